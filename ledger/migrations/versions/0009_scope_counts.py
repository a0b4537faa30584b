"""Each scope's active and proposed counts, kept by triggers, so a budget check is one row read.

Before this revision every write counted the scope's records (``COUNT(*)`` over its index):
linear in the scope's size, so a save into a scope holding 100,000 records paid for all of
them. The counts live in ``scope_settings`` next to the budget and the lock, and a trigger
on ``memory_records`` moves them in the same statement that changes a status (records are
never deleted, so inserts and status changes are all there is).

Revision ID: 0009_scope_counts
Revises: 0008_ops
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from ledger.store import postgres_ddl, sqlite_ddl, superseded_ddl

revision = "0009_scope_counts"
down_revision = "0008_ops"
branch_labels = None
depends_on = None

_BACKFILL = """UPDATE scope_settings SET
  active_count = (SELECT COUNT(*) FROM memory_records m WHERE m.scope_key = scope_settings.scope_key
                  AND m.status = 'active'),
  proposed_count = (SELECT COUNT(*) FROM memory_records m WHERE m.scope_key = scope_settings.scope_key
                    AND m.status = 'proposed')"""


def upgrade() -> None:
    for name in ("active_count", "proposed_count"):
        op.add_column("scope_settings", sa.Column(name, sa.BigInteger, nullable=False, server_default="0"))
    # Triggers first, then the counts, in this transaction: no write can fall between the two.
    sqlite = op.get_bind().dialect.name == "sqlite"
    for obj in sqlite_ddl.COUNTS if sqlite else superseded_ddl.COUNTS_0009:
        op.execute(obj.sql)
    op.execute(_BACKFILL)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for obj in reversed(sqlite_ddl.COUNTS):
            op.execute(sqlite_ddl.drop(obj))
    else:
        for obj in reversed(superseded_ddl.COUNTS_0009):
            op.execute(postgres_ddl.drop(obj))
    with op.batch_alter_table("scope_settings") as batch:
        batch.drop_column("proposed_count")
        batch.drop_column("active_count")
