"""A forgotten body is gone from the SQLite files: the database, its WAL and shared memory,
free pages and FTS segments (docs/ledger.md). SQLite only: the files are the point."""

from __future__ import annotations

import random
import sqlite3
import struct
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from ledger import Ledger, open_ledger
from ledger.schema import RECORDS
from ledger.store import sqlite_files

SCOPE = "account:local"
WORD = "zanzibarquokka"


def file_bytes(directory: Path) -> dict[str, bytes]:
    """Every file next to the database (db, -wal, -shm, anything else), as bytes."""
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def holders(directory: Path, word: str) -> list[str]:
    needles = {word.encode(), word.upper().encode(), word.capitalize().encode(), word.encode("utf-16-le")}
    return [name for name, data in file_bytes(directory).items() if any(n in data for n in needles)]


@pytest.fixture
def sqlite_dir_led(tmp_path: Path, clock: Any) -> Iterator[Ledger]:
    ledger = open_ledger(f"sqlite:///{tmp_path / 'db' / 'ledger.db'}", clock=clock)
    yield ledger
    ledger.close()


def _dir(led: Ledger) -> Path:
    database = led.engine.url.database
    assert database is not None
    return Path(database).parent


def unused_space(database: Path) -> bytes:
    """The gap of every b-tree page of the database file, between its cell pointers and its cells: space
    that holds no row, and that a rebalance leaves as it was (``ledger/store/sqlite_files.py``)."""
    data = database.read_bytes()
    size = struct.unpack_from(">H", data, 16)[0]
    size = 65536 if size == 1 else size
    gaps = []
    for first in range(0, len(data), size):
        header = first + (100 if first == 0 else 0)
        kind = data[header]
        if kind not in (2, 5, 10, 13):  # not a b-tree page: a free page (zeroed), an overflow page
            continue
        cells, content = struct.unpack_from(">HH", data, header + 3)
        pointers = header + (12 if kind in (2, 5) else 8) + 2 * cells
        gaps.append(data[pointers : first + (content or 65536)])
    return b"".join(gaps)


def checkpoint(led: Ledger) -> None:
    """The whole WAL into the database file: tried again while the ledger's checkpointer runs one (busy)."""
    with led.engine.connect() as conn:
        for _ in range(200):
            blocked = conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)").scalar()
            if not blocked:
                return
            time.sleep(0.01)
    raise AssertionError("the WAL stayed busy for 2 s")


def _surround(led: Ledger, n: int) -> None:
    # Separate transactions: each save writes its own FTS segment before automerge kicks in.
    for i in range(n):
        led.save(f"unrelated pin number {i} about gardening and cycling routes")


def test_a_forgotten_edited_body_leaves_no_trace_in_the_files(sqlite_dir_led: Ledger, clock: Any) -> None:
    first = sqlite_dir_led.save(f"My locker code phrase is {WORD} at the gym")
    clock.advance(seconds=1)
    head = sqlite_dir_led.save(f"My locker phrase is {WORD.capitalize()} at the new gym", supersedes=first.id)
    assert [r.id for r in sqlite_dir_led.search(SCOPE, WORD)] == [head.id]
    assert holders(_dir(sqlite_dir_led), WORD), "the test cannot see the word before it is forgotten"
    clock.advance(seconds=1)
    sqlite_dir_led.delete(head.id)
    assert holders(_dir(sqlite_dir_led), WORD) == []
    assert sqlite_dir_led.search(SCOPE, WORD) == []


def test_a_reader_that_held_the_wal_during_a_forget_lets_it_go_when_it_ends(sqlite_dir_led: Ledger, clock: Any) -> None:
    """The window a reader's snapshot keeps open closes when that reader ends, with no later write or forget."""
    pin = sqlite_dir_led.save(f"My locker code phrase is {WORD} at the gym")
    clock.advance(seconds=1)
    with sqlite_dir_led.reading() as reader:
        reader.rows(select(RECORDS.c.id))  # a snapshot taken before the forget, kept across it
        sqlite_dir_led.delete(pin.id)
        assert holders(_dir(sqlite_dir_led), WORD), "the snapshot did not keep the old pages (the test shows nothing)"
    assert holders(_dir(sqlite_dir_led), WORD) == []


@pytest.mark.parametrize("neighbours", [60, 400])
def test_erasure_with_many_fts_segments_around(sqlite_dir_led: Ledger, clock: Any, neighbours: int) -> None:
    sqlite_dir_led.set_budget(SCOPE, 1000)
    _surround(sqlite_dir_led, neighbours // 2)
    first = sqlite_dir_led.save(f"{WORD} is the name of my boat")
    _surround(sqlite_dir_led, neighbours // 2)
    clock.advance(seconds=1)
    proposal = sqlite_dir_led.propose(
        f"the boat is called {WORD} and moors in Brixham", supersedes=[first.id], rationale=f"mentions {WORD} twice"
    )
    sqlite_dir_led.accept(proposal.id)
    clock.advance(seconds=1)
    head = sqlite_dir_led.save(f"{WORD} (the boat) moors in Dartmouth now", supersedes=proposal.id)
    # Searches read the segments (and may leave pages in the WAL and cache).
    for _ in range(3):
        assert next(r.id for r in sqlite_dir_led.search(SCOPE, f"{WORD} boat")) == head.id
    with sqlite_dir_led.engine.connect() as conn:
        segments = conn.exec_driver_sql("SELECT count(DISTINCT segid) FROM memory_fts_idx").scalar()
    assert segments is not None and segments > 1, "the index should be spread over several segments"
    sqlite_dir_led.delete(head.id)
    assert holders(_dir(sqlite_dir_led), WORD) == []
    assert holders(_dir(sqlite_dir_led), "dartmouth") == [] and holders(_dir(sqlite_dir_led), "brixham") == []
    # The neighbours are untouched and still searchable.
    assert len(sqlite_dir_led.search(SCOPE, "gardening", limit=200)) == min(200, neighbours)
    assert len(sqlite_dir_led.list(SCOPE)) == neighbours


def test_erasure_of_an_expired_head_and_a_deleted_proposal(sqlite_dir_led: Ledger, clock: Any) -> None:
    _surround(sqlite_dir_led, 30)
    exp = sqlite_dir_led.save(f"temporary: {WORD} door", expires_at=clock.now + timedelta(seconds=5))
    prop = sqlite_dir_led.propose(f"maybe {WORD} window", rationale=f"{WORD} seen")
    clock.advance(seconds=10)
    assert sqlite_dir_led.sweep_expired(clock.now) == 1
    sqlite_dir_led.delete(exp.id)
    sqlite_dir_led.delete(prop.id)
    assert holders(_dir(sqlite_dir_led), WORD) == []


def test_the_word_survives_where_it_is_still_held(sqlite_dir_led: Ledger, clock: Any) -> None:
    """Erasure is exact: another live record with the same word keeps it searchable."""
    gone = sqlite_dir_led.save(f"{WORD} one")
    keep = sqlite_dir_led.save(f"{WORD} two")
    sqlite_dir_led.delete(gone.id)
    assert [r.id for r in sqlite_dir_led.search(SCOPE, WORD)] == [keep.id]
    assert holders(_dir(sqlite_dir_led), WORD)
    sqlite_dir_led.delete(keep.id)
    assert holders(_dir(sqlite_dir_led), WORD) == []


def _made_up(rng: random.Random) -> str:
    return "".join(rng.choice("bdfgklmnprstvz") + rng.choice("aeiou") for _ in range(4))


def test_a_stale_copy_a_rebalance_left_in_a_page_goes_with_the_forget(sqlite_dir_led: Ledger, clock: Any) -> None:
    """``secure_delete`` zeroes a deleted cell, but a page rebuilt by a rebalance keeps old cell bytes in its
    gap: edits that grow records on full pages leave a pin's bytes there beside its live row. Forgetting
    the pin must take both."""
    sqlite_dir_led.set_budget(SCOPE, 10_000)
    database = _dir(sqlite_dir_led) / "ledger.db"
    rng = random.Random(0)
    heads: list[Any] = []
    words: list[str] = []
    stale: list[int] = []
    for _ in range(10):  # rounds until a rebalance has left a copy (the first one does, on SQLite 3.40)
        # Given: pins, then edits of older ones (a superseded row grows, and overflows its full page)
        for _ in range(60):
            clock.advance(seconds=1)
            words.append(f"zq{_made_up(rng)}{len(words)}")
            filler = " ".join(_made_up(rng) for _ in range(rng.randint(5, 30)))
            heads.append(sqlite_dir_led.save(f"note {words[-1]} {filler}"))
        for _ in range(20):
            clock.advance(seconds=1)
            k = rng.randrange(len(heads))
            filler = " ".join(_made_up(rng) for _ in range(rng.randint(5, 30)))
            heads[k] = sqlite_dir_led.save(f"edited {words[k]} {filler}", supersedes=heads[k].id)
        checkpoint(sqlite_dir_led)
        gaps = unused_space(database)
        stale = [k for k, word in enumerate(words) if word.encode() in gaps]
        if stale:
            break
    assert stale, "no rebalance left a pin's bytes in a page's gap (the test shows nothing)"
    # When: those pins are forgotten
    for k in stale:
        clock.advance(seconds=1)
        sqlite_dir_led.delete(heads[k].id)
    # Then: no copy is left anywhere, the gaps included
    assert [words[k] for k in stale if holders(_dir(sqlite_dir_led), words[k])] == []


def test_a_vacuum_the_write_lock_kept_out_runs_when_the_next_transaction_ends(
    sqlite_dir_led: Ledger, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The forget returns even when its VACUUM cannot run (another process kept the write lock); the next
    transaction of the process runs it."""
    asked: list[bool] = []
    scrub = sqlite_files.scrub

    def locked_once(raw: sqlite3.Connection, *, vacuum: bool, **options: Any) -> bool:
        asked.append(vacuum)
        if vacuum and asked.count(True) == 1:
            raise sqlite3.OperationalError("database is locked")
        return scrub(raw, vacuum=vacuum, **options)

    monkeypatch.setattr(sqlite_files, "scrub", locked_once)
    pin = sqlite_dir_led.save(f"My locker code phrase is {WORD} at the gym")
    clock.advance(seconds=1)
    sqlite_dir_led.delete(pin.id)
    assert asked == [True]
    sqlite_dir_led.save("an unrelated pin about cycling routes")
    assert asked == [True, True]
    sqlite_dir_led.save("another unrelated pin about gardening")
    assert asked == [True, True]  # done: nothing is left to scrub


def test_a_vacuum_still_due_when_its_process_ends_runs_in_the_next_process(
    tmp_path: Path, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file counts a forget's VACUUM until one has run: a process that ends with it kept out (here, even its
    last try at close) leaves it due, and the next process to open the file runs it in its first transaction."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    asked: list[bool] = []
    scrub = sqlite_files.scrub

    def locked(raw: sqlite3.Connection, *, vacuum: bool, **options: Any) -> bool:
        asked.append(vacuum)
        raise sqlite3.OperationalError("database is locked")

    first = open_ledger(url, clock=clock)
    pin = first.save(f"My locker code phrase is {WORD} at the gym")
    monkeypatch.setattr(sqlite_files, "scrub", locked)
    clock.advance(seconds=1)
    first.delete(pin.id)
    first.close()
    assert asked == [True, True]  # the forget's own try, then the one at close
    assert _user_version(tmp_path / "ledger.db") == 1

    def spy(raw: sqlite3.Connection, *, vacuum: bool, **options: Any) -> bool:
        asked.append(vacuum)
        return scrub(raw, vacuum=vacuum, **options)

    monkeypatch.setattr(sqlite_files, "scrub", spy)
    second = open_ledger(url, clock=clock)
    try:
        second.list()
        assert asked[2:] == [True]
        assert _user_version(tmp_path / "ledger.db") == 0
        second.list()
        assert asked[2:] == [True]  # nothing is due any more
    finally:
        second.close()


def test_a_process_with_nothing_due_scrubs_nothing(sqlite_dir_led: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[bool] = []
    monkeypatch.setattr(sqlite_files, "scrub", lambda raw, *, vacuum, **options: asked.append(vacuum) or True)
    sqlite_dir_led.save("an unrelated pin about cycling routes")
    sqlite_dir_led.list()
    assert asked == []


def test_a_read_does_not_wait_behind_a_writer_for_a_pending_scrub(sqlite_dir_led: Ledger) -> None:
    store: Any = sqlite_dir_led.store
    store._scrub_pending = True
    store._queue._timeout_s = 60  # a read that queued behind the writer would wait until the writer is done
    holding, done = threading.Event(), threading.Event()

    def writer() -> None:
        with store._queue:  # this process's writers' queue, held as a long write would
            holding.set()
            done.wait(30)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert holding.wait(10)
        sqlite_dir_led.list()  # returns while the queue is still held
        assert not done.is_set() and store._scrub_pending  # the scrub is left for a later transaction
    finally:
        done.set()
        thread.join()


def _user_version(database: Path) -> int:
    conn = sqlite3.connect(database)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()
