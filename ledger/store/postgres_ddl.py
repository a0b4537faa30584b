"""The PostgreSQL schema the tables cannot state (:data:`OBJECTS`): the search index and the triggers.

The tables and their indexes are the Core tables of :mod:`ledger.models`; what is here is
written once, in PostgreSQL's own words, and every path that makes a schema takes it from
here: the migrations that create or re-create an object (its latest revision), and the test
that compares a migrated database with these statements and those tables
(``tests/ledger/test_schema_ddl.py``, through ``pg_get_functiondef``, ``pg_get_triggerdef``
and ``pg_get_indexdef``). A change here needs a migration that re-creates the object on
existing databases (the test holds each statement's digest and the revision that created it).
"""

from __future__ import annotations

from ledger.store.base import SchemaObject

# The search: a GIN index over the active bodies' tsvector (see PostgresStore.search).
SEARCH = (
    SchemaObject(
        "index",
        "ix_memory_records_fts",
        "memory_records",
        "CREATE INDEX ix_memory_records_fts ON memory_records "
        "USING gin (to_tsvector('english', coalesce(body, ''))) WHERE status = 'active'",
    ),
)

# No row is ever deleted: the database refuses it.
NO_DELETE = (
    SchemaObject(
        "function",
        "memory_records_no_delete",
        "",
        """CREATE FUNCTION memory_records_no_delete() RETURNS trigger AS $$
       BEGIN RAISE EXCEPTION 'memory_records rows are never deleted'; END $$ LANGUAGE plpgsql""",
    ),
    SchemaObject(
        "trigger",
        "memory_records_no_delete",
        "memory_records",
        "CREATE TRIGGER memory_records_no_delete BEFORE DELETE ON memory_records "
        "FOR EACH ROW EXECUTE FUNCTION memory_records_no_delete()",
    ),
)

_HELD = "('active','proposed')"

# Each scope's active and proposed counts, moved in the statement that changes a status.
COUNTS = (
    SchemaObject(
        "function",
        "memory_records_count",
        "",
        f"""CREATE FUNCTION memory_records_count() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP = 'INSERT' THEN
        IF NEW.status IN {_HELD} THEN
          UPDATE scope_settings SET active_count = active_count + (NEW.status = 'active')::int,
            proposed_count = proposed_count + (NEW.status = 'proposed')::int
          WHERE scope_key = NEW.scope_key;
        END IF;
      ELSIF OLD.status IS DISTINCT FROM NEW.status AND (OLD.status IN {_HELD} OR NEW.status IN {_HELD}) THEN
        UPDATE scope_settings SET
          active_count = active_count + (NEW.status = 'active')::int - (OLD.status = 'active')::int,
          proposed_count = proposed_count + (NEW.status = 'proposed')::int - (OLD.status = 'proposed')::int
        WHERE scope_key = NEW.scope_key;
      END IF;
      RETURN NULL;
    END $$""",
    ),
    SchemaObject(
        "trigger",
        "memory_records_count",
        "memory_records",
        """CREATE TRIGGER memory_records_count AFTER INSERT OR UPDATE OF status ON memory_records
    FOR EACH ROW EXECUTE FUNCTION memory_records_count()""",
    ),
)

# Everything, in the order it can be created (a function before its trigger).
OBJECTS: tuple[SchemaObject, ...] = (*SEARCH, *NO_DELETE, *COUNTS)


def drop(obj: SchemaObject) -> str:
    """The statement that drops ``obj`` when it exists."""
    if obj.kind == "trigger":
        return f"DROP TRIGGER IF EXISTS {obj.name} ON {obj.table}"
    if obj.kind == "function":
        return f"DROP FUNCTION IF EXISTS {obj.name}()"
    return f"DROP {obj.kind.upper()} IF EXISTS {obj.name}"


__all__ = ["COUNTS", "NO_DELETE", "OBJECTS", "SEARCH", "drop"]
