"""Django settings for dir2mcp.

Every value comes from the environment through django-environ and has a safe
default, so the project starts with no variable set. The database is the
state directory's ``meta.sqlite`` unless ``DATABASE_URL`` names another
(PostgreSQL for scale-out). See ``.env.example`` for the full list.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import environ
from django.core.exceptions import ImproperlyConfigured

from dir2mcp_site import bootstrap
from dir2mcp_site.ops import secretkey

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()


def _whole(name: str, default: int, *, minimum: int) -> int:
    """An integer setting. Anything else stops every entry point with one
    ``CONFIG_INVALID`` line and exit 2 (``cli.load_settings_or_exit``)."""
    raw = env.str(name, default="").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a whole number, not {raw!r}") from None
    if value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {value}")
    return value


def _script_name(raw: str) -> str | None:
    """``DJANGO_FORCE_SCRIPT_NAME``: empty, or ``/a/b`` (no trailing slash,
    no dot segment, no query), else ImproperlyConfigured."""
    if not raw:
        return None
    segments = raw.split("/")
    if segments[0] or not all(segments[1:]) or any(s in (".", "..") for s in segments) or "?" in raw:
        raise ImproperlyConfigured(f"DJANGO_FORCE_SCRIPT_NAME must look like /prefix, not {raw!r}")
    return raw


DIR2MCP_ROOT = bootstrap.root_dir()
DIR2MCP_STATE_DIR = bootstrap.state_dir()

# Behind a TLS-terminating reverse proxy (docs/deploy.md).
DJANGO_BEHIND_PROXY = env.bool("DJANGO_BEHIND_PROXY", default=False)
# DJANGO_SECRET_KEY, required behind a proxy; otherwise a random key kept in
# the state directory (0600). Never a value published in the source.
SECRET_KEY = secretkey.secret_key(
    env.str("DJANGO_SECRET_KEY", default=""), behind_proxy=DJANGO_BEHIND_PROXY, state_dir=DIR2MCP_STATE_DIR
)
DEBUG = env.bool("DJANGO_DEBUG", default=False)
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    # django-ninja's templates and static files, for Swagger UI at /api/v1/docs
    # from the package, not a CDN: installed without importing ninja (apps.py)
    "dir2mcp_site.apps.NinjaAssets",
    "corpus",
    "mcp_gateway",
    "payments",
]

MIDDLEWARE = [
    "dir2mcp_site.ops.middleware.RequestMetrics",
    "dir2mcp_site.ops.middleware.SecurityHeaders",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "dir2mcp_site.urls"
# Request bodies up to the gateway's limit (mcp_gateway.transport.MAX_BODY_BYTES).
DATA_UPLOAD_MAX_MEMORY_SIZE = 4 * 1024 * 1024
ASGI_APPLICATION = "dir2mcp_site.asgi.application"
WSGI_APPLICATION = "dir2mcp_site.wsgi.application"

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
            ],
        },
    },
]

# SQLite in WAL mode with a busy timeout lets the server, the indexer and
# `status` share one file; IMMEDIATE transactions take the write lock up
# front so concurrent writers queue instead of failing mid-transaction.
# The write-ahead log is kept near DIR2MCP_SQLITE_WAL_MIB: the indexing
# writer checkpoints it past that size (corpus/wal.py) and
# `journal_size_limit` truncates the file back to it once it restarts.
SQLITE_WAL_LIMIT_BYTES = _whole("DIR2MCP_SQLITE_WAL_MIB", 64, minimum=1) * 2**20
SQLITE_OPTIONS = {
    "timeout": _whole("DIR2MCP_SQLITE_TIMEOUT", 30, minimum=0),
    "transaction_mode": "IMMEDIATE",
    "init_command": (
        "PRAGMA journal_mode=WAL;PRAGMA synchronous=NORMAL;PRAGMA foreign_keys=ON;PRAGMA busy_timeout=30000;"
        f"PRAGMA journal_size_limit={SQLITE_WAL_LIMIT_BYTES};"
    ),
}

if env.str("DATABASE_URL", default=""):
    DATABASES = {"default": env.db("DATABASE_URL")}
    if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        # Parameters travel apart from the statement instead of being quoted
        # into it: quoting every document's text on the client was a fifth of
        # a worker's time (docs/benchmarks.md, "Scale-out").
        DATABASES["default"].setdefault("OPTIONS", {}).setdefault("server_side_binding", True)
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": DIR2MCP_STATE_DIR / "meta.sqlite",
            "OPTIONS": SQLITE_OPTIONS,
        }
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Admin sign-in: refused before the password hash is computed once a client
# or a username has failed DIR2MCP_LOGIN_FAILURES times; one more try every
# DIR2MCP_LOGIN_WINDOW / DIR2MCP_LOGIN_FAILURES seconds (dir2mcp_site/ops/logins.py).
AUTHENTICATION_BACKENDS = ["dir2mcp_site.ops.logins.ThrottledModelBackend"]
DIR2MCP_LOGIN_FAILURES = _whole("DIR2MCP_LOGIN_FAILURES", 5, minimum=1)
DIR2MCP_LOGIN_WINDOW = _whole("DIR2MCP_LOGIN_WINDOW", 900, minimum=1)

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
# The status page's script and styles (dir2mcp_site is not an app).
STATICFILES_DIRS = [BASE_DIR / "dir2mcp_site" / "static"]
STATIC_ROOT = env.path("DJANGO_STATIC_ROOT", default=str(BASE_DIR / "staticfiles"))
# The daphne process serves /static/ itself (admin CSS/JS) unless a reverse
# proxy serves STATIC_ROOT after collectstatic (docs/deploy.md).
DIR2MCP_SERVE_STATIC = env.bool("DIR2MCP_SERVE_STATIC", default=True)

# Behind the proxy: trust its X-Forwarded-Proto / X-Forwarded-Host only when told to.
if DJANGO_BEHIND_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    USE_X_FORWARDED_HOST = True
# The one URL prefix the site is served under when a proxy mounts it below
# its root (``/dir2mcp``; the proxy passes the full path on). A prefix a request
# names itself (daphne's ``Daphne-Root-Path`` header) is ignored: the gate
# decides on the path Django resolves, and only this setting shifts it.
FORCE_SCRIPT_NAME = _script_name(env.str("DJANGO_FORCE_SCRIPT_NAME", default=""))
# Behind a proxy: set it. `up --tls-cert` sets both itself (mcp_gateway/server.py).
SESSION_COOKIE_SECURE = env.bool("DJANGO_SECURE_COOKIES", default=False)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
# Strict-Transport-Security on every answer sent over https (up --tls-cert, or
# a proxy's X-Forwarded-Proto with DJANGO_BEHIND_PROXY), never over http; 0 turns it off.
SECURE_HSTS_SECONDS = _whole("DJANGO_HSTS_SECONDS", 31_536_000, minimum=0)

# Celery: with no broker, tasks run in-process (see corpus/tasks.py).
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="")
CELERY_RESULT_BACKEND = env.str("CELERY_RESULT_BACKEND", default="")
CELERY_TASK_ALWAYS_EAGER = not CELERY_BROKER_URL
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = env.str("DIR2MCP_CELERY_QUEUE", default="dir2mcp")
# Paths per ingestion task, a file for OCR, speech-to-text or conversion
# counting as 16 (corpus.ingest.distributed.task_paths).
DIR2MCP_CELERY_TASK_PATHS = _whole("DIR2MCP_CELERY_TASK_PATHS", 128, minimum=1)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# Celery's Django fixup closes the database connection after every task
# unless told to reuse it this many times; corpus/tasks.py manages worker
# connections instead (kept across tasks, replaced when broken).
CELERY_DB_REUSE_MAX = 2**31
# A task not acknowledged within the visibility timeout (its worker died) is
# delivered again; it must exceed the longest task (OCR of a large scan).
_VISIBILITY = _whole("DIR2MCP_CELERY_VISIBILITY_TIMEOUT", 3600, minimum=1)
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": _VISIBILITY,
    "unacked_restore_interval": min(10, _VISIBILITY),
    "unacked_restore_throttle": 1,
}

# State several server processes must share (rate limits) lives in Redis when
# one is named: REDIS_URL, else the Celery broker when that is Redis. Without
# it each process keeps its own (docs/scaling.md).
REDIS_URL = env.str(
    "REDIS_URL", default=CELERY_BROKER_URL if CELERY_BROKER_URL.startswith(("redis://", "rediss://")) else ""
)
# The longest the rate limiter waits for Redis to connect or answer (it
# answers in well under a millisecond); then it counts in this process for a
# while (mcp_gateway/ratelimit.py). The event loop never waits for it.
DIR2MCP_REDIS_TIMEOUT = env.float("DIR2MCP_REDIS_TIMEOUT", default=0.25)

# Resource change notifications fan out over a channel layer
# (mcp_gateway/notify.py): Redis pub/sub across processes when REDIS_URL is
# set, else within this process only.
CHANNEL_LAYERS = {
    "default": (
        {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL], "prefix": "dir2mcp"},
        }
        if REDIS_URL
        else {"BACKEND": "channels.layers.InMemoryChannelLayer", "CONFIG": {"capacity": 1000}}
    )
}
# Seconds between keep-alive comments on a standalone GET stream (mcp_gateway/standalone.py).
DIR2MCP_SSE_KEEPALIVE = env.float("DIR2MCP_SSE_KEEPALIVE", default=15.0)
# subscriptions/listen streams one process keeps open at once (mcp_gateway/subscriptions.py).
DIR2MCP_MAX_LISTENS = env.int("DIR2MCP_MAX_LISTENS", default=1000)

# Any: logging.config.dictConfig's schema, values of many types.
LOGGING: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {
            "()": "dir2mcp_site.ops.logformat.PlainFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s",
        },
    },
    "filters": {
        "one_line": {"()": "dir2mcp_site.logfilters.OneLine"},
        "throttled": {"()": "dir2mcp_site.logfilters.Throttled"},
    },
    "handlers": {
        "stderr": {"class": "logging.StreamHandler", "formatter": "plain"},
        "stderr_one_line": {
            "class": "logging.StreamHandler",
            "formatter": "plain",
            "filters": ["one_line", "throttled"],
        },
    },
    "loggers": {
        # 4xx answers are the transport doing its job; 5xx still log.
        "django.request": {"level": "ERROR"},
        # A refused Host, a static path climbing out of its directory, a bad
        # session cookie: anyone can send them, so one line each, never a
        # traceback, and at most ten a minute for each kind (logfilters.Throttled).
        "django.security": {"handlers": ["stderr_one_line"], "propagate": False},
        # The connection's early check of a request head failing (a bug, which
        # a client's head may set off at its rate): one line, ten a minute.
        "mcp_gateway.bounded.head_check": {"handlers": ["stderr_one_line"], "propagate": False},
        # A connection closed for the answers its client leaves unread
        # (server.max_unread_mb, max_unread_total_mb): one a connection, at
        # the rate a client with the token opens them; ten a minute.
        "mcp_gateway.bounded.cut": {"handlers": ["stderr_one_line"], "propagate": False},
    },
    "root": {"handlers": ["stderr"], "level": env.str("DIR2MCP_LOG_LEVEL", default="WARNING")},
}

# Deployments (docs/deploy.md): JSON lines on stdout for journald or a collector.
if env.str("DIR2MCP_LOG_FORMAT", default="plain") == "json":
    LOGGING["formatters"]["plain"] = {"()": "dir2mcp_site.ops.logformat.JsonFormatter"}
    for _handler in LOGGING["handlers"].values():
        _handler["stream"] = "ext://sys.stdout"
