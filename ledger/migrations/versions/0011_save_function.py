"""PostgreSQL: ``memledger_save``, a plain save in one statement (docs/ledger.md, "Round trips on PostgreSQL").

A save with no edit, no conflict group and room under the budget is most saves; the function
writes one in a single round trip instead of the write transaction's three. SQLite has nothing
to add: its saves make no round trips.

Revision ID: 0011_save_function
Revises: 0010_model_target
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import op

from ledger.store import postgres_ddl, superseded_ddl

revision = "0011_save_function"
down_revision = "0010_model_target"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for obj in superseded_ddl.SAVE_0011:
            op.execute(obj.sql)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for obj in superseded_ddl.SAVE_0011:
            op.execute(postgres_ddl.drop(obj))
