"""Holdpoint settings: one file, everything that differs between machines comes from the environment.

With no environment at all Holdpoint runs embedded: SQLite under var/, Celery's filesystem://
broker and a database cache, so a newcomer needs no server. Production and CI set DATABASE_URL
(postgres://...), CELERY_BROKER_URL (redis:// or amqp://) and CACHE_URL (redis://...).
"""

from datetime import timedelta
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"

env = environ.Env()

DEBUG = env.bool("DEBUG", default=False)
# Sessions, CSRF tokens and signed values rest on this key, so a production process (DEBUG off)
# refuses to start without its own, or with one short enough to guess (Django's deploy check
# asks for 50 characters). DEBUG (scripts/run) falls back to a fixed development key; the tests
# set one in pyproject.toml ([tool.pytest_env]).
SECRET_KEY_MIN_LENGTH = 50
SECRET_KEY = env.str("SECRET_KEY", default="")
if not DEBUG and len(SECRET_KEY) < SECRET_KEY_MIN_LENGTH:
    raise ImproperlyConfigured(
        (
            f"SECRET_KEY is {len(SECRET_KEY)} characters long, shorter than {SECRET_KEY_MIN_LENGTH}."
            if SECRET_KEY
            else "SECRET_KEY is not set."
        )
        + f" With DEBUG off Holdpoint refuses to start without one of {SECRET_KEY_MIN_LENGTH} or more "
        "random characters: set SECRET_KEY (python -c 'import secrets; print(secrets.token_urlsafe(50))'), "
        "or DEBUG=true on a development machine."
    )
if not SECRET_KEY:
    SECRET_KEY = "holdpoint-insecure-development-key-change-me"
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "template_partials",
    "csp",
    "accounts",
    "evidence",
    "policy",
    "envelopes",
    "approvals",
    "webhooks",
    "metrics",
    "limits",
    "axes",
    "notifications",
    "dashboard",
    "reviewers",
    "rules",
]

# config.api_lane's classes are Django's and the libraries' own, skipped for the agent API
# (/api/v1/), which authenticates by key and renders JSON: see that module.
MIDDLEWARE = [
    # First: the caller's traceparent, and the request's span, around everything else.
    "telemetry.middleware.TraceContextMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "config.api_lane.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "config.api_lane.CsrfViewMiddleware",
    "config.api_lane.AuthenticationMiddleware",
    "config.api_lane.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "config.api_lane.CSPMiddleware",
    "config.api_lane.HtmxMiddleware",
    # Last, as django-axes asks: it turns a locked-out login into the lock-out page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "csp.context_processors.nonce",
            ],
        },
    },
]

DATABASES = {
    "default": env.db("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'holdpoint.sqlite3'}"),
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # IMMEDIATE takes the write lock when a transaction starts, so two writers never
    # interleave a read-then-write on SQLite; WAL lets readers run beside the writer.
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # A file, not memory, so that a real Celery worker started by the tests sees the same data;
    # beside the database file and named after it, so runs on different DATABASE_URLs do not
    # share one (var/holdpoint.sqlite3 -> var/test-holdpoint.sqlite3).
    _sqlite_file = Path(DATABASES["default"]["NAME"])
    DATABASES["default"]["TEST"] = {"NAME": str(_sqlite_file.with_name(f"test-{_sqlite_file.name}"))}
else:
    if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        # Django's, with the per-request health check made without a round trip while nothing
        # has come from the server (config/postgresql/base.py).
        DATABASES["default"]["ENGINE"] = "config.postgresql"
    DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("CONN_MAX_AGE", default=60))
    DATABASES["default"].setdefault("CONN_HEALTH_CHECKS", True)
    # Behind PgBouncer in transaction mode (HOLDPOINT_PGBOUNCER) each transaction may run on
    # another server connection, so nothing may outlive a transaction on one: no server-side
    # cursor (Django's iterator() holds one open across statements) and no prepared statement
    # (prepared on one server connection, executed on another: "does not exist"). Holdpoint
    # keeps no other session state (no session SET, advisory lock or LISTEN; the one SET is
    # set_config(..., true), local to its transaction). A switch rather than URL options: the
    # URL can say disable_server_side_cursors, but django-environ gives psycopg no way to say
    # prepare_threshold=None from it, and half of the two breaks under load.
    _pgbouncer = env.bool("HOLDPOINT_PGBOUNCER", default=False)
    if _pgbouncer:
        DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
    # The agent API's hot statements (envelopes/modelsql.py) are prepared by psycopg the third
    # time a connection runs them, so PostgreSQL stops parsing and planning them on every call;
    # Django's ORM binds values on the client and is never prepared. Soon rather than psycopg's
    # default of five: psycopg forgets its prepared statements at every rollback. Off (`false`,
    # or HOLDPOINT_PGBOUNCER) for a connection pooler that cannot keep prepared statements
    # (PgBouncer in transaction mode before 1.21, or without max_prepared_statements): then
    # never, not psycopg's default of five.
    if env.bool("HOLDPOINT_DB_PREPARED_STATEMENTS", default=not _pgbouncer):
        DATABASES["default"].setdefault("OPTIONS", {}).setdefault("prepare_threshold", 2)
    else:
        DATABASES["default"].setdefault("OPTIONS", {})["prepare_threshold"] = None
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

_cache_url = env.str("CACHE_URL", default="")
if _cache_url.startswith(("redis://", "rediss://")):
    CACHES = {
        "default": {
            "BACKEND": "config.cache.HoldpointRedisCache",
            "LOCATION": _cache_url,
            # A Redis that is down or unreachable costs a request at most this, never a hang:
            # the throttle then lets calls through (limits/throttle.py).
            "OPTIONS": {"socket_connect_timeout": 1.0, "socket_timeout": 1.0},
        }
    }
else:
    # Shared by every web process. Its table is made by `migrate` (limits' migrations); the
    # throttle windows and one-time claims have tables of their own, safe from its culling.
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.db.DatabaseCache",
            "LOCATION": "holdpoint_cache",
        }
    }

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# Logins, at /accounts/login/ and /admin/, are limited by django-axes (its tables come with
# `migrate`): after HOLDPOINT_LOGIN_FAILURE_LIMIT failures for one username from one address,
# that pair is refused for HOLDPOINT_LOGIN_COOLOFF_MINUTES, even with the right password, and the
# page says so (429). Username and address together: one address cannot go on guessing at an
# account, and nobody elsewhere can lock a reviewer out by failing on purpose.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    # Django's password backend, refusing everyone but superusers with HOLDPOINT_PASSWORD_LOGIN off.
    "accounts.signin.PasswordBackend",
    # OpenID Connect (mozilla-django-oidc, accounts/oidc.py): answers only its own callback, and
    # only with OIDC_ISSUER set.
    "accounts.oidc.OidcBackend",
]
AXES_FAILURE_LIMIT = env.int("HOLDPOINT_LOGIN_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = timedelta(minutes=env.int("HOLDPOINT_LOGIN_COOLOFF_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_DISABLE_ACCESS_LOG = True  # no row for every successful login
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_CLIENT_IP_CALLABLE = "limits.client_ip.client_ip"
LOGIN_URL = "/accounts/login/"
# Sessions end this long after they were last written (a sign-in writes one), whichever way the
# user signed in.
HOLDPOINT_SESSION_AGE_S = env.int("HOLDPOINT_SESSION_AGE_S", default=12 * 3600)
SESSION_COOKIE_AGE = HOLDPOINT_SESSION_AGE_S
# false: the password form is gone and password sign-in refused, except for superusers (who keep
# /admin/login/ for when the identity provider is down).
HOLDPOINT_PASSWORD_LOGIN = env.bool("HOLDPOINT_PASSWORD_LOGIN", default=True)
# A reviewer token made without a chosen expiry lasts this many days (0: it never expires).
HOLDPOINT_REVIEWER_TOKEN_DAYS = env.int("HOLDPOINT_REVIEWER_TOKEN_DAYS", default=90)
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = VAR_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

# --- security: the production values are the defaults whenever DEBUG is off -----------------
HTTPS = env.bool("HOLDPOINT_HTTPS", default=not DEBUG)
SESSION_COOKIE_SECURE = HTTPS
CSRF_COOKIE_SECURE = HTTPS
SESSION_COOKIE_HTTPONLY = True
# htmx takes the token from the rendered hx-headers, so no script needs to read the cookie.
CSRF_COOKIE_HTTPONLY = True
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=HTTPS)
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=31536000 if HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = HTTPS
SECURE_HSTS_PRELOAD = HTTPS
# TLS ends at a reverse proxy that sets X-Forwarded-Proto (and appends to X-Forwarded-For): trust
# those two headers. Without it such a deployment redirects to https forever.
BEHIND_PROXY = env.bool("HOLDPOINT_BEHIND_PROXY", default=False)
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if BEHIND_PROXY else None
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
X_FRAME_OPTIONS = "DENY"

CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "frame-ancestors": ["'none'"],
        "form-action": ["'self'"],
        "base-uri": ["'none'"],
        "object-src": ["'none'"],
    },
}

# --- API -------------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["accounts.auth.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["accounts.auth.HasTeamKey"],
    "DEFAULT_PARSER_CLASSES": ["envelopes.apikit.parsers.EnvelopeJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # JSON for */* and application/json without parsing Accept; anything else as DRF does.
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "envelopes.apikit.negotiation.JsonFirstNegotiation",
    "DEFAULT_THROTTLE_CLASSES": ["accounts.auth.ApiKeyRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {"api_key": env.str("HOLDPOINT_API_RATE", default="6000/min")},
    "EXCEPTION_HANDLER": "envelopes.apikit.problems.problem_exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Holdpoint API",
    "DESCRIPTION": "Recovery control plane for AI-agent tool failures (wire contract v1).",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "OAS_VERSION": "3.1.0",
}
# Form bodies (the API's JSON bodies have their own 64 KiB limit, envelopes/apikit/parsers.py). The
# dashboard's "Edit and approve" form posts an input of up to 32 KiB canonical as indented JSON
# (multipart, not percent-encoded): room for its indentation, and for the form's own clear refusal
# of a longer text (approvals/forms.py, INPUT_TEXT_MAX) to answer before this one does.
DATA_UPLOAD_MAX_MEMORY_SIZE = 320 * 1024

# --- Celery ----------------------------------------------------------------------------------
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="filesystem://")
if CELERY_BROKER_URL.startswith("filesystem://"):
    _broker_dir = VAR_DIR / "broker"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
    }
else:
    # Any countdown stays below half of this, so the broker never redelivers a task that a
    # worker still holds.
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}

# --- a broker or Redis outage ----------------------------------------------------------------
# A publish connects at most once (kombu would retry for the whole connection timeout while the
# request waits), within short timeouts; workers' and beat's own connections retry as Celery's
# broker_connection_max_retries says. The web's publishes are hints (config.celery.publish_hint).
if not CELERY_BROKER_URL.startswith("filesystem://"):
    CELERY_BROKER_TRANSPORT_OPTIONS["max_retries"] = 0
    if CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
        CELERY_BROKER_TRANSPORT_OPTIONS |= {"socket_connect_timeout": 1.0, "socket_timeout": 5.0}
CELERY_BROKER_CONNECTION_TIMEOUT = 2.0
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ALWAYS_EAGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"
# In memory: no schedule file for a kill to corrupt; every timer is a due_at column (config.celery).
CELERY_BEAT_SCHEDULER = "celery.beat:Scheduler"
HOLDPOINT_SWEEP_SECONDS = env.float("HOLDPOINT_SWEEP_SECONDS", default=5.0)
CELERY_BEAT_SCHEDULE = {
    "sweep-due-steps": {"task": "envelopes.tasks.sweep_due_steps", "schedule": HOLDPOINT_SWEEP_SECONDS},
    "seal-audit-chains": {"task": "envelopes.tasks.seal_audit_chains", "schedule": 60.0},
    "deliver-webhooks": {"task": "webhooks.tasks.deliver_due_messages", "schedule": HOLDPOINT_SWEEP_SECONDS},
    # Closed hours into ToolHour/ToolDay, the current hour so far into a provisional row
    # (metrics/README.md): what keeps the metrics pages and API from reading envelopes.
    "rollup-metrics": {"task": "metrics.tasks.rollup_metrics", "schedule": 60.0},
    "purge-idempotency-keys": {"task": "envelopes.tasks.purge_idempotency_keys", "schedule": 3600.0},
    # Notifying reviewers (§9): reminders, expiry warnings, escalations, batched sends.
    "notify-reviewers": {"task": "notifications.tasks.notify", "schedule": HOLDPOINT_SWEEP_SECONDS},
    "purge-quarantine": {"task": "envelopes.tasks.purge_quarantine", "schedule": 3600.0},
    "purge-webhook-history": {"task": "webhooks.tasks.purge_webhook_history", "schedule": 3600.0},
    # Reviewers' cancel-alls of many held steps (approvals.models.CancelAllRequest), should the
    # ring on commit not reach the broker: a fallback, so not at the timers' cadence, where it
    # would queue beside the timer sweep in a worker's processes.
    "cancel-held-steps": {"task": "approvals.tasks.cancel_held_steps", "schedule": 20.0},
}
# Webhook delivery has its own queue, so that deliveries never queue in front of the timer
# sweeps. A worker started without -Q consumes both queues (`celery -A config worker --beat`
# delivers and fires timers); `-Q celery --beat` and `-Q webhooks` split them (README).
CELERY_TASK_DEFAULT_QUEUE = "celery"
CELERY_TASK_QUEUES: dict[str, dict[str, str]] = {"celery": {}, "webhooks": {}}  # name: options
CELERY_TASK_ROUTES = {"webhooks.tasks.deliver_due_messages": {"queue": "webhooks"}}
# Delivery sweeps running at once across all workers (webhooks.delivery): 1 leaves every other
# process of a worker that consumes both queues to the timers; raise it for a -Q webhooks worker.
HOLDPOINT_WEBHOOK_CONCURRENT_SWEEPS = env.int("HOLDPOINT_WEBHOOK_CONCURRENT_SWEEPS", default=1)
# Retention of what beat purges hourly (read at each purge): delivered webhook messages with
# their tries, dead letters, quarantined payloads.
HOLDPOINT_WEBHOOK_RETENTION_DAYS = env.int("HOLDPOINT_WEBHOOK_RETENTION_DAYS", default=30)
HOLDPOINT_DEAD_LETTER_RETENTION_DAYS = env.int("HOLDPOINT_DEAD_LETTER_RETENTION_DAYS", default=90)
HOLDPOINT_QUARANTINE_RETENTION_DAYS = env.int("HOLDPOINT_QUARANTINE_RETENTION_DAYS", default=30)
# Notifications (§9) send on their own queue, like webhook delivery: a worker started without -Q
# consumes it too; `-Q webhooks,notifications` runs every send apart from the timers. Their
# history (finished messages with their tries and notices, watches that owe nothing) is purged
# hourly after HOLDPOINT_NOTIFICATION_RETENTION_DAYS (read at each purge).
CELERY_TASK_QUEUES["notifications"] = {}
CELERY_TASK_ROUTES["notifications.tasks.notify"] = {"queue": "notifications"}
CELERY_TASK_ROUTES["notifications.tasks.slack_response_send"] = {"queue": "notifications"}
CELERY_BEAT_SCHEDULE["purge-notification-history"] = {
    "task": "notifications.tasks.purge_notification_history",
    "schedule": 3600.0,
}
HOLDPOINT_NOTIFICATION_RETENTION_DAYS = env.int("HOLDPOINT_NOTIFICATION_RETENTION_DAYS", default=30)
# The core's domain events (envelopes.events), once every consumer is done with them, are purged
# hourly after HOLDPOINT_DOMAIN_EVENT_RETENTION_DAYS (read at each purge).
CELERY_BEAT_SCHEDULE["purge-domain-events"] = {"task": "envelopes.tasks.purge_domain_events", "schedule": 3600.0}
HOLDPOINT_DOMAIN_EVENT_RETENTION_DAYS = env.int("HOLDPOINT_DOMAIN_EVENT_RETENTION_DAYS", default=30)

# --- Holdpoint -------------------------------------------------------------------------------
HOLDPOINT_WEBHOOK_ALLOW_PRIVATE = env.bool("HOLDPOINT_WEBHOOK_ALLOW_PRIVATE", default=False)
HOLDPOINT_BASE_URL = env.str("HOLDPOINT_BASE_URL", default="http://127.0.0.1:8000")
# The base64 of a 32-byte Ed25519 seed that signs decision receipts (contract §13); empty: a key
# generated at first use and stored (evidence.keys).
HOLDPOINT_RECEIPT_KEY = env.str("HOLDPOINT_RECEIPT_KEY", default="")
# A Prometheus scraper's `Authorization: Bearer <token>` for /metrics; empty: staff sessions only.
HOLDPOINT_METRICS_TOKEN = env.str("HOLDPOINT_METRICS_TOKEN", default="")
# How long a stored answer to an Idempotency-Key is kept (then the key may be used anew).
HOLDPOINT_IDEMPOTENCY_TTL_HOURS = env.int("HOLDPOINT_IDEMPOTENCY_TTL_HOURS", default=7 * 24)
# How many tools agents may auto-register per team (configuretool and the admin are not capped).
HOLDPOINT_MAX_TOOLS_PER_TEAM = env.int("HOLDPOINT_MAX_TOOLS_PER_TEAM", default=500)
# Slack interaction payloads (§10) are verified with it; with it set, Slack messages carry buttons.
SLACK_SIGNING_SECRET = env.str("SLACK_SIGNING_SECRET", default="")
# Trace context (§13, telemetry/): with an OTLP/HTTP collector's base URL, every process exports
# spans to `{it}/v1/traces`; empty: no exporter, no SDK loaded. The step page links a step's
# trace id through HOLDPOINT_TRACE_URL, `{trace_id}` replaced (e.g. a Jaeger or Tempo URL).
OTEL_EXPORTER_OTLP_ENDPOINT = env.str("OTEL_EXPORTER_OTLP_ENDPOINT", default="")
HOLDPOINT_TRACE_URL = env.str("HOLDPOINT_TRACE_URL", default="")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    # axes.apps says "AXES: BEGIN version …" at INFO in every process; its lock-outs are WARNINGs.
    "loggers": {"django.request": {"level": "ERROR"}, "axes.apps": {"level": "WARNING"}},
}
# httpx logs every request's full URL at INFO: a Slack incoming-webhook URL or response_url is a
# credential (webhook paths may be too). Holdpoint logs its sends itself, without them.
LOGGING["loggers"]["httpx"] = {"level": "WARNING"}  # type: ignore[index]

# --- notifying reviewers by email (contract §9) ----------------------------------------------
# EMAIL_URL: smtp://user:pass@host:25, smtp+tls://...:587, smtp+ssl://...:465 (django-environ).
# Without it, mail is written to files under var/mail/ (one file per message).
if env.str("EMAIL_URL", default=""):
    globals().update(env.email_url("EMAIL_URL"))
else:
    EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
    EMAIL_FILE_PATH = VAR_DIR / "mail"
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="Holdpoint <holdpoint@localhost>")
EMAIL_TIMEOUT = 10

# --- single sign-on with OpenID Connect (contract §12; accounts/oidc.py) ----------------------
# Empty OIDC_ISSUER: no single sign-on, the login page is the password form alone. The provider's
# endpoints and keys come from its discovery document, OIDC_ISSUER/.well-known/openid-configuration.
OIDC_ISSUER = env.str("OIDC_ISSUER", default="").rstrip("/")
OIDC_RP_CLIENT_ID = env.str("OIDC_CLIENT_ID", default="")
OIDC_RP_CLIENT_SECRET = env.str("OIDC_CLIENT_SECRET", default="")
# "Sign in with <name>" on the login page; empty: the issuer's host name.
HOLDPOINT_OIDC_PROVIDER_NAME = env.str("HOLDPOINT_OIDC_PROVIDER_NAME", default="")
# The claim (in the ID token or the userinfo answer) whose values holdpoint:TEAM:ROLE and
# holdpoint:TEAM:group:NAME set a user's memberships and groups at every sign-in.
HOLDPOINT_OIDC_ROLES_CLAIM = env.str("HOLDPOINT_OIDC_ROLES_CLAIM", default="groups")
OIDC_RP_SCOPES = env.str("HOLDPOINT_OIDC_SCOPES", default="openid email profile")
OIDC_USE_PKCE = True
OIDC_PKCE_CODE_CHALLENGE_METHOD = "S256"
OIDC_USE_NONCE = True
OIDC_TIMEOUT = 10  # seconds for each call to the provider (discovery, keys, token, userinfo)
# The start and callback views are accounts.oidc's, routed by accounts/urls.py.
