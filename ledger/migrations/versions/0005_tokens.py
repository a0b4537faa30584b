"""API tokens for multi-account serving (docs/operations.md): id, account, hash, created/last used/revoked.

Only the SHA-256 of a token is stored. The code that uses the table is ``worker/tokens.py``.

Revision ID: 0005_tokens
Revises: 0004_store
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_tokens"
down_revision = "0004_store"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("account", sa.Text, nullable=False),
        sa.Column("hash", sa.Text, nullable=False, unique=True),
        sa.Column("created_at", sa.BigInteger, nullable=False),
        sa.Column("last_used_at", sa.BigInteger, nullable=True),
        sa.Column("revoked_at", sa.BigInteger, nullable=True),
        sa.CheckConstraint("revoked_at IS NULL OR revoked_at >= created_at", name="ck_api_tokens_revoked"),
    )
    op.create_index("ix_api_tokens_account", "api_tokens", ["account"])


def downgrade() -> None:
    op.drop_index("ix_api_tokens_account", table_name="api_tokens")
    op.drop_table("api_tokens")
