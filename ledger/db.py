"""Engines, transactions and migrations.

SQLite: WAL, ``secure_delete``, a busy timeout, and write transactions that begin
``IMMEDIATE`` (a deferred transaction that reads and then writes fails with
SQLITE_BUSY whatever the timeout). PostgreSQL: READ COMMITTED plus a row lock on
the scope's ``scope_settings`` row; serialization failures and deadlocks are retried.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.pool import StaticPool
from tenacity import Retrying, retry_if_exception, stop_after_attempt, stop_before_delay, wait_random_exponential

from ledger.errors import LedgerBusy, LedgerError

log = logging.getLogger(__name__)

T = TypeVar("T")
MIGRATIONS_DIR = Path(__file__).with_name("migrations")
BUSY_TIMEOUT_MS = 5_000
WRITE_RETRY_BUDGET_S = 30.0


def is_sqlite(engine: Engine) -> bool:
    return engine.dialect.name == "sqlite"


def make_engine(url: str) -> Engine:
    """Create an engine for ``url`` with the pragmas and hooks this ledger relies on."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(url)
    if parsed.get_backend_name() == "postgresql":
        return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)
    raise LedgerError(f"unsupported database URL {parsed.render_as_string(hide_password=True)!r}: use sqlite or postgresql")


def _sqlite_engine(url: str) -> Engine:
    parsed = make_url(url)
    database = parsed.database or ""
    memory = database in ("", ":memory:")
    if not memory:
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    kwargs: dict[str, Any] = {"connect_args": {"check_same_thread": False, "timeout": BUSY_TIMEOUT_MS / 1000}}
    if memory:
        kwargs["poolclass"] = StaticPool
    engine = create_engine(url, **kwargs)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: sqlite3.Connection, _record: object) -> None:
        # Take transaction control away from pysqlite so that BEGIN IMMEDIATE is ours to emit.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        if not memory:
            cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA secure_delete=ON")
        cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        mode = conn.get_execution_options().get("sqlite_begin", "DEFERRED")
        conn.exec_driver_sql(f"BEGIN {mode}")

    return engine


def _retryable(exc: BaseException) -> bool:
    """SQLite busy/locked and PostgreSQL serialization failures or deadlocks."""
    if not isinstance(exc, OperationalError | DBAPIError):
        return False
    orig = getattr(exc, "orig", None)
    sqlstate = getattr(orig, "sqlstate", None)
    if sqlstate in ("40001", "40P01", "55P03"):
        return True
    text = str(orig).lower()
    return "database is locked" in text or "database is busy" in text or "database table is locked" in text


def run_write(engine: Engine, fn: Callable[[Connection], T], *, pg_lock: Callable[[Connection], None] | None = None) -> T:
    """Run ``fn`` in one write transaction, retried while the database is busy.

    On SQLite the transaction begins ``IMMEDIATE``, which serializes every writer.
    On PostgreSQL, ``pg_lock`` runs first in the same transaction (the ledger
    passes one that creates the scope's settings row if missing and locks it
    ``FOR UPDATE``), which serializes the writers of one scope.

    Raises:
        LedgerBusy: the database stayed busy past the retry budget.
        LedgerError: whatever ``fn`` raised on purpose (the transaction is rolled back).
    """
    retrying = Retrying(
        retry=retry_if_exception(_retryable),
        stop=stop_before_delay(WRITE_RETRY_BUDGET_S) | stop_after_attempt(50),
        wait=wait_random_exponential(multiplier=0.005, max=0.5),
        reraise=True,
    )
    try:
        for attempt in retrying:
            with attempt:
                return _write_once(engine, fn, pg_lock)
    except (OperationalError, DBAPIError) as exc:
        if _retryable(exc):
            raise LedgerBusy("the ledger database stayed busy; try again in a moment") from exc
        raise
    raise AssertionError("unreachable")  # pragma: no cover


def _write_once(engine: Engine, fn: Callable[[Connection], T], pg_lock: Callable[[Connection], None] | None) -> T:
    sqlite = is_sqlite(engine)
    with engine.connect() as raw:
        conn = raw.execution_options(sqlite_begin="IMMEDIATE") if sqlite else raw
        with conn.begin():
            if pg_lock is not None and not sqlite:
                pg_lock(conn)
            return fn(conn)


def alembic_config(url: str | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if url is not None:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Apply Alembic migrations up to ``revision`` on ``engine``'s database."""
    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")
