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

revision = "0004_store"
down_revision = "0003_consolidation"
branch_labels = None
depends_on = None

_TRIGGERS = ("memory_fts_ai", "memory_fts_ad", "memory_fts_au")


def _fts(tokenize: str) -> list[str]:
    return [
        f"CREATE VIRTUAL TABLE memory_fts USING fts5(body, content='memory_records', content_rowid='seq', "
        f"tokenize='{tokenize}')",
        """CREATE TRIGGER memory_fts_ai AFTER INSERT ON memory_records WHEN new.status = 'active' BEGIN
             INSERT INTO memory_fts(rowid, body) VALUES (new.seq, new.body);
           END""",
        """CREATE TRIGGER memory_fts_ad AFTER DELETE ON memory_records WHEN old.status = 'active' BEGIN
             INSERT INTO memory_fts(memory_fts, rowid, body) VALUES ('delete', old.seq, old.body);
           END""",
        """CREATE TRIGGER memory_fts_au AFTER UPDATE OF status, body ON memory_records
           WHEN old.status = 'active' OR new.status = 'active' BEGIN
             INSERT INTO memory_fts(memory_fts, rowid, body)
               SELECT 'delete', old.seq, old.body WHERE old.status = 'active';
             INSERT INTO memory_fts(rowid, body) SELECT new.seq, new.body WHERE new.status = 'active';
           END""",
        "INSERT INTO memory_fts(rowid, body) SELECT seq, body FROM memory_records WHERE status = 'active'",
    ]


def _rebuild_fts(tokenize: str) -> None:
    for trigger in _TRIGGERS:
        op.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    op.execute("DROP TABLE IF EXISTS memory_fts")
    for statement in _fts(tokenize):
        op.execute(statement)


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
        _rebuild_fts("porter unicode61")


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _rebuild_fts("unicode61")
    op.drop_index("ix_derived_texts_record_id", table_name="derived_texts")
    op.drop_table("derived_texts")
    with op.batch_alter_table("scope_settings") as batch:
        batch.drop_column("latest_at")
