"""config/settings.py as a deployment with none of Holdpoint's variables set would load it."""

from __future__ import annotations

import os
import runpy
from pathlib import Path
from typing import Any
from unittest import mock

SETTINGS_FILE = Path(__file__).resolve().parent.parent / "config" / "settings.py"


def settings_with_environment_unset(*names: str) -> dict[str, Any]:
    """The module-level names config/settings.py defines when NAMES are not in the environment
    (the rest of the environment as it is): what each default really is, written once there."""
    environment = {key: value for key, value in os.environ.items() if key not in names}
    with mock.patch.dict(os.environ, environment, clear=True):
        return runpy.run_path(str(SETTINGS_FILE))
