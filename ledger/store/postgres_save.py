"""A plain save or edit on PostgreSQL in one statement: the server-side functions ``memledger_save`` and
``memledger_edit``.

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

Neither of the last two is a search of the scope's records, whose plan PostgreSQL would keep
for the connection's life, made perhaps while the table had no statistics (then a read of
every record of the scope): the scope's row holds the latest ``valid_to`` of its records
(``latest_closed_at``, kept by the counts' trigger), read with the lock, and
``ix_memory_records_due_scope`` holds only the records that can still expire.

The scope's row is written once: one ``UPDATE`` takes the lock, moves the latest instant and the
active count, and holds the checks on the row in its ``WHERE`` (PostgreSQL checks them again on the
row's latest version once it has the lock), so a failed check writes nothing. The counts' trigger
skips the rows the function counted itself (``postgres_ddl.COUNTED``). A record due at the instant
is looked for once the lock is held; if there is one the function raises
:data:`~ledger.store.postgres_ddl.NOT_PLAIN`: its transaction is rolled back and :func:`call`
answers None, as for a save the update declined.

An edit (``supersedes`` one record, no conflict group given) has its own function,
``memledger_edit``: under the same lock and the same instant it closes the target, logs its
``superseded`` event, inserts the new record (the target's kind unless given one, and its
conflict group) and its ``saved`` event, in one round trip where the transaction waits four
times. It declines as the save does (no settings row, an expiry not after the instant,
something due, something closed after the instant), and also when the target is not an active
record of the scope or took effect after the instant: the transaction then gives the answer
(raising :data:`~ledger.store.postgres_ddl.NOT_PLAIN` when the target changed while it waited).
An edit replaces rather than grows, so the budget is never in question.

The rows they write are the transaction's, column for column: ``tests/ledger/test_postgres_save.py``
saves and edits through both paths and compares the raw rows. The functions are in
:mod:`ledger.store.postgres_ddl` with the rest of the dialect's own schema.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ledger.store.driver import psycopg
from ledger.store.postgres_ddl import NOT_PLAIN

CALL = (
    "SELECT memledger_save(%(s)s, %(clock)s, %(default_max)s, %(id)s, %(kind)s, %(body)s, "
    "%(session)s, %(expires)s, %(detail)s)"
)
# An edit: the instant, the new record's kind and conflict group (NULLs when it is not plain).
EDIT_CALL = (
    "SELECT * FROM memledger_edit(%(s)s, %(clock)s, %(target)s, %(id)s, %(kind)s, %(body)s, "
    "%(session)s, %(expires)s, %(supersedes)s, %(closed_detail)s, %(detail)s)"
)


def call(raw: Any, sql: str, params: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """Run ``sql`` (:data:`CALL` or :data:`EDIT_CALL`) on the psycopg connection ``raw`` in a transaction of its
    own: the row it answered, or None when the write is not plain (nothing was written: it declined, or it
    raised :data:`~ledger.store.postgres_ddl.NOT_PLAIN` and its transaction was rolled back)."""
    autocommit = raw.autocommit
    raw.autocommit = True  # the call is the transaction: no BEGIN, no COMMIT, one round trip
    try:
        with raw.cursor() as cur:
            cur.execute(sql, params)
            found = cur.fetchone()
    except psycopg.Error as exc:
        if exc.sqlstate != NOT_PLAIN:
            raise
        return None
    finally:
        raw.autocommit = autocommit
    return None if found is None or found[0] is None else tuple(found)
