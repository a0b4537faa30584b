"""One store per database (``sqlite.py``, ``postgres.py``); see :mod:`ledger.store.base`.

The PostgreSQL store loads with the first PostgreSQL engine (or the name ``PostgresStore``): its module loads
SQLAlchemy's PostgreSQL dialect, which a command on SQLite never needs.
"""

from __future__ import annotations

import importlib
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine
from sqlalchemy.engine import make_url

from ledger.errors import LedgerError
from ledger.store.base import Locked, Params, Pending, Rows, Statement, Store
from ledger.store.ddl import include_object
from ledger.store.prepared import Prepared, lit, param
from ledger.store.scope import enter_scope
from ledger.store.sqlite import DEFAULT_SYNCHRONOUS, SYNCHRONOUS_MODES, SQLiteStore

if TYPE_CHECKING:
    from ledger.store.postgres import PostgresStore

__all__ = [
    "Locked",
    "Pending",
    "PostgresStore",
    "Prepared",
    "Rows",
    "SQLiteStore",
    "Store",
    "enter_scope",
    "include_object",
    "lit",
    "make_engine",
    "param",
    "query",
    "rows",
    "run",
    "send",
    "store_for",
]

# Each database's store, by the module that defines it (imported with the first engine of its kind).
_KINDS: dict[str, str] = {
    "sqlite": "ledger.store.sqlite:SQLiteStore",
    "postgresql": "ledger.store.postgres:PostgresStore",
}
# By the engine's id (a plain dict lookup: every statement asks); an entry leaves with its engine.
_STORES: dict[int, Store] = {}


def make_engine(url: str, *, sqlite_synchronous: str = DEFAULT_SYNCHRONOUS) -> Engine:
    """An engine for ``url`` with the settings its store relies on; on SQLite every connection runs
    ``PRAGMA synchronous`` = ``sqlite_synchronous`` (``normal`` or ``full``).

    Raises:
        LedgerError: another database, a URL that is not UTF-8 text, or a ``sqlite_synchronous`` that is not
            ``normal`` or ``full``.
    """
    if sqlite_synchronous not in SYNCHRONOUS_MODES:  # whatever the database: a bad setting is never silent
        raise LedgerError(
            f"SQLite synchronous must be one of {', '.join(SYNCHRONOUS_MODES)}, not {sqlite_synchronous!r}"
        )
    try:
        url.encode("utf-8")
    except UnicodeEncodeError:  # os.fsdecode's stand-ins for bytes of another encoding, in a path or a name
        raise LedgerError(
            "the database URL is not UTF-8 text: it holds bytes of another encoding (in a file or directory name, "
            "say); use a path and names in UTF-8"
        ) from None
    parsed = make_url(url)
    kind = _kind(parsed.get_backend_name())
    if kind is None:
        raise LedgerError(
            f"unsupported database URL {parsed.render_as_string(hide_password=True)!r}: use sqlite or postgresql"
        )
    if kind is SQLiteStore:
        engine = SQLiteStore.create_engine(url, synchronous=sqlite_synchronous)
    else:
        engine = kind.create_engine(url)
    _remember(engine, kind(engine))
    return engine


def _kind(dialect: str) -> type[Store] | None:
    """The store class of the database named ``dialect`` (its module imported), or None for another."""
    where = _KINDS.get(dialect)
    if where is None:
        return None
    module, _, name = where.partition(":")
    kind: type[Store] = getattr(importlib.import_module(module), name)
    return kind


def __getattr__(name: str) -> Any:
    if name == "PostgresStore":
        return _kind("postgresql")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _remember(engine: Engine, store: Store) -> Store:
    key = id(engine)
    _STORES[key] = store
    weakref.finalize(engine, _STORES.pop, key, None)
    return store


def store_for(engine: Engine) -> Store:
    """The engine's store (one per engine)."""
    found = _STORES.get(id(engine))
    if found is None or found.engine is not engine:
        kind = _kind(engine.dialect.name)
        if kind is None:
            raise LedgerError(f"unsupported database {engine.dialect.name!r}: use sqlite or postgresql")
        found = _remember(engine, kind(engine))
    return found


def _store_of(conn: Connection) -> Store:
    return store_for(conn.engine)


def run(conn: Connection, stmt: Statement, params: Params | None = None) -> int:
    """Run one Core statement in ``conn``'s transaction through its store's fastest path; its row count."""
    return _store_of(conn).run(conn, stmt, params)


def rows(conn: Connection, stmt: Statement, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
    """Like :func:`run`, returning the rows as tuples."""
    return _store_of(conn).rows(conn, stmt, params)


def send(conn: Connection, stmt: Statement, params: Mapping[str, Any] | None = None) -> None:
    """Run a statement whose outcome is not read; see :meth:`Store.send`."""
    _store_of(conn).send(conn, stmt, params)


def query(conn: Connection, stmt: Statement, params: Mapping[str, Any] | None = None) -> Pending[Rows]:
    """Send a statement now and read its rows later; see :meth:`Store.query`."""
    return _store_of(conn).query(conn, stmt, params)
