"""SQLite: WAL, ``secure_delete``, ``BEGIN IMMEDIATE`` writers, FTS5 search, checkpoint after a forget.

A deferred transaction that reads and then writes fails with SQLITE_BUSY whatever the busy
timeout, so every write transaction begins ``IMMEDIATE`` (one writer at a time; readers never
wait). pysqlite's own transaction handling is switched off (``isolation_level = None``) so
the ``BEGIN`` statements are the store's: ``BEGIN IMMEDIATE`` for writes, a deferred ``BEGIN``
(from SQLAlchemy's documented ``begin`` event) for everything else. In-memory ``sqlite://``
has one connection (``StaticPool``) for every thread, so each use of it is serialized.
"""

from __future__ import annotations

import logging
import re
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

from sqlalchemy import Connection, Engine, RowMapping, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import StaticPool

from ledger.errors import LedgerError
from ledger.store.base import Store, prefixed_columns

log = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 5_000
MAX_TERMS = 32
_WORD = re.compile(r"\w+", re.UNICODE)
_BUSY = ("database is locked", "database is busy", "database table is locked")


def fts5_query(query: str) -> str:
    """Quote every word and OR them: ``"deploy" OR "region"``; bm25 ranks records matching more words first.

    Empty when the query has no word at all.
    """
    return " OR ".join(f'"{word}"' for word in _WORD.findall(query)[:MAX_TERMS])


class SQLiteStore(Store):
    dialect: ClassVar[str] = "sqlite"

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.memory = (engine.url.database or "") in ("", ":memory:")
        if self.memory:
            self._lock = self.new_lock()
        self._search_sql = (
            f"SELECT {prefixed_columns('m')} FROM memory_fts f JOIN memory_records m ON m.seq = f.rowid "
            "WHERE memory_fts MATCH :q AND m.scope_key = :s AND m.status = 'active' "
            "AND (m.expires_at IS NULL OR m.expires_at > :n) ORDER BY bm25(memory_fts), m.seq LIMIT :lim"
        )

    @classmethod
    def create_engine(cls, url: str) -> Engine:
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
        event.listen(engine, "connect", _on_connect(memory))
        event.listen(engine, "begin", _on_begin)
        return engine

    # ------------------------------------------------------------------ transactions
    @contextmanager
    def _begin_write(self) -> Iterator[Connection]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT`` on the DBAPI connection.

        A statement run through SQLAlchemy inside autobegins SQLAlchemy's own transaction
        (``_on_begin`` sees ours open and emits nothing); that one is then committed or
        rolled back through SQLAlchemy, which ends ours.
        """
        with self.engine.connect() as conn:
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

    @contextmanager
    def _begin_read(self) -> Iterator[Connection]:
        with self.engine.connect() as conn, conn.begin():
            yield conn

    # ------------------------------------------------------------------ statements
    def execute(self, conn: Connection, sql: str, params: Mapping[str, Any]) -> int:
        """Straight to the DBAPI cursor: a few microseconds instead of SQLAlchemy's tens, and a save runs several."""
        return int(_exec_sqlite(conn, sql, params).rowcount)

    def query(self, conn: Connection, sql: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = _exec_sqlite(conn, sql, params).fetchall()
        return rows

    def search(self, conn: Connection, scope: str, query: str, *, limit: int, now_us: int) -> list[RowMapping]:
        match = fts5_query(query)
        if not match:
            return []
        params = {"q": match, "s": scope, "n": now_us, "lim": limit}
        return list(conn.execute(text(self._search_sql), params).mappings())

    def scope_hint(self) -> str:
        # ``+scope_key`` keeps the planner on ix_memory_records_due (only what is due) instead of
        # ix_memory_records_scope_status (every active record of the scope, each read from the table).
        return "+scope_key = :s"

    # ------------------------------------------------------------------ erasure
    def erase_in_transaction(self, conn: Connection) -> None:
        # Rewrite the FTS segments without the deleted entries, inside the forget's own transaction.
        self.execute(conn, "INSERT INTO memory_fts(memory_fts) VALUES ('optimize')", {})

    def scrub_files(self) -> bool:
        """Checkpoint the WAL so old page images of erased text leave the files.

        ``TRUNCATE`` is tried once without a busy handler (a checkpoint that waits for readers
        holds the write lock meanwhile and would stall every writer); when a reader holds a
        snapshot it falls back to ``PASSIVE``, and the next checkpoint overwrites the rest.
        """
        if self.memory:
            return True
        try:
            with self._lock, self.engine.connect() as conn:
                raw = conn.connection.dbapi_connection
                assert raw is not None
                raw.execute("PRAGMA busy_timeout=0")
                try:
                    busy, _log, _done = raw.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                    if busy == 0:
                        return True
                    raw.execute("PRAGMA wal_checkpoint(PASSIVE)")
                finally:
                    raw.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        except (sqlite3.Error, DBAPIError) as exc:
            log.warning("erasure checkpoint failed (%s); the next checkpoint will finish it", type(exc).__name__)
            return False
        log.info("erasure checkpoint could not truncate: a reader held the WAL; the next checkpoint finishes it")
        return False

    # ------------------------------------------------------------------ errors
    def is_busy(self, exc: BaseException) -> bool:
        orig = getattr(exc, "orig", exc)
        return isinstance(orig, sqlite3.OperationalError) and any(b in str(orig).lower() for b in _BUSY)


def _on_connect(memory: bool) -> Any:
    def on_connect(dbapi_conn: sqlite3.Connection, _record: object) -> None:
        dbapi_conn.isolation_level = None  # the BEGINs are ours
        cur = dbapi_conn.cursor()
        if not memory:
            cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA secure_delete=ON")
        cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    return on_connect


def _on_begin(conn: Connection) -> None:
    """SQLAlchemy's (deferred) transaction; a write transaction the store began is left alone."""
    dbapi_conn = conn.connection.dbapi_connection
    if not dbapi_conn.in_transaction:  # type: ignore[union-attr]
        dbapi_conn.execute("BEGIN")  # type: ignore[union-attr]


def _exec_dbapi(dbapi_conn: Any, sql: str, params: Mapping[str, Any] | Sequence[Any] = ()) -> Any:
    """Execute on a sqlite3 connection; errors come out wrapped as ``conn.execute`` would raise them."""
    try:
        return dbapi_conn.execute(sql, params)
    except sqlite3.Error as exc:
        raise DBAPIError.instance(sql, params, exc, sqlite3.Error) from exc


# The rule text() uses to find ``:name`` parameters (so both read a statement alike).
_BIND_PARAM = re.compile(r"(?<![:\w\x5c]):(\w+)(?![:\w])", re.UNICODE)


@lru_cache(maxsize=512)
def _qmark(sql: str) -> tuple[str, tuple[str, ...]]:
    """``sql`` with ``?`` for each ``:name``, and the names in order (sqlite3 binds a sequence far faster)."""
    return _BIND_PARAM.sub("?", sql), tuple(_BIND_PARAM.findall(sql))


def _exec_sqlite(conn: Connection, sql: str, params: Mapping[str, Any]) -> Any:
    qmark_sql, names = _qmark(sql)
    return _exec_dbapi(conn.connection.dbapi_connection, qmark_sql, [params[name] for name in names])
