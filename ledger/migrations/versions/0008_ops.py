"""Operations state: the expiry sweep's last run (``ops_sweep``), so a stopped cron can be alerted on.

Revision ID: 0008_ops
Revises: 0007_extraction_packet
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_ops"
down_revision = "0007_extraction_packet"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ops_sweep",
        sa.Column("name", sa.Text, primary_key=True),
        sa.Column("last_started_at", sa.BigInteger, nullable=False),
        sa.Column("last_finished_at", sa.BigInteger, nullable=False),
        sa.Column("last_now", sa.BigInteger, nullable=False),
        sa.Column("last_expired", sa.BigInteger, nullable=False),
        sa.Column("runs", sa.BigInteger, nullable=False),
        sa.Column("expired_total", sa.BigInteger, nullable=False),
        sa.CheckConstraint("last_expired >= 0 AND runs >= 1 AND expired_total >= 0", name="ck_ops_sweep_counts"),
    )


def downgrade() -> None:
    op.drop_table("ops_sweep")
