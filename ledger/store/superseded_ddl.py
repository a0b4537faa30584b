"""PostgreSQL statements a later revision replaced, as the revisions that created them wrote them.

A revision creates its objects from :mod:`ledger.store.postgres_ddl` while they are the store's; once a later
revision re-creates one, the earlier revision takes the text it wrote from here, and so does the later
revision's downgrade: a database at any revision holds what that revision wrote.
"""

from __future__ import annotations

from ledger.store.schema_object import SchemaObject

_HELD = "('active','proposed')"

# memory_records_count, function and trigger, as 0009_scope_counts created them (0018_write_checks re-creates them).
COUNTS_0009 = (
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

# memledger_save as 0011_save_function created it (0018_write_checks re-creates it).
SAVE_0011 = (
    SchemaObject(
        "function",
        "memledger_save",
        "",
        """CREATE OR REPLACE FUNCTION memledger_save(
  p_scope text, p_clock bigint, p_default_max bigint, p_id text, p_kind text, p_body text,
  p_session text, p_expires bigint, p_detail text
) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  latest bigint;
  budget bigint;
  held bigint;
  n bigint;
BEGIN
  SELECT latest_at, coalesce(max_records, p_default_max), active_count + proposed_count
    INTO latest, budget, held
    FROM scope_settings WHERE scope_key = p_scope FOR UPDATE;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  n := CASE WHEN latest IS NULL OR p_clock > latest THEN p_clock ELSE latest + 1 END;
  IF held + 1 >= budget
     OR p_expires <= n
     OR EXISTS (SELECT 1 FROM memory_records m WHERE m.scope_key = p_scope AND m.valid_to > n)
     OR EXISTS (SELECT 1 FROM memory_records m WHERE m.scope_key = p_scope
                AND m.status IN ('active','proposed') AND m.expires_at IS NOT NULL AND m.expires_at <= n) THEN
    RETURN NULL;
  END IF;
  UPDATE scope_settings SET latest_at = n WHERE scope_key = p_scope;
  INSERT INTO memory_records (id, scope_key, kind, body, provenance, status, source_session_id, supersedes,
    superseded_by, confidence_bps, rationale, valid_from, valid_to, expires_at, conflict_group, erased_at,
    created_at, updated_at)
  VALUES (p_id, p_scope, p_kind, p_body, 'user_explicit', 'active', p_session, '[]',
    NULL, NULL, NULL, n, NULL, p_expires, NULL, NULL, n, n);
  INSERT INTO ledger_events (at, scope_key, event, record_id, reason, run_id, detail)
  VALUES (n, p_scope, 'saved', p_id, NULL, NULL, p_detail);
  RETURN n;
END $$""",
    ),
)

# memledger_edit as 0016_edit_function created it (0018_write_checks re-creates it).
EDIT_0016 = (
    SchemaObject(
        "function",
        "memledger_edit",
        "",
        """CREATE OR REPLACE FUNCTION memledger_edit(
  p_scope text, p_clock bigint, p_target text, p_id text, p_kind text, p_body text,
  p_session text, p_expires bigint, p_supersedes text, p_closed_detail text, p_detail text,
  OUT o_at bigint, OUT o_kind text, OUT o_group text
) LANGUAGE plpgsql AS $$
DECLARE
  latest bigint;
  n bigint;
  t record;
BEGIN
  SELECT latest_at INTO latest FROM scope_settings WHERE scope_key = p_scope FOR UPDATE;
  IF NOT FOUND THEN
    RETURN;
  END IF;
  n := CASE WHEN latest IS NULL OR p_clock > latest THEN p_clock ELSE latest + 1 END;
  SELECT status, valid_from, kind, conflict_group INTO t FROM memory_records
    WHERE scope_key = p_scope AND id = p_target;
  IF NOT FOUND OR t.status <> 'active' OR t.valid_from > n
     OR p_expires <= n
     OR EXISTS (SELECT 1 FROM memory_records m WHERE m.scope_key = p_scope AND m.valid_to > n)
     OR EXISTS (SELECT 1 FROM memory_records m WHERE m.scope_key = p_scope
                AND m.status IN ('active','proposed') AND m.expires_at IS NOT NULL AND m.expires_at <= n) THEN
    RETURN;
  END IF;
  UPDATE scope_settings SET latest_at = n WHERE scope_key = p_scope;
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
  INSERT INTO ledger_events (at, scope_key, event, record_id, reason, run_id, detail)
  VALUES (n, p_scope, 'saved', p_id, NULL, NULL, p_detail);
END $$""",
    ),
)

# memory_records_count, function and trigger, as 0018_write_checks created them (0019_scope_row re-creates them).
COUNTS_0018 = (
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
        """CREATE TRIGGER memory_records_count AFTER INSERT OR UPDATE OF status, valid_to ON memory_records
    FOR EACH ROW EXECUTE FUNCTION memory_records_count()""",
    ),
)

# memledger_save as 0018_write_checks created it (0019_scope_row re-creates it).
SAVE_0018 = (
    SchemaObject(
        "function",
        "memledger_save",
        "",
        """CREATE OR REPLACE FUNCTION memledger_save(
  p_scope text, p_clock bigint, p_default_max bigint, p_id text, p_kind text, p_body text,
  p_session text, p_expires bigint, p_detail text
) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  latest bigint;
  closed bigint;
  budget bigint;
  held bigint;
  n bigint;
BEGIN
  SELECT latest_at, latest_closed_at, coalesce(max_records, p_default_max), active_count + proposed_count
    INTO latest, closed, budget, held
    FROM scope_settings WHERE scope_key = p_scope FOR UPDATE;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  n := CASE WHEN latest IS NULL OR p_clock > latest THEN p_clock ELSE latest + 1 END;
  IF held + 1 >= budget
     OR p_expires <= n
     OR closed > n
     OR EXISTS (SELECT 1 FROM memory_records m WHERE m.scope_key = p_scope
                AND m.status IN ('active','proposed') AND m.expires_at IS NOT NULL AND m.expires_at <= n) THEN
    RETURN NULL;
  END IF;
  UPDATE scope_settings SET latest_at = n WHERE scope_key = p_scope;
  INSERT INTO memory_records (id, scope_key, kind, body, provenance, status, source_session_id, supersedes,
    superseded_by, confidence_bps, rationale, valid_from, valid_to, expires_at, conflict_group, erased_at,
    created_at, updated_at)
  VALUES (p_id, p_scope, p_kind, p_body, 'user_explicit', 'active', p_session, '[]',
    NULL, NULL, NULL, n, NULL, p_expires, NULL, NULL, n, n);
  INSERT INTO ledger_events (at, scope_key, event, record_id, reason, run_id, detail)
  VALUES (n, p_scope, 'saved', p_id, NULL, NULL, p_detail);
  RETURN n;
END $$""",
    ),
)

# memledger_edit as 0018_write_checks created it (0019_scope_row re-creates it).
EDIT_0018 = (
    SchemaObject(
        "function",
        "memledger_edit",
        "",
        """CREATE OR REPLACE FUNCTION memledger_edit(
  p_scope text, p_clock bigint, p_target text, p_id text, p_kind text, p_body text,
  p_session text, p_expires bigint, p_supersedes text, p_closed_detail text, p_detail text,
  OUT o_at bigint, OUT o_kind text, OUT o_group text
) LANGUAGE plpgsql AS $$
DECLARE
  latest bigint;
  closed bigint;
  n bigint;
  t record;
BEGIN
  SELECT latest_at, latest_closed_at INTO latest, closed FROM scope_settings WHERE scope_key = p_scope FOR UPDATE;
  IF NOT FOUND THEN
    RETURN;
  END IF;
  n := CASE WHEN latest IS NULL OR p_clock > latest THEN p_clock ELSE latest + 1 END;
  SELECT status, valid_from, kind, conflict_group INTO t FROM memory_records
    WHERE scope_key = p_scope AND id = p_target;
  IF NOT FOUND OR t.status <> 'active' OR t.valid_from > n
     OR p_expires <= n
     OR closed > n
     OR EXISTS (SELECT 1 FROM memory_records m WHERE m.scope_key = p_scope
                AND m.status IN ('active','proposed') AND m.expires_at IS NOT NULL AND m.expires_at <= n) THEN
    RETURN;
  END IF;
  UPDATE scope_settings SET latest_at = n WHERE scope_key = p_scope;
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
  INSERT INTO ledger_events (at, scope_key, event, record_id, reason, run_id, detail)
  VALUES (n, p_scope, 'saved', p_id, NULL, NULL, p_detail);
END $$""",
    ),
)

__all__ = ["COUNTS_0009", "COUNTS_0018", "EDIT_0016", "EDIT_0018", "SAVE_0011", "SAVE_0018"]
