"""Prepared statements: SQLAlchemy Core built once from the tables, run many times.

The ledger's hot statements (a save runs six) are module-level constants:

>>> BY_ID = Prepared(select(*RECORDS.c).where(RECORDS.c.id == bindparam("id")))
>>> store.rows(conn, BY_ID, {"id": record_id})

Each store runs them its own way: PostgreSQL through ``Connection.execute`` (SQLAlchemy
caches the compiled form), SQLite straight on the DB-API cursor with the statement compiled
once (:mod:`ledger.store.sqlite`), because SQLAlchemy's execution path costs more than
the statement itself there. Constants that a partial index's predicate must see spelled
out are written with :func:`lit` and rendered into the SQL, not bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from weakref import WeakKeyDictionary

from sqlalchemy import BindParameter, Executable, bindparam, literal


class Prepared:
    """One Core statement and, per dialect, what its store compiled it to (see the module docstring).

    ``column_keys`` names the columns an ``insert()``/``update()`` without ``values()``
    sets; each is bound under its column's name. ``driver_values`` says the caller takes
    each column as the driver returns it (SQLite: a boolean as 0 or 1) and converts it itself,
    so a statement over such columns may still take the direct path.
    """

    __slots__ = ("column_keys", "driver_values", "plans", "statement")

    def __init__(
        self, statement: Executable, *, column_keys: Sequence[str] | None = None, driver_values: bool = False
    ) -> None:
        self.statement = statement
        self.column_keys = None if column_keys is None else list(column_keys)
        self.driver_values = driver_values
        self.plans: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"Prepared({self.statement!s})"


# The Prepared made for each plain Core statement run through a Reader's rows/query/run, while the statement lives.
_MADE: WeakKeyDictionary[Executable, Prepared] = WeakKeyDictionary()


def prepared(statement: Prepared | Executable) -> Prepared:
    """``statement`` as a :class:`Prepared`: itself, or the one made for this Core statement object when it first ran.

    Another package's statements are plain SQLAlchemy Core; one built once and run many times (a module-level
    constant, as a run's claim and settlement are) is compiled once and takes the store's direct path like the
    ledger's own. A statement built per call gets a Prepared of its own each time: build those once.
    """
    if isinstance(statement, Prepared):
        return statement
    found = _MADE.get(statement)
    if found is None:
        found = _MADE[statement] = Prepared(statement)
    return found


def param(name: str, *, expanding: bool = False) -> BindParameter[Any]:
    """A named parameter (``expanding``: a list, for ``in_()``)."""
    return bindparam(name, expanding=expanding)


def lit(value: str | int | Sequence[str]) -> BindParameter[Any]:
    """A constant rendered into the statement's text (``status = 'active'``), as a partial index needs.

    A sequence is for ``in_()``: ``RECORDS.c.status.in_(lit(("active", "proposed")))``.
    """
    if isinstance(value, (str, int)):
        return literal(value, literal_execute=True)
    return bindparam(None, list(value), expanding=True, literal_execute=True)


__all__ = ["Prepared", "lit", "param", "prepared"]
