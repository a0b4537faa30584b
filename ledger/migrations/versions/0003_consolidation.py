"""Consolidation tables: per-scope settings and runs.

The schema lives in the one migration chain so that `memledger db upgrade` brings a
database fully up; the code that uses these tables is in `consolidation/`.

Revision ID: 0003_consolidation
Revises: 0002_drop_task_knowledge
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_consolidation"
down_revision = "0002_drop_task_knowledge"
branch_labels = None
depends_on = None

MODES = "('off','propose','apply')"
STATES = "('pending','running','settled')"
OUTCOMES = "('applied','proposed','cancelled','skipped_budget','failed','abandoned')"


def upgrade() -> None:
    _settings()
    _runs()
    _run_indexes()


def _settings() -> None:
    op.create_table(
        "consolidation_settings",
        sa.Column("scope_key", sa.Text, primary_key=True),
        sa.Column("mode", sa.Text, nullable=False),
        sa.Column("allowed_ops", sa.Text, nullable=False),
        sa.Column("debounce_s", sa.Float, nullable=False),
        sa.Column("max_wait_s", sa.Float, nullable=True),
        sa.Column("harness", sa.Text, nullable=False),
        sa.Column("model", sa.Text, nullable=False),
        sa.Column("wall_clock_cap_s", sa.Float, nullable=False),
        sa.Column("max_output_tokens", sa.Integer, nullable=False),
        sa.Column("spend_budget_micro_usd", sa.BigInteger, nullable=False),
        sa.Column("created_at", sa.BigInteger, nullable=False),
        sa.Column("updated_at", sa.BigInteger, nullable=False),
        sa.CheckConstraint(f"mode IN {MODES}", name="ck_consolidation_settings_mode"),
        sa.CheckConstraint("debounce_s >= 0", name="ck_consolidation_settings_debounce"),
        sa.CheckConstraint("max_wait_s IS NULL OR max_wait_s >= debounce_s", name="ck_consolidation_settings_wait"),
        sa.CheckConstraint("wall_clock_cap_s > 0", name="ck_consolidation_settings_cap"),
        sa.CheckConstraint("max_output_tokens > 0", name="ck_consolidation_settings_tokens"),
        sa.CheckConstraint("spend_budget_micro_usd >= 0", name="ck_consolidation_settings_budget"),
    )


def _runs() -> None:
    op.create_table(
        "consolidation_runs",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("scope_key", sa.Text, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("outcome", sa.Text, nullable=True),
        sa.Column("mode", sa.Text, nullable=True),
        sa.Column("turns", sa.Integer, nullable=False),
        sa.Column("created_at", sa.BigInteger, nullable=False),
        sa.Column("due_at", sa.BigInteger, nullable=False),
        sa.Column("started_at", sa.BigInteger, nullable=True),
        sa.Column("settled_at", sa.BigInteger, nullable=True),
        sa.Column("harness", sa.Text, nullable=True),
        sa.Column("model", sa.Text, nullable=True),
        sa.Column("wall_clock_cap_s", sa.Float, nullable=True),
        sa.Column("input_tokens", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("output_tokens", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("cache_creation_input_tokens", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("cache_read_input_tokens", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("spend_micro_usd", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("model_calls", sa.Integer, nullable=False, server_default="0"),
        sa.Column("ops_proposed", sa.Integer, nullable=False, server_default="0"),
        sa.Column("ops_applied", sa.Integer, nullable=False, server_default="0"),
        sa.Column("ops_refused", sa.Integer, nullable=False, server_default="0"),
        sa.Column("refusals", sa.Text, nullable=False, server_default="{}"),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("prompt", sa.Text, nullable=True),
        sa.Column("answer", sa.Text, nullable=True),
        sa.Column("answer_raw", sa.Text, nullable=True),
        sa.Column("answer_stored_at", sa.BigInteger, nullable=True),
        sa.CheckConstraint(f"state IN {STATES}", name="ck_consolidation_runs_state"),
        sa.CheckConstraint(
            f"(state = 'settled') = (outcome IS NOT NULL) AND (outcome IS NULL OR outcome IN {OUTCOMES})",
            name="ck_consolidation_runs_outcome",
        ),
        sa.CheckConstraint("(state = 'settled') = (settled_at IS NOT NULL)", name="ck_consolidation_runs_settled"),
        sa.CheckConstraint(
            "state = 'pending' OR started_at IS NOT NULL OR outcome = 'cancelled'", name="ck_consolidation_runs_started"
        ),
    )


def _run_indexes() -> None:
    # At most one pending and one running run per scope.
    for state in ("pending", "running"):
        op.create_index(
            f"ux_consolidation_runs_{state}",
            "consolidation_runs",
            ["scope_key"],
            unique=True,
            sqlite_where=sa.text(f"state = '{state}'"),
            postgresql_where=sa.text(f"state = '{state}'"),
        )
    op.create_index(
        "ix_consolidation_runs_due",
        "consolidation_runs",
        ["due_at"],
        sqlite_where=sa.text("state = 'pending'"),
        postgresql_where=sa.text("state = 'pending'"),
    )
    op.create_index("ix_consolidation_runs_scope", "consolidation_runs", ["scope_key", "created_at"])


def downgrade() -> None:
    op.drop_table("consolidation_runs")
    op.drop_table("consolidation_settings")
