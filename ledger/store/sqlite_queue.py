"""Where one process's SQLite writers wait for each other, before SQLite's own lock.

SQLite's busy handler polls with sleeps of up to 100 ms: under a steady stream of saves from
other threads a write could lose every poll for seconds. So this process's writers queue on a
lock of their own first; other processes still meet the busy handler.
"""

from __future__ import annotations

import os
import threading

from ledger.errors import LedgerBusy


class WriteQueue:
    """Where this process's writers wait for each other: as long as the busy handler would, then busy.

    Re-entrant, so a write nested in a write of the same thread proceeds as before.
    """

    __slots__ = ("_depth", "_lock", "_owner", "_pid", "_timeout_s")

    def __init__(self, *, timeout_s: float) -> None:
        self._timeout_s = timeout_s
        self._lock = threading.RLock()
        self._pid = os.getpid()
        self._owner: int | None = None
        self._depth = 0

    def __enter__(self) -> None:
        if not self.enter(self._timeout_s):
            raise LedgerBusy("the ledger database stayed busy; try again in a moment")

    def enter(self, timeout_s: float) -> bool:
        """Take the queue within ``timeout_s`` (0: only if no other thread holds it); whether it was taken.
        Taken, it is left with ``__exit__``."""
        if self._pid != os.getpid():
            # A forked child: the lock may have been held by a parent thread at the fork, and
            # would stay held for ever here. The child's writers are the child's own.
            self._lock, self._pid, self._owner, self._depth = threading.RLock(), os.getpid(), None, 0
        taken = self._lock.acquire(timeout=timeout_s) if timeout_s > 0 else self._lock.acquire(blocking=False)
        if not taken:
            return False
        self._owner = threading.get_ident()
        self._depth += 1
        return True

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        if not self._depth:
            self._owner = None
        self._lock.release()

    def held_here(self) -> bool:
        """Whether the calling thread is inside a write (which SQLite's write lock then belongs to)."""
        return self._owner == threading.get_ident() and self._pid == os.getpid()
