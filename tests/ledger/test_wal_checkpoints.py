"""The WAL's checkpoints on a SQLite file: a thread of the store's copies the WAL back, not the commits
(``ledger/store/sqlite_wal.py``). Real files; what is looked at is the WAL: its file's size (frames of a
4,096-byte page), the frames its index counts, and its header's salt, which SQLite moves on every time the
WAL starts again from its beginning, after a checkpoint copied all of it."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

from sqlalchemy import event

from ledger import Ledger, open_ledger
from ledger.store import SQLiteStore, sqlite_wal, store_for
from tests.hygiene import kill_group, popen

FRAME = 4_096 + 24


def store_of(led: Ledger) -> SQLiteStore:
    store = store_for(led.engine)
    assert isinstance(store, SQLiteStore)
    return store


def save_until_the_checkpointer_starts(led: Ledger, label: str) -> None:
    """Saves until one finds the WAL at its limit and starts the checkpointer (a save writes about 15 pages)."""
    checkpoints = store_of(led)._checkpoints
    for i in range(sqlite_wal.WAL_PAGES):
        led.save(f"{label} {i}: the staging cluster runs in eu-west-1 and deploys go out before 3pm")
        if checkpoints.running():
            return
    raise AssertionError(f"no checkpointer after {sqlite_wal.WAL_PAGES} saves ({checkpoints.frames()} frames)")


def salt(wal: Path) -> bytes:
    """The WAL header's first salt: a new value each time the WAL starts again."""
    with wal.open("rb") as fh:
        fh.seek(16)
        return fh.read(4)


def test_the_checkpointer_keeps_the_wal_short_and_no_commit_checkpoints(tmp_path: Path) -> None:
    # Given a ledger on a file; its writers checkpoint a commit only past the safety bound
    led = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    led.set_budget(led.scope_key, 10_000)
    wal = tmp_path / "ledger.db-wal"
    with led.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == sqlite_wal.SAFETY_PAGES

    # When it saves about five times the WAL's limit in pages (a save writes about 15)
    salts: set[bytes] = set()
    largest = 0
    for i in range(400):
        led.save(f"pin {i}: the staging cluster runs in eu-west-1 and deploys go out before 3pm")
        largest = max(largest, wal.stat().st_size)
        salts.add(salt(wal))

    # Then the WAL started again several times, each after a checkpoint that copied all of it, and no commit
    # ran one: a commit checkpoints only once the WAL holds the safety bound's pages, and it never did
    assert len(salts) >= 3, salts
    assert largest < sqlite_wal.SAFETY_PAGES * FRAME, largest // FRAME
    assert store_of(led)._checkpoints.running()
    # And once the checkpointer has caught up, the next commit finds the WAL within twice the limit
    checkpoints = store_of(led)._checkpoints
    deadline = time.monotonic() + 30
    while checkpoints.frames() > 2 * sqlite_wal.WAL_PAGES and time.monotonic() < deadline:
        time.sleep(0.05)
        led.save("one more, after the loop")
    assert 0 < checkpoints.frames() <= 2 * sqlite_wal.WAL_PAGES, checkpoints.frames()
    led.close()


def test_a_writer_with_no_checkpointer_still_checkpoints_past_the_safety_bound(tmp_path: Path) -> None:
    # Given a connection of the ledger's engine writing on its own: no store's write, so no checkpointer thread
    led = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    wal = tmp_path / "ledger.db-wal"
    proxy = led.engine.raw_connection()
    raw = proxy.driver_connection
    assert raw is not None
    raw.execute("CREATE TABLE filler (blob BLOB)")
    first = salt(wal)
    largest = 0

    # When it commits about one and a half times the safety bound in pages, ten a commit
    for _ in range(sqlite_wal.SAFETY_PAGES * 3 // 20):
        raw.execute("BEGIN IMMEDIATE")
        raw.executemany("INSERT INTO filler VALUES (randomblob(3000))", [()] * 10)
        raw.execute("COMMIT")
        largest = max(largest, wal.stat().st_size)

    # Then the commit that reached the bound checkpointed it, and the WAL started again
    assert not store_of(led)._checkpoints.running()
    assert salt(wal) != first
    assert largest < (sqlite_wal.SAFETY_PAGES + 50) * FRAME, largest // FRAME
    proxy.close()
    led.close()


CHILD = """
import sys
from ledger import open_ledger
led = open_ledger(sys.argv[1])
for i in range(50):
    led.save(f"pin {i} saved by a short-lived process")
led.close()
"""


def test_a_process_that_saves_and_exits_leaves_the_wal_empty(tmp_path: Path) -> None:
    # Given another connection open on the file (a server, say): the last one to close is not the child's, so
    # SQLite's own checkpoint at close does not run
    path = tmp_path / "ledger.db"
    open_ledger(f"sqlite:///{path}").close()
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("SELECT count(*) FROM memory_records").fetchall()
        # When a process saves 50 pins (about 700 pages: less than the limit, so no thread started) and exits
        child = popen([sys.executable, "-c", CHILD, f"sqlite:///{path}"])
        try:
            assert child.wait(120) == 0
        finally:
            kill_group(child)
        # Then its close checkpointed the WAL itself and truncated it, and every pin is in the database
        assert (tmp_path / "ledger.db-wal").stat().st_size == 0
        assert other.execute("SELECT count(*) FROM memory_records").fetchone()[0] == 50
    finally:
        other.close()


def test_a_ledger_written_once_holds_no_checkpointer_thread_nor_its_connection(tmp_path: Path) -> None:
    # Given a ledger on a file that another connection keeps open (so SQLite's own checkpoint at close never runs)
    path = tmp_path / "ledger.db"
    led = open_ledger(f"sqlite:///{path}")
    other = sqlite3.connect(path, isolation_level=None)
    detached: list[object] = []  # the connections taken out of the pool: the checkpointer's would be one
    event.listen(led.engine, "detach", lambda dbapi_connection, _record: detached.append(dbapi_connection))
    try:
        other.execute("SELECT count(*) FROM memory_records").fetchall()
        # When it saves once, and stays open
        led.save("the only pin")
        # Then the WAL is far below its limit, no checkpointer thread runs for it, and none took a connection
        checkpoints = store_of(led)._checkpoints
        assert 0 < checkpoints.frames() < sqlite_wal.WAL_PAGES
        assert checkpoints._thread is None and not checkpoints.running()
        assert detached == []
        # And its close checkpoints the WAL all the same (on a connection of its own, closed after)
        led.close()
        assert len(detached) == 1
        assert (tmp_path / "ledger.db-wal").stat().st_size == 0
        assert other.execute("SELECT count(*) FROM memory_records").fetchone()[0] == 1
    finally:
        other.close()


def test_a_ledger_that_only_reads_makes_no_checkpoint_at_its_close(tmp_path: Path) -> None:
    # Given a ledger on a file with a pin in its WAL, and another connection that keeps the file open
    path = tmp_path / "ledger.db"
    led = open_ledger(f"sqlite:///{path}")
    led.save("the only pin")
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("SELECT count(*) FROM memory_records").fetchall()
        led.close()  # its last checkpoint: the WAL is empty
        # When the ledger only reads after that, and closes again
        wal_size = (tmp_path / "ledger.db-wal").stat().st_size
        detached: list[object] = []
        event.listen(led.engine, "detach", lambda dbapi_connection, _record: detached.append(dbapi_connection))
        assert [r.body for r in led.list()] == ["the only pin"]
        led.close()
        # Then that close opened no connection to checkpoint
        assert detached == [] and (tmp_path / "ledger.db-wal").stat().st_size == wal_size
    finally:
        other.close()


def test_closing_a_ledger_whose_file_is_gone_makes_no_new_file(tmp_path: Path) -> None:
    # Given a ledger that saved, whose files were then removed (a test's or an operator's clean-up)
    path = tmp_path / "ledger.db"
    led = open_ledger(f"sqlite:///{path}")
    led.save("the only pin")
    for name in ("ledger.db", "ledger.db-wal", "ledger.db-shm"):
        (tmp_path / name).unlink(missing_ok=True)
    # When it closes, Then its checkpoint at close does not connect to the file again, which would make a new one
    led.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_the_checkpointer_stops_when_the_ledger_closes_or_its_engine_is_disposed(tmp_path: Path) -> None:
    # Given a ledger whose saves took the WAL to its limit (the commit that found it there started the thread)
    led = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    led.set_budget(led.scope_key, 10_000)
    checkpoints = store_of(led)._checkpoints
    save_until_the_checkpointer_starts(led, "pin")
    thread = checkpoints._thread
    assert thread is not None and thread.is_alive() and thread.daemon

    # When the ledger closes, Then the thread has ended
    led.close()
    assert not thread.is_alive() and not checkpoints.running()

    # And a later save starts none while the WAL is below its limit; one that takes it there starts another,
    # which disposing the engine alone stops too
    led.save("a pin after the close")
    assert checkpoints._thread is None
    save_until_the_checkpointer_starts(led, "pin after the close")
    again = checkpoints._thread
    assert again is not None and again is not thread and again.is_alive()
    led.engine.dispose()
    assert not again.is_alive()
    assert thread not in threading.enumerate() and again not in threading.enumerate()


def test_saves_go_on_while_a_reader_holds_its_snapshot_and_the_wal_comes_back_after(tmp_path: Path) -> None:
    # Given a reader holding a snapshot from before the saves (the checkpoint cannot copy past it)
    led = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    led.set_budget(led.scope_key, 10_000)
    led.save("before the reader")
    wal = tmp_path / "ledger.db-wal"
    reader = sqlite3.connect(tmp_path / "ledger.db", isolation_level=None)
    reader.execute("BEGIN")
    assert reader.execute("SELECT count(*) FROM memory_records").fetchone()[0] == 1
    start = salt(wal)

    # When saves write more than the WAL's limit meanwhile, Then none waits for the reader, and the WAL grows
    began = time.monotonic()
    for i in range(120):
        led.save(f"pin {i} while a reader reads")
    assert time.monotonic() - began < 30
    assert store_of(led)._checkpoints.frames() > sqlite_wal.WAL_PAGES and salt(wal) == start

    # And once the reader ends, the checkpointer copies the WAL and it starts again
    reader.execute("COMMIT")
    reader.close()
    deadline = time.monotonic() + 30
    while salt(wal) == start and time.monotonic() < deadline:
        time.sleep(0.05)
        led.save("one more, after the reader")
    assert salt(wal) != start
    led.close()


def _save_in_child(led: Ledger) -> None:
    led.save("saved by a child forked while the checkpointer ran")


def test_a_child_forked_while_the_checkpointer_runs_writes_on_its_own(tmp_path: Path) -> None:
    """A fork waits for the pass in progress: a child copying SQLite's locks mid-checkpoint would wait for ever."""
    import multiprocessing

    led = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    led.set_budget(led.scope_key, 10_000)
    for round_ in range(5):
        # Given the WAL past its limit, so the thread is woken and copying
        for i in range(80):
            led.save(f"pin {round_}.{i} before a fork")
        # When a child is forked at once and saves, Then it saves and exits, and so does the parent after it
        child = multiprocessing.get_context("fork").Process(target=_save_in_child, args=(led,))
        child.start()
        child.join(60)
        if child.exitcode is None:
            child.kill()
            child.join(10)
        assert child.exitcode == 0
    led.save("saved by the parent after the forks")
    assert len(led.list()) == 5 * 80 + 5 + 1
    led.close()


def _run_script(script: str, tmp_path: Path) -> tuple[int, bytes]:
    """``script`` run by a Python process of its own on a ledger in ``tmp_path``: its exit code and stderr."""
    child = popen([sys.executable, "-c", script, f"sqlite:///{tmp_path / 'ledger.db'}"], stderr=subprocess.PIPE)
    try:
        _out, err = child.communicate(timeout=120)
    finally:
        kill_group(child)
    return child.returncode, err


# Saves up to a few pages short of the WAL's limit (none starts the checkpointer), then saves by ``save_to_the_limit``
# until one finds the WAL at it.
NEAR_THE_LIMIT = """
import sys
from ledger import open_ledger
from ledger.store import sqlite_wal, store_for
led = open_ledger(sys.argv[1])
led.set_budget(led.scope_key, 10_000)
checkpoints = store_for(led.engine)._checkpoints
saved = 0

def save():
    global saved
    led.save(f"pin {saved}: the staging cluster runs in eu-west-1 and deploys go out before 3pm")
    saved += 1

while checkpoints.frames() < sqlite_wal.WAL_PAGES - 60:
    save()
assert checkpoints._thread is None

def save_to_the_limit():
    while checkpoints.frames() < sqlite_wal.WAL_PAGES:
        save()
"""

NO_THREAD = (
    NEAR_THE_LIMIT
    + """
import resource, threading
led.list()  # the modules a read needs are loaded
with open("/proc/self/status") as fh:
    size = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmSize"))
threading.stack_size(64 * 1024 * 1024)  # a thread's stack: more address space than the limit leaves
resource.setrlimit(resource.RLIMIT_AS, (size + 32 * 1024 * 1024, resource.RLIM_INFINITY))
save_to_the_limit()
resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
threading.stack_size(0)
assert not checkpoints.running()
assert len(led.list()) == saved
led.close()
"""
)


def test_a_commit_that_cannot_start_the_checkpointer_still_succeeds(tmp_path: Path) -> None:
    # Given a process with no room left for a thread (its address space is limited)
    # When it saves, the save whose commit takes the WAL to its limit trying to start the checkpointer
    returncode, err = _run_script(NO_THREAD, tmp_path)
    # Then the committed save is reported as saved, not as an error, and the failure is logged
    assert returncode == 0, err.decode()
    assert b"could not start" in err


NO_CONNECTION = (
    NEAR_THE_LIMIT
    + """
import os, resource
held = [led.engine.connect() for _ in range(led.engine.pool.checkedin())]  # the checkpointer must open its own
assert led.engine.pool.checkedin() == 0
lowest = os.open("/dev/null", os.O_RDONLY)
os.close(lowest)
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (lowest, hard))  # no more files: the checkpointer cannot connect
save_to_the_limit()
checkpoints._thread.join(10)
assert not checkpoints.running()
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
for i in range(200):
    save()
assert checkpoints.running()
for conn in held:
    conn.close()
led.close()
"""
)


def test_a_checkpointer_that_could_not_connect_starts_again(tmp_path: Path) -> None:
    # Given a process whose checkpointer found no file descriptor to connect with, for a moment
    # When it saves about three times the WAL's limit in pages after that
    returncode, err = _run_script(NO_CONNECTION, tmp_path)
    # Then a commit past the limit started the checkpointer again (the child checks it runs)
    assert returncode == 0, err.decode()
    assert b"could not connect" in err
