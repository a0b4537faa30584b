"""The pages a save and an edit write on SQLite, b-tree by b-tree, beside LangGraph's ``put``.

At ``synchronous=FULL`` every page a commit changed is written to the WAL and synced before the
commit returns; at ``NORMAL`` it is still written, and copied again by the next checkpoint. With
the WAL's checkpoints off (the ledger's checkpointer thread, and SQLite's own), the WAL holds
every frame of the measured commits: each frame's header names its page, and SQLite's ``dbstat``
table says which table or index owns that page (``interior`` pages are counted apart from the
leaves). A ledger of two scopes of 1,500 records each first, then 500 saves, then 300 edits, each
measured from a WAL started empty. docs/performance.md ("Ledger on SQLite") records the figures.
"""

from __future__ import annotations

import sqlite3
import struct
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from ledger import Ledger, open_ledger
from ledger.store import sqlite_wal
from tests.bench.conftest import load, note

pytestmark = [pytest.mark.bench, pytest.mark.timeout(300)]

WARM = 1_500
SAVES = 500
EDITS = 300
_WAL_HEADER = struct.Struct(">IIIIIIII")  # magic, version, page size, checkpoint, salts, checksums
_FRAME_HEADER = struct.Struct(">IIII")  # page number, database size after a commit (0 inside one), salts


def wal_commits(wal: Path) -> list[list[int]]:
    """The page numbers each commit of the WAL wrote, in order (frames of an earlier WAL's salt end the list)."""
    data = wal.read_bytes()
    _magic, _version, page_size, _ckpt, salt1, salt2, _c1, _c2 = _WAL_HEADER.unpack_from(data)
    commits: list[list[int]] = []
    pages: list[int] = []
    offset = _WAL_HEADER.size
    while offset + 24 + page_size <= len(data):
        page, commit, frame_salt1, frame_salt2 = _FRAME_HEADER.unpack_from(data, offset)
        if (frame_salt1, frame_salt2) != (salt1, salt2):
            break
        pages.append(page)
        if commit:
            commits.append(pages)
            pages = []
        offset += 24 + page_size
    return commits


def owners(path: Path) -> dict[int, str]:
    """Each page's table or index (``/interior`` for a b-tree's inner pages), from ``dbstat``."""
    conn = sqlite3.connect(path)
    try:
        found = conn.execute("SELECT name, pageno, pagetype FROM dbstat").fetchall()
    finally:
        conn.close()
    return {page: name if kind != "internal" else f"{name}/interior" for name, page, kind in found}


def restart_wal(path: Path) -> None:
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0, "a reader held the WAL"
    finally:
        conn.close()


def pages_of(path: Path, what: str, run: Callable[[], object]) -> float:
    """Run ``run`` on a WAL started empty; print the pages its commits wrote per commit, by b-tree."""
    restart_wal(path)
    run()
    commits = wal_commits(path.with_name(path.name + "-wal"))
    names = owners(path)
    per_tree = Counter(names.get(page, f"page {page}") for pages in commits for page in pages)
    total = sum(len(pages) for pages in commits) / len(commits)
    note(f"{what}: {total:.2f} pages a commit ({len(commits)} commits)")
    for name, count in per_tree.most_common():
        note(f"    {count / len(commits):5.2f}  {name}")
    return total


def body(i: int) -> str:
    return f"The staging cluster runs in eu-west-1; production is in us-east-2 (note {i})"


def test_pages_a_save_and_an_edit_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_wal, "WAL_PAGES", 10**9)  # no checkpoint: the WAL keeps every frame
    monkeypatch.setattr(sqlite_wal, "SAFETY_PAGES", 10**9)
    note(f"load: {load()}")
    path = tmp_path / "ours.db"
    base = open_ledger(f"sqlite:///{path}")
    led, other = Ledger(base.engine, account="pages"), Ledger(base.engine, account="other")
    for scope in (led, other):
        scope.set_budget(scope.scope_key, 10 * WARM)
    ids = [led.save(body(i)).id for i in range(WARM)]
    for i in range(WARM):
        other.save(body(i))
    save = pages_of(path, "memledger save", lambda: ids.extend(led.save(body(WARM + i)).id for i in range(SAVES)))

    def edits() -> None:
        for i in range(EDITS):
            key = i * 7 % len(ids)
            ids[key] = led.save(body(key) + " (edited)", supersedes=ids[key]).id

    edit = pages_of(path, "memledger edit", edits)
    base.close()
    put = _langgraph_put_pages(tmp_path / "langgraph.db")
    note(f"pages a commit: save {save:.2f}, edit {edit:.2f}, LangGraph put {put:.2f}")
    assert edit > save > put > 0


def _langgraph_put_pages(path: Path) -> float:
    pytest.importorskip("langgraph.store.sqlite", reason="pip install -e '.[bench]' (make bench does)")
    from langgraph.store.sqlite import SqliteStore

    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA wal_autocheckpoint=0")
        store = SqliteStore(conn)
        store.setup()
        for i in range(WARM):
            store.put(("memories", "pages"), f"k{i}", {"text": body(i)})

        def puts() -> None:
            for i in range(SAVES):
                store.put(("memories", "pages"), f"k{WARM + i}", {"text": body(WARM + i)})

        return pages_of(path, "LangGraph put", puts)
    finally:
        conn.close()
