"""The one-statement writes' checks, each one row or one small index: ``scope_settings.latest_closed_at`` and
``ix_memory_records_due_scope`` (PostgreSQL).

``memledger_save`` and ``memledger_edit`` (0011, 0016) are given a clock reading taken before the
scope's lock. They decline when a record of the scope was closed at a later instant (an expiry
sweep that committed while they waited), and when a record of the scope is due. Both were searches
of ``memory_records``, and on a table without statistics (a new database; autovacuum off or not yet
run) PostgreSQL keeps the plan it made while the table was small: for either search, a read of
every record of the scope through ``ix_memory_records_scope_status``. A save into a scope of 2,000
records paid 0.7 ms for it, four times a round trip.

* ``scope_settings.latest_closed_at``: the latest ``valid_to`` of the scope's records. A trigger on
  ``memory_records`` moves it in the statement that writes a ``valid_to`` (an insert, or an update
  naming the column), never back, so it is at least that latest instant whichever path wrote it; the
  functions read it with the lock they already take. On PostgreSQL the trigger is the counts' own
  (``memory_records_count``, 0009, re-created here): a close already moves the scope's counts, and
  the same row update now moves this column too. SQLite's writes read the clock after their lock and
  need none of it; triggers of their own keep the column all the same, so that it means one thing on
  both databases.
* ``ix_memory_records_due_scope`` (PostgreSQL): a scope's records that can still expire, by when.
  Only records with an expiry are in it: a save without one writes nothing more.

Revision ID: 0018_write_checks
Revises: 0017_events_record_index
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from ledger.store import postgres_ddl, sqlite_ddl, superseded_ddl
from ledger.store.schema_object import SchemaObject

revision = "0018_write_checks"
down_revision = "0017_events_record_index"
branch_labels = None
depends_on = None

_BACKFILL = """UPDATE scope_settings SET latest_closed_at =
  (SELECT MAX(m.valid_to) FROM memory_records m WHERE m.scope_key = scope_settings.scope_key)"""


def upgrade() -> None:
    op.add_column("scope_settings", sa.Column("latest_closed_at", sa.BigInteger, nullable=True))
    # Triggers first, then the column's values, in this transaction: no write can fall between the two.
    if op.get_bind().dialect.name == "sqlite":
        for obj in sqlite_ddl.CLOSED:
            op.execute(obj.sql)
    else:
        _replace(superseded_ddl.COUNTS_0009, superseded_ddl.COUNTS_0018)
        for obj in (*postgres_ddl.DUE, *superseded_ddl.SAVE_0018, *superseded_ddl.EDIT_0018):
            op.execute(obj.sql)
    op.execute(_BACKFILL)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for obj in reversed(sqlite_ddl.CLOSED):
            op.execute(sqlite_ddl.drop(obj))
    else:
        for obj in (*superseded_ddl.SAVE_0011, *superseded_ddl.EDIT_0016):
            op.execute(obj.sql)
        _replace(superseded_ddl.COUNTS_0018, superseded_ddl.COUNTS_0009)
        for obj in postgres_ddl.DUE:
            op.execute(postgres_ddl.drop(obj))
    # Not a batch ALTER: on SQLite that rebuilds the table, and the counts' triggers (0009) name it.
    op.drop_column("scope_settings", "latest_closed_at")


def _replace(old: tuple[SchemaObject, ...], new: tuple[SchemaObject, ...]) -> None:
    """Drop ``old`` (the trigger before its function), then create ``new``."""
    for obj in reversed(old):
        op.execute(postgres_ddl.drop(obj))
    for obj in new:
        op.execute(obj.sql)
