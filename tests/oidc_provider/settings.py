"""The test provider's settings. Everything it is told comes from files in one directory, named
by HOLDPOINT_TEST_OIDC_DIR (harness.py writes them): config.json (issuer), provider-key.pem,
claims.json (each user's `groups`), tamper.json (a token response to forge), issued.jsonl."""

import json
import os
from pathlib import Path

STATE_DIR = Path(os.environ["HOLDPOINT_TEST_OIDC_DIR"])
CONFIG = json.loads((STATE_DIR / "config.json").read_text())

SECRET_KEY = "test-oidc-provider-key-not-a-secret-padded-to-fifty-characters"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "oauth2_provider",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
ROOT_URLCONF = "tests.oidc_provider.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [Path(__file__).resolve().parent / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
    }
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(STATE_DIR / "provider.sqlite3")}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# Its own cookie names: the browser keeps cookies per host, not per port.
SESSION_COOKIE_NAME = "provider_sessionid"
CSRF_COOKIE_NAME = "provider_csrftoken"
LOGIN_URL = "/accounts/login/"

OAUTH2_PROVIDER = {
    "OIDC_ENABLED": True,
    "OIDC_RSA_PRIVATE_KEY": (STATE_DIR / "provider-key.pem").read_text(),
    "OIDC_ISS_ENDPOINT": CONFIG["issuer"],
    "PKCE_REQUIRED": True,
    "OAUTH2_VALIDATOR_CLASS": "tests.oidc_provider.validators.ClaimsValidator",
    "SCOPES": {"openid": "OpenID Connect", "email": "email", "profile": "profile"},
    "ALLOWED_REDIRECT_URI_SCHEMES": ["http", "https"],
}
