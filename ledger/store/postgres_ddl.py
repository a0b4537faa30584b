"""The PostgreSQL schema the tables cannot state (:data:`OBJECTS`): the search index, the index of what is due in a
scope, the index by scope and status (PostgreSQL's only), the triggers, the save and edit functions.

The tables and their indexes are the Core tables of :mod:`ledger.models`; what is here is
written once, in PostgreSQL's own words, and every path that makes a schema takes it from
here: the migrations that create or re-create an object (its latest revision), and the test
that compares a migrated database with these statements and those tables
(``tests/ledger/test_schema_ddl.py``, through ``pg_get_functiondef``, ``pg_get_triggerdef``
and ``pg_get_indexdef``). A change here needs a migration that re-creates the object on
existing databases (the test holds each statement's digest and the revision that created it).
"""

from __future__ import annotations

import re

from ledger.store.schema_object import SchemaObject

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

# What is due in one scope (memledger_save's and memledger_edit's check, a write's sweep): only the scope's records
# that can still expire. Without it a plan made while the table had no statistics reads every active record of the
# scope (ix_memory_records_scope_status) or every scope's due records (ix_memory_records_due). Only records with an
# expiry are in it, so a save without one writes nothing more.
DUE = (
    SchemaObject(
        "index",
        "ix_memory_records_due_scope",
        "memory_records",
        "CREATE INDEX ix_memory_records_due_scope ON memory_records (scope_key, expires_at) "
        "WHERE status IN ('active','proposed') AND expires_at IS NOT NULL",
    ),
)

# A scope's records by status (the active set, its search, the proposals): PostgreSQL's only. SQLite finds the same
# rows through ix_memory_records_asof (valid_to IS NULL) and its partial ix_memory_records_proposed (sqlite_ddl.py).
BY_STATUS = (
    SchemaObject(
        "index",
        "ix_memory_records_scope_status",
        "memory_records",
        "CREATE INDEX ix_memory_records_scope_status ON memory_records (scope_key, status)",
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

# Names the record whose writes memledger_save or memledger_edit counted in the scope's row themselves, for the
# statements that write it (a transaction-local setting, set to '' once they ran): the counts' trigger skips the
# record's own row and the row it supersedes (superseded_by), so the scope's row takes one update a write.
COUNTED = "memledger.counted"

# Each scope's active and proposed counts, moved in the statement that changes a status; and its latest
# ``valid_to`` (``latest_closed_at``: never moved back, so at least the latest, whichever statement wrote it),
# moved in the statement that writes one. memledger_save and memledger_edit read it with their lock instead of
# searching the scope's records for one closed after their instant, and move both in the update that takes the
# lock, so the trigger does not fire for the rows they write (its WHEN, and COUNTED above).
COUNTS = (
    SchemaObject(
        "function",
        "memory_records_count",
        "",
        f"""CREATE FUNCTION memory_records_count() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP = 'INSERT' THEN
        IF NEW.status IN {_HELD} OR NEW.valid_to IS NOT NULL THEN
          UPDATE scope_settings SET active_count = active_count + (NEW.status = 'active')::int,
            proposed_count = proposed_count + (NEW.status = 'proposed')::int,
            latest_closed_at = greatest(latest_closed_at, NEW.valid_to)
          WHERE scope_key = NEW.scope_key;
        END IF;
      ELSIF (OLD.status IS DISTINCT FROM NEW.status AND (OLD.status IN {_HELD} OR NEW.status IN {_HELD}))
         OR (NEW.valid_to IS NOT NULL AND (OLD.valid_to IS NULL OR NEW.valid_to > OLD.valid_to)) THEN
        UPDATE scope_settings SET
          active_count = active_count + (NEW.status = 'active')::int - (OLD.status = 'active')::int,
          proposed_count = proposed_count + (NEW.status = 'proposed')::int - (OLD.status = 'proposed')::int,
          latest_closed_at = greatest(latest_closed_at, NEW.valid_to)
        WHERE scope_key = NEW.scope_key;
      END IF;
      RETURN NULL;
    END $$""",
    ),
    SchemaObject(
        "trigger",
        "memory_records_count",
        "memory_records",
        f"""CREATE TRIGGER memory_records_count AFTER INSERT OR UPDATE OF status, valid_to ON memory_records
    FOR EACH ROW WHEN (coalesce(current_setting('{COUNTED}', true), '') = ''
      OR current_setting('{COUNTED}', true) NOT IN (NEW.id, coalesce(NEW.superseded_by, NEW.id)))
    EXECUTE FUNCTION memory_records_count()""",
    ),
)

# The instant of a write in the scope's row, as the transaction computes it: the clock reading, or the scope's
# latest instant + 1 µs when the reading is not past it.
_INSTANT = "greatest(p_clock, s.latest_at + 1)"

# A record of the scope due to expire at the instant ``n``: a probe of ix_memory_records_due_scope.
_DUE = """EXISTS (SELECT 1 FROM memory_records m WHERE m.scope_key = p_scope
             AND m.status IN ('active','proposed') AND m.expires_at IS NOT NULL AND m.expires_at <= n)"""

# What a function raises when, its lock held, it finds the write is not plain (a record due, an edit's target no
# longer active): its statement is rolled back, nothing is written, and ledger/store/postgres_save.py answers
# None, as for a write declined by the update that takes the lock.
NOT_PLAIN = "MLNP0"

# A plain save in one statement (ledger/store/postgres_save.py calls it). The record's columns,
# in the order of ledger.record_rows.NAMES after ``seq``. The scope's row is updated once: the update takes the
# lock, moves the latest instant and the active count, and writes nothing when a check of the row fails
# (PostgreSQL checks the row's latest version once it holds the lock). What is due is looked for after it.
SAVE = (
    SchemaObject(
        "function",
        "memledger_save",
        "",
        f"""CREATE OR REPLACE FUNCTION memledger_save(
  p_scope text, p_clock bigint, p_default_max bigint, p_id text, p_kind text, p_body text,
  p_session text, p_expires bigint, p_detail text
) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  n bigint;
  counted text;
BEGIN
  UPDATE scope_settings s SET latest_at = {_INSTANT}, active_count = s.active_count + 1
    WHERE s.scope_key = p_scope
      AND (s.active_count + s.proposed_count + 1 >= coalesce(s.max_records, p_default_max)) IS NOT TRUE
      AND (p_expires <= {_INSTANT}) IS NOT TRUE
      AND (s.latest_closed_at > {_INSTANT}) IS NOT TRUE
    RETURNING s.latest_at INTO n;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  IF {_DUE} THEN
    RAISE EXCEPTION 'memledger_save: a record of the scope is due' USING ERRCODE = '{NOT_PLAIN}';
  END IF;
  counted := set_config('{COUNTED}', p_id, true);
  INSERT INTO memory_records (id, scope_key, kind, body, provenance, status, source_session_id, supersedes,
    superseded_by, confidence_bps, rationale, valid_from, valid_to, expires_at, conflict_group, erased_at,
    created_at, updated_at)
  VALUES (p_id, p_scope, p_kind, p_body, 'user_explicit', 'active', p_session, '[]',
    NULL, NULL, NULL, n, NULL, p_expires, NULL, NULL, n, n);
  counted := set_config('{COUNTED}', '', true);
  INSERT INTO ledger_events (at, scope_key, event, record_id, reason, run_id, detail)
  VALUES (n, p_scope, 'saved', p_id, NULL, NULL, p_detail);
  RETURN n;
END $$""",
    ),
)

# An edit in one statement (ledger/store/postgres_save.py calls it): the target closed at the instant with its
# ``superseded`` event, then the new record with its ``saved`` event, as Transaction.save writes them. The new
# record keeps the target's kind unless given one, and its conflict group (whose one active member is the target).
# Writes nothing whenever the edit is not plain: it returns NULLs when the update that takes the lock declines,
# and raises NOT_PLAIN when, the lock held, something is due or the target is not an active record of the scope
# in effect at the instant. Every statement names the scope, as memledger_save's do (docs/operations.md: a
# function distributed by its first argument). The scope's row is updated once, as by memledger_save: the latest
# instant, and the latest ``valid_to`` (the target's, the instant); the counts do not move (one active record
# closed, one saved).
EDIT = (
    SchemaObject(
        "function",
        "memledger_edit",
        "",
        f"""CREATE OR REPLACE FUNCTION memledger_edit(
  p_scope text, p_clock bigint, p_target text, p_id text, p_kind text, p_body text,
  p_session text, p_expires bigint, p_supersedes text, p_closed_detail text, p_detail text,
  OUT o_at bigint, OUT o_kind text, OUT o_group text
) LANGUAGE plpgsql AS $$
DECLARE
  n bigint;
  counted text;
  t record;
BEGIN
  UPDATE scope_settings s SET latest_at = {_INSTANT},
      latest_closed_at = greatest(s.latest_closed_at, {_INSTANT})
    WHERE s.scope_key = p_scope
      AND (p_expires <= {_INSTANT}) IS NOT TRUE
      AND (s.latest_closed_at > {_INSTANT}) IS NOT TRUE
    RETURNING s.latest_at INTO n;
  IF NOT FOUND THEN
    RETURN;
  END IF;
  SELECT status, valid_from, kind, conflict_group INTO t FROM memory_records
    WHERE scope_key = p_scope AND id = p_target;
  IF NOT FOUND OR t.status <> 'active' OR t.valid_from > n OR {_DUE} THEN
    RAISE EXCEPTION 'memledger_edit: not a plain edit' USING ERRCODE = '{NOT_PLAIN}';
  END IF;
  counted := set_config('{COUNTED}', p_id, true);
  UPDATE memory_records SET status = 'superseded', valid_to = n, superseded_by = p_id, updated_at = n
    WHERE scope_key = p_scope AND id = p_target;
  INSERT INTO ledger_events (at, scope_key, event, record_id, reason, run_id, detail)
  VALUES (n, p_scope, 'superseded', p_target, NULL, NULL, p_closed_detail);
  o_at := n;
  o_kind := coalesce(p_kind, t.kind);
  o_group := t.conflict_group;
  INSERT INTO memory_records (id, scope_key, kind, body, provenance, status, source_session_id, supersedes,
    superseded_by, confidence_bps, rationale, valid_from, valid_to, expires_at, conflict_group, erased_at,
    created_at, updated_at)
  VALUES (p_id, p_scope, o_kind, p_body, 'user_explicit', 'active', p_session, p_supersedes,
    NULL, NULL, NULL, n, NULL, p_expires, o_group, NULL, n, n);
  counted := set_config('{COUNTED}', '', true);
  INSERT INTO ledger_events (at, scope_key, event, record_id, reason, run_id, detail)
  VALUES (n, p_scope, 'saved', p_id, NULL, NULL, p_detail);
END $$""",
    ),
)

# Everything, in the order it can be created (a function before its trigger).
OBJECTS: tuple[SchemaObject, ...] = (*SEARCH, *DUE, *BY_STATUS, *NO_DELETE, *COUNTS, *SAVE, *EDIT)


_ARGUMENTS = re.compile(r"FUNCTION\s+\w+\s*\((.*?)\)\s*(?:RETURNS|LANGUAGE)", re.S)


def drop(obj: SchemaObject) -> str:
    """The statement that drops ``obj`` when it exists (a function: by its arguments, as it was created)."""
    if obj.kind == "trigger":
        return f"DROP TRIGGER IF EXISTS {obj.name} ON {obj.table}"
    if obj.kind == "function":
        found = _ARGUMENTS.search(obj.sql)
        arguments = " ".join(found.group(1).split()) if found else ""
        return f"DROP FUNCTION IF EXISTS {obj.name}({arguments})"
    return f"DROP {obj.kind.upper()} IF EXISTS {obj.name}"


__all__ = ["COUNTED", "COUNTS", "DUE", "EDIT", "NOT_PLAIN", "NO_DELETE", "OBJECTS", "SAVE", "SEARCH", "drop"]
