"""SQLite: WAL, ``secure_delete``, ``BEGIN IMMEDIATE`` writers, FTS5 search, VACUUM and checkpoint after a forget.

A deferred transaction that reads and then writes fails with SQLITE_BUSY whatever the busy
timeout, so every write transaction begins ``IMMEDIATE`` (one writer at a time; readers never
wait). pysqlite's own transaction handling is switched off (``isolation_level = None``) so
the ``BEGIN`` statements are the store's: ``BEGIN IMMEDIATE`` for writes, a deferred ``BEGIN``
(from SQLAlchemy's documented ``begin`` event) for everything else. In-memory ``sqlite://``
has one connection (``StaticPool``) for every thread, so each use of it is serialized.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from operator import itemgetter
from pathlib import Path
from typing import Any, ClassVar

from sqlalchemy import ColumnElement, Connection, Dialect, Engine, RowMapping, Table, create_engine, event, text
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import StaticPool
from sqlalchemy.sql.compiler import SQLCompiler

from ledger.errors import LedgerBusy, LedgerError
from ledger.store import sqlite_ddl, sqlite_files, sqlite_fts, sqlite_wal
from ledger.store.base import Params, Statement, Store, prefixed_columns
from ledger.store.prepared import Prepared
from ledger.store.sqlite_queue import WriteQueue

log = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 5_000
# PRAGMA synchronous in WAL mode (docs/operations.md, "What is durable"). normal: the WAL is synced at checkpoints
# only, so a committed write survives a crash of the process but the last ones may be lost with the machine
# (power loss, OS crash; the file stays consistent). full: the WAL is synced at every commit, so a committed
# write survives those too, for an fsync per commit.
SYNCHRONOUS_MODES = ("normal", "full")
DEFAULT_SYNCHRONOUS = "normal"
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
    ddl = sqlite_ddl.OBJECTS
    migrate_on_open: ClassVar[bool] = True
    stamp_reads: ClassVar[bool] = True

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.memory = (engine.url.database or "") in ("", ":memory:")
        if self.memory:
            self._lock = self.new_lock()
        # This process's writers queue (sqlite_queue.py). A write holds both: in-memory SQLite's one lock, or a
        # file's queue (each has only one of them).
        self._queue = WriteQueue(timeout_s=BUSY_TIMEOUT_MS / 1000)
        self._write_lock: AbstractContextManager[Any] = self._lock if self.memory else self._queue
        # A file's WAL checkpoints, in a thread started once the WAL reaches its limit; disposing the engine stops it
        self._checkpoints = sqlite_wal.Checkpointer(
            engine, queue=self._queue, busy=_busy, busy_timeout_ms=BUSY_TIMEOUT_MS
        )
        event.listen(engine, "engine_disposed", lambda _engine: self._checkpoints.close())
        self._writers = threading.local()
        self._writers_lock = threading.Lock()
        self._kept: set[Connection] = set()
        # An erasure's checkpoint a reader blocked, or (first) a VACUUM an earlier process left due: see scrub_files.
        self._scrub_pending = self._first_look = not self.memory
        self._vacuum_due = False  # a forget committed (or is committing) and no VACUUM has run since
        self._search_sql = (
            f"SELECT {prefixed_columns('m')} FROM memory_fts f JOIN memory_records m ON m.seq = f.rowid "
            "WHERE memory_fts MATCH :q AND m.scope_key = :s AND m.status = 'active' "
            "AND (m.expires_at IS NULL OR m.expires_at > :n) ORDER BY bm25(memory_fts), m.seq LIMIT :lim"
        )

    @classmethod
    def create_engine(cls, url: str, *, synchronous: str = DEFAULT_SYNCHRONOUS) -> Engine:
        """The engine; every connection it opens runs ``PRAGMA synchronous`` = ``synchronous``, one of
        :data:`SYNCHRONOUS_MODES` (:func:`ledger.store.make_engine` checks it)."""
        parsed = make_url(url)
        database = parsed.database or ""
        memory = database in ("", ":memory:")
        if not memory:
            if not parsed.query.get("uri"):  # by its absolute path: a later chdir must not open another file
                database = str(Path(database).expanduser().absolute())
                url = parsed.set(database=database).render_as_string(hide_password=False)
            try:
                Path(database).parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise LedgerError(f"cannot create the directory for the ledger database {database!r}: {exc}") from exc
        # hide_parameters: a statement's values (a body) never enter an error's text, so no traceback logs one.
        kwargs: dict[str, Any] = {
            "connect_args": {"check_same_thread": False, "timeout": BUSY_TIMEOUT_MS / 1000},
            "hide_parameters": True,
        }
        if memory:
            kwargs["poolclass"] = StaticPool
        else:
            # Each writing thread keeps one connection (SQLiteStore._writer): no fixed cap, so a
            # server's worker threads never wait for each other's idle connections.
            kwargs["max_overflow"] = -1
        engine = create_engine(url, **kwargs)
        event.listen(engine, "connect", _on_connect(memory, synchronous))
        event.listen(engine, "begin", _on_begin)
        return engine

    # ------------------------------------------------------------------ transactions
    def write(self) -> AbstractContextManager[Connection]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT`` on the DBAPI connection, errors translated (:class:`_Write`).

        A statement run through SQLAlchemy inside autobegins SQLAlchemy's own transaction
        (``_on_begin`` sees ours open and emits nothing); that one is then committed or
        rolled back through SQLAlchemy, which ends ours. On a file, each thread keeps its write
        connection between transactions (see :meth:`_writer`).
        """
        return _Write(self)

    @contextmanager
    def migrating(self) -> Iterator[Connection]:
        # BEGIN IMMEDIATE first: a second migrator waits in the busy handler, then finds the head.
        # SQLAlchemy's transaction opened over it emits nothing (_on_begin) and ends it.
        with self.engine.connect() as conn:
            _exec_dbapi(conn.connection.dbapi_connection, "BEGIN IMMEDIATE")
            with conn.begin():
                yield conn

    def _writer(self) -> tuple[Connection, Any]:
        """This thread's write connection, kept checked out between its write transactions, marked busy
        until :meth:`write` ends; and the thread's record of it (None: a pooled connection to close).

        A pool checkout and return cost a save about 20 µs (a tenth of it). An idle kept
        connection holds no transaction and no snapshot, so it keeps no WAL page and no lock.
        It is replaced after a fork or when invalidated, closed when its thread's object is
        collected or the store is disposed. A write nested in another write of the same thread,
        and in-memory SQLite (one shared connection), take a pooled connection as before.
        """
        local = self._writers
        conn: Connection | None = getattr(local, "conn", None)
        if self.memory or getattr(local, "busy", False):
            return self.engine.connect(), None
        if conn is None or local.pid != os.getpid() or conn.closed or conn.invalidated:
            conn = local.conn = self.engine.connect()
            local.pid = os.getpid()
            with self._writers_lock:
                self._kept.add(conn)
            weakref.finalize(threading.current_thread(), self._drop_writer, conn, local.pid)
        local.busy = True
        return conn, local

    def _drop_writer(self, conn: Connection, pid: int) -> None:
        with self._writers_lock:
            self._kept.discard(conn)
        if pid == os.getpid():  # never close a parent's connection in a forked child (its locks are the parent's)
            try:
                conn.close()
            except Exception:
                log.debug("closing a kept write connection failed", exc_info=True)

    def dispose(self) -> None:
        if self._scrub_pending or self._vacuum_due:  # a VACUUM a lock kept out: one more try before the end
            self.scrub_files()
        # Under the write queue (a kept connection is in use only inside a write; closing one another thread writes
        # on crashed the process). Writers busy past the wait keep theirs: each is closed when its thread ends.
        if self._queue.enter(BUSY_TIMEOUT_MS / 1000):
            try:
                with self._writers_lock:
                    kept = list(self._kept)
                for conn in kept:
                    self._drop_writer(conn, os.getpid())
            finally:
                self._queue.__exit__(None, None, None)
        super().dispose()

    def _begin_write(self) -> AbstractContextManager[Connection]:
        return self.write()  # this store's write() is the whole of it, in one frame

    @contextmanager
    def _begin_read(self) -> Iterator[Connection]:
        with self.engine.connect() as conn, conn.begin():
            yield conn
        if self._scrub_pending:  # this read may have been the snapshot that kept an erased page in the WAL
            self.scrub_files(wait=False)  # a read never waits behind writers: a later transaction tries again

    # ------------------------------------------------------------------ statements
    def run(self, conn: Connection, stmt: Statement, params: Params | None = None) -> int:
        """A prepared statement goes straight to the DB-API cursor: a few microseconds instead of SQLAlchemy's
        tens, and a save runs six. Anything else (a statement built per call) goes through SQLAlchemy."""
        plan = self._plan(stmt)
        if plan is None:
            return super().run(conn, stmt, params)
        dbapi_conn = conn.connection.dbapi_connection
        if type(params) is not dict and isinstance(params, Sequence):  # a dict is no Sequence: skip the ABC's check
            if plan.expanding:  # executemany needs one SQL text
                return super().run(conn, stmt, params)
            rows = [plan.values(p) for p in params]
            return int(_exec_dbapi(dbapi_conn, plan.sql, rows, many=True).rowcount)
        sql, values = plan.bind(params or {})
        return int(_exec_dbapi(dbapi_conn, sql, values).rowcount)

    def send(self, conn: Connection, stmt: Statement, params: Mapping[str, Any] | None = None) -> None:
        """:meth:`run` without its row count, and for one set of values of a statement without ``IN`` lists
        (a save's two inserts) without its other turns."""
        plan = self._plan(stmt)
        shape = None if plan is None or type(params) is not dict else plan.fixed
        if shape is None:
            self.run(conn, stmt, params)
        else:
            _exec_dbapi(conn.connection.dbapi_connection, shape.sql, shape.values(params))  # type: ignore[arg-type]

    def rows(self, conn: Connection, stmt: Statement, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        plan = self._plan(stmt)
        if plan is None:
            return super().rows(conn, stmt, params)
        sql, values = plan.bind(params or {})
        found: list[tuple[Any, ...]] = _exec_dbapi(conn.connection.dbapi_connection, sql, values).fetchall()
        return found

    def _plan(self, stmt: Statement) -> _Plan | None:
        if not isinstance(stmt, Prepared):
            return None
        try:
            return stmt.plans["sqlite"]  # type: ignore[no-any-return]
        except KeyError:
            plan = stmt.plans["sqlite"] = _Plan.build(stmt, self.engine.dialect)
            return plan

    def upsert(self, table: Table) -> Any:
        return sqlite_insert(table)

    def search(self, conn: Connection, scope: str, query: str, *, limit: int, now_us: int) -> list[RowMapping]:
        match = fts5_query(query)
        if not match:
            return []
        params = {"q": match, "s": scope, "n": now_us, "lim": limit}
        return list(conn.execute(text(self._search_sql), params).mappings())

    def scope_hint(self) -> ColumnElement[bool]:
        # ``+scope_key`` keeps the planner on ix_memory_records_due (only what is due) instead of an index by
        # scope (every record of the scope, each read from the table).
        return text("+memory_records.scope_key = :s")  # type: ignore[return-value]

    # ------------------------------------------------------------------ erasure
    def erase_in_transaction(self, conn: Connection) -> None:
        # Rewrite the FTS segments without the deleted entries, inside the forget's own transaction.
        with _dbapi_errors("memory_fts optimize"):
            sqlite_fts.erase(conn.connection.dbapi_connection)  # type: ignore[arg-type]
            if not self.memory:  # counted in the file too, for a process that ends before its VACUUM ran
                sqlite_files.count_vacuum_due(conn.connection.dbapi_connection)  # type: ignore[arg-type]
        self._vacuum_due = True  # pages may keep the erased text in their unused space (sqlite_files.py)

    def search_index_problem(self, *, thorough: bool) -> str | None:
        # The thorough check is an FTS5 command (an INSERT): it needs the write lock, and changes nothing.
        with self.write() if thorough else self.read() as conn, _dbapi_errors("memory_fts integrity-check"):
            return sqlite_fts.problem(conn.connection.dbapi_connection, thorough=thorough, busy=_busy)  # type: ignore[arg-type]

    def rebuild_search_index(self) -> None:
        with self.write() as conn, _dbapi_errors("memory_fts rebuild"):
            raw = conn.connection.dbapi_connection
            sqlite_fts.rebuild(raw, busy=_busy)  # type: ignore[arg-type]
            left = sqlite_fts.problem(raw, thorough=True, busy=_busy)  # type: ignore[arg-type]
        if left is not None:
            raise LedgerError(f"the full-text index is still damaged after a rebuild: {left}")

    def scrub_files(self, *, wait: bool = True) -> bool:
        """``VACUUM`` once a forget committed (this process's, or one an earlier process counted in the file), then
        checkpoint the WAL, so erased text leaves the files (:func:`sqlite_files.scrub`). Never waits for a reader
        (nor, unless ``wait``, for this process's writers), never raises; what was blocked is tried again as each
        later transaction ends, and by :meth:`dispose`."""
        if self.memory:
            return True
        if self._queue.held_here():  # a forget inside this thread's write: that write's end tries again
            self._scrub_pending = True
            return False
        if not self._queue.enter(BUSY_TIMEOUT_MS / 1000 if wait else 0.0):  # this process's writers wait for it
            self._scrub_pending = True
            return False
        try:
            vacuum, self._vacuum_due = self._vacuum_due, False
            first, self._first_look = self._first_look, False
            try:
                with self._checkpoints.checkpointing(), self.engine.connect() as conn:
                    raw: sqlite3.Connection = conn.connection.dbapi_connection  # type: ignore[assignment]
                    vacuum = vacuum or sqlite_files.vacuums_due(raw) > 0
                    done = (first and not vacuum) or sqlite_files.scrub(
                        raw, vacuum=vacuum, busy_timeout_ms=BUSY_TIMEOUT_MS, busy=_busy
                    )
            except (sqlite3.Error, DBAPIError, LedgerBusy) as exc:
                log.warning("erasure scrub failed (%s); the next transaction tries again", type(exc).__name__)
                self._vacuum_due = self._vacuum_due or vacuum
                done = False
            self._scrub_pending = not done
        finally:
            self._queue.__exit__(None, None, None)
        return done

    def compact(self, tables: Sequence[str]) -> tuple[bool, list[str]]:
        with self._lock:  # in-memory SQLite's one connection (nothing on a file)
            proxy = self.engine.raw_connection()
            try:
                raw: sqlite3.Connection = proxy.driver_connection  # type: ignore[assignment]
                truncated = sqlite_files.compact(raw, busy_timeout_ms=BUSY_TIMEOUT_MS, busy=_busy)
            finally:
                proxy.close()
        return truncated, [] if truncated else [sqlite_files.WAL_KEPT]

    def size_bytes(self, tables: Sequence[str]) -> int:
        path = self.engine.url.database or ""
        return sum(os.path.getsize(p) for p in (path, path + "-wal") if path and os.path.exists(p))

    # ------------------------------------------------------------------ errors
    def is_busy(self, exc: BaseException) -> bool:
        return _busy(exc)


def _on_connect(memory: bool, synchronous: str) -> Any:
    def on_connect(dbapi_conn: sqlite3.Connection, _record: object) -> None:
        dbapi_conn.isolation_level = None  # the BEGINs are ours
        cur = dbapi_conn.cursor()
        if not memory:  # WAL mode, and its checkpoints off the write path (sqlite_wal.py)
            sqlite_wal.use_wal(cur, busy=_busy, timeout_s=BUSY_TIMEOUT_MS / 1000)
        cur.execute(f"PRAGMA synchronous={synchronous.upper()}")
        cur.execute("PRAGMA secure_delete=ON")
        cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    return on_connect


def _busy(exc: BaseException) -> bool:
    """A busy or locked database, raised by sqlite3 or wrapped by SQLAlchemy."""
    orig = getattr(exc, "orig", exc)
    return isinstance(orig, sqlite3.OperationalError) and any(b in str(orig).lower() for b in _BUSY)


def _left_open(conn: Connection) -> bool:
    """Whether a transaction is still on ``conn``, SQLAlchemy's or SQLite's (its rollback failed); unknown: yes."""
    try:
        if conn.get_transaction() is not None or conn.in_transaction():
            return True
        return bool(conn.connection.dbapi_connection.in_transaction)  # type: ignore[union-attr]
    except Exception:
        return True


class _Write:
    """One write transaction of :meth:`SQLiteStore.write`: a class, not a generator, as every save runs one.

    Entering takes the write lock, this thread's write connection and ``BEGIN IMMEDIATE``; leaving commits
    (rolls back when the block raised), gives the connection back (dropped when it is spoiled: invalidated,
    or a transaction left open) and the lock. Every database error leaves translated (``store.boundary``).
    """

    __slots__ = ("conn", "dbapi_conn", "local", "store")

    def __init__(self, store: SQLiteStore) -> None:
        self.store = store

    def __enter__(self) -> Connection:
        store = self.store
        with store.boundary:
            store._write_lock.__enter__()
            try:
                self.conn, self.local = store._writer()
                try:
                    self.dbapi_conn = self.conn.connection.dbapi_connection
                    _exec_dbapi(self.dbapi_conn, "BEGIN IMMEDIATE")
                except BaseException:
                    self._give_back(failed=True)
                    raise
            except BaseException:
                store._write_lock.__exit__(None, None, None)
                raise
        return self.conn

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        store, conn, dbapi_conn = self.store, self.conn, self.dbapi_conn
        with store.boundary:
            try:
                try:
                    if exc is not None:
                        self._roll_back()
                    elif conn.in_transaction():
                        conn.commit()
                    else:
                        _exec_dbapi(dbapi_conn, "COMMIT")
                except BaseException:
                    self._roll_back()  # a COMMIT that failed (a full disk) leaves the transaction open
                    self._give_back(failed=True)
                    raise
                self._give_back(failed=exc is not None)
            finally:
                store._write_lock.__exit__(None, None, None)
        if not store.memory:  # wakes the WAL's checkpointer when the WAL has grown past its limit
            store._checkpoints.after_commit()
        if store._scrub_pending:  # an erasure's checkpoint a reader blocked (never raises)
            store.scrub_files()
        store.boundary.__exit__(kind, exc, tb)  # the block's own error, translated (else it leaves as it is)

    def _roll_back(self) -> None:
        """End a failed transaction, SQLAlchemy's and SQLite's; never raises (:meth:`_give_back` drops a spoiled
        connection). SQLAlchemy keeps a transaction whose ``COMMIT`` failed on the connection and refuses every
        later statement until it is rolled back: the thread's kept connection would refuse every forget after."""
        conn, dbapi_conn = self.conn, self.dbapi_conn
        try:
            if conn.get_transaction() is not None:
                conn.rollback()
            if dbapi_conn.in_transaction:  # type: ignore[union-attr]
                dbapi_conn.execute("ROLLBACK")  # type: ignore[union-attr]
        except Exception:
            log.warning("rolling back a failed write failed; its connection is dropped", exc_info=True)

    def _give_back(self, *, failed: bool) -> None:
        """This thread's connection back (a pooled one closed); after a failure, dropped when spoiled."""
        conn, local = self.conn, self.local
        if local is None:
            conn.close()
            return
        # Never hand a thread a connection mid-transaction.
        if failed and (conn.invalidated or _left_open(conn)):
            local.conn = None
            self.store._drop_writer(conn, local.pid)
        local.busy = False


def _on_begin(conn: Connection) -> None:
    """SQLAlchemy's (deferred) transaction; a write transaction the store began is left alone."""
    dbapi_conn = conn.connection.dbapi_connection
    if not dbapi_conn.in_transaction:  # type: ignore[union-attr]
        dbapi_conn.execute("BEGIN")  # type: ignore[union-attr]


@contextmanager
def _dbapi_errors(what: str) -> Iterator[None]:
    """sqlite3 errors raised inside come out wrapped as ``conn.execute`` would raise them (the boundary translates)."""
    try:
        yield
    except sqlite3.Error as exc:
        raise DBAPIError.instance(what, (), exc, sqlite3.Error) from exc


def _exec_dbapi(dbapi_conn: Any, sql: str, params: Any = (), *, many: bool = False) -> Any:
    """Execute on a sqlite3 connection; errors come out wrapped as ``conn.execute`` would raise them."""
    try:
        return dbapi_conn.executemany(sql, params) if many else dbapi_conn.execute(sql, params)
    except sqlite3.Error as exc:
        raise DBAPIError.instance(sql, params, exc, sqlite3.Error, hide_parameters=True) from exc


# Most of one statement's shapes kept (one per length of its IN lists): past it, they are made again.
_SHAPES_KEPT = 64


class _Shape:
    """One SQL text of a prepared statement and how to bind it: one slot per ``?``.

    A slot ``(name, None, None)`` takes ``params[name]``; ``(name, i, None)`` the ``i``-th
    item of the list ``params[name]`` (an ``IN`` list); ``(None, None, value)`` is a constant.
    """

    __slots__ = ("constants", "getter", "names", "processors", "slots", "sql")

    def __init__(
        self, sql: str, slots: list[tuple[str | None, int | None, Any]], processors: list[Callable[[Any], Any] | None]
    ) -> None:
        self.sql = sql
        self.slots = slots
        self.processors = processors  # the type's bind processor (Float: to_float), per slot
        # The common case, every slot a plain parameter: one list comprehension binds it.
        plain = all(name is not None and index is None for name, index, _v in slots) and not any(processors)
        self.names: tuple[str, ...] | None = tuple(n for n, _i, _v in slots if n is not None) if plain else None
        # Two or more of them: one C call (itemgetter gives one name's value alone, not in a tuple).
        self.getter = itemgetter(*self.names) if self.names is not None and len(self.names) > 1 else None
        # Next, plain parameters and constants (a scope's stamp): one comprehension too.
        simple = all(index is None for _n, index, _v in slots) and not any(processors)
        self.constants = tuple((name, value) for name, _i, value in slots) if simple and not plain else None

    def values(self, params: Mapping[str, Any]) -> Sequence[Any]:
        if self.getter is not None:
            return self.getter(params)  # type: ignore[no-any-return]
        if self.names is not None:
            return [params[name] for name in self.names]
        if self.constants is not None:
            return [value if name is None else params[name] for name, value in self.constants]
        return [
            _processed(proc, _slot_value(params, name, index, value))
            for (name, index, value), proc in zip(self.slots, self.processors, strict=True)
        ]


def _slot_value(params: Mapping[str, Any], name: str | None, index: int | None, value: Any) -> Any:
    if name is None:
        return value
    return params[name] if index is None else params[name][index]


class _Plan:
    """A prepared statement compiled for SQLite once, bound without SQLAlchemy's execution path.

    Built from SQLAlchemy's public compiler API only: :meth:`SQLCompiler.construct_expanded_state`
    renders the constants (``lit``) into the text and expands ``IN`` lists, and names each
    ``?`` in order (``positiontup``); each parameter's type gives its bind processor. A
    statement with an ``IN`` list has one text per length of its lists, each made on first use.
    """

    __slots__ = ("_compiled", "_dialect", "_lists", "_shapes", "expanding", "fixed", "sql")

    def __init__(self, compiled: SQLCompiler, dialect: Dialect, lists: tuple[str, ...]) -> None:
        self._compiled = compiled
        self._dialect = dialect
        self._lists = lists  # the parameters that are IN lists
        self._shapes: dict[tuple[int, ...], _Shape] = {}
        self.expanding = bool(lists)
        self.fixed = None if lists else self._shape(())  # the one text of a statement without IN lists
        self.sql = "" if self.fixed is None else self.fixed.sql

    @classmethod
    def build(cls, prepared: Prepared, dialect: Dialect) -> _Plan | None:
        """The plan, or None when the statement needs what only SQLAlchemy's path does (type processing)."""
        statement: Any = prepared.statement
        if not prepared.driver_values and any(
            _processor(column.type, dialect, result=True) for column in getattr(statement, "exported_columns", ())
        ):
            return None
        compiled = statement.compile(dialect=dialect, column_keys=prepared.column_keys)
        if not isinstance(compiled, SQLCompiler) or compiled.positiontup is None:
            return None
        binds = compiled.binds
        if any(binds[name].callable is not None for name in compiled.positiontup):
            return None  # a value computed per execution
        lists = tuple(dict.fromkeys(n for n in compiled.positiontup if binds[n].required and binds[n].expanding))
        return cls(compiled, dialect, lists)

    def _shape(self, lengths: tuple[int, ...]) -> _Shape:
        found = self._shapes.get(lengths)
        if found is None:
            if len(self._shapes) >= _SHAPES_KEPT:
                self._shapes.clear()
            found = self._shapes[lengths] = self._make(lengths)
        return found

    def _make(self, lengths: tuple[int, ...]) -> _Shape:
        compiled, binds = self._compiled, self._compiled.binds
        sizes = dict(zip(self._lists, lengths, strict=True))
        sample = {name: [None] * sizes[name] if name in sizes else None for name, b in binds.items() if b.required}
        state = compiled.construct_expanded_state(sample, escape_names=False)
        origin = {item: (name, i) for name, items in state.parameter_expansion.items() for i, item in enumerate(items)}
        slots: list[tuple[str | None, int | None, Any]] = []
        processors: list[Callable[[Any], Any] | None] = []
        for position in state.positiontup or ():
            name, index = origin.get(position, (position, None))
            if not binds[name].required:
                slots.append((None, None, state.parameters[position]))
            else:
                slots.append((name, index, None))
            if index is not None:
                processors.append(state.processors.get(position))
            else:
                processors.append(_processor(binds[name].type, self._dialect, result=False))
        return _Shape(state.statement, slots, processors)

    def values(self, params: Mapping[str, Any]) -> Sequence[Any]:
        """The values for ``sql`` (a statement without ``IN`` lists)."""
        assert self.fixed is not None, "a statement with IN lists has no one text: bind() it"
        return self.fixed.values(params)

    def bind(self, params: Mapping[str, Any]) -> tuple[str, Sequence[Any]]:
        """The SQL and the values for one execution."""
        if self.fixed is not None:
            return self.sql, self.fixed.values(params)
        lists = {name: list(params[name]) for name in self._lists}
        shape = self._shape(tuple(len(items) for items in lists.values()))
        return shape.sql, shape.values({**params, **lists})


def _processor(type_: Any, dialect: Dialect, *, result: bool) -> Callable[[Any], Any] | None:
    """The type's bind (or result) processor on ``dialect``: what SQLAlchemy's path would apply to a value."""
    impl = type_.dialect_impl(dialect)
    found = impl.result_processor(dialect, None) if result else impl.bind_processor(dialect)
    return found  # type: ignore[no-any-return]


def _processed(processor: Callable[[Any], Any] | None, value: Any) -> Any:
    return value if processor is None or value is None else processor(value)
