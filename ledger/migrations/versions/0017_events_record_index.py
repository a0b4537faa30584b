"""Drop ``ix_ledger_events_record``: every write paid for an index no read needs.

Each event's row went into three b-trees: the table, ``ix_ledger_events_scope`` (scope, seq) and
``ix_ledger_events_record`` (record_id). Nothing in the ledger, consolidation or the worker reads
events by record; ``Ledger.events(scope_key, record_id=...)`` now filters the scope's events (the
scope index), and only a call with a record and no scope reads the whole log. On SQLite the index
was one of the 15.5 pages a save writes to the WAL (two of an edit's), on PostgreSQL about 100
bytes of WAL per event.

Revision ID: 0017_events_record_index
Revises: 0016_edit_function
Create Date: 2026-12-06
"""

from __future__ import annotations

from alembic import op

revision = "0017_events_record_index"
down_revision = "0016_edit_function"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_ledger_events_record", table_name="ledger_events")


def downgrade() -> None:
    op.create_index("ix_ledger_events_record", "ledger_events", ["record_id"])
