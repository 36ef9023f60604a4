"""Settings of the authenticated floor: the real app's settings, serving only the floor's
one INSERT behind DRF (see authed_urls.py)."""

from config.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "bench.floor"]  # noqa: F405
ROOT_URLCONF = "bench.floor.authed_urls"
