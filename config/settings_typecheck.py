"""The settings mypy's Django plugin loads ([tool.django-stubs] in pyproject.toml).

config.settings refuses to load without SECRET_KEY when DEBUG is off, as a production process
must; type checking is not one, so it gets a placeholder key here. Nothing else imports this.
"""

import os

os.environ.setdefault("SECRET_KEY", "holdpoint-type-checking-only-not-a-secret-padded-to-fifty")

from config.settings import *  # noqa: F403
