"""The three projects' suites, each run by its own runner as the handed-out account.

Each suite names the engines (and features) of the one sandbox it gets per backend, and runs
its parts against it: Django's `runtests.py` on Postgres and on MariaDB, SQLAlchemy's pytest
plugin (`--dburi`) on each dialect, redis-py's pytest suite (`--redis-url`). What the projects'
own docs ask of a test database (SQLAlchemy's `test_schema`, hstore, citext; Django's second
`other` database) is done as that account, never as a superuser.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .results import Result, from_junit, from_unittest
from .runner import redact, run_logged
from .sandbox import Sandbox, Service

# Django: the apps issue 29 names; postgres_tests only where the backend is PostgreSQL.
DJANGO_APPS = ["backends", "migrations", "model_fields", "queries", "transactions"]
DJANGO_POSTGRES_APPS = ["postgres_tests"]
# GeoDjango's apps that use the database (gdal_tests, geos_tests and the form and admin tests
# exercise the host's GDAL and GEOS libraries, not the sandbox).
DJANGO_GIS_APPS = [f"gis_tests.{app}" for app in (
    "distapp", "geo3d", "geoapp", "geogapp", "gis_migrations", "inspectapp", "layermap",
    "rasterapp", "relatedapp", "test_spatialrefsys")]

# SQLAlchemy: five of PostgreSQL's six range types' round trips (1,228 parametrized tests each,
# two thirds of the dialect's time) are left out for time; Int4Range's stay.
SQLALCHEMY_TRIM = ("not (Int8RangeRoundTripTest or NumRangeRoundTripTest or DateRangeRoundTripTest"
                   " or DateTimeRangeRoundTripTest or DateTimeTZRangeRoundTripTest)")

# redis-py: by default the synchronous suite's files that talk to the server (the asyncio twin
# of each and the client-internals files too with --full).
REDIS_PY_FILES = [f"tests/{name}" for name in (
    "test_commands.py", "test_pipeline.py", "test_pubsub.py", "test_scripting.py",
    "test_function.py", "test_lock.py", "test_hash.py", "test_keyspace_notifications.py",
    "test_monitor.py", "test_connection.py", "test_connection_pool.py", "test_encoding.py",
    "test_vsets.py", "test_cache.py", "test_command_metadata.py")]
# What needs infrastructure a sandbox is not (a cluster, sentinels, a TLS port, the project's
# fault injector, an identity provider, Redis Stack's modules), left out by the project's own
# markers and, where it has none, by file (--full) or by name. Counted as deselected.
REDIS_PY_MARKERS = ("not onlycluster and not redismod and not ssl and not replica "
                    "and not cp_integration and not multidb_integration")
REDIS_PY_IGNORE = [
    f"tests/{prefix}{name}"
    for prefix in ("", "test_asyncio/")
    for name in (
        "test_cluster.py", "test_cluster_transaction.py",  # a cluster
        "test_sentinel.py", "test_sentinel_managed_connection.py",  # sentinels
        "test_ssl.py",  # a TLS port
        "test_credentials.py", "test_auth",  # Entra ID (redis-entraid, a cloud tenant)
        "test_scenario", "test_multidb",  # the fault injector, several databases
        "test_search.py",  # RediSearch (a feature: `--features redis=search`)
    )
] + [
    "tests/test_http", "tests/test_observability",  # an HTTP server, OpenTelemetry
    # a cluster behind the fault injector's proxy
    "tests/maint_notifications/test_cluster_maint_notifications_handling.py",
    "tests/maint_notifications/test_async_cluster_maint_notifications_handling.py",
]
REDIS_PY_DESELECT = " and ".join(f"not ({expr})" for expr in (
    # They build their own client for localhost:6379 (redis-py's default server), not the one
    # --redis-url names, or mock a connection to it.
    "test_client_setinfo or test_retry_connect_on_timeout_error or test_connect_with_retries"
    " or test_create_single_connection_client_from_url",
    "test_asyncio and (test_multiple_connections or test_max_connections"
    " or test_reuse_previously_released_connection)",
    # TLS certificates, sentinels and a cluster node of their own beside the server.
    "TestSSLCache or TestSentinelCache"
    " or test_subscriber_mode_rejects_regular_command_after_ssubscribe",
))

# Bytecode (and pytest's rewritten asserts) is kept beside the cached sources, whatever the
# caller's environment says: rewriting redis-py's asserts alone takes ~20 s of CPU per run.
KEEP_BYTECODE: dict[str, str | None] = {"PYTHONDONTWRITEBYTECODE": None}

# Per part: a run past this is killed and reported (the whole job aims at ~8 minutes). Django's
# whole suite (--full) takes ~5 minutes on PostgreSQL and longer on MariaDB on 2 cores, so it
# gets more.
DEADLINE_SECS = 900
FULL_DEADLINE_SECS = 3600


@dataclass
class Context:
    python: str
    logs: Path
    backend: str
    full: bool


@dataclass
class Part:
    """One run of one suite against one engine of one sandbox."""

    suite: str
    name: str
    backend: str
    selection: str
    result: Result
    secs: float
    log: Path | None = None


@dataclass
class Suite:
    name: str
    version: str
    src: Path
    engines: list[str]
    features: list[str] = field(default_factory=list)

    def run(self, sandbox: Sandbox, ctx: Context) -> list[Part]:
        return RUNNERS[self.name](self, sandbox, ctx)


def _log(ctx: Context, suite: str, part: str) -> Path:
    return ctx.logs / f"{suite}-{part}-{ctx.backend}.log"


def _crashed(suite: str, name: str, ctx: Context, selection: str, reason: str) -> Part:
    return Part(suite, name, ctx.backend, selection, Result(crashed=reason), 0.0)


# --- Django -------------------------------------------------------------------------------

_DJANGO_SETTINGS = '''\
# Written by scripts/real_suites for one run of runtests.py and removed after it.
DATABASES = {databases!r}
SECRET_KEY = "django_tests_secret_key"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
USE_TZ = False
'''


def django_settings(service: Service, engine: str) -> str:
    """Django's test settings (its `tests/test_sqlite.py`, pointed at the sandbox): `default`
    and `other` on the same server, each test database a `test_…` one, which the MariaDB
    account may create (README, "What an agent gets")."""
    base = {"ENGINE": engine, "NAME": service.database, "USER": service.user,
            "PASSWORD": service.password, "HOST": service.host, "PORT": str(service.port)}
    databases = {
        "default": {**base, "TEST": {"NAME": f"test_{service.database}"}},
        "other": {**base, "TEST": {"NAME": "test_other"}},
    }
    return _DJANGO_SETTINGS.format(databases=databases)


def _django_part(suite: Suite, ctx: Context, service: Service, name: str, engine: str,
                 labels: list[str], secrets: list[str]) -> Part:
    selection = " ".join(labels) or "the whole suite"
    deadline = FULL_DEADLINE_SECS if ctx.full else DEADLINE_SECS
    settings_dir = Path(tempfile.mkdtemp(prefix="real-suites-django-"))
    try:
        (settings_dir / "sandbox_settings.py").write_text(django_settings(service, engine))
        log = _log(ctx, "django", name)
        ran = run_logged(
            [ctx.python, "runtests.py", "--settings=sandbox_settings", "--parallel=2",
             "--noinput", "--verbosity=1", *labels],
            cwd=suite.src / "tests",
            env={"PYTHONPATH": f"{suite.src}:{settings_dir}", **KEEP_BYTECODE},
            log=log, secrets=secrets, deadline_secs=deadline,
        )
    finally:
        shutil.rmtree(settings_dir, ignore_errors=True)
    result = from_unittest(ran.output)
    if ran.status is None:
        result.crashed = f"killed after {deadline}s"
    return Part("django", name, ctx.backend, selection, result, ran.secs, log)


def run_django(suite: Suite, sandbox: Sandbox, ctx: Context) -> list[Part]:
    secrets = sandbox.secrets()
    parts = []
    if "postgres" in sandbox.services:
        postgres = sandbox.services["postgres"]
        labels = [] if ctx.full else DJANGO_POSTGRES_APPS + DJANGO_APPS
        parts.append(_django_part(suite, ctx, postgres, "postgres",
                                  "django.db.backends.postgresql", labels, secrets))
        if "postgis" in postgres.features:
            # GeoDjango on the PostGIS backend: the feature must reach the test database
            # Django creates from template1. (runtests.py leaves gis_tests out on the plain
            # postgresql backend, also in a run of the whole suite.)
            parts.append(_django_part(suite, ctx, postgres, "postgis",
                                      "django.contrib.gis.db.backends.postgis",
                                      DJANGO_GIS_APPS, secrets))
    if "mariadb" in sandbox.services:
        labels = [] if ctx.full else DJANGO_APPS
        parts.append(_django_part(suite, ctx, sandbox.services["mariadb"], "mariadb",
                                  "django.db.backends.mysql", labels, secrets))
    return parts


# --- pytest-driven suites -----------------------------------------------------------------

def _pytest_part(suite: Suite, ctx: Context, name: str, args: list[str], selection: str,
                 secrets: list[str], env: dict[str, str | None] | None = None) -> Part:
    work = Path(tempfile.mkdtemp(prefix=f"real-suites-{suite.name}-"))
    junit = work / "junit.xml"
    try:
        log = _log(ctx, suite.name, name)
        ran = run_logged(
            # pytest's cache (some suites use its `cache` fixture) stays out of the sources.
            [ctx.python, "-m", "pytest", "-o", f"cache_dir={work / 'cache'}",
             f"--junitxml={junit}", "-o", "junit_family=xunit2", *args],
            cwd=suite.src, env={**KEEP_BYTECODE, **(env or {})},
            log=log, secrets=secrets, deadline_secs=DEADLINE_SECS,
        )
        summary = [l for l in ran.output.splitlines() if re.match(r"^=+ .* in [\d.]+s", l)]
        deselected = re.search(r"(\d+) deselected", summary[-1]) if summary else None
        if junit.exists():
            xml = redact(junit.read_text(), secrets)
            log.with_suffix(".xml").write_text(xml)
            result = from_junit(xml, int(deselected.group(1)) if deselected else 0)
        else:
            result = Result()
        stop = re.search(r"^!+ (stopping after \d+ failures|Interrupted: .*?) !+$",
                         ran.output, re.M)
        if ran.status is None:
            result.crashed = f"killed after {DEADLINE_SECS}s"
        elif stop:
            result.crashed = stop.group(1)
        elif ran.status not in (0, 1) or not junit.exists():
            lines = [l for l in ran.output.splitlines() if l.strip()]
            result.crashed = f"pytest exited {ran.status}: " + (lines[-1] if lines else "")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return Part(suite.name, name, ctx.backend, selection, result, ran.secs, log)


# --- SQLAlchemy -----------------------------------------------------------------------------

def _sqlalchemy_postgres_setup(service: Service) -> None:
    """README.unittests.rst's PostgreSQL steps, as the account: the two schemas, hstore and
    citext, English full-text search (set on the role, since a database's settings do not
    follow it when SQLAlchemy copies it for each pytest-xdist worker)."""
    import psycopg2

    conn = psycopg2.connect(host=service.host, port=service.port, user=service.user,
                            password=service.password, dbname=service.database)
    try:
        conn.autocommit = True
        with conn.cursor() as cursor:
            for statement in (
                "CREATE SCHEMA IF NOT EXISTS test_schema",
                "CREATE SCHEMA IF NOT EXISTS test_schema_2",
                "CREATE EXTENSION IF NOT EXISTS hstore",
                "CREATE EXTENSION IF NOT EXISTS citext",
                "ALTER ROLE CURRENT_USER SET default_text_search_config = 'pg_catalog.english'",
            ):
                cursor.execute(statement)
    finally:
        # SQLAlchemy copies this database per worker (CREATE DATABASE … TEMPLATE), which
        # Postgres refuses while anyone else is connected to it.
        conn.close()


def _sqlalchemy_mysql_setup(service: Service) -> None:
    """README.unittests.rst's MySQL/MariaDB step, as the account (it may create `test_*`)."""
    import pymysql

    conn = pymysql.connect(host=service.host, port=service.port, user=service.user,
                           password=service.password, database=service.database)
    try:
        with conn.cursor() as cursor:
            for name in ("test_schema", "test_schema_2"):
                cursor.execute(f"CREATE DATABASE IF NOT EXISTS {name} CHARACTER SET utf8mb4")
    finally:
        conn.close()


def run_sqlalchemy(suite: Suite, sandbox: Sandbox, ctx: Context) -> list[Part]:
    secrets = sandbox.secrets()
    parts = []
    dialects = [
        ("postgres", "postgresql", "postgresql+psycopg2", _sqlalchemy_postgres_setup, ""),
        ("mariadb", "mysql", "mysql+pymysql", _sqlalchemy_mysql_setup, "?charset=utf8mb4"),
    ]
    for engine, dialect, driver, setup, query in dialects:
        if engine not in sandbox.services:
            continue
        service = sandbox.services[engine]
        selection = f"test/dialect/{dialect}"
        try:
            setup(service)
        except Exception as err:  # the account could not do what the project's docs ask
            parts.append(_crashed("sqlalchemy", dialect, ctx, selection,
                                  f"setup as the account failed: {type(err).__name__}: "
                                  f"{str(err).strip().splitlines()[0] if str(err).strip() else ''}"))
            continue
        url = (f"{driver}://{service.user}:{service.password}@{service.host}:{service.port}/"
               f"{service.database}{query}")
        args = [selection, f"--dburi={url}", "-n", "2", "--timeout=300"]
        if not ctx.full:
            args += ["-k", SQLALCHEMY_TRIM]
        parts.append(_pytest_part(suite, ctx, dialect, args, selection, secrets))
    return parts


# --- redis-py -------------------------------------------------------------------------------

def run_redis_py(suite: Suite, sandbox: Sandbox, ctx: Context) -> list[Part]:
    service = sandbox.services["redis"]
    url = f"redis://{service.user}:{service.password}@{service.host}:{service.port}/0"
    ignore = [f"--ignore={path}" for path in REDIS_PY_IGNORE]
    paths, selection = ((["tests"], "tests/") if ctx.full
                        else (REDIS_PY_FILES, f"{len(REDIS_PY_FILES)} files of tests/"))
    return [_pytest_part(
        suite, ctx, "redis",
        [*paths, f"--redis-url={url}", "-m", REDIS_PY_MARKERS, "-k", REDIS_PY_DESELECT, *ignore],
        f"{selection} on a standalone server", sandbox.secrets(),
    )]


RUNNERS = {
    "django": run_django,
    "sqlalchemy": run_sqlalchemy,
    "redis-py": run_redis_py,
}
