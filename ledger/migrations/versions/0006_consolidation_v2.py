"""Consolidation v2: removal switch, prompt bound, rotation cursor, pending forgets.

* ``consolidation_settings.allow_removal`` (default false: ``retire`` is refused) and
  ``max_prompt_chars`` (the candidate list's bound, default 16,000);
* ``consolidation_settings.rotation_cursor``: the id the candidate rotation reached
  last run (null: start of the ring);
* ``memory_records.proposed_action``: ``'forget'`` on a proposal that, when accepted,
  forgets the record it names (a ``retire`` in propose mode); null on every other row;
* scopes whose ``allowed_ops`` was the whole old vocabulary get the whole new one.

Plain ``add_column`` (no batch mode), so SQLite keeps the FTS triggers of
``memory_records``.

Revision ID: 0006_consolidation_v2
Revises: 0005_tokens
Create Date: 2026-12-01
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0006_consolidation_v2"
down_revision = "0005_tokens"
branch_labels = None
depends_on = None

OLD_OPS = ["merge", "correct", "keep"]
NEW_OPS = ["merge", "correct", "expire", "group", "retire", "keep"]


def upgrade() -> None:
    op.add_column(
        "consolidation_settings",
        sa.Column("allow_removal", sa.Boolean, nullable=False, server_default=sa.false()),
    )
    op.add_column(
        "consolidation_settings",
        sa.Column("max_prompt_chars", sa.Integer, nullable=False, server_default="16000"),
    )
    op.add_column("consolidation_settings", sa.Column("rotation_cursor", sa.Text, nullable=True))
    op.add_column("memory_records", sa.Column("proposed_action", sa.Text, nullable=True))
    op.execute(
        sa.text("UPDATE consolidation_settings SET allowed_ops = :new WHERE allowed_ops = :old").bindparams(
            new=json.dumps(NEW_OPS), old=json.dumps(OLD_OPS)
        )
    )


def downgrade() -> None:
    op.execute(
        sa.text("UPDATE consolidation_settings SET allowed_ops = :old WHERE allowed_ops = :new").bindparams(
            new=json.dumps(NEW_OPS), old=json.dumps(OLD_OPS)
        )
    )
    with op.batch_alter_table("consolidation_settings") as batch:
        batch.drop_column("rotation_cursor")
        batch.drop_column("max_prompt_chars")
        batch.drop_column("allow_removal")
    # memory_records keeps its FTS triggers: drop the column without batch mode where the dialect can.
    op.drop_column("memory_records", "proposed_action")
