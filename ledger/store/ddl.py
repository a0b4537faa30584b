"""The dialects' own schema, both dialects at once: what Alembic's comparison leaves to the schema test."""

from __future__ import annotations

from ledger.store import postgres_ddl, sqlite_ddl


def dialect_objects() -> tuple[str, ...]:
    """The tables and indexes of the dialects' own schema (and the prefix of FTS5's shadow tables)."""
    return tuple(o.name for o in (*sqlite_ddl.OBJECTS, *postgres_ddl.OBJECTS) if o.kind in ("table", "index"))


def include_object(obj: object, name: str | None, type_: str, reflected: bool, compare_to: object) -> bool:
    """Alembic's filter: the FTS5 table (and its shadow tables) and the PostgreSQL GIN index are dialect
    features, compared by ``tests/ledger/test_schema_ddl.py`` instead."""
    return not (name is not None and name.startswith(dialect_objects()))
