"""A scope's model target beyond harness and model: a base URL of its own and its own price of its model.

``base_url`` points a harness that takes one (``openai``) at a server of the scope's choosing
(Ollama, vLLM, llama.cpp's server, LM Studio, OpenAI); ``price_in_usd_per_mtok`` and
``price_out_usd_per_mtok`` price a model the built-in table does not know (0 for a local
model), or override the table. On both settings tables; all nullable (unset).

Revision ID: 0010_model_target
Revises: 0009_scope_counts
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_model_target"
down_revision = "0009_scope_counts"
branch_labels = None
depends_on = None

_TABLES = ("consolidation_settings", "extraction_settings")


def upgrade() -> None:
    # Plain add_column: nullable columns need no table rebuild on SQLite.
    for table in _TABLES:
        op.add_column(table, sa.Column("base_url", sa.Text, nullable=True))
        op.add_column(table, sa.Column("price_in_usd_per_mtok", sa.Float, nullable=True))
        op.add_column(table, sa.Column("price_out_usd_per_mtok", sa.Float, nullable=True))


def downgrade() -> None:
    for table in _TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("price_out_usd_per_mtok")
            batch.drop_column("price_in_usd_per_mtok")
            batch.drop_column("base_url")
