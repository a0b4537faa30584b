"""How the call to a scope's model is made: the answer's format, temperature, context window, system role, streaming.

``response_format`` (``auto``: the strongest form the server takes, falling back on a
refusal; or ``json_schema``, ``json_object``, ``plain``), ``temperature`` (0),
``context_window_tokens`` (unset: what the server reports), ``system_role`` (true: the
instructions go in a system message; false, for chat templates without one, such as
Gemma's: at the head of the user message) and ``stream`` (true: the answer is streamed,
so a call given up stops the server generating). On ``consolidation_settings``; every
existing scope gets the defaults.

Revision ID: 0015_model_call
Revises: 0014_save_requests
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015_model_call"
down_revision = "0014_save_requests"
branch_labels = None
depends_on = None

_COLUMNS = ("stream", "system_role", "context_window_tokens", "temperature", "response_format")


def upgrade() -> None:
    # Plain add_column: a column with a constant default needs no table rebuild on SQLite.
    op.add_column(
        "consolidation_settings", sa.Column("response_format", sa.Text, nullable=False, server_default="auto")
    )
    op.add_column("consolidation_settings", sa.Column("temperature", sa.Float, nullable=False, server_default="0"))
    op.add_column("consolidation_settings", sa.Column("context_window_tokens", sa.Integer, nullable=True))
    op.add_column(
        "consolidation_settings", sa.Column("system_role", sa.Boolean, nullable=False, server_default=sa.true())
    )
    op.add_column("consolidation_settings", sa.Column("stream", sa.Boolean, nullable=False, server_default=sa.true()))


def downgrade() -> None:
    with op.batch_alter_table("consolidation_settings") as batch:
        for column in _COLUMNS:
            batch.drop_column(column)
