"""The account memory ledger: memory_records, scope_settings, ledger_events, full-text search.

Revision ID: 0001_ledger
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from ledger.store import postgres_ddl, sqlite_ddl

revision = "0001_ledger"
down_revision = None
branch_labels = None
depends_on = None

KINDS = "('preference','fact','decision','constraint')"
PROVENANCES = "('user_explicit','model_proposal','model_consolidation')"
STATUSES = "('active','proposed','rejected','superseded','expired','deleted')"

# This revision's SQLite FTS5 index (unstemmed), as it was: 0004_store re-creates it from
# ledger.store.sqlite_ddl. The delete command of an external-content table must carry the old
# values, so every trigger passes old.body.
SQLITE_FTS = [
    "CREATE VIRTUAL TABLE memory_fts USING fts5(body, content='memory_records', content_rowid='seq')",
    """CREATE TRIGGER memory_fts_ai AFTER INSERT ON memory_records WHEN new.status = 'active' BEGIN
         INSERT INTO memory_fts(rowid, body) VALUES (new.seq, new.body);
       END""",
    """CREATE TRIGGER memory_fts_ad AFTER DELETE ON memory_records WHEN old.status = 'active' BEGIN
         INSERT INTO memory_fts(memory_fts, rowid, body) VALUES ('delete', old.seq, old.body);
       END""",
    # One trigger, delete before insert: SQLite fires separate triggers newest first, so two
    # triggers would re-insert and then delete an active row that stays active (emptying its entry).
    """CREATE TRIGGER memory_fts_au AFTER UPDATE OF status, body ON memory_records
       WHEN old.status = 'active' OR new.status = 'active' BEGIN
         INSERT INTO memory_fts(memory_fts, rowid, body) SELECT 'delete', old.seq, old.body WHERE old.status = 'active';
         INSERT INTO memory_fts(rowid, body) SELECT new.seq, new.body WHERE new.status = 'active';
       END""",
]


def upgrade() -> None:
    _records()
    _settings_and_events()
    # No row is ever deleted (both databases), and PostgreSQL's search index: the store's statements.
    if op.get_bind().dialect.name == "sqlite":
        statements = [*SQLITE_FTS, *(o.sql for o in sqlite_ddl.NO_DELETE)]
    else:
        statements = [o.sql for o in (*postgres_ddl.SEARCH, *postgres_ddl.NO_DELETE)]
    for statement in statements:
        op.execute(statement)


def _records() -> None:
    op.create_table(
        "memory_records",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("id", sa.Text, nullable=False, unique=True),
        sa.Column("scope_key", sa.Text, nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("body", sa.Text, nullable=True),
        sa.Column("provenance", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("source_session_id", sa.Text, nullable=True),
        sa.Column("supersedes", sa.Text, nullable=False, server_default="[]"),
        sa.Column("superseded_by", sa.Text, nullable=True),
        sa.Column("confidence_bps", sa.Integer, nullable=True),
        sa.Column("rationale", sa.Text, nullable=True),
        sa.Column("valid_from", sa.BigInteger, nullable=False),
        sa.Column("valid_to", sa.BigInteger, nullable=True),
        sa.Column("expires_at", sa.BigInteger, nullable=True),
        sa.Column("conflict_group", sa.Text, nullable=True),
        sa.Column("erased_at", sa.BigInteger, nullable=True),
        sa.Column("created_at", sa.BigInteger, nullable=False),
        sa.Column("updated_at", sa.BigInteger, nullable=False),
        sa.CheckConstraint(f"kind IN {KINDS}", name="ck_memory_records_kind"),
        sa.CheckConstraint(f"provenance IN {PROVENANCES}", name="ck_memory_records_provenance"),
        sa.CheckConstraint(f"status IN {STATUSES}", name="ck_memory_records_status"),
        sa.CheckConstraint("valid_to IS NULL OR valid_to >= valid_from", name="ck_memory_records_interval"),
        sa.CheckConstraint("(status = 'active') = (valid_to IS NULL)", name="ck_memory_records_active_open"),
        sa.CheckConstraint(
            "status NOT IN ('proposed','rejected') OR valid_to = valid_from", name="ck_memory_records_proposal_empty"
        ),
        sa.CheckConstraint(
            "confidence_bps IS NULL OR (confidence_bps BETWEEN 0 AND 10000)", name="ck_memory_records_confidence"
        ),
        sa.CheckConstraint("body IS NOT NULL OR erased_at IS NOT NULL", name="ck_memory_records_body_or_erased"),
        sa.CheckConstraint("erased_at IS NULL OR status IN ('deleted','superseded')", name="ck_memory_records_erased"),
        sa.CheckConstraint("status <> 'superseded' OR superseded_by IS NOT NULL", name="ck_memory_records_successor"),
    )
    _record_indexes()


def _record_indexes() -> None:
    # One active member per conflict group (partial unique index; ON CONFLICT must repeat the WHERE).
    op.create_index(
        "ux_memory_records_conflict_active",
        "memory_records",
        ["scope_key", "conflict_group"],
        unique=True,
        sqlite_where=sa.text("status = 'active' AND conflict_group IS NOT NULL"),
        postgresql_where=sa.text("status = 'active' AND conflict_group IS NOT NULL"),
    )
    # As-of reads: open records (valid_to IS NULL) and those closed after the instant.
    op.create_index("ix_memory_records_asof", "memory_records", ["scope_key", "valid_to", "valid_from"])
    # The active set and the budget count.
    op.create_index("ix_memory_records_scope_status", "memory_records", ["scope_key", "status"])
    # The sweep: only what can still expire, ordered by when.
    op.create_index(
        "ix_memory_records_due",
        "memory_records",
        ["expires_at"],
        sqlite_where=sa.text("status IN ('active','proposed') AND expires_at IS NOT NULL"),
        postgresql_where=sa.text("status IN ('active','proposed') AND expires_at IS NOT NULL"),
    )


def _settings_and_events() -> None:
    op.create_table(
        "scope_settings",
        sa.Column("scope_key", sa.Text, primary_key=True),
        sa.Column("max_records", sa.Integer, nullable=False),
        sa.Column("created_at", sa.BigInteger, nullable=False),
        sa.Column("updated_at", sa.BigInteger, nullable=False),
        sa.CheckConstraint("max_records >= 0", name="ck_scope_settings_max_records"),
    )
    op.create_table(
        "ledger_events",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.BigInteger, nullable=False),
        sa.Column("scope_key", sa.Text, nullable=False),
        sa.Column("event", sa.Text, nullable=False),
        sa.Column("record_id", sa.Text, nullable=True),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("run_id", sa.Text, nullable=True),
        sa.Column("detail", sa.Text, nullable=False, server_default="{}"),
    )
    op.create_index("ix_ledger_events_scope", "ledger_events", ["scope_key", "seq"])
    op.create_index("ix_ledger_events_record", "ledger_events", ["record_id"])


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TABLE IF EXISTS memory_fts")
    else:
        for obj in reversed(postgres_ddl.NO_DELETE):
            op.execute(postgres_ddl.drop(obj))
    op.drop_table("ledger_events")
    op.drop_table("scope_settings")
    op.drop_table("memory_records")
