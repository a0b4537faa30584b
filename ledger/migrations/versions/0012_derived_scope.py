"""``derived_texts.scope_key``: the scope of the records a derived text quotes.

With it, every statement on a ledger table names one scope (docs/operations.md, "Beyond one
primary"): forgetting a record looks up and erases only its own scope's derived texts. Existing
rows take the scope of the record they name.

Revision ID: 0012_derived_scope
Revises: 0011_save_function
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_derived_scope"
down_revision = "0011_save_function"
branch_labels = None
depends_on = None

_BACKFILL = """UPDATE derived_texts SET scope_key = (
  SELECT m.scope_key FROM memory_records m WHERE m.id = derived_texts.record_id)"""


def upgrade() -> None:
    with op.batch_alter_table("derived_texts") as batch:
        batch.add_column(sa.Column("scope_key", sa.Text, nullable=True))
    op.execute(_BACKFILL)
    # A text naming no record anywhere holds nothing to erase: it has no scope either.
    op.execute("DELETE FROM derived_texts WHERE scope_key IS NULL")
    with op.batch_alter_table("derived_texts") as batch:
        batch.alter_column("scope_key", existing_type=sa.Text, nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("derived_texts") as batch:
        batch.drop_column("scope_key")
