"""``memledger db compact`` beside live writers: three writers save and forget while compaction runs again and again.

Each writer thread has an account of its own (as three clients of ``serve``, on one engine) and
forgets about 30 % of the time; it keeps what it was told: the saves acknowledged, the forgets
acknowledged. Meanwhile compaction runs in a loop, on an engine of its own (the short test) or as
the ``memledger db compact`` command (the soak). Afterwards nothing is damaged: the full-text
index passes its thorough check, every acknowledged save that was not forgotten reads back with
its body and is found by a search for its own word, every forgotten one reads back without a body
and is found by no search, and (SQLite) no forgotten word is left in the database files once
compacted. No writer saw an error.

On SQLite the load used to break the index for good: every forget's merge of the index added
levels to its structure record (SQLite before 3.44) until, after about a thousand forgets, FTS5
could no longer read it. The short test sees the growth (the thorough check reports an index
whose structure has grown past what a forget leaves); the soak runs past a thousand forgets.
"""

from __future__ import annotations

import random
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from sqlalchemy import Engine

from ledger import Ledger, check_search_index, compact, make_engine, open_ledger

MEMLEDGER = str(Path(sys.executable).parent / "memledger")
WRITERS = 3
FORGET_SHARE = 0.3
KEEP_AT_MOST = 150  # below the default budget of 200 records per account
SEARCH_WORDS = 32  # the words one search takes
FORGETS_PER_COMPACTION = 20


def body(word: str) -> str:
    return f"deploy note {word} for the region"


@dataclass
class Writer:
    """One client: what the ledger acknowledged to it, and what went wrong."""

    led: Ledger
    kept: dict[str, str] = field(default_factory=dict)  # record id -> its distinctive word
    forgotten: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def run(self, stop: threading.Event, rnd: random.Random, progress: threading.Condition) -> None:
        while not stop.is_set():
            try:
                if self.kept and (rnd.random() < FORGET_SHARE or len(self.kept) >= KEEP_AT_MOST):
                    rid = rnd.choice(list(self.kept))
                    self.led.delete(rid)
                    self.forgotten[rid] = self.kept.pop(rid)
                    with progress:
                        progress.notify_all()
                else:
                    word = "w" + uuid.uuid4().hex[:16]
                    self.kept[self.led.save(body(word)).id] = word
                if rnd.random() < 0.1:
                    self.led.search(self.led.scope_key, "deploy region")
            except Exception as exc:  # every error is a failure of the test, reported at the end
                self.errors.append(f"{type(exc).__name__}: {exc}")
                if len(self.errors) > 20:
                    return


def compact_in_process(engine: Engine) -> Callable[[], None]:
    """Compaction on an engine of its own, as another process would have."""

    def run() -> None:
        report = compact(engine)
        assert report.search_index is None, report.search_index

    return run


def compact_by_command(url: str) -> Callable[[], None]:
    def run() -> None:
        done = subprocess.run(
            [MEMLEDGER, "db", "compact", "--database-url", url], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr

    return run


def run_load(
    url: str, *, seconds: float, min_forgets: int, compactor: Callable[[], None], files: list[Path]
) -> list[Writer]:
    """The writers for ``seconds`` (and until they have forgotten ``min_forgets`` records), compacting meanwhile;
    then once more when there are ``files`` to read."""
    base = open_ledger(url, migrate=True)
    writers = [Writer(base.for_account(f"live{n}_{uuid.uuid4().hex[:6]}")) for n in range(WRITERS)]
    stop, progress = threading.Event(), threading.Condition()
    threads = [
        threading.Thread(target=w.run, args=(stop, random.Random(n), progress), daemon=True)
        for n, w in enumerate(writers)
    ]
    for thread in threads:
        thread.start()

    def forgets() -> int:
        return sum(len(w.forgotten) for w in writers)

    compactions = 0
    deadline = time.monotonic() + seconds
    try:
        while any(t.is_alive() for t in threads) and (
            compactions < 3 or time.monotonic() < deadline or forgets() < min_forgets
        ):
            # Compaction every FORGETS_PER_COMPACTION forgets (back to back, it would hold the write lock nearly
            # all the time, and the writers would hardly write).
            due = forgets() + FORGETS_PER_COMPACTION
            with progress:
                progress.wait_for(lambda due=due: forgets() >= due, timeout=10)
            compactor()
            compactions += 1
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    if files:
        compactor()  # once the writers are done: the files the checks read are compacted
    assert [w.errors[:3] for w in writers] == [[]] * WRITERS
    assert compactions >= 3, f"only {compactions} compactions ran beside the writers"
    return writers


def assert_no_damage(url: str, writers: list[Writer], files: list[Path]) -> None:
    assert [w.errors for w in writers] == [[]] * WRITERS
    assert sum(len(w.forgotten) for w in writers) > 0
    engine = make_engine(url)
    try:
        assert check_search_index(engine) is None
    finally:
        engine.dispose()
    if files:  # SQLite: FTS5's own check, and the structure within what a forget leaves (64 levels, a few more)
        with closing(sqlite3.connect(files[0])) as raw:
            raw.execute("INSERT INTO memory_fts(memory_fts) VALUES ('integrity-check')")
            structure = raw.execute("SELECT block FROM memory_fts_data WHERE id = 10").fetchone()[0]
            assert len(structure) < 2 * 64 * 2, f"the index's structure record has grown to {len(structure)} bytes"
    on_disk = b"".join(path.read_bytes() for path in files if path.exists())
    for w in writers:
        records = {r.id: r for r in w.led.records(w.led.scope_key)}
        assert {rid: records[rid].body for rid in w.kept} == {rid: body(word) for rid, word in w.kept.items()}
        assert {records[rid].status.value for rid in w.forgotten} == {"deleted"}
        assert {records[rid].body for rid in w.forgotten} == {None}
        kept, forgotten = list(w.kept.items()), list(w.forgotten.values())
        for at in range(0, len(kept), SEARCH_WORDS):  # a search ORs its words: each finds its own record
            chunk = kept[at : at + SEARCH_WORDS]
            found = w.led.search(w.led.scope_key, " ".join(word for _rid, word in chunk), limit=2 * SEARCH_WORDS)
            assert {r.id for r in found} == {rid for rid, _word in chunk}
        for at in range(0, len(forgotten), SEARCH_WORDS):
            assert w.led.search(w.led.scope_key, " ".join(forgotten[at : at + SEARCH_WORDS])) == []
        assert [word for word in forgotten if word.encode() in on_disk] == []
    writers[0].led.close()


def ledger_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> tuple[str, list[Path]]:
    """The database of the test, and the files a forgotten word must not be left in (SQLite)."""
    if backend == "postgres":
        return str(request.getfixturevalue("pg_migrated")), []
    return f"sqlite:///{tmp_path / 'ledger.db'}", [tmp_path / "ledger.db", tmp_path / "ledger.db-wal"]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_compaction_beside_three_writers_damages_nothing(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # 5-15 s on a loaded machine (2 cores, other suites beside): 3 writers, 3+ compactions, on SQLite 150+ forgets
    # (before the fix, the index's structure passed 128 levels after about 120) and 40+ on PostgreSQL, where
    # each compaction's CHECKPOINT (server-wide) takes 0.3-7 s depending on what else writes to the server.
    url, files = ledger_url(backend, tmp_path, request)
    engine = make_engine(url)
    try:
        forgets = 150 if backend == "sqlite" else 40
        writers = run_load(url, seconds=2, min_forgets=forgets, compactor=compact_in_process(engine), files=files)
    finally:
        engine.dispose()
    assert_no_damage(url, writers, files)


@pytest.mark.soak
@pytest.mark.timeout(900)
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_soak_compaction_by_command_beside_three_writers_past_a_thousand_forgets(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url, files = ledger_url(backend, tmp_path, request)
    writers = run_load(url, seconds=60, min_forgets=1500, compactor=compact_by_command(url), files=files)
    assert_no_damage(url, writers, files)
