"""Shared fixtures: backends (SQLite file / real PostgreSQL schema), Redis, a fixed clock.

Services: a test that needs PostgreSQL or Redis skips with a reason on a laptop
without them, and fails when ``MEMLEDGER_REQUIRE_SERVICES=1`` (as CI sets).
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, event, make_url, text
from sqlalchemy.engine import Engine

from ledger import Ledger, open_ledger
from tests import hygiene
from tests.pg_pool import SchemaPool

PG_URL = os.environ.get("MEMLEDGER_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
# The same server as psycopg takes it (no SQLAlchemy driver name)
PG_CONNINFO = make_url(PG_URL).set(drivername="postgresql").render_as_string(hide_password=False)


# Redis: what a test writes there is under its process's key prefix (tests/hygiene.py), removed after it by that
# prefix; nothing else in the database is read or touched, so every test process shares the one database.
REDIS_URL = os.environ.get("MEMLEDGER_TEST_REDIS_URL", "redis://127.0.0.1:6379/9")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


# The longest test files, longest first (docs/performance.md). `make test` hands whole files to its
# processes (`--dist loadfile`) in collection order, so the long ones start first and the short ones
# fill in at the end, instead of one process starting a minute-long file when the others are done.
LONGEST_FILES_FIRST = (
    "tests/worker/test_faults.py",
    "tests/ledger/test_protocol.py",
    "tests/worker/test_hostile.py",
    "tests/worker/test_serve_and_worker.py",
    "tests/worker/test_protocol_doc.py",
    "tests/consolidation/test_consolidate.py",
    "tests/ledger/test_compact.py",
    "tests/worker/test_actors.py",
    "tests/ledger/test_packet.py",
    "tests/ledger/test_lifecycle.py",
    "tests/worker/test_mcp.py",
    "tests/ledger/test_concurrency.py",
    "tests/ledger/test_state_machine.py",
    "tests/consolidation/test_vocabulary.py",
    "tests/consolidation/test_state_machine.py",
    "tests/worker/test_mcp_http.py",
    "tests/consolidation/test_extraction_service.py",
    "tests/ledger/test_migrations.py",
    "tests/ledger/test_store.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: n for n, path in enumerate(LONGEST_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.partition("::")[0], len(rank)))


# The catalogs every test's schemas churn. The test server runs without autovacuum, and their dead rows
# piled up run after run (pg_attribute reached 21,740 pages for a few hundred live rows), so that every
# scan of them, and each schema made or reset, grew slower; a VACUUM at the start keeps their space reused.
CHURNED_CATALOGS = ("pg_class", "pg_attribute", "pg_type", "pg_depend", "pg_attrdef", "pg_constraint", "pg_index")


def pytest_sessionstart(session: pytest.Session) -> None:
    if hasattr(session.config, "workerinput"):
        return  # a pytest-xdist process: the controller did it before starting it
    import psycopg

    session.config.stash[LEFTOVERS] = leftovers = hygiene.Leftovers(REDIS_URL, PG_CONNINFO)
    leftovers.snapshot()
    try:
        with psycopg.connect(PG_CONNINFO, autocommit=True, connect_timeout=5) as conn:
            conn.execute("VACUUM " + ", ".join(f"pg_catalog.{name}" for name in CHURNED_CATALOGS))
    except psycopg.Error:
        pass  # no server: the tests that need one skip, or fail in CI, with the reason


LEFTOVERS = pytest.StashKey[hygiene.Leftovers]()


@pytest.hookimpl(wrapper=True)
def pytest_sessionfinish(session: pytest.Session) -> Any:
    """Each test process: kill the process groups of its children still alive and delete its Redis keys. The
    controlling process, once every test process has ended (pytest-xdist stops them in its own hook, run
    inside this wrapper): the run's check (tests/hygiene.py); anything left behind fails the run."""
    _end_of_test_process()
    result = yield
    leftovers = session.config.stash.get(LEFTOVERS, None)
    if leftovers is not None:
        problems = leftovers.check()
        if problems:
            reporter = session.config.pluginmanager.get_plugin("terminalreporter")
            lines = ["the test run left these behind:", *(f"  {problem}" for problem in problems)]
            if reporter is not None:
                reporter.write("\n")
                reporter.write_sep("=", "leftovers", red=True)
                reporter.write_line("\n".join(lines))
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
    return result


def _end_of_test_process() -> None:
    hygiene.kill_every_group()
    if _redis_used:
        import redis

        client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
        try:
            hygiene.delete_keys(client, hygiene.REDIS_PREFIX)
        except redis.RedisError:
            pass
        finally:
            client.close()


def require_services() -> bool:
    """True in CI (``CI=true``, or ``MEMLEDGER_REQUIRE_SERVICES=1`` as ``.ci/run`` sets): what a test needs
    must be there, so a missing service or tool fails the test instead of skipping it."""
    flags = (os.environ.get("MEMLEDGER_REQUIRE_SERVICES", ""), os.environ.get("CI", ""))
    return any(flag.strip().lower() in ("1", "true", "yes") for flag in flags)


def tool_missing(message: str) -> None:
    """Skip locally; fail in CI, where ``.ci/run`` installs the tool."""
    if require_services():
        pytest.fail(f"{message} (required in CI: .ci/run installs it)")
    pytest.skip(message)


def service_missing(what: str, exc: BaseException) -> None:
    """Skip locally; fail in CI where the service must be there."""
    message = f"{what} is not reachable ({type(exc).__name__}: {exc})"
    if require_services():
        pytest.fail(message + " and MEMLEDGER_REQUIRE_SERVICES=1")
    pytest.skip(message)


def _pg_reachable() -> BaseException | None:
    try:
        engine = create_engine(PG_URL)
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        engine.dispose()
    except Exception as exc:
        return exc
    return None


@pytest.fixture(scope="session")
def pg_available() -> BaseException | None:
    return _pg_reachable()


class Clock:
    """A settable clock for the ledger: tests move time explicitly."""

    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kwargs: float) -> datetime:
        self.now += timedelta(**kwargs)
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


# Tests commit without waiting for the WAL flush: no test crashes the server, and the flush was most of
# each PostgreSQL test's wait. A benchmark of commits takes it off (DURABLE_COMMITS).
ASYNC_COMMITS = "-csynchronous_commit%3Doff%20"


def pg_schema_url(schema: str) -> str:
    """The URL of ``schema``: search_path points at it, and its connections are named after it (``application_name``),
    so that the pool of schemas (``tests/pg_pool.py``) can end the ones a test left behind."""
    sep = "&" if "?" in PG_URL else "?"
    return f"{PG_URL}{sep}options={ASYNC_COMMITS}-capplication_name%3D{schema}%20-csearch_path%3D{schema}"


def durable(url: str) -> str:
    """``url`` with every commit waiting for its WAL flush, as in production."""
    return url.replace(ASYNC_COMMITS, "")


@contextmanager
def fresh_pg_schema(schema: str) -> Iterator[str]:
    """A new PostgreSQL schema called ``schema`` for the block, dropped after it; its URL points search_path at it."""
    admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    try:
        yield pg_schema_url(schema)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
        admin.dispose()


@pytest.fixture
def pg_schema(pg_available: BaseException | None) -> Iterator[str]:
    """A new, empty PostgreSQL schema for one test; its URL points search_path at it.

    For the tests of the migrations themselves and of opening an unmigrated database; the others take
    :func:`pg_migrated`."""
    if pg_available is not None:
        service_missing("PostgreSQL", pg_available)
    with fresh_pg_schema(hygiene.schema_name()) as url:
        yield url


def make_pg_pool(**options: Any) -> SchemaPool:
    """A pool of schemas migrated by :func:`migrate_postgres_schema` (``tests/pg_pool.py``)."""
    return SchemaPool(PG_CONNINFO, lambda schema: migrate_postgres_schema(pg_schema_url(schema)), **options)


@functools.cache
def pg_pool() -> SchemaPool:
    """This process's pool of migrated schemas (dropped when the process ends)."""
    return make_pg_pool()


@contextmanager
def leased_pg_schema() -> Iterator[str]:
    """The URL of a schema of the pool, at the state the migrations leave, for the block."""
    pool = pg_pool()
    schema = pool.lease()
    try:
        yield pg_schema_url(schema)
    finally:
        pool.give_back(schema)


@pytest.fixture
def pg_migrated(pg_available: BaseException | None) -> Iterator[str]:
    """A PostgreSQL schema at the head revision for one test, from this process's pool (``tests/pg_pool.py``):
    as the migrations left it, whatever the tests before did in it."""
    if pg_available is not None:
        service_missing("PostgreSQL", pg_available)
    with leased_pg_schema() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database URL on each backend: a new SQLite file (empty), a PostgreSQL schema at the head revision."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    return str(request.getfixturevalue("pg_migrated"))


@pytest.fixture(params=["sqlite", "postgres"])
def empty_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database on each backend: a new SQLite file, a new PostgreSQL schema (the migrations' tests)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    return str(request.getfixturevalue("pg_schema"))


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'ledger.db'}"


@functools.cache
def _migrated_sqlite_template() -> Path:
    directory = Path(tempfile.mkdtemp(prefix="ledger-template-"))
    atexit.register(shutil.rmtree, directory, True)
    path = directory / "ledger.db"
    open_ledger(f"sqlite:///{path}", migrate=True).close()
    raw = sqlite3.connect(path)
    try:  # everything in the main file: the copy takes that file alone
        raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        raw.close()
    return path


def copy_migrated_sqlite(url: str) -> None:
    """Put a ledger at the head revision at the SQLite ``url`` if nothing is there yet: a copy of a file the
    migrations built once in this test process, a file copy instead of a migration per test. What the
    migrations build is tested on files of their own (``tests/ledger/test_migrations.py``)."""
    path = Path(url.removeprefix("sqlite:///"))
    if url.startswith("sqlite:///") and not path.exists():
        shutil.copyfile(_migrated_sqlite_template(), path)


@functools.cache
def _postgres_migration() -> tuple[tuple[str, Any], ...]:
    """What Alembic sends to migrate an empty PostgreSQL schema to head, recorded once in this test process
    on a schema of its own: the statements after the migration lock up to the migration's commit."""
    schema = hygiene.schema_name("tpl")
    admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    recorded: list[tuple[str, Any]] = []
    migration: dict[str, Any] = {"connection": None, "committed": False}

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        dbapi_connection = conn.connection.dbapi_connection
        if migration["connection"] is dbapi_connection:
            recorded.append((statement, parameters))
        elif "pg_advisory_xact_lock" in statement and not migration["committed"]:
            migration["connection"] = dbapi_connection

    def committed(conn: Any) -> None:
        if migration["connection"] is conn.connection.dbapi_connection:
            migration.update(connection=None, committed=True)

    event.listen(Engine, "before_cursor_execute", record)
    event.listen(Engine, "commit", committed)
    try:
        open_ledger(pg_schema_url(schema), migrate=True).close()
    finally:
        event.remove(Engine, "before_cursor_execute", record)
        event.remove(Engine, "commit", committed)
        with admin.connect() as conn:
            conn.execute(text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
        admin.dispose()
    assert recorded and migration["committed"], "the PostgreSQL migration was not recorded"
    return tuple(recorded)


def migrate_postgres_schema(url: str) -> None:
    """Bring the empty schema of ``url`` (a :func:`pg_schema` URL) to head by sending it the statements Alembic
    sent to one schema of this process, in one transaction. Unlike Alembic it takes no migration lock, which
    is one for the whole database: every test process's migrations queued on it. What the migrations build is
    tested through Alembic itself (``tests/ledger/test_migrations.py``)."""
    if pg_pool.cache_info().currsize and url.rpartition("%3D")[2] in pg_pool().leased:
        return  # a schema of the pool is at head
    engine = create_engine(url)
    try:
        raw = engine.raw_connection()
        try:
            cursor = raw.cursor()
            cursor.execute("SELECT to_regclass('alembic_version')")
            if cursor.fetchone()[0] is not None:
                return  # migrated already
            for statement, parameters in _postgres_migration():
                cursor.execute(statement, parameters)
            raw.commit()
        finally:
            raw.close()
    finally:
        engine.dispose()


@pytest.fixture
def make_ledger(ledger_url: str, clock: Clock) -> Iterator[Callable[..., Ledger]]:
    """Factory: ``make_ledger(account="local")`` on the parametrized backend; closed after the test."""
    opened: list[Ledger] = []

    def factory(**kwargs: object) -> Ledger:
        kwargs.setdefault("clock", clock)
        if ledger_url.startswith("sqlite"):
            copy_migrated_sqlite(ledger_url)
        else:
            migrate_postgres_schema(ledger_url)
        led = open_ledger(ledger_url, migrate=True, **kwargs)  # type: ignore[arg-type]
        opened.append(led)
        return led

    yield factory
    for led in opened:
        led.close()


@pytest.fixture
def led(make_ledger: Callable[..., Ledger]) -> Ledger:
    return make_ledger()


_redis_used = False


@pytest.fixture
def redis_url() -> Iterator[str]:
    """The test Redis (``MEMLEDGER_TEST_REDIS_URL``, db 9 by default), for one test: see :func:`redis_for_a_test`."""
    with redis_for_a_test() as url:
        yield url


@contextmanager
def redis_for_a_test() -> Iterator[str]:
    """The test Redis's URL for the block. Its users take their namespaces from :func:`tests.hygiene.redis_namespace`
    (``make_runtime`` and ``memledger_env`` do): after the block, every key under this test process's prefix is
    deleted, and nothing else in the database is touched."""
    import redis

    global _redis_used
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except Exception as exc:
        client.close()
        service_missing("Redis", exc)
    _redis_used = True
    try:
        yield REDIS_URL
    finally:
        hygiene.delete_keys(client, hygiene.REDIS_PREFIX)
        client.close()
