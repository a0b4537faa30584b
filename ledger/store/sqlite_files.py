"""SQLite's files after an erasure: the ``VACUUM`` and WAL checkpoint after a forget, and ``memledger db compact``.

``secure_delete`` zeroes a deleted cell and a freed page, but not every byte a page stops using.
When a b-tree page is rebalanced, SQLite rebuilds it from its cells (``rebuildPage`` in
``btree.c``, up to 3.5x at least) and leaves the unallocated gap between the cell pointers and
the cells as it was: bytes of cells that lived there before, moved to a sibling or rewritten
lower down. When such a cell is later erased, its live copy is zeroed and the stale one stays
in the file. Any table can hold one (the FTS segments, the records, the run prompts), and
nothing short of rewriting the pages removes it. So a forget is followed by ``VACUUM``, which
writes every page anew from the live rows: its cost grows with the size of the database
(docs/performance.md).

Both run beside live writers and readers. A checkpoint that waits for readers holds the write
lock meanwhile, and would stall every writer for as long as a reader keeps its snapshot (the old
WAL pages it may still read): so no checkpoint here waits, and between tries nothing is held.
When a reader outlasts them all, a ``PASSIVE`` checkpoint copies what it can and the next one
overwrites the rest.
"""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Callable

# `memledger db compact`: how long VACUUM may wait for the write lock (an operator's command may wait longer than
# a request), and how long the checkpoint after it tries again while readers hold the WAL.
COMPACT_BUSY_TIMEOUT_MS = 30_000
COMPACT_CHECKPOINT_RETRY_S = 5.0
WAL_KEPT = (
    "a reader kept its snapshot of the WAL for the whole checkpoint: the WAL was checkpointed as far as it could be "
    "but not truncated, and may still hold page images of erased text until the next checkpoint; run "
    "`memledger db compact` again in a quieter moment"
)


def checkpoint(
    raw: sqlite3.Connection, *, retry_s: float, busy_timeout_ms: int, busy: Callable[[BaseException], bool]
) -> bool:
    """``wal_checkpoint(TRUNCATE)``, tried for ``retry_s`` with no busy handler, else ``PASSIVE``; if it truncated.

    ``busy_timeout_ms`` is the connection's busy timeout, set back afterwards.
    """
    deadline = time.monotonic() + retry_s
    raw.execute("PRAGMA busy_timeout=0")
    try:
        while True:
            try:
                blocked, _log, _done = raw.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            except sqlite3.OperationalError as exc:
                if not busy(exc):
                    raise
                blocked = 1
            if blocked == 0:
                return True
            if time.monotonic() >= deadline:
                break
            time.sleep(random.uniform(0.01, 0.05))
        raw.execute("PRAGMA wal_checkpoint(PASSIVE)")
        return False
    finally:
        raw.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")


def scrub(
    raw: sqlite3.Connection, *, vacuum: bool, busy_timeout_ms: int, busy: Callable[[BaseException], bool]
) -> bool:
    """After a forget: ``VACUUM`` when ``vacuum``, then a :func:`checkpoint` that never waits; if it truncated.

    ``VACUUM`` waits for the write lock as any writer does (``busy_timeout_ms``, the connection's);
    readers go on reading their snapshots. ``raw`` is outside any transaction.

    Raises:
        sqlite3.OperationalError: the write lock stayed busy, or the ``VACUUM`` failed (nothing is lost: the
            database is as it was, and the caller tries again).
    """
    if vacuum:
        due = vacuums_due(raw)
        raw.execute("VACUUM")
        _vacuumed(raw, due)
    return checkpoint(raw, retry_s=0.0, busy_timeout_ms=busy_timeout_ms, busy=busy)


# A forget counts itself in the database header's user version, in its own transaction, and a VACUUM that ran
# after it sets the count back to 0: a VACUUM a lock kept out is still due when its process has gone, and the
# next process to use the file runs it.
def count_vacuum_due(raw: sqlite3.Connection) -> None:
    """In a forget's transaction: one more ``VACUUM`` is due."""
    raw.execute(f"PRAGMA user_version = {vacuums_due(raw) + 1}")


def vacuums_due(raw: sqlite3.Connection) -> int:
    """The forgets counted since the last ``VACUUM`` that followed them (0: none is due)."""
    return int(raw.execute("PRAGMA user_version").fetchone()[0])


def _vacuumed(raw: sqlite3.Connection, due: int) -> None:
    """Clear the count read before a ``VACUUM``; a forget committed since keeps its own ``VACUUM`` due."""
    raw.execute("BEGIN IMMEDIATE")
    try:
        if vacuums_due(raw) == due:
            raw.execute("PRAGMA user_version = 0")
    finally:
        raw.execute("COMMIT")


def compact(raw: sqlite3.Connection, *, busy_timeout_ms: int, busy: Callable[[BaseException], bool]) -> bool:
    """``VACUUM``, then a truncating :func:`checkpoint`; whether the WAL was truncated (else: :data:`WAL_KEPT`).

    ``VACUUM`` takes the write lock as any writer does and rewrites the database into the WAL:
    writers wait for it meanwhile (a save retries for up to 30 s), readers go on reading their
    snapshots. It cannot run inside a transaction: ``raw`` is the DB-API connection, outside any.
    """
    raw.execute(f"PRAGMA busy_timeout={COMPACT_BUSY_TIMEOUT_MS}")
    try:
        raw.execute("VACUUM")
    finally:
        raw.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
    return checkpoint(raw, retry_s=COMPACT_CHECKPOINT_RETRY_S, busy_timeout_ms=busy_timeout_ms, busy=busy)
