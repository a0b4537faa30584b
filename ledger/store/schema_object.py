"""One object of the schema the Core tables cannot state (FTS5, triggers, functions, some indexes)."""

from __future__ import annotations

from typing import NamedTuple


class SchemaObject(NamedTuple):
    """One object of the schema the Core tables cannot state, in its dialect's own words.

    Each dialect lists its own in one place (:mod:`ledger.store.sqlite_ddl`,
    :mod:`ledger.store.postgres_ddl`); the migrations and the schema test take them from there.
    """

    kind: str  # "table" (SQLite's FTS5), "trigger", "function" or "index"
    name: str
    table: str  # what a trigger or an index is on ("" otherwise)
    sql: str
