"""Extraction and the packet audit: extraction settings and digests, a ``job`` on runs,
the per-session packet audit and the per-scope injection switch.

Runs of both jobs share ``consolidation_runs``: ``job`` is ``consolidate`` or
``extract``, and ``session_id`` names the chat an extraction run reads ('' for
consolidation). At most one pending run per (scope, job, session); still one running
run per scope, so a scope's jobs never run at the same time.

Revision ID: 0007_extraction_packet
Revises: 0006_consolidation_v2
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_extraction_packet"
down_revision = "0006_consolidation_v2"
branch_labels = None
depends_on = None


def upgrade() -> None:
    _runs_per_job()
    _extraction_tables()
    _packet_tables()


def _runs_per_job() -> None:
    op.add_column("consolidation_runs", sa.Column("job", sa.Text, nullable=False, server_default="consolidate"))
    op.add_column("consolidation_runs", sa.Column("session_id", sa.Text, nullable=False, server_default=""))
    op.drop_index("ux_consolidation_runs_pending", table_name="consolidation_runs")
    op.create_index(
        "ux_consolidation_runs_pending",
        "consolidation_runs",
        ["scope_key", "job", "session_id"],
        unique=True,
        sqlite_where=sa.text("state = 'pending'"),
        postgresql_where=sa.text("state = 'pending'"),
    )


def _extraction_tables() -> None:
    op.create_table(
        "extraction_settings",
        sa.Column("scope_key", sa.Text, primary_key=True),
        sa.Column("mode", sa.Text, nullable=False),
        sa.Column("harness", sa.Text, nullable=False),
        sa.Column("model", sa.Text, nullable=False),
        sa.Column("debounce_s", sa.Float, nullable=False),
        sa.Column("max_wait_s", sa.Float, nullable=True),
        sa.Column("wall_clock_cap_s", sa.Float, nullable=False),
        sa.Column("max_output_tokens", sa.Integer, nullable=False),
        sa.Column("created_at", sa.BigInteger, nullable=False),
        sa.Column("updated_at", sa.BigInteger, nullable=False),
        sa.CheckConstraint("mode IN ('off','propose')", name="ck_extraction_settings_mode"),
        sa.CheckConstraint("debounce_s >= 0", name="ck_extraction_settings_debounce"),
    )
    op.create_table(
        "extraction_digests",
        sa.Column("scope_key", sa.Text, primary_key=True),
        sa.Column("session_id", sa.Text, primary_key=True),
        sa.Column("digest_id", sa.Text, nullable=False, unique=True),
        sa.Column("messages", sa.Text, nullable=True),
        sa.Column("chars", sa.Integer, nullable=False),
        sa.Column("next_seq", sa.Integer, nullable=False),
        sa.Column("updated_at", sa.BigInteger, nullable=False),
    )


def _packet_tables() -> None:
    op.create_table(
        "packet_audits",
        sa.Column("scope_key", sa.Text, primary_key=True),
        sa.Column("session_id", sa.Text, primary_key=True),
        sa.Column("built_at", sa.BigInteger, nullable=False),
        sa.Column("max_chars", sa.Integer, nullable=False),
        sa.Column("token_estimate", sa.Integer, nullable=False),
        sa.Column("selected", sa.Text, nullable=False),
        sa.Column("excluded", sa.Text, nullable=False),
    )
    op.create_table(
        "memory_injection",
        sa.Column("scope_key", sa.Text, primary_key=True),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("updated_at", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("memory_injection")
    op.drop_table("packet_audits")
    op.drop_table("extraction_digests")
    op.drop_table("extraction_settings")
    # Extraction runs cannot live in the older table (one pending run per scope): they go with it.
    op.execute("DELETE FROM consolidation_runs WHERE job = 'extract'")
    op.drop_index("ux_consolidation_runs_pending", table_name="consolidation_runs")
    op.create_index(
        "ux_consolidation_runs_pending",
        "consolidation_runs",
        ["scope_key"],
        unique=True,
        sqlite_where=sa.text("state = 'pending'"),
        postgresql_where=sa.text("state = 'pending'"),
    )
    with op.batch_alter_table("consolidation_runs") as batch:
        batch.drop_column("session_id")
        batch.drop_column("job")
