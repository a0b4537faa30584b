"""PostgreSQL: ``memledger_edit``, an edit in one statement (docs/ledger.md, "Round trips on PostgreSQL").

An edit of an active record (no conflict group given, nothing due, no explicit instant) waited
four times for the server: the scope's lock, the usage with the target's row, the close's row
count, the commit. The function does the whole edit in one round trip, as ``memledger_save``
(0011) does a plain save. SQLite has nothing to add: its edits make no round trips.

Revision ID: 0016_edit_function
Revises: 0015_model_call
Create Date: 2026-12-06
"""

from __future__ import annotations

from alembic import op

from ledger.store import postgres_ddl, superseded_ddl

revision = "0016_edit_function"
down_revision = "0015_model_call"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for obj in superseded_ddl.EDIT_0016:
            op.execute(obj.sql)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for obj in superseded_ddl.EDIT_0016:
            op.execute(postgres_ddl.drop(obj))
