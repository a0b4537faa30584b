"""The full-text index: a damaged one is reported (the check, ``memledger db check``, ``db compact``) and rebuilt
from the records (``rebuild_search_index``, ``memledger db rebuild-index``), while a ledger stays open beside it.

The SQLite damage is the one forgets used to leave: a structure record of 2,002 levels, which FTS5
cannot read ("database disk image is malformed", then "vtable constructor failed: memory_fts").
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from ledger import Ledger, LedgerError, check_search_index, make_engine, open_ledger, rebuild_search_index

MEMLEDGER = str(Path(sys.executable).parent / "memledger")
# Cookie 0, 2,002 levels (a varint), 1 segment, write counter 1, then each level's merge and segment counts.
LEVELS_2002 = bytes(4) + bytes([0x80 | (2002 >> 7), 2002 & 0x7F]) + b"\x01\x01" + bytes(2 * 2002)


def break_structure(path: Path) -> None:
    """What about a thousand forgets left in the index's structure record before the fix."""
    with closing(sqlite3.connect(path)) as raw:
        raw.execute("UPDATE memory_fts_data SET block = ? WHERE id = 10", (LEVELS_2002,))
        raw.commit()


def unindex(path: Path, record_id: str) -> None:
    """Drop one active record's entry from the index (as a trigger that missed it would leave it)."""
    with closing(sqlite3.connect(path)) as raw:
        raw.execute(
            "INSERT INTO memory_fts(memory_fts, rowid, body) "
            "SELECT 'delete', seq, body FROM memory_records WHERE id = ?",
            (record_id,),
        )
        raw.commit()


@pytest.fixture
def sqlite_ledger(tmp_path: Path) -> Ledger:
    led = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    for n in range(20):
        led.save(f"the deploy region of service {n} is eu-west-1")
    return led


def test_an_unreadable_index_is_reported_and_rebuilt_while_a_ledger_is_open(
    sqlite_ledger: Ledger, tmp_path: Path
) -> None:
    led = sqlite_ledger
    engine = make_engine(f"sqlite:///{tmp_path / 'ledger.db'}")
    try:
        # Given the index's structure record past what FTS5 can read
        break_structure(tmp_path / "ledger.db")
        with pytest.raises(LedgerError, match=r"(malformed|vtable constructor failed).*`memledger db check`"):
            led.save("a pin while the index is broken")

        # Then both checks say so, and how to repair it
        for thorough in (False, True):
            problem = check_search_index(engine, thorough=thorough)
            assert problem is not None and "memledger db rebuild-index" in problem
        assert led.search_index_problem() == check_search_index(engine, thorough=False)

        # When it is rebuilt from the records, then it is sound, and the ledger opened before works again
        rebuild_search_index(engine)
        assert check_search_index(engine) is None and led.search_index_problem() is None
        assert len(led.search(led.scope_key, "deploy region", limit=50)) == 20
        saved = led.save("a pin after the repair about the garden")
        assert [r.id for r in led.search(led.scope_key, "garden")] == [saved.id]
        led.delete(saved.id)
        assert led.search(led.scope_key, "garden") == [] and check_search_index(engine) is None
    finally:
        engine.dispose()
        led.close()


def test_an_active_record_missing_from_the_index_is_found_by_the_thorough_check(
    sqlite_ledger: Ledger, tmp_path: Path
) -> None:
    led = sqlite_ledger
    engine = make_engine(f"sqlite:///{tmp_path / 'ledger.db'}")
    try:
        lost = led.save("the garden shed code is kept elsewhere")
        unindex(tmp_path / "ledger.db", lost.id)
        assert led.search(led.scope_key, "garden") == []
        assert check_search_index(engine, thorough=False) is None  # one lookup cannot see it
        problem = check_search_index(engine)
        assert problem is not None and "does not list exactly the active records" in problem
        rebuild_search_index(engine)
        assert check_search_index(engine) is None
        assert [r.id for r in led.search(led.scope_key, "garden")] == [lost.id]
    finally:
        engine.dispose()
        led.close()


def test_a_rebuild_indexes_no_superseded_or_forgotten_body(sqlite_ledger: Ledger, tmp_path: Path) -> None:
    led = sqlite_ledger
    old = led.save("my locker code is zebra1234")
    new = led.save("my locker code is yak5678", supersedes=old.id)
    engine = make_engine(f"sqlite:///{tmp_path / 'ledger.db'}")
    try:
        rebuild_search_index(engine)
        assert check_search_index(engine) is None
        assert [r.id for r in led.search(led.scope_key, "yak5678")] == [new.id]
        led.delete(new.id)  # erases the chain, old included
        assert led.search(led.scope_key, "zebra1234 yak5678") == []
        with closing(sqlite3.connect(tmp_path / "ledger.db")) as raw:
            indexed = raw.execute("SELECT count(*) FROM memory_fts WHERE memory_fts MATCH 'zebra1234'").fetchone()
        assert indexed == (0,)
    finally:
        engine.dispose()
        led.close()


def memledger(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    env = {"MEMLEDGER_DATABASE_URL": url, "PATH": "/usr/bin:/bin"}
    return subprocess.run([MEMLEDGER, *args], env=env, capture_output=True, text=True, timeout=120)


def test_db_check_compact_and_rebuild_index_commands(sqlite_ledger: Ledger, tmp_path: Path) -> None:
    # Five commands: about 5 s (20 s on a loaded machine).
    sqlite_ledger.close()
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    break_structure(tmp_path / "ledger.db")
    check = memledger("db", "check", url=url)
    assert check.returncode == 1 and "memledger db rebuild-index" in check.stderr, check.stderr
    upgraded = memledger("db", "upgrade", url=url)  # the schema is fine: said, not failed
    assert upgraded.returncode == 0 and "Warning: the full-text index is damaged" in upgraded.stdout
    compacted = memledger("db", "compact", "--json", url=url)
    assert compacted.returncode == 1 and '"searchIndex": "the full-text index' in compacted.stdout
    rebuilt = memledger("db", "rebuild-index", url=url)
    assert rebuilt.returncode == 0 and "rebuilt from the records" in rebuilt.stdout, rebuilt.stderr
    again = memledger("db", "check", "--json", url=url)
    assert again.returncode == 0 and '"searchIndex": "ok"' in again.stdout


@pytest.mark.postgres
def test_a_missing_or_invalid_index_is_reported_and_rebuilt_postgres(pg_migrated: str) -> None:
    led = open_ledger(pg_migrated)
    admin = create_engine(pg_migrated, isolation_level="AUTOCOMMIT")
    try:
        saved = led.save("the deploy region is eu-west-1")
        assert check_search_index(led.engine) is None
        with admin.connect() as conn:
            conn.execute(text("DROP INDEX ix_memory_records_fts"))
        assert "is missing" in (check_search_index(led.engine) or "")
        rebuild_search_index(led.engine)
        assert check_search_index(led.engine) is None
        with admin.connect() as conn:  # what a build that did not finish leaves
            conn.execute(
                text("UPDATE pg_index SET indisvalid = false WHERE indexrelid = to_regclass('ix_memory_records_fts')")
            )
        assert "is invalid" in (led.search_index_problem() or "")
        rebuild_search_index(led.engine)
        assert led.search_index_problem() is None
        assert [r.id for r in led.search(led.scope_key, "deploy region")] == [saved.id]
    finally:
        admin.dispose()
        led.close()
