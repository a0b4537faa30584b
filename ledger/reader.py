"""The read view: :class:`Reader`, what :meth:`ledger.Ledger.reading` yields (and what a write transaction extends)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, CursorResult, Executable

from ledger import record_rows
from ledger.models import MemoryRecord
from ledger.store import Pending, Prepared, Rows
from ledger.store import query as store_query
from ledger.store import rows as store_rows
from ledger.store import run as store_run
from ledger.store.prepared import prepared


class Reader:
    """A read transaction (one snapshot) for SQLAlchemy Core statements built from :mod:`ledger.schema`.

    ``execute`` returns SQLAlchemy's result. ``rows``, ``query`` and ``run`` take a statement built once
    (a module-level constant, bound by name) through the store's fastest path, prepared on its first
    run: on SQLite straight to the cursor, on PostgreSQL several in one round trip, which is what a hot
    path (a consolidation run's claim and settle) wants.
    """

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def execute(
        self, statement: Executable, params: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None
    ) -> CursorResult[*tuple[Any, ...]]:
        """Run one SQLAlchemy Core statement (built from the tables in :mod:`ledger.schema`)."""
        return self.conn.execute(statement, params)

    def rows(self, statement: Prepared | Executable, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        """Run one statement that returns rows: the rows as tuples, in the statement's column order."""
        return store_rows(self.conn, prepared(statement), params)

    def query(self, statement: Prepared | Executable, params: Mapping[str, Any] | None = None) -> Pending[Rows]:
        """Send one statement that returns rows now and read them later (``.result()``).

        Statements sent one after another before the first is read share one round trip on
        PostgreSQL; elsewhere this is :meth:`rows`, run at once.
        """
        return store_query(self.conn, prepared(statement), params)

    def run(
        self, statement: Prepared | Executable, params: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None
    ) -> int:
        """Run one statement (a list of parameter sets: once per set); how many rows it changed."""
        return store_run(self.conn, prepared(statement), params)

    def records(self, record_ids: Iterable[str]) -> dict[str, MemoryRecord]:
        """The named records as this transaction sees them, by id (missing ids left out)."""
        return {row["id"]: record_rows.to_record(row) for row in record_rows.fetch_many(self.conn, list(record_ids))}
