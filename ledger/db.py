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
import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from functools import lru_cache
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, Engine, TextClause, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, OperationalError, StatementError
from sqlalchemy.pool import StaticPool

from ledger.errors import InvalidArgument, LedgerBusy, LedgerError

log = logging.getLogger(__name__)

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
    if memory:
        _MEMORY_LOCKS[engine] = threading.RLock()

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


@contextmanager
def write_connection(engine: Engine) -> Iterator[Connection]:
    """One write transaction: ``BEGIN IMMEDIATE`` on SQLite (every writer serialized), a plain
    ``BEGIN`` on PostgreSQL (the caller then locks its scope's row). Commits when the block
    ends normally, rolls back when it raises."""
    with engine_lock(engine):
        if not is_sqlite(engine):
            with engine.connect() as conn, conn.begin():
                yield conn
            return
        with _sqlite_write(engine) as conn:
            yield conn


@contextmanager
def _sqlite_write(engine: Engine) -> Iterator[Connection]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` issued on the DBAPI connection.

    SQLAlchemy's transaction bookkeeping costs more than the statements of a save
    (see docs/performance.md). When the block executes through SQLAlchemy, SQLAlchemy
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
            yield conn
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


_MEMORY_LOCKS: weakref.WeakKeyDictionary[Engine, threading.RLock] = weakref.WeakKeyDictionary()


def is_memory(engine: Engine) -> bool:
    return is_sqlite(engine) and (engine.url.database or "") in ("", ":memory:")


def engine_lock(engine: Engine) -> AbstractContextManager[Any]:
    """In-memory SQLite has one connection (``StaticPool``) for every thread: serialize its use."""
    lock = _MEMORY_LOCKS.get(engine)
    return nullcontext() if lock is None else lock


# Create the scope's settings row if missing (PostgreSQL: and lock it) and move its latest
# instant forward in the same statement: past ``:t`` when the clock is ahead of it, else one
# microsecond past the previous latest (an explicit instant never moves it backwards).
_STAMP = (
    "INSERT INTO scope_settings (scope_key, max_records, created_at, updated_at, latest_at) "
    "VALUES (:s, :m, :t, :t, :t) ON CONFLICT (scope_key) DO UPDATE SET latest_at = CASE "
    "WHEN scope_settings.latest_at IS NULL OR scope_settings.latest_at < excluded.latest_at "
    "THEN excluded.latest_at WHEN :x = 1 THEN scope_settings.latest_at ELSE scope_settings.latest_at + 1 END "
    "RETURNING latest_at"
)


_STAMP_EXISTING = (
    "UPDATE scope_settings SET latest_at = CASE WHEN latest_at IS NULL OR latest_at < :t THEN :t "
    "WHEN :x = 1 THEN latest_at ELSE latest_at + 1 END WHERE scope_key = :s RETURNING latest_at"
)


def stamp(
    conn: Connection, scope_key: str, *, default_max: int, clock_us: int, explicit: bool, create: bool = True
) -> int:
    """Lock ``scope_key`` for this transaction and return its instant (SPEC 3.1).

    Without an explicit instant the result is ``clock_us`` or, when the clock is at or before
    the scope's latest instant, that instant + 1 µs: strictly increasing in commit order.
    An explicit instant is returned as given (and recorded when it is the latest).
    ``create=False`` leaves a scope without a settings row without one (a refusal's event).
    """
    params = {"s": scope_key, "m": default_max, "t": clock_us, "x": int(explicit)}
    found = query(conn, _STAMP if create else _STAMP_EXISTING, params)
    return clock_us if explicit or not found else int(found[0][0])


@contextmanager
def translated(engine: Engine) -> Iterator[None]:
    """The store boundary: no SQLAlchemy, sqlite3 or driver error reaches a caller."""
    try:
        yield
    except LedgerError:
        raise
    except UnicodeError as exc:
        raise InvalidArgument(
            "the text contains a character the database cannot store (a lone UTF-16 surrogate); send valid Unicode"
        ) from exc
    except (DBAPIError, sqlite3.Error) as exc:
        if _retryable(exc if isinstance(exc, DBAPIError) else DBAPIError.instance("", (), exc, sqlite3.Error)):
            raise LedgerBusy("the ledger database stayed busy; try again in a moment") from exc
        raise LedgerError(f"the ledger database refused the operation: {_first_line(exc)}") from exc
    except StatementError as exc:
        raise InvalidArgument(f"a value cannot be stored: {_first_line(exc)}") from exc


def _first_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    lines = str(orig).strip().splitlines()
    return lines[0] if lines else type(orig).__name__


def retryable(exc: BaseException) -> bool:
    """Whether ``exc`` (as raised inside a write) is worth running the write again for."""
    if isinstance(exc, LedgerBusy):
        return True
    cause = exc.__cause__ if isinstance(exc, LedgerError) else exc
    return cause is not None and _retryable(cause)


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
