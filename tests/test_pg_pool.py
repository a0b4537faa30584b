"""The pool of migrated PostgreSQL schemas (``tests/pg_pool.py``): what it hands out is what the migrations
make, whatever the test before did, and nothing a test leaves behind reaches the next one."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from sqlalchemy import make_url

from ledger import open_ledger
from tests.conftest import PG_URL, T0, make_pg_pool, pg_schema_url, service_missing
from tests.pg_pool import FINGERPRINT, SEQUENCES, TABLES, SchemaPool

SCOPE = "account:local"


def admin() -> psycopg.Connection[Any]:
    return psycopg.connect(make_url(PG_URL).set(drivername="postgresql").render_as_string(hide_password=False))


@pytest.fixture
def pool(pg_available: BaseException | None) -> Iterator[SchemaPool]:
    """A pool of its own (a short lock timeout), its schemas dropped after the test."""
    if pg_available is not None:
        service_missing("PostgreSQL", pg_available)
    made = make_pg_pool(lock_timeout="300ms")
    yield made
    made.close()


def state(schema: str) -> dict[str, Any]:
    """Everything a test could see of ``schema``: its catalog's fingerprint, each table's rows, each sequence."""
    with admin() as conn:
        conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
        found: dict[str, Any] = {"catalog": conn.execute(FINGERPRINT).fetchone()[0]}  # type: ignore[index]
        for (table,) in conn.execute(TABLES).fetchall():
            copied = bytearray()
            with conn.cursor().copy(sql.SQL("COPY {} TO STDOUT").format(sql.Identifier(table))) as copy:
                for chunk in copy:
                    copied += chunk
            found[f"table {table}"] = bytes(copied)
        for (seq,) in conn.execute(SEQUENCES).fetchall():
            query = sql.SQL("SELECT last_value, is_called FROM {}").format(sql.Identifier(seq))
            found[f"sequence {seq}"] = conn.execute(query).fetchone()
        return found


def oid(schema: str) -> int:
    with admin() as conn:
        return int(conn.execute("SELECT %s::regnamespace::oid", [schema]).fetchone()[0])  # type: ignore[index]


def dirty(schema: str) -> None:
    """Rows in the ledger's tables, the migrations' own row changed, every sequence moved on."""
    led = open_ledger(pg_schema_url(schema), clock=lambda: T0)
    try:
        kept = led.save("kept")
        led.save("gone, then", kind="decision")
        led.delete(kept.id)
        led.set_budget(SCOPE, 7)
    finally:
        led.close()
    with admin() as conn:
        conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
        conn.execute("UPDATE alembic_version SET version_num = 'elsewhere'")
        for (seq,) in conn.execute(SEQUENCES).fetchall():
            conn.execute("SELECT nextval(%s)", [seq])


def test_a_schema_given_back_dirty_is_handed_out_as_alembic_migrates_one(
    pool: SchemaPool, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a schema Alembic migrated (not the recorded statements the pool replays)
    open_ledger(pg_schema, migrate=True).close()
    alembic = state(pg_schema.rpartition("%3D")[2])
    # And a schema of the pool that a test wrote to, changed the migrations' row of, and moved every sequence of
    first = pool.lease()
    made = oid(first)
    assert state(first) == alembic
    dirty(first)
    written = state(first)
    assert written != alembic and all(written[k] != alembic[k] for k in alembic if k.startswith("sequence"))
    assert written["table memory_records"] and written["table ledger_events"] and written["table scope_settings"]
    # When it is given back and handed out again
    pool.give_back(first)
    again = pool.lease()
    # Then it is the same schema (reset, not made anew) under a new name, as Alembic leaves one
    assert again != first and oid(again) == made and pool.replaced == 0
    assert state(again) == alembic
    # And the migrations' functions and triggers work in it: a save counts, a row cannot be deleted
    led = open_ledger(pg_schema_url(again), clock=lambda: T0)
    try:
        led.save("after the reset")
        assert led.budget(SCOPE).max_records == 200
        with led.engine.connect() as conn, pytest.raises(Exception, match="memory"):
            conn.exec_driver_sql("DELETE FROM memory_records")
    finally:
        led.close()
    with admin() as conn:
        conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(again)))
        assert conn.execute("SELECT seq FROM memory_records").fetchall() == [(1,)]  # the sequence restarted


CHANGES = {
    "a column": "ALTER TABLE scope_settings ADD COLUMN stray INTEGER",
    "a dropped trigger": "DROP TRIGGER memory_records_no_delete ON memory_records",
    "a function's body": "CREATE OR REPLACE FUNCTION memory_records_no_delete() RETURNS trigger "
    "LANGUAGE plpgsql AS $$ BEGIN RETURN OLD; END $$",
    "a dropped index": "DROP INDEX ix_memory_records_due",
    "a new table": "CREATE TABLE stray (n integer)",
    "a default": "ALTER TABLE scope_settings ALTER COLUMN max_records SET DEFAULT 9",
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_schema_a_test_changed_is_replaced_by_a_new_one(pool: SchemaPool, change: str) -> None:
    first = pool.lease()
    migrated = state(first)
    with admin() as conn:
        conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(first)))
        conn.execute(CHANGES[change])
    assert state(first)["catalog"] != migrated["catalog"]  # the fingerprint sees it
    pool.give_back(first)
    again = pool.lease()
    assert pool.replaced == 1 and state(again) == migrated
    with admin() as conn:
        assert conn.execute("SELECT to_regnamespace(%s)", [first]).fetchone() == (None,)  # dropped


def test_a_connection_a_test_left_in_a_transaction_is_ended_not_waited_for(pool: SchemaPool) -> None:
    # Given a connection of the test (named after its schema) holding a lock the reset needs, and one idle
    first = pool.lease()
    made = oid(first)
    url = pg_schema_url(first).replace("+psycopg", "")
    holding = psycopg.connect(url)
    holding.execute("INSERT INTO ops_sweep SELECT * FROM ops_sweep")  # an open transaction on the table
    holding.execute("LOCK TABLE memory_records IN ACCESS SHARE MODE")
    idle = psycopg.connect(url, autocommit=True)
    idle.execute("SELECT 1")
    pool.give_back(first)
    # When the schema is handed out again
    started = time.monotonic()
    again = pool.lease()
    # Then without waiting for the lock, both connections were ended, and the schema is the same one, reset
    assert time.monotonic() - started < 5 and pool.replaced == 0 and oid(again) == made
    for left in (holding, idle):
        with left, pytest.raises(psycopg.OperationalError):
            left.execute("SELECT 1")
    # And a connection made afterwards with the old URL finds no tables: the schema's name changed
    with psycopg.connect(url) as late:
        assert late.execute("SELECT to_regclass('memory_records')").fetchone() == (None,)


def test_a_lock_held_by_a_connection_of_another_name_is_ended_after_the_lock_timeout(pool: SchemaPool) -> None:
    first = pool.lease()
    made = oid(first)
    stranger = admin()  # not named after the schema: the reset's first pass misses it
    stranger.execute(sql.SQL("LOCK TABLE {}.alembic_version IN ACCESS SHARE MODE").format(sql.Identifier(first)))
    pool.give_back(first)
    again = pool.lease()
    assert pool.replaced == 0 and oid(again) == made
    with stranger, pytest.raises(psycopg.OperationalError):
        stranger.execute("SELECT 1")
