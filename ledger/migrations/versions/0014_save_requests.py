"""The request ids of saves (docs/ledger.md, "Retrying a save"): a save sent again with its ``requestId``
returns the record it wrote instead of writing another.

Revision ID: 0014_save_requests
Revises: 0013_run_proposals
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014_save_requests"
down_revision = "0013_run_proposals"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "save_requests",
        sa.Column("record_id", sa.Text, primary_key=True),
        sa.Column("scope_key", sa.Text, nullable=False),
        sa.Column("request_id", sa.Text, nullable=False),
        sa.Column("fingerprint", sa.Text, nullable=True),
        sa.Column("created_at", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_save_requests_request", "save_requests", ["scope_key", "request_id"], unique=True)


def downgrade() -> None:
    op.drop_index("ix_save_requests_request", table_name="save_requests")
    op.drop_table("save_requests")
