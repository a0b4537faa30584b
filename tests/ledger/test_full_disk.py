"""A forget that fails on a full disk is rolled back: once space is freed, forgets work again without a restart.

The failed transaction used to stay on the writing thread's kept connection (SQLAlchemy keeps a
transaction whose COMMIT failed until it is rolled back), and every later forget on that thread
failed ("Can't reconnect until invalid transaction is rolled back") while saves, which take
another path, went on working.

SQLite: a real full file system, a tmpfs of 8 MB mounted in a user and mount namespace of the
child process (``unshare``), filled with a file, then the file removed. PostgreSQL: the server's
disk cannot be filled from here, so a deferred constraint trigger refuses the forget's ``COMMIT``
with ``disk_full`` (SQLSTATE 53100) while a flag says the disk is full.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from ledger import LedgerError, open_ledger
from tests.conftest import tool_missing

ROOT = Path(__file__).resolve().parents[2]
FULL = "database or disk is full"


def test_a_forget_refused_by_a_full_disk_leaves_later_forgets_working_sqlite(tmp_path: Path) -> None:
    # A few seconds: one Python process in namespaces of its own, filling 8 MB.
    unshare = shutil.which("unshare")
    if unshare is None:
        tool_missing("unshare (util-linux) is needed to mount a small file system")
    child = f"{sys.executable} -m tests.ledger.full_disk_child {tmp_path}"
    mount = f"mount -t tmpfs -o size=8m tmpfs {tmp_path} && exec {child}"
    done = subprocess.run(
        [str(unshare), "--user", "--map-root-user", "--mount", "sh", "-c", mount],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0 and "mount" in done.stderr and "ledger" not in done.stderr:
        tool_missing(f"a tmpfs cannot be mounted in a user namespace here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    steps = json.loads(done.stdout)
    # Given a full disk, the forgets are refused, with the database's reason
    assert [FULL in outcome for outcome in steps["full"]] == [True, True], steps["full"]
    # When space is freed, then every forget works again (the two refused ones too), and saves do
    assert steps["freed"] == ["ok"] * 4
    assert steps["save"] == ["ok"]
    assert steps["bodies"] == ["None"] * 4


@pytest.mark.postgres
def test_a_forget_refused_at_commit_for_a_full_disk_leaves_later_forgets_working_postgres(pg_migrated: str) -> None:
    admin = create_engine(pg_migrated, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text("CREATE TABLE test_disk (is_full boolean NOT NULL)"))
        conn.execute(text("INSERT INTO test_disk VALUES (false)"))
        conn.execute(
            text(
                "CREATE FUNCTION test_disk_full() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "IF (SELECT is_full FROM test_disk) THEN "
                "RAISE EXCEPTION 'could not extend file: No space left on device' "
                "USING ERRCODE = 'disk_full'; END IF; RETURN NULL; END $$"
            )
        )
        conn.execute(
            text(
                "CREATE CONSTRAINT TRIGGER test_disk_full AFTER UPDATE ON memory_records "
                "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION test_disk_full()"
            )
        )
    led = open_ledger(pg_migrated)
    try:
        ids = [led.save(f"pin number {n} about the garden shed").id for n in range(6)]
        with admin.connect() as conn:
            conn.execute(text("UPDATE test_disk SET is_full = true"))
        for rid in ids[:2]:
            with pytest.raises(LedgerError, match="No space left on device"):
                led.delete(rid)
        with admin.connect() as conn:
            conn.execute(text("UPDATE test_disk SET is_full = false"))
        for rid in ids[:4]:
            assert led.delete(rid).status.value == "deleted"
        assert [led.get(rid).body for rid in ids[:4]] == [None] * 4
        assert led.save("a pin after the disk was freed").status.value == "active"
    finally:
        led.close()
        with admin.connect() as conn:
            conn.execute(text("DROP TRIGGER IF EXISTS test_disk_full ON memory_records"))
            conn.execute(text("DROP FUNCTION IF EXISTS test_disk_full()"))
            conn.execute(text("DROP TABLE IF EXISTS test_disk"))
        admin.dispose()
