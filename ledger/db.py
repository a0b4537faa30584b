"""Engines, transactions and migrations.

SQLite: WAL, ``secure_delete``, a busy timeout, and write transactions that begin
``IMMEDIATE`` (a deferred transaction that reads and then writes fails with
SQLITE_BUSY whatever the timeout). PostgreSQL: READ COMMITTED plus a row lock on
the scope's ``scope_settings`` row; serialization failures and deadlocks are retried.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, Engine, TextClause, create_engine, event, text
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
WRITE_ATTEMPTS = 50


def is_sqlite(engine: Engine) -> bool:
    return engine.dialect.name == "sqlite"


def make_engine(url: str) -> Engine:
    """Create an engine for ``url`` with the pragmas and hooks this ledger relies on."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(url)
    if parsed.get_backend_name() == "postgresql":
        return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)
    raise LedgerError(
        f"unsupported database URL {parsed.render_as_string(hide_password=True)!r}: use sqlite or postgresql"
    )


def _sqlite_engine(url: str) -> Engine:
    parsed = make_url(url)
    database = parsed.database or ""
    memory = database in ("", ":memory:")
    if not memory:
        try:
            Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LedgerError(f"cannot create the directory for the ledger database {database!r}: {exc}") from exc
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

    # SQLAlchemy's own transactions begin here, from the dialect, rather than from a
    # "begin" event listener: any engine-level event listener makes every connect and
    # every statement pay for event dispatch (see docs/performance.md).
    engine.dialect.do_begin = _sqlite_begin  # type: ignore[method-assign,assignment]
    return engine


def _sqlite_begin(dbapi_conn: Any) -> None:
    """Begin SQLAlchemy's (deferred) transaction; leave a write transaction _write_once_sqlite began alone."""
    if not dbapi_conn.in_transaction:
        dbapi_conn.execute("BEGIN")


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


def run_write(
    engine: Engine, fn: Callable[[Connection], T], *, pg_lock: Callable[[Connection], None] | None = None
) -> T:
    """Run ``fn`` in one write transaction, retried while the database is busy.

    On SQLite the transaction begins ``IMMEDIATE``, which serializes every writer.
    On PostgreSQL, ``pg_lock`` runs first in the same transaction (the ledger
    passes one that creates the scope's settings row if missing and locks it
    ``FOR UPDATE``), which serializes the writers of one scope.

    Raises:
        LedgerBusy: the database stayed busy past the retry budget.
        LedgerError: whatever ``fn`` raised on purpose (the transaction is rolled back).
    """
    started = time.monotonic()
    try:
        # The uncontended write pays for no retry machinery (building tenacity's state
        # costs as much as a save's statements); contention falls through to the loop.
        return _write_once(engine, fn, pg_lock)
    except (OperationalError, DBAPIError) as exc:
        if not _retryable(exc):
            raise
    budget_s = max(0.0, WRITE_RETRY_BUDGET_S - (time.monotonic() - started))
    retrying = Retrying(
        retry=retry_if_exception(_retryable),
        stop=stop_before_delay(budget_s) | stop_after_attempt(WRITE_ATTEMPTS - 1),
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
    if is_sqlite(engine):
        return _write_once_sqlite(engine, fn)
    with engine.connect() as conn, conn.begin():
        if pg_lock is not None:
            pg_lock(conn)
        return fn(conn)


def _write_once_sqlite(engine: Engine, fn: Callable[[Connection], T]) -> T:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` issued on the DBAPI connection.

    SQLAlchemy's transaction bookkeeping costs more than the statements of a save
    (see docs/performance.md). When ``fn`` executes through SQLAlchemy, SQLAlchemy
    autobegins a transaction of its own (``_sqlite_begin`` sees ours open and emits
    nothing); that one is then committed or rolled back through SQLAlchemy, which
    ends ours. A failed ``COMMIT`` leaves the pool's reset-on-return to roll back.
    """
    # engine.connect() joins the engine's event dispatch into every Connection; the
    # ledger's SQLite engine has no listeners, so skip that (SQLAlchemy does the same
    # for its own first-connect Connection). With a listener attached, join as usual.
    with Connection(engine, _has_events=False if not engine._has_events else None) as conn:
        dbapi_conn = conn.connection.dbapi_connection
        _exec_dbapi(dbapi_conn, "BEGIN IMMEDIATE")
        try:
            result = fn(conn)
        except BaseException:
            if conn.in_transaction():
                conn.rollback()
            elif dbapi_conn.in_transaction:  # type: ignore[union-attr]
                _exec_dbapi(dbapi_conn, "ROLLBACK")
            raise
        if conn.in_transaction():
            conn.commit()
        else:
            _exec_dbapi(dbapi_conn, "COMMIT")
        return result


def _exec_dbapi(dbapi_conn: Any, sql: str, params: Mapping[str, Any] | Sequence[Any] = ()) -> Any:
    """Execute on a sqlite3 connection; errors come out wrapped as ``conn.execute`` would raise them."""
    try:
        return dbapi_conn.execute(sql, params)
    except sqlite3.Error as exc:
        raise DBAPIError.instance(sql, params, exc, sqlite3.Error) from exc


@lru_cache(maxsize=512)
def _text(sql: str) -> TextClause:
    return text(sql)


# The rule text() uses to find ``:name`` parameters (so both read a statement alike).
_BIND_PARAM = re.compile(r"(?<![:\w\x5c]):(\w+)(?![:\w])", re.UNICODE)


@lru_cache(maxsize=512)
def _qmark(sql: str) -> tuple[str, tuple[str, ...]]:
    """``sql`` with ``?`` for each ``:name``, and the names in order.

    sqlite3 binds a sequence far faster than a mapping (it looks every name up
    through the C API): ~16 us less for the 18 columns of a record insert.
    """
    return _BIND_PARAM.sub("?", sql), tuple(_BIND_PARAM.findall(sql))


def _exec_sqlite(conn: Connection, sql: str, params: Mapping[str, Any]) -> Any:
    qmark_sql, names = _qmark(sql)
    return _exec_dbapi(conn.connection.dbapi_connection, qmark_sql, [params[name] for name in names])


def execute(conn: Connection, sql: str, params: Mapping[str, Any]) -> int:
    """Run one statement (``:name`` parameters) in ``conn``'s transaction; returns its row count.

    On SQLite it goes straight to the DBAPI cursor: a few microseconds instead of
    SQLAlchemy's tens, and a save runs several. Elsewhere it runs through SQLAlchemy
    (a cached ``text()``). Errors are SQLAlchemy's either way.
    """
    if conn.dialect.name != "sqlite":
        return int(conn.execute(_text(sql), params).rowcount)
    return int(_exec_sqlite(conn, sql, params).rowcount)


def query(conn: Connection, sql: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """Like :func:`execute`, returning the rows as tuples."""
    if conn.dialect.name != "sqlite":
        return [tuple(row) for row in conn.execute(_text(sql), params)]
    rows: list[tuple[Any, ...]] = _exec_sqlite(conn, sql, params).fetchall()
    return rows


def alembic_config(url: str | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if url is not None:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Apply Alembic migrations up to ``revision`` on ``engine``'s database.

    Raises:
        LedgerError: the database cannot be reached or opened.
    """
    cfg = alembic_config()
    with _reachable(engine), engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def current_revision(engine: Engine) -> str | None:
    """The database's Alembic revision (None when never migrated). Raises LedgerError when unreachable."""
    from alembic.runtime.migration import MigrationContext

    with _reachable(engine), engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


@contextmanager
def _reachable(engine: Engine) -> Iterator[None]:
    """Translate a failure to connect (server down, unknown database, unwritable file) into a LedgerError."""
    try:
        yield
    except OperationalError as exc:
        first = str(exc.orig).strip().splitlines()[0] if exc.orig is not None else type(exc).__name__
        where = engine.url.render_as_string(hide_password=True)
        raise LedgerError(f"cannot open the ledger database {where!r}: {first}") from exc


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")
