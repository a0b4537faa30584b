"""A plain save on PostgreSQL in one statement: the server-side function ``memledger_save``.

A save through :class:`ledger.tx.Transaction` waits three times (the scope's lock, the budget
and due check, the inserts with ``COMMIT``) and costs seven statements of client work. Most
saves are plain: no edit, no conflict group, room left under the budget, nothing due to
expire. For those, one call of ``memledger_save`` in its own transaction does what the
transaction would: it takes the scope's lock, computes the instant exactly as the transaction
does from the clock reading it is given (the reading, or the scope's latest instant + 1 µs
when the clock is not past it), moves the scope's latest instant, inserts the record and its
``saved`` event, and returns the instant.

It writes nothing and returns NULL whenever the save is not plain once the lock is held, and
the caller then runs the full transaction, which reads the clock again after its lock and
gives every answer a save can give (a refusal, the budget hooks on the last slot, the sweep
of what is due):

* the scope has no settings row yet;
* the save would take the scope's last slot or go past its budget;
* ``expires_at`` is not after the instant;
* a record of the scope is due to expire at the instant;
* a record of the scope was closed at an instant after this one (an expiry sweep that
  committed while this call waited for the lock, at an instant after the clock reading).
  The transaction reads the clock after its lock for this reason (docs/ledger.md, "Lock,
  then instant"); here the clock was read before the call, so the call checks instead.

The rows it writes are the transaction's, column for column: ``tests/ledger/test_postgres_save.py``
saves through both paths and compares the raw rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The record's columns, in the order of ledger.record_rows.NAMES after ``seq``.
SAVE_FUNCTION = """CREATE OR REPLACE FUNCTION memledger_save(
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
END $$"""

DROP_SAVE_FUNCTION = (
    "DROP FUNCTION IF EXISTS memledger_save(text, bigint, bigint, text, text, text, text, bigint, text)"
)

CALL = (
    "SELECT memledger_save(%(s)s, %(clock)s, %(default_max)s, %(id)s, %(kind)s, %(body)s, "
    "%(session)s, %(expires)s, %(detail)s)"
)


def save_plain(raw: Any, params: Mapping[str, Any]) -> int | None:
    """Call ``memledger_save`` on the psycopg connection ``raw`` in a transaction of its own: the instant, or
    None when the save is not plain (nothing was written)."""
    autocommit = raw.autocommit
    raw.autocommit = True  # the call is the transaction: no BEGIN, no COMMIT, one round trip
    try:
        with raw.cursor() as cur:
            cur.execute(CALL, params)
            found = cur.fetchone()
    finally:
        raw.autocommit = autocommit
    return None if found is None or found[0] is None else int(found[0])
