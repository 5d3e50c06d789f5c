"""One settings module, read from the environment (see README §Configuration).

Variables the environment leaves unset may come from the checkout's `.env` (`make run` writes one).
Local defaults need no configuration when DEBUG is on: SQLite and an embedded (filesystem) Celery broker under
var/, and a secret key generated once into var/. With DEBUG off (the default) a real SECRET_KEY is required
and cookies, HSTS and SSL redirects follow the TLS settings.
"""

from __future__ import annotations

import math
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from config.env import (
    check_oidc_settings,
    dotenv_path,
    env_bool,
    env_int,
    env_list,
    env_networks,
    env_port_range,
    env_str,
    local_secret_key,
    read_dotenv,
)
from config.logs import logging_config

BASE_DIR = Path(__file__).resolve().parent.parent
# The checkout's `.env` (`make run` writes it) fills in only what the environment leaves unset, before any
# setting is read: a deployment's variables always win (config/env.py).
read_dotenv(dotenv_path(BASE_DIR / ".env"))
VAR_DIR = Path(env_str("GPUMARKET_VAR_DIR") or BASE_DIR / "var")
VAR_DIR.mkdir(parents=True, exist_ok=True)

DEBUG = env_bool("DEBUG", False)

SECRET_KEY = env_str("SECRET_KEY") or ""
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY is required when DEBUG is off: set SECRET_KEY (or SECRET_KEY_FILE), "
            "or DEBUG=1 for local use"
        )
    SECRET_KEY = local_secret_key(VAR_DIR / "secret_key")

ALLOWED_HOSTS = env_list(
    "ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"] + (["testserver"] if DEBUG else [])
)
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "accounts",
    "inventory",
    "market",
    "allocator",
    "nodeagent",
    "frontend",
    "ops",
    "whatif",
]

MIDDLEWARE = [
    "ops.middleware.RequestLogMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "config.middleware.InputGuardMiddleware",
    "config.middleware.ContentSecurityPolicyMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last: its process_view runs the view itself, after every other middleware's checks (CSRF included).
    "config.middleware.DatabaseConflictMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASE_URL = env_str("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'db.sqlite3'}"
try:
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=env_int("DB_CONN_MAX_AGE", 60))}
except ValueError as exc:
    raise ImproperlyConfigured(f"DATABASE_URL={DATABASE_URL!r}: {exc}") from exc
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The web server, worker and beat share one file locally: take the write lock at BEGIN so concurrent
    # writers wait (up to the timeout) instead of failing half-way through a transaction.
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
elif env_bool("DB_POOL", False):
    # Under ASGI (config/asgi.py turns this on) each request runs its sync code on a thread of its own, so
    # Django's persistent connections, one per thread, would be opened and dropped with every request: a
    # pool per process instead (psycopg_pool), each request borrowing a connection while it runs. A waiting
    # command poll holds none (nodeagent/api/agent.py).
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 2,
        "max_size": env_int("DB_POOL_SIZE", 20, minimum=1),
        "timeout": 10,
    }
# A request or task that meets a deadlock or a serialization failure is run again this many times, after
# pauses growing from about this many milliseconds (config/dbretry.py); then a request gets a 503.
DB_CONFLICT_RETRIES = env_int("DB_CONFLICT_RETRIES", 3, minimum=0)
DB_CONFLICT_BACKOFF_MS = env_int("DB_CONFLICT_BACKOFF_MS", 50, minimum=1)
# Under ASGI: how many sync requests of each kind one worker runs at once (config/slots.py); the rest wait
# their turn in the event loop. Keep web + 2 x agent under DB_POOL_SIZE (the polls' looks have agent-many).
ASGI_AGENT_SLOTS = env_int("ASGI_AGENT_SLOTS", 4, minimum=1)
ASGI_WEB_SLOTS = env_int("ASGI_WEB_SLOTS", 8, minimum=1)
# An agent request that waited this long for a slot is answered 503 unrun (the agent backs off).
ASGI_AGENT_QUEUE_SECONDS = env_int("ASGI_AGENT_QUEUE_SECONDS", 5, minimum=1)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_USER_MODEL = "accounts.User"
PASSWORD_HASHERS = [
    "django.contrib.auth.hashers.Argon2PasswordHasher",
    "django.contrib.auth.hashers.PBKDF2PasswordHasher",
]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# The login guard first: it refuses a locked-out caller before any password is checked (docs/reliability.md).
# Local accounts (username and password) keep working beside single sign-on unless LOCAL_LOGIN is off; the
# OpenID backend only loads the users it signed in (docs/sso.md).
LOCAL_LOGIN = env_bool("LOCAL_LOGIN", True)
AUTHENTICATION_BACKENDS = [
    "accounts.login_guard.LoginGuardBackend",
    *(["django.contrib.auth.backends.ModelBackend"] if LOCAL_LOGIN else []),
    "accounts.sso.backend.OidcBackend",
]
LOGIN_FAILURES_PER_USER = env_int("LOGIN_FAILURES_PER_USER", 5, minimum=1)
LOGIN_FAILURES_PER_ADDRESS = env_int("LOGIN_FAILURES_PER_ADDRESS", 50, minimum=1)
LOGIN_LOCKOUT_SECONDS = env_int("LOGIN_LOCKOUT_SECONDS", 900, minimum=1)
# Single sign-on with OpenID Connect (docs/sso.md): off while OIDC_ISSUER is unset. Endpoints and keys come
# from the issuer's discovery document.
OIDC_ISSUER = (env_str("OIDC_ISSUER") or "").rstrip("/")
OIDC_CLIENT_ID = env_str("OIDC_CLIENT_ID") or ""
OIDC_CLIENT_SECRET = env_str("OIDC_CLIENT_SECRET") or ""
# The command line's public client (device flow): ID tokens for it are exchanged for API tokens.
OIDC_CLI_CLIENT_ID = env_str("OIDC_CLI_CLIENT_ID") or ""
OIDC_PROVIDER_NAME = env_str("OIDC_PROVIDER_NAME") or "your organisation"
OIDC_SCOPES = env_list("OIDC_SCOPES", ["openid", "email", "profile", "groups"])
OIDC_GROUPS_CLAIM = env_str("OIDC_GROUPS_CLAIM") or "groups"
OIDC_CLOCK_SKEW_SECONDS = env_int("OIDC_CLOCK_SKEW_SECONDS", 60, minimum=0)
OIDC_HTTP_TIMEOUT_S = env_int("OIDC_HTTP_TIMEOUT_S", 10, minimum=1)
check_oidc_settings(
    issuer=OIDC_ISSUER, client_id=OIDC_CLIENT_ID, cli_client_id=OIDC_CLI_CLIENT_ID, local_login=LOCAL_LOGIN
)
LOGIN_URL = "frontend:login"
LOGIN_REDIRECT_URL = "frontend:home"
LOGOUT_REDIRECT_URL = "frontend:login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"

# Behind TLS (TLS=1) cookies are secure and browsers are told to stay on HTTPS; a proxy that terminates TLS
# must set X-Forwarded-Proto.
TLS = env_bool("TLS", not DEBUG)
SESSION_COOKIE_SECURE = TLS
CSRF_COOKIE_SECURE = TLS
SESSION_COOKIE_HTTPONLY = True
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
if TLS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31_536_000, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "config.schema.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "config.api.Pagination",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "EXCEPTION_HANDLER": "config.api.exception_handler",
    # One parser for every API body: a JSON object, bounded in size and depth (docs/reliability.md).
    "DEFAULT_PARSER_CLASSES": ["config.parsers.JSONParser"],
    "DEFAULT_THROTTLE_RATES": {"user": env_str("API_THROTTLE_USER") or "6000/min"},
    "DEFAULT_THROTTLE_CLASSES": ["config.throttling.AtomicUserRateThrottle"],
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "gpumarket API",
    "DESCRIPTION": "Market-based, multi-tenant GPU allocation. Amounts are integer micro-credits "
    "(1 credit = 1,000,000).",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI and Redoc from the installed drf-spectacular-sidecar, so /api/docs/ works offline.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "config.api.schema_error_responses",
        "config.api.schema_closed_request_bodies",
    ],
    # Several models have a `state` field; name each choice set after its model instead of a hash.
    "ENUM_NAME_OVERRIDES": {
        "JobStateEnum": "market.models.jobs.JobState",
        "LeaseStateEnum": "market.models.leases.LeaseState",
        "RoundStateEnum": "market.models.rounds.RoundState",
        "NodeStateEnum": "inventory.models.Node.State",
        # The ledger entry kind keeps the name it had before policy versions brought a second "kind".
        "KindEnum": "market.models.ledger.EntryKind",
        "PolicyVersionKindEnum": "market.models.policy_versions.VersionKind",
        "PolicyVersionStatusEnum": "market.models.policy_versions.VersionStatus",
        "CanaryStateEnum": "market.models.policy_versions.CanaryState",
        "CanaryOnExpiryEnum": "market.models.policy_versions.OnExpiry",
        "SpendAlertKindEnum": "market.models.spend_alerts.AlertKind",
        "SpendAlertActionEnum": "market.models.spend_alerts.AlertAction",
        # The agents' guard events and exit reasons, in protocol 1's bodies and protocol 2's report alike.
        "GuardEventKindEnum": [
            ("gpu_drained", "gpu_drained"),
            ("gpu_resumed", "gpu_resumed"),
            ("foreign_killed", "foreign_killed"),
        ],
        "ExitReasonEnum": [("out of memory", "out of memory")],
    },
}

# Limits on a submitted job (docs/jobs.md §Validation).
JOB_COMMAND_MAX_CHARS = env_int("JOB_COMMAND_MAX_CHARS", 8192, minimum=1)
JOB_MAX_HOURS = env_int("JOB_MAX_HOURS", 168, minimum=1)
JOB_MAX_PENDING_PER_TENANT = env_int("JOB_MAX_PENDING_PER_TENANT", 10_000, minimum=1)
# What a job's sandbox gives it per GPU when it asks for nothing, and the most it may ask (cgroup limits,
# docs/jobs.md §What a job can see); its log cap and process limit on the node.
JOB_CPUS_PER_GPU_DEFAULT = env_int("JOB_CPUS_PER_GPU_DEFAULT", 8, minimum=1)
JOB_CPUS_PER_GPU_MAX = env_int("JOB_CPUS_PER_GPU_MAX", 64, minimum=1)
JOB_MEMORY_GB_PER_GPU_DEFAULT = env_int("JOB_MEMORY_GB_PER_GPU_DEFAULT", 64, minimum=1)
JOB_MEMORY_GB_PER_GPU_MAX = env_int("JOB_MEMORY_GB_PER_GPU_MAX", 1024, minimum=1)
JOB_LOG_MAX_MB = env_int("JOB_LOG_MAX_MB", 256, minimum=1)
JOB_PIDS_MAX = env_int("JOB_PIDS_MAX", 4096, minimum=16)
# Live API tokens one user may have in one tenant (docs/reliability.md).
API_TOKENS_PER_USER = env_int("API_TOKENS_PER_USER", 20, minimum=1)

CACHES = {
    "default": {
        "BACKEND": "config.cache.RedisCache",
        "LOCATION": env_str("REDIS_URL"),
    }
    if env_str("REDIS_URL")
    else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
}

# Celery (config/celery.py reads these with the CELERY_ prefix).
REDIS_URL = env_str("REDIS_URL")
# Rate-limit counters (config/ratelimit.py) live under this Redis key prefix.
RATE_LIMIT_PREFIX = env_str("RATE_LIMIT_PREFIX") or "gpumarket:rl"
CELERY_TASK_MAX_S = env_int("CELERY_TASK_MAX_S", 240, minimum=10)
if REDIS_URL:
    CELERY_BROKER_URL = REDIS_URL
    # Redis re-delivers an unacknowledged task after the visibility timeout: keep it well above the longest
    # task's hard limit so a slow task is never run twice at once.
    # Typed for both branches: kombu's options differ by transport.
    CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {"visibility_timeout": CELERY_TASK_MAX_S * 4}
else:
    _broker = VAR_DIR / "broker"
    for sub in ("out", "processed", "control"):
        (_broker / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_URL = "filesystem://"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker / "out"),
        "data_folder_out": str(_broker / "out"),
        "processed_folder": str(_broker / "processed"),
        # Else kombu writes its exchange table to ./control in whatever folder the worker started in.
        "control_folder": str(_broker / "control"),
        "store_processed": False,
    }
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
# The queue tasks go to and workers read by default (tests give each run a queue of its own).
CELERY_TASK_DEFAULT_QUEUE = env_str("CELERY_QUEUE") or "celery"
# A task is acknowledged only after it finishes and is put back if its worker dies, so a killed worker loses
# nothing; services make the second delivery harmless (ARCHITECTURE.md §Rounds and workers).
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = CELERY_TASK_MAX_S
CELERY_TASK_SOFT_TIME_LIMIT = CELERY_TASK_MAX_S - 10
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
ROUND_SECONDS = env_int("ROUND_SECONDS", 300, minimum=10)
# Beat ticks this often; a tick starts a round only when the period (MarketPolicy.round_seconds, first set
# from ROUND_SECONDS and changeable by admins at run time) has begun, so most ticks do nothing.
ROUND_TICK_SECONDS = env_int("ROUND_TICK_SECONDS", min(10, ROUND_SECONDS), minimum=1)
CELERY_BEAT_SCHEDULE: dict[str, dict[str, object]] = {
    "round-tick": {
        "task": "market.round_tick",
        "schedule": float(ROUND_TICK_SECONDS),
        # A tick that waited longer than one interval is stale: the next one does the same work.
        "options": {"expires": float(ROUND_TICK_SECONDS)},
    },
    # Recurring allowances: a tick finds each period once (market/services/allowance.py).
    "allowance-tick": {
        "task": "market.allowance_tick",
        "schedule": float(env_int("ALLOWANCE_TICK_SECONDS", 300, minimum=10)),
        "options": {"expires": 300.0},
    },
}
# Node agents (docs/agent.md): how often they report and long-poll, and when a silent node is lost.
# Protocol 1 agents heartbeat every AGENT_HEARTBEAT_SECONDS. Protocol 2 agents report at the interval
# nodeagent/services/pacing.py sends them: live nodes / the policy's agent_report_budget_rps, between the
# floor and the ceiling, staggered by +-10% (so at most 1.1 x the ceiling). A command poll is held up to
# AGENT_POLL_SECONDS (protocol 1 agents cap their own wait at 25 s).
AGENT_HEARTBEAT_SECONDS = env_int("AGENT_HEARTBEAT_SECONDS", 15, minimum=1)
AGENT_REPORT_FLOOR_S = env_int("AGENT_REPORT_FLOOR_S", 10, minimum=1)
AGENT_REPORT_CEILING_S = env_int("AGENT_REPORT_CEILING_S", 30, minimum=AGENT_REPORT_FLOOR_S)
AGENT_POLL_SECONDS = env_int("AGENT_POLL_SECONDS", 240, minimum=1)
# Node loss within 90 s by default: a node reports at least every 1.1 x 30 = 33 s, is marked down 45 s after
# its last report, found by a check every 10 s: 33 + 45 + 10 = 88 s from the report it would have sent
# (docs/agent.md §Node loss). The timeout must outlast the slowest report interval and a failed try's backoff.
NODE_DOWN_SECONDS = env_int(
    "NODE_DOWN_SECONDS",
    45,
    minimum=max(AGENT_HEARTBEAT_SECONDS, math.ceil(AGENT_REPORT_CEILING_S * 1.1)) + 1,
)
NODE_CHECK_SECONDS = env_int("NODE_CHECK_SECONDS", 10, minimum=1)
# What an agent's gzip body may inflate to (a 360-tick backlog of 64 GPUs, log tails of its leases): 413 above.
AGENT_BODY_MAX_BYTES = env_int("AGENT_BODY_MAX_BYTES", 8 * 1024 * 1024, minimum=1024)
# The ports a gang's rendezvous is chosen from, one per lease (market/gang.py; docs/agent.md §Multi-node gangs).
GANG_PORT_RANGE = env_port_range("GANG_PORT_RANGE", (29500, 29999))
CELERY_BEAT_SCHEDULE["nodes-check"] = {
    "task": "nodeagent.nodes_check",
    "schedule": float(NODE_CHECK_SECONDS),
    "options": {"expires": float(NODE_CHECK_SECONDS)},
}
# A running canary's guardrails and expiry (market/services/canary.py, docs/policy.md §Canary).
CELERY_BEAT_SCHEDULE["canary-check"] = {
    "task": "market.canary_check",
    "schedule": float(env_int("CANARY_CHECK_SECONDS", 60, minimum=5)),
    "options": {"expires": 60.0},
}
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")

# Structured logs (config/logs.py): ids on every line, secrets redacted; LOG_FORMAT=json for one JSON object a line.
LOGGING = logging_config(fmt=(env_str("LOG_FORMAT") or "plain").lower(), level=env_str("LOG_LEVEL") or "INFO")

# Operations (docs/deploy.md): who may scrape /metrics, and how often workers prove they are alive.
METRICS_TOKEN = env_str("METRICS_TOKEN") or ""
METRICS_ALLOW_FROM = env_networks("METRICS_ALLOW_FROM", ["127.0.0.1/32", "::1/128"] if DEBUG else [])
WORKER_HEARTBEAT_SECONDS = env_int("WORKER_HEARTBEAT_SECONDS", ROUND_TICK_SECONDS, minimum=1)
CELERY_BEAT_SCHEDULE["worker-heartbeat"] = {
    "task": "ops.worker_heartbeat",
    "schedule": float(WORKER_HEARTBEAT_SECONDS),
    # A heartbeat no worker took in time must not later pass for a live worker.
    "options": {"expires": float(WORKER_HEARTBEAT_SECONDS)},
}
# Round books, bid outcomes and old commands past MarketPolicy.retention_days (market/services/retention.py).
CELERY_BEAT_SCHEDULE["retention-prune"] = {
    "task": "market.retention_prune",
    "schedule": float(env_int("RETENTION_PRUNE_SECONDS", 3600, minimum=60)),
    "options": {"expires": 600.0},
}

# Mail (spend alerts, docs/alerts.md): the backend from the environment; `make run` writes the console backend
# into .env so alerts show in its log. Without one, DEBUG prints mail to the console and production sends
# through SMTP (EMAIL_HOST and friends).
EMAIL_BACKEND = env_str("EMAIL_BACKEND") or (
    "django.core.mail.backends.console.EmailBackend"
    if DEBUG
    else "django.core.mail.backends.smtp.EmailBackend"
)
EMAIL_HOST = env_str("EMAIL_HOST") or "localhost"
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER") or ""
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD") or ""
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL") or "gpumarket <alerts@gpumarket.invalid>"
# Spend alerts: how often beat evaluates the rules, how long a webhook may take, and whether a webhook may
# point at a private, loopback or link-local address (off: a tenant must not make the server probe the
# platform's own network; the tests and a local `make run` turn it on).
SPEND_ALERT_TICK_SECONDS = env_int("SPEND_ALERT_TICK_SECONDS", 60, minimum=10)
SPEND_ALERT_WEBHOOK_TIMEOUT_S = env_int("SPEND_ALERT_WEBHOOK_TIMEOUT_S", 5, minimum=1)
SPEND_ALERT_WEBHOOK_ALLOW_PRIVATE = env_bool("SPEND_ALERT_WEBHOOK_ALLOW_PRIVATE", DEBUG)
CELERY_BEAT_SCHEDULE["spend-alerts-tick"] = {
    "task": "market.spend_alerts_tick",
    "schedule": float(SPEND_ALERT_TICK_SECONDS),
    "options": {"expires": float(SPEND_ALERT_TICK_SECONDS)},
}
