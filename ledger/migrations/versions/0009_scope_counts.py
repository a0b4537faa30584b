"""Each scope's active and proposed counts, kept by triggers, so a budget check is one row read.

Before this revision every write counted the scope's records (``COUNT(*)`` over its index):
linear in the scope's size, so a save into a scope holding 100,000 records paid for all of
them. The counts live in ``scope_settings`` next to the budget and the lock, and a trigger
on ``memory_records`` moves them in the same statement that changes a status (records are
never deleted, so inserts and status changes are all there is).

Revision ID: 0009_scope_counts
Revises: 0008_ops
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_scope_counts"
down_revision = "0008_ops"
branch_labels = None
depends_on = None

_HELD = "('active','proposed')"

SQLITE = (
    f"""CREATE TRIGGER memory_records_count_ai AFTER INSERT ON memory_records
    WHEN new.status IN {_HELD} BEGIN
      UPDATE scope_settings SET active_count = active_count + (new.status = 'active'),
        proposed_count = proposed_count + (new.status = 'proposed')
      WHERE scope_key = new.scope_key;
    END""",
    f"""CREATE TRIGGER memory_records_count_au AFTER UPDATE OF status ON memory_records
    WHEN old.status <> new.status AND (old.status IN {_HELD} OR new.status IN {_HELD}) BEGIN
      UPDATE scope_settings SET
        active_count = active_count + (new.status = 'active') - (old.status = 'active'),
        proposed_count = proposed_count + (new.status = 'proposed') - (old.status = 'proposed')
      WHERE scope_key = new.scope_key;
    END""",
)
POSTGRES = (
    f"""CREATE FUNCTION memory_records_count() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP = 'INSERT' THEN
        IF NEW.status IN {_HELD} THEN
          UPDATE scope_settings SET active_count = active_count + (NEW.status = 'active')::int,
            proposed_count = proposed_count + (NEW.status = 'proposed')::int
          WHERE scope_key = NEW.scope_key;
        END IF;
      ELSIF OLD.status IS DISTINCT FROM NEW.status AND (OLD.status IN {_HELD} OR NEW.status IN {_HELD}) THEN
        UPDATE scope_settings SET
          active_count = active_count + (NEW.status = 'active')::int - (OLD.status = 'active')::int,
          proposed_count = proposed_count + (NEW.status = 'proposed')::int - (OLD.status = 'proposed')::int
        WHERE scope_key = NEW.scope_key;
      END IF;
      RETURN NULL;
    END $$""",
    """CREATE TRIGGER memory_records_count AFTER INSERT OR UPDATE OF status ON memory_records
    FOR EACH ROW EXECUTE FUNCTION memory_records_count()""",
)
_BACKFILL = """UPDATE scope_settings SET
  active_count = (SELECT COUNT(*) FROM memory_records m WHERE m.scope_key = scope_settings.scope_key
                  AND m.status = 'active'),
  proposed_count = (SELECT COUNT(*) FROM memory_records m WHERE m.scope_key = scope_settings.scope_key
                    AND m.status = 'proposed')"""


def upgrade() -> None:
    for name in ("active_count", "proposed_count"):
        op.add_column("scope_settings", sa.Column(name, sa.BigInteger, nullable=False, server_default="0"))
    # Triggers first, then the counts, in this transaction: no write can fall between the two.
    sqlite = op.get_bind().dialect.name == "sqlite"
    for statement in SQLITE if sqlite else POSTGRES:
        op.execute(statement)
    op.execute(_BACKFILL)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS memory_records_count_ai")
        op.execute("DROP TRIGGER IF EXISTS memory_records_count_au")
    else:
        op.execute("DROP TRIGGER IF EXISTS memory_records_count ON memory_records")
        op.execute("DROP FUNCTION IF EXISTS memory_records_count()")
    with op.batch_alter_table("scope_settings") as batch:
        batch.drop_column("proposed_count")
        batch.drop_column("active_count")
