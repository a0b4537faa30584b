"""The storage layer: per-scope latest instant, the derived-text registry, stemmed SQLite search.

* ``scope_settings.latest_at``: the scope's latest write instant; the next write's instant
  is strictly after it. Back-filled from the event log.
* ``derived_texts``: text derived from records (run prompts and answers, packet audits,
  digests), by record id; forgetting a record erases through it.
* SQLite FTS5 with the ``porter`` tokenizer, so "dogs" finds "dog" as PostgreSQL's
  ``english`` configuration does. The index is rebuilt from the active bodies.

Revision ID: 0004_store
Revises: 0003_consolidation
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from ledger.store import sqlite_ddl

revision = "0004_store"
down_revision = "0003_consolidation"
branch_labels = None
depends_on = None

# What the downgrade restores: the unstemmed index of 0001_ledger (the triggers stay the store's).
_UNSTEMMED = (
    "CREATE VIRTUAL TABLE memory_fts USING fts5(body, content='memory_records', content_rowid='seq', "
    "tokenize='unicode61')"
)
_FILL = "INSERT INTO memory_fts(rowid, body) SELECT seq, body FROM memory_records WHERE status = 'active'"


def _rebuild_fts(statements: list[str]) -> None:
    for obj in reversed(sqlite_ddl.FTS):
        op.execute(sqlite_ddl.drop(obj))
    for statement in statements:
        op.execute(statement)
    op.execute(_FILL)


def upgrade() -> None:
    op.add_column("scope_settings", sa.Column("latest_at", sa.BigInteger, nullable=True))
    op.execute(
        "UPDATE scope_settings SET latest_at = "
        "(SELECT MAX(e.at) FROM ledger_events e WHERE e.scope_key = scope_settings.scope_key)"
    )
    op.create_table(
        "derived_texts",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("owner", sa.Text, nullable=False),
        sa.Column("key", sa.Text, nullable=False),
        sa.Column("record_id", sa.Text, nullable=False),
        sa.Column("columns", sa.Text, nullable=False),
        sa.Column("created_at", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_derived_texts_record_id", "derived_texts", ["record_id"])
    if op.get_bind().dialect.name == "sqlite":
        _rebuild_fts([o.sql for o in sqlite_ddl.FTS])  # the store's: the stemmed index


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _rebuild_fts([_UNSTEMMED, *(o.sql for o in sqlite_ddl.FTS[1:])])
    op.drop_index("ix_derived_texts_record_id", table_name="derived_texts")
    op.drop_table("derived_texts")
    with op.batch_alter_table("scope_settings") as batch:
        batch.drop_column("latest_at")
