"""Settings of the floor: minimal Django on the same database as the real app.

Same DATABASE_URL, same persistent connections (CONN_MAX_AGE, health checks) and the same
gunicorn command line as the real app; only what a bare view needs is installed. By default
no middleware runs (the floor is the least Django can do); BENCH_FLOOR_STACK=app puts the real
app's middleware list in front of the view instead, to separate middleware cost from ingest
cost.
"""

import os

import environ

env = environ.Env()

DEBUG = False
SECRET_KEY = "bench-floor-not-a-secret"
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1"])
ROOT_URLCONF = "bench.floor.urls"
WSGI_APPLICATION = "bench.floor.wsgi.application"
INSTALLED_APPS = ["bench.floor"]
MIDDLEWARE: list[str] = []
DATABASES = {"default": env.db("DATABASE_URL")}
DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("CONN_MAX_AGE", default=60))
DATABASES["default"].setdefault("CONN_HEALTH_CHECKS", True)
if os.environ.get("BENCH_FLOOR_ENGINE", "django") == "app":
    # The app's PostgreSQL backend: its health check polls the socket where Django's sends
    # SELECT 1 (config/postgresql/base.py). By default the floor is Django as it ships.
    DATABASES["default"]["ENGINE"] = "config.postgresql"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "UTC"
USE_I18N = False
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
}

if os.environ.get("BENCH_FLOOR_STACK", "bare") == "app":
    # The real app's middleware list and the settings it reads, and the apps it needs; the
    # view is still the bare one.
    from config import settings as app

    INSTALLED_APPS = [
        "django.contrib.auth",
        "django.contrib.contenttypes",
        "django.contrib.sessions",
        "django.contrib.messages",
        "django.contrib.staticfiles",
        "csp",
        "django_htmx",
        "bench.floor",
    ]
    MIDDLEWARE = list(app.MIDDLEWARE)
    STATIC_URL, STATIC_ROOT, STATICFILES_DIRS = app.STATIC_URL, app.STATIC_ROOT, app.STATICFILES_DIRS
    CONTENT_SECURITY_POLICY = app.CONTENT_SECURITY_POLICY
    SECURE_SSL_REDIRECT, SECURE_HSTS_SECONDS = app.SECURE_SSL_REDIRECT, app.SECURE_HSTS_SECONDS
    SECURE_REFERRER_POLICY, X_FRAME_OPTIONS = app.SECURE_REFERRER_POLICY, app.X_FRAME_OPTIONS
    SECURE_CONTENT_TYPE_NOSNIFF = app.SECURE_CONTENT_TYPE_NOSNIFF
