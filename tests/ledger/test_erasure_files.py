"""A forgotten body is gone from the SQLite files: the database, its WAL and shared memory,
free pages and FTS segments (docs/ledger.md). SQLite only: the files are the point."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from ledger import Ledger, open_ledger
from ledger.schema import RECORDS

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
