"""SQLite: ``ix_memory_records_scope_status`` gives way to ``ix_memory_records_proposed``; a save writes a page less.

Every save wrote an entry of ``ix_memory_records_scope_status`` (scope, status), and every edit
three (the closed record's entry moved, the new one added): about 1.2 of the 14.5 pages a save
wrote to the WAL, and 3 of an edit's 22 (``tests/bench/bench_pages.py``). On SQLite the index
served two kinds of reads. The active set is exactly the records with no ``valid_to``
(``ck_memory_records_active_open``), which ``ix_memory_records_asof`` (scope, valid_to,
valid_from) already finds; the reads that named ``status = 'active'`` now name ``valid_to IS
NULL``. Proposals are the records whose interval is empty (``ck_memory_records_proposal_empty``):
a partial index holds only those, so a save or an edit of an active record writes nothing to it
(``ledger/store/sqlite_ddl.py``).

PostgreSQL keeps the index unchanged (declared now with its own statements,
``ledger/store/postgres_ddl.py``): its reads of the active set, its search among them, name the
status.

Revision ID: 0020_sqlite_status_index
Revises: 0019_scope_row
Create Date: 2026-12-06
"""

from __future__ import annotations

from alembic import op

from ledger.store import sqlite_ddl

revision = "0020_sqlite_status_index"
down_revision = "0019_scope_row"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.drop_index("ix_memory_records_scope_status", table_name="memory_records")
        for obj in sqlite_ddl.PROPOSED:
            op.execute(obj.sql)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for obj in sqlite_ddl.PROPOSED:
            op.execute(sqlite_ddl.drop(obj))
        op.create_index("ix_memory_records_scope_status", "memory_records", ["scope_key", "status"])
