"""One update of the scope's row per plain save or edit (PostgreSQL): ``memledger_save``, ``memledger_edit`` and the
counts' trigger re-created.

``memledger_save`` and ``memledger_edit`` (0018) locked the scope's row (``SELECT … FOR UPDATE``), moved its
latest instant, and the counts' trigger (``memory_records_count``) moved its counts and its latest
``valid_to`` once more for each record row they wrote: three to four writes of the row each (a lock and two
or three new versions, each a WAL record and a trigger's statement). Now one ``UPDATE`` takes the lock,
moves the instant and what the trigger moved, and checks the budget, the expiry and the latest ``valid_to``
in its ``WHERE``: the row's values are the latest once it holds the lock, and a failed check writes
nothing. A record due at the instant (and, for an edit, a target that is not an active record in effect
then) is looked for once the lock is held; found, the call raises ``MLNP0``, its transaction is rolled
back, and the caller runs the full transaction as for any write that is not plain.

The trigger skips the rows those functions counted themselves: while they write their records, the
transaction-local setting ``memledger.counted`` names the new record, and the trigger's ``WHEN`` leaves out
that record's row and the row it supersedes. Every other write (the transactions, consolidation, the sweep)
leaves the setting empty, and the trigger counts its rows as before. SQLite is unchanged.

Revision ID: 0019_scope_row
Revises: 0018_write_checks
Create Date: 2026-12-06
"""

from __future__ import annotations

from alembic import op

from ledger.store import postgres_ddl, superseded_ddl
from ledger.store.schema_object import SchemaObject

revision = "0019_scope_row"
down_revision = "0018_write_checks"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        return
    _replace(superseded_ddl.COUNTS_0018, postgres_ddl.COUNTS)
    for obj in (*postgres_ddl.SAVE, *postgres_ddl.EDIT):
        op.execute(obj.sql)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        return
    for obj in (*superseded_ddl.SAVE_0018, *superseded_ddl.EDIT_0018):
        op.execute(obj.sql)
    _replace(postgres_ddl.COUNTS, superseded_ddl.COUNTS_0018)


def _replace(old: tuple[SchemaObject, ...], new: tuple[SchemaObject, ...]) -> None:
    """Drop ``old`` (the trigger before its function), then create ``new``."""
    for obj in reversed(old):
        op.execute(postgres_ddl.drop(obj))
    for obj in new:
        op.execute(obj.sql)
