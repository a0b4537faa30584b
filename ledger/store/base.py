"""The store: everything that differs between databases, behind one interface.

One :class:`Store` per engine (:func:`ledger.store.store_for`). The ledger asks it for a
write transaction (the scope's lock), a read transaction (one snapshot), the statements
a dialect spells differently (full-text search, the sweep's planner hint), the erasure
mechanics, and the translation of every driver error into the :class:`LedgerError` tree.
Everything else — the statements built from the tables — is shared.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, ClassVar, Generic, NamedTuple, TypeVar

from sqlalchemy import ColumnElement, Connection, Engine, Executable, RowMapping, Table, bindparam
from sqlalchemy.exc import DBAPIError, StatementError

from ledger.errors import InvalidArgument, LedgerBusy, LedgerError
from ledger.schema import RECORD_NAMES
from ledger.store.prepared import Prepared
from ledger.store.schema_object import SchemaObject

T = TypeVar("T")
U = TypeVar("U")
Statement = Prepared | Executable
Params = Mapping[str, Any] | Sequence[Mapping[str, Any]]


class Locked(NamedTuple):
    """What taking a scope's lock read: the scope's latest instant (None before its first stamp)."""

    latest_us: int | None


class Pending(Generic[T]):
    """The answer to statements already sent: :meth:`result` reads it (waiting for it if need be).

    Statements sent one after another and read afterwards share one round trip on PostgreSQL.
    """

    __slots__ = ("_fetch", "_result")

    def __init__(self, fetch: Callable[[], T]) -> None:
        self._fetch: Callable[[], T] | None = fetch
        self._result: T | None = None

    def result(self) -> T:
        """The answer (read once; later calls return the same)."""
        if self._fetch is not None:
            fetch, self._fetch = self._fetch, None
            self._result = fetch()
        return self._result  # type: ignore[return-value]

    def then(self, fn: Callable[[T], U]) -> Pending[U]:
        """``fn`` of the answer, when it is read."""
        return Pending(lambda: fn(self.result()))


Rows = list[tuple[Any, ...]]
# What SQLite says when a statement meets a damaged index (FTS5 reports its own damage as a malformed database).
_DAMAGE = ("database disk image is malformed", "vtable constructor failed")
# What every report of a damaged full-text index ends with.
REBUILD_INDEX_HINT = "rebuild it from the records with `memledger db rebuild-index` (safe while the service runs)"


def prefixed_columns(alias: str) -> str:
    """The ``memory_records`` columns a record is built from, in table order, qualified by ``alias``."""
    return ", ".join(f"{alias}.{name}" for name in RECORD_NAMES)


def _statement(stmt: Statement) -> Executable:
    return stmt.statement if isinstance(stmt, Prepared) else stmt


class Store(ABC):
    """One database: :class:`~ledger.store.sqlite.SQLiteStore` or :class:`~ledger.store.postgres.PostgresStore`."""

    dialect: ClassVar[str]
    # The schema the Core tables cannot state, in this dialect's words (sqlite_ddl.py, postgres_ddl.py).
    ddl: ClassVar[tuple[SchemaObject, ...]]
    # Whether open_ledger() migrates by default: an embedded file yes; a shared server is the operator's.
    migrate_on_open: ClassVar[bool]
    # Whether save_plain and edit_plain write a plain save or edit in one statement (else they are never called).
    saves_plain: ClassVar[bool] = False
    # Whether the scope's stamp may also return what the write reads first (enter_scope's ``reading``): where the
    # whole write transaction reads one snapshot under a lock taken before the stamp (SQLite's BEGIN IMMEDIATE).
    # Not on PostgreSQL, where the stamp creates a new scope's row and a later statement sees a later snapshot.
    stamp_reads: ClassVar[bool] = False

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._lock: AbstractContextManager[Any] = nullcontext()
        self._built: dict[Callable[[Store], Executable], Prepared] = {}
        self.boundary = _Boundary(self)

    @classmethod
    @abstractmethod
    def create_engine(cls, url: str) -> Engine:
        """An engine for ``url`` with every setting this store relies on."""

    # ------------------------------------------------------------------ transactions
    @abstractmethod
    def _begin_write(self) -> AbstractContextManager[Connection]:
        """A write transaction that serializes writers (at least those of one scope, with :func:`enter_scope`)."""

    @abstractmethod
    def _begin_read(self) -> AbstractContextManager[Connection]:
        """A read transaction: one snapshot for every statement in it."""

    def write(self) -> AbstractContextManager[Connection]:
        """A write transaction; commits when the block ends, rolls back when it raises."""
        return self._writing()

    @contextmanager
    def _writing(self) -> Iterator[Connection]:
        with self.boundary, self._lock, self._begin_write() as conn:
            yield conn

    @contextmanager
    def read(self) -> Iterator[Connection]:
        with self.boundary, self._lock, self._begin_read() as conn:
            yield conn

    @contextmanager
    def single(self) -> Iterator[Connection]:
        """A connection for one read statement, in that statement's own snapshot (no ``BEGIN`` … ``COMMIT``)."""
        with self.boundary, self._lock, self.engine.connect() as conn:
            yield conn

    @contextmanager
    def migrating(self) -> Iterator[Connection]:
        """The transaction Alembic migrates in, exclusive of every other migrator of this database.

        Two processes opening one fresh database at once (an API node and its workers) would
        otherwise both try to create the schema, and one of them fail.
        """
        with self.engine.begin() as conn:
            yield conn

    def dispose(self) -> None:
        """Close every connection this store holds (the engine's pool included)."""
        self.engine.dispose()

    def serialized(self) -> AbstractContextManager[Any]:
        """Held around every use of a connection when the store has only one (in-memory SQLite)."""
        return self._lock

    # ------------------------------------------------------------------ statements
    def run(self, conn: Connection, stmt: Statement, params: Params | None = None) -> int:
        """Run one Core statement in ``conn``'s transaction; its row count."""
        return int(conn.execute(_statement(stmt), params).rowcount)

    def rows(self, conn: Connection, stmt: Statement, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        """Run one Core statement that returns rows; the rows as tuples, in the statement's column order."""
        return [tuple(row) for row in conn.execute(_statement(stmt), params)]

    def send(self, conn: Connection, stmt: Statement, params: Mapping[str, Any] | None = None) -> None:
        """Run a statement whose outcome the caller does not read (an insert, an event).

        On PostgreSQL it travels with the next statement the transaction waits for, or with the
        ``COMMIT``; its error, if any, is raised there (the transaction then rolls back).
        """
        self.run(conn, stmt, params)

    def save_plain(self, params: Mapping[str, Any]) -> int | None:
        """A plain save in one statement where the store has one (PostgreSQL: ``ledger.store.postgres_save``):
        the instant it was written at, or None when the save is not plain (nothing was written; the
        caller runs the full transaction). Called only where :attr:`saves_plain`."""
        return None

    def edit_plain(self, params: Mapping[str, Any]) -> tuple[int, str, str | None] | None:
        """An edit in one statement where the store has one (as :meth:`save_plain`): the instant, the new record's
        kind and conflict group, or None when the edit is not plain (nothing was written)."""
        return None

    def flush(self, conn: Connection) -> None:  # noqa: B027 - nothing is ever held back by default
        """Wait for every statement sent and not yet answered; raise the first one's error, if any."""

    def query(self, conn: Connection, stmt: Statement, params: Mapping[str, Any] | None = None) -> Pending[Rows]:
        """Send a statement that returns rows, to be read later: several sent before the first is read
        share one round trip on PostgreSQL."""
        found = self.rows(conn, stmt, params)
        return Pending(lambda: found)

    def lock_scope(self, conn: Connection, scope_key: str) -> Locked | None:
        """Hold ``scope_key``'s write lock before the transaction reads its clock (see docs/ledger.md).

        Returns the scope's latest instant when taking the lock read it, else None (the stamp
        statement reads and moves it). Nothing to do where the write transaction itself is the
        lock (SQLite's ``BEGIN IMMEDIATE``).
        """
        return None

    @abstractmethod
    def upsert(self, table: Table) -> Any:
        """The dialect's ``insert()`` for ``table`` (the one that has ``on_conflict_do_update``)."""

    def built(self, build: Callable[[Store], Executable], *, driver_values: bool = False) -> Prepared:
        """``build(self)`` prepared once per store: for statements spelled with :meth:`upsert` or
        :meth:`scope_hint`. ``driver_values``: as :class:`Prepared`'s (a caller that only tests a
        boolean column's truth takes SQLite's 0 or 1, and the statement keeps the direct path)."""
        found = self._built.get(build)
        if found is None:
            found = self._built[build] = Prepared(build(self), driver_values=driver_values)
        return found

    @abstractmethod
    def search(self, conn: Connection, scope: str, query: str, *, limit: int, now_us: int) -> list[RowMapping]:
        """Active bodies of ``scope`` matching ``query``'s words, best first."""

    def scope_hint(self) -> ColumnElement[bool]:
        """The sweep's scope predicate, bound as ``s`` (SQLite needs a planner hint)."""
        from ledger.schema import RECORDS

        return RECORDS.c.scope_key == bindparam("s")

    # ------------------------------------------------------------------ erasure
    def erase_in_transaction(self, conn: Connection) -> None:  # noqa: B027 - nothing to do by default
        """Inside the forget's transaction, after the bodies are nulled (SQLite: rewrite the FTS segments)."""

    def scrub_files(self) -> bool:
        """After the forget commits: best effort, never waits, never raises. Whether it completed."""
        return True

    @abstractmethod
    def search_index_problem(self, *, thorough: bool) -> str | None:
        """What is wrong with the full-text index, or None when it is sound.

        The quick check costs a lookup (the service's health check runs it); ``thorough`` reads
        the whole index (``memledger db check``). Raises LedgerBusy when the database stays busy.
        """

    @abstractmethod
    def rebuild_search_index(self) -> None:
        """Build the full-text index again from the records (``memledger db rebuild-index``), beside live writers.

        Raises LedgerError when the index is still damaged afterwards.
        """

    @abstractmethod
    def compact(self, tables: Sequence[str]) -> tuple[bool, list[str]]:
        """Rewrite ``tables`` so no erased text survives in the files, then checkpoint (``memledger db compact``).

        Returns whether the checkpoint ran, and notes for the operator.
        """

    @abstractmethod
    def size_bytes(self, tables: Sequence[str]) -> int:
        """The bytes the ledger's ``tables`` take on disk (what compacting shrinks)."""

    # ------------------------------------------------------------------ errors
    @abstractmethod
    def is_busy(self, exc: BaseException) -> bool:
        """A driver error that means "try again": locked, busy, a serialization failure, a deadlock."""

    def translate(self, exc: Exception) -> Exception:
        """The store boundary: no SQLAlchemy, sqlite3 or psycopg error reaches a caller.

        A :class:`LedgerError`, or any error that is not the database's, is returned as it is.
        """
        if isinstance(exc, UnicodeError):
            return InvalidArgument(
                "the text contains a character the database cannot store (a lone UTF-16 surrogate); send valid Unicode"
            )
        if isinstance(exc, DBAPIError):
            if self.is_busy(exc):
                return LedgerBusy("the ledger database stayed busy; try again in a moment")
            detail = _first_line(exc)
            if any(sign in detail for sign in _DAMAGE):
                detail += "; see whether the full-text index is damaged: `memledger db check`"
            return LedgerError(f"the ledger database refused the operation: {detail}")
        if isinstance(exc, StatementError):
            return InvalidArgument(f"a value cannot be stored: {_first_line(exc)}")
        return exc

    @staticmethod
    def new_lock() -> threading.RLock:
        return threading.RLock()


class _Boundary:
    """``with store.boundary:`` — the database's errors leave as :meth:`Store.translate` makes them.

    A class, not a generator: every write passes through it.
    """

    __slots__ = ("store",)

    def __init__(self, store: Store) -> None:
        self.store = store

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, Exception):
            translated = self.store.translate(exc)
            if translated is not exc:
                raise translated from exc


def _first_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    lines = str(orig).strip().splitlines()
    return lines[0] if lines else type(orig).__name__
