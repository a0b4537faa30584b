"""A run's proposals counted apart from what it applied: ``proposals_written`` on ``consolidation_runs``.

A propose-mode consolidation run and every extraction run write proposals that wait for the user;
they used to be counted in ``ops_applied``, so a run that changed nothing read "1 applied". Existing
rows are moved over: a settled run whose mode was ``propose`` (or an extraction run) had applied only
its keeps, which cannot be told apart now, so all of its count moves.

Revision ID: 0013_run_proposals
Revises: 0012_derived_scope
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_run_proposals"
down_revision = "0012_derived_scope"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("consolidation_runs", sa.Column("proposals_written", sa.Integer, nullable=False, server_default="0"))
    op.execute(
        "UPDATE consolidation_runs SET proposals_written = ops_applied, ops_applied = 0 "
        "WHERE state = 'settled' AND (job = 'extract' OR mode = 'propose')"
    )


def downgrade() -> None:
    op.execute(
        "UPDATE consolidation_runs SET ops_applied = ops_applied + proposals_written WHERE proposals_written > 0"
    )
    with op.batch_alter_table("consolidation_runs") as batch:
        batch.drop_column("proposals_written")
