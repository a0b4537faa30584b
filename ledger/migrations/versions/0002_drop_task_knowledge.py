"""Drop the legacy task_knowledge table if present, without copying rows (it never had a reader).

Revision ID: 0002_drop_task_knowledge
Revises: 0001_ledger
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_drop_task_knowledge"
down_revision = "0001_ledger"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if sa.inspect(op.get_bind()).has_table("task_knowledge"):
        op.drop_table("task_knowledge")


def downgrade() -> None:
    # The table had no reader and its rows were deliberately not kept: nothing to restore.
    pass
