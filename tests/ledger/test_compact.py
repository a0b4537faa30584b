"""``memledger db compact``: erasure reaches the database files.

On PostgreSQL a forget leaves the old row version (dead tuple) with the body in the table's
file until ``VACUUM FULL``; the test reads the relation files themselves (when this process
can read the server's data directory, as on CI where both run on one machine).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import Engine, make_url, text

from ledger import Ledger, open_ledger
from ledger.compaction import compact
from tests.conftest import PG_CONNINFO, PG_URL, service_missing
from tests.hygiene import database_name

MEMLEDGER = str(Path(sys.executable).parent / "memledger")


def _schema_files(engine: Engine) -> bytes:
    """Every file of every relation (tables, TOAST, indexes) in the ledger's schema."""
    with engine.connect() as conn:
        data_dir = conn.execute(text("SHOW data_directory")).scalar_one()
        paths = conn.execute(
            text(
                "SELECT pg_relation_filepath(c.oid) FROM pg_class c "
                "WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 't', 'i', 'm')"
            )
        ).scalars()
        found = b""
        for rel in paths:
            if rel is None:
                continue
            base = Path(data_dir) / rel
            for part in [base, *sorted(base.parent.glob(base.name + ".*"))]:
                if part.exists():
                    found += part.read_bytes()
    return found


def _checkpoint(engine: Engine) -> None:
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("CHECKPOINT")


@pytest.fixture
def pg_database(pg_available: BaseException | None) -> Iterator[str]:
    """A database of its own for one test: what VACUUM FULL may remove depends on every open transaction of its
    database, and the other tests' (in the shared database, at the same time) would keep dead row versions."""
    if pg_available is not None:
        service_missing("PostgreSQL", pg_available)
    name = database_name()
    with psycopg.connect(PG_CONNINFO, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name} TEMPLATE template0")
    try:
        yield make_url(PG_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(PG_CONNINFO, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _forget_and_checkpoint(led: Ledger) -> tuple[str, bytes]:
    """Save a pin with a distinctive word and forget it; the word and the schema's files after a checkpoint."""
    marker = f"zebra{uuid.uuid4().hex}"
    record = led.save(f"my locker combination note {marker}")
    led.delete(record.id)
    assert led.get(record.id).body is None
    _checkpoint(led.engine)
    try:
        return marker, _schema_files(led.engine)
    except PermissionError:
        pytest.skip("the PostgreSQL data directory is not readable from this process")


@pytest.mark.postgres
def test_compact_removes_a_forgotten_body_from_postgres_files(pg_database: str) -> None:
    led = open_ledger(pg_database, migrate=True)
    try:
        marker, before = _forget_and_checkpoint(led)
        if marker.encode() not in before:
            pytest.skip("the dead tuple was already pruned: nothing to show")
        report = compact(led.engine)
        assert "memory_records" in report.tables and report.checkpoint
        assert report.notes == []
        assert marker.encode() not in _schema_files(led.engine)
        assert led.get(record_id(led)).status.value == "deleted"  # the tombstone survives
    finally:
        led.close()


@pytest.mark.postgres
def test_compact_says_when_an_open_transaction_keeps_a_forgotten_body(pg_database: str) -> None:
    led = open_ledger(pg_database, migrate=True)
    try:
        # Given another session whose snapshot began before the forget (it reads no ledger table: a lock on one
        # would make VACUUM FULL wait for the session's end)
        with psycopg.connect(make_url(pg_database).set(drivername="postgresql").render_as_string(False)) as reader:
            reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            reader.execute("SELECT 1").fetchone()
            marker, before = _forget_and_checkpoint(led)
            assert marker.encode() in before

            # When the ledger is compacted meanwhile, then the body it may still see stays, and the report says why
            held = compact(led.engine)
            assert held.checkpoint and len(held.notes) == 1
            assert "1 other session(s) with a transaction open" in held.notes[0]
            assert marker not in held.notes[0]
            assert marker.encode() in _schema_files(led.engine)
            reader.rollback()

        # And once that session has ended, compacting again removes it
        again = compact(led.engine)
        assert again.notes == []
        assert marker.encode() not in _schema_files(led.engine)
    finally:
        led.close()


def record_id(led: Ledger) -> str:
    """The one record of the ledger's scope."""
    (record,) = led.records(led.scope_key)
    return record.id


def test_compact_on_sqlite_vacuums_and_truncates_the_wal(tmp_path: Path) -> None:
    """A forget already runs VACUUM (docs/ledger.md, "Erasure"); compacting returns what other writes freed:
    here the pages the full-text index's merges let go as edits replace its entries."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    led = open_ledger(url)
    try:
        led.set_budget("account:local", 1000)
        for n in range(300):
            pin = led.save(f"a pin worth editing number {n} " + " ".join(f"w{n}x{j}" for j in range(60)))
            led.save(f"the same pin edited, number {n} " + " ".join(f"v{n}y{j}" for j in range(60)), supersedes=pin.id)
        with led.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA freelist_count").scalar(), "no page was freed (the test shows nothing)"
        # The checkpointer thread copies WAL frames into the file meanwhile, so only the file's own size is a
        # floor for what compacting finds; the WAL's may grow or be cut back.
        file_before = os.path.getsize(tmp_path / "ledger.db")
        report = compact(led.engine)
        assert report.dialect == "sqlite" and "memory_records" in report.tables
        assert report.bytes_after < report.bytes_before and file_before <= report.bytes_before
        assert os.path.getsize(tmp_path / "ledger.db-wal") == 0
        assert len(led.records("account:local")) == 600  # superseded versions stay
    finally:
        led.close()


def test_db_compact_command(tmp_path: Path) -> None:
    env = {"MEMLEDGER_DATABASE_URL": f"sqlite:///{tmp_path / 'ledger.db'}", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([MEMLEDGER, "db", "compact"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "tables rewritten" in done.stdout
    bad = subprocess.run(
        [MEMLEDGER, "db", "compact", "--database-url", "mysql://x"], env=env, capture_output=True, text=True
    )
    assert bad.returncode == 1 and "unsupported database URL" in bad.stderr and "Traceback" not in bad.stderr
