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
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from ledger import open_ledger
from ledger.compact import compact

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


@pytest.mark.postgres
def test_compact_removes_a_forgotten_body_from_postgres_files(pg_schema: str) -> None:
    led = open_ledger(pg_schema, migrate=True)
    try:
        marker = f"zebra{uuid.uuid4().hex}"
        record = led.save(f"my locker combination note {marker}")
        led.delete(record.id)
        assert led.get(record.id).body is None
        _checkpoint(led.engine)
        try:
            before = _schema_files(led.engine)
        except PermissionError:
            pytest.skip("the PostgreSQL data directory is not readable from this process")
        if marker.encode() not in before:
            pytest.skip("the dead tuple was already pruned: nothing to show")
        report = compact(led.engine)
        assert "memory_records" in report.tables and report.checkpoint
        assert marker.encode() not in _schema_files(led.engine)
        assert led.get(record.id).status.value == "deleted"  # the tombstone survives
    finally:
        led.close()


def test_compact_on_sqlite_vacuums_and_truncates_the_wal(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    led = open_ledger(url)
    try:
        for n in range(300):
            led.delete(led.save(f"a pin worth forgetting number {n} " + "x" * 500).id)
        size_before = os.path.getsize(tmp_path / "ledger.db")
        report = compact(led.engine)
        assert report.dialect == "sqlite" and "memory_records" in report.tables
        assert report.bytes_after < report.bytes_before <= size_before + os.path.getsize(tmp_path / "ledger.db-wal")
        assert os.path.getsize(tmp_path / "ledger.db-wal") == 0
        assert len(led.records("account:local")) == 300  # tombstones stay
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
