"""SQLite's WAL: the file's journal mode, and its checkpoints off the write path (a thread per store).

Left to itself, SQLite checkpoints inside the commit that takes the WAL past 1,000 pages, on the
committing connection: that commit copies every page back and syncs both files while this
process's writers queue behind it. So every connection lets the WAL grow ten times further before
it checkpoints a commit of its own (:data:`SAFETY_PAGES`: a writer nobody checkpoints for still
bounds the WAL), and a commit only reads how many frames the WAL holds (the WAL-index header, one
``pread``): from :data:`WAL_PAGES` on, it wakes this store's checkpointer.

The checkpointer is a daemon thread with a connection of its own (the engine's, with its
``PRAGMA synchronous``: a checkpoint syncs what it syncs inline, so every commit is as durable as
before), started by the first commit that finds :data:`WAL_PAGES` frames: a store that writes less
holds neither. It runs ``wal_checkpoint(PASSIVE)``, which never waits for a reader or a writer and
copies what no reader's snapshot still needs; writers go on meanwhile. It passes again while they
keep up with it. What is left is copied under this process's write queue, without waiting for
anything (:meth:`Checkpointer._catch_up`): once the whole WAL is in the database, the next writer
starts the WAL again from its beginning. When the store is disposed the thread checkpoints once
more, as a forget's checkpoint does (``TRUNCATE`` without waiting, else ``PASSIVE``;
``sqlite_files.py``), so a short-lived process leaves no long WAL behind; when no thread runs and
the store wrote, the disposing thread makes that checkpoint itself, on a connection it closes after.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from sqlalchemy import Engine
from tenacity import Retrying, retry_if_exception, stop_before_delay, wait_random

from ledger.store import sqlite_files
from ledger.store.sqlite_queue import WriteQueue

log = logging.getLogger(__name__)

WAL_PAGES = 1_000  # SQLite's own automatic checkpoint: a commit past it wakes the checkpointer
SAFETY_PAGES = 10 * WAL_PAGES  # each connection's wal_autocheckpoint: a commit checkpoints itself only past it
# The WAL's file is written over from its beginning when the WAL starts again, and cut back to this as it does
# when it grew larger (journal_size_limit): four times WAL_PAGES frames of SQLite's default page (4,096 bytes and
# a 24-byte frame header) after its 32-byte header. A file cut back every time would grow again every time.
WAL_FILE_BYTES = 32 + 4 * WAL_PAGES * (4_096 + 24)
# The WAL-index header every connection maps (the -shm file; sqlite.org/walformat.html): mxFrame, the WAL's
# last frame, is the native-order 32-bit word at this offset.
_MX_FRAME = slice(16, 20)
# While writers add frames as fast as a pass copies them, more passes; once at most this many are left, they are
# copied under the write queue (the writers of this process wait for so many pages at most, never for a reader).
TAIL_PAGES = WAL_PAGES // 4
MAX_PASSES = 4
QUEUE_WAIT_S = 1.0  # how long the checkpointer waits for this process's writers before it leaves the tail
STOP_WAIT_S = 10.0  # how long disposing waits for the thread's last checkpoint


def use_wal(cur: sqlite3.Cursor, *, busy: Callable[[BaseException], bool], timeout_s: float) -> None:
    """On every connection to a file: put the file in WAL mode (a property of the file, kept once set); let a
    commit checkpoint only past :data:`SAFETY_PAGES`, and keep at most :data:`WAL_FILE_BYTES` of the WAL's
    file when the WAL starts again.

    Switching a new file needs its exclusive lock, and SQLite refuses at once, without the busy
    handler, when another connection switching it at the same moment holds a shared lock:
    processes opening one new file together failed "database is locked" here, about one open
    in 30. So: nothing to do when the file is in WAL already, and short retries (``busy`` errors, for up to
    ``timeout_s``) otherwise.
    """
    for attempt in Retrying(
        stop=stop_before_delay(timeout_s), wait=wait_random(0.001, 0.02), retry=retry_if_exception(busy), reraise=True
    ):
        with attempt:
            if cur.execute("PRAGMA journal_mode").fetchall() != [("wal",)]:
                cur.execute("PRAGMA journal_mode=WAL").fetchall()
    cur.execute(f"PRAGMA wal_autocheckpoint={SAFETY_PAGES}")
    cur.execute(f"PRAGMA journal_size_limit={WAL_FILE_BYTES}")


class Checkpointer:
    """One store's checkpointer thread: started by the first commit past :data:`WAL_PAGES`, stopped by
    :meth:`close`.

    The thread's connection is the ``engine``'s (its pragmas), taken out of the pool: disposing the pool
    leaves it to the thread, which closes it. ``queue`` is the store's write queue; ``busy`` tells a busy
    database's error; ``busy_timeout_ms`` is the connection's busy timeout.
    """

    def __init__(
        self, engine: Engine, *, queue: WriteQueue, busy: Callable[[BaseException], bool], busy_timeout_ms: int
    ) -> None:
        self._engine = engine
        self._wal = (engine.url.database or "") + "-wal"
        self._shm = (engine.url.database or "") + "-shm"
        self._shm_fd: int | None = None  # kept open: a read of the WAL-index header per commit
        self._queue = queue
        self._busy = busy
        self._busy_timeout_ms = busy_timeout_ms
        self._fresh()
        _CHECKPOINTERS.add(self)

    def _fresh(self) -> None:
        """No thread (yet, or in a forked child, where the parent's thread does not run and its locks may be held)."""
        self._pid = os.getpid()
        self._state = threading.Lock()
        self._one = threading.Lock()  # one checkpoint at a time in this process (a forget's and ours)
        self._thread: threading.Thread | None = None
        self._due = threading.Event()
        self._stop = threading.Event()
        self._wrote = False  # a commit since the last close: the close checkpoints

    def after_commit(self) -> None:
        """On the commit path: once the WAL holds :data:`WAL_PAGES` frames (read from the WAL-index header: one
        ``pread``), wake the thread, starting it the first time (and again when it could not start, or not
        connect). Never raises."""
        if self._pid != os.getpid():
            self._after_fork()
        self._wrote = True
        if self.frames() >= WAL_PAGES:
            thread = self._thread
            if thread is None or not thread.is_alive():
                self._start()
            if not self._due.is_set():
                self._due.set()

    def frames(self) -> int:
        """The frames in the WAL since it last started again; 0 when its index cannot be read (no ``-shm`` file:
        commits then checkpoint past the safety bound)."""
        try:
            if self._shm_fd is None:
                self._shm_fd = os.open(self._shm, os.O_RDONLY)
            return int.from_bytes(os.pread(self._shm_fd, 20, 0)[_MX_FRAME], sys.byteorder)
        except OSError:
            return 0

    @contextmanager
    def checkpointing(self) -> Iterator[None]:
        """Held around a forget's checkpoint: the thread's ``PASSIVE`` would make its ``TRUNCATE`` busy. Take it
        inside the write queue, never the other way round. (Compaction, outside the queue, does not take it: its
        ``TRUNCATE`` retries for up to 5 s instead, and the thread's passes are short.)"""
        if self._pid != os.getpid():
            self._after_fork()
        with self._one:
            yield

    def running(self) -> bool:
        """Whether the thread runs (for the tests)."""
        thread = self._thread
        return thread is not None and thread.is_alive() and self._pid == os.getpid()

    def close(self) -> None:
        """Stop the thread after its last checkpoint (waits up to :data:`STOP_WAIT_S`), or, when none runs and a
        commit came since the last close, make that checkpoint here; the next commit past the limit starts
        another thread. Never raises."""
        if self._pid != os.getpid():
            self._after_fork()
            return
        with self._state:
            thread, self._thread = self._thread, None
            stop, due = self._stop, self._due
            self._due, self._stop = threading.Event(), threading.Event()
            fd, self._shm_fd = self._shm_fd, None
            wrote, self._wrote = self._wrote, False
        if fd is not None:  # the index goes with the last connection: the next commit opens the new one
            os.close(fd)
        if thread is None or not thread.is_alive():  # never started, could not, or could not connect
            if wrote:
                self._last_here()
            return
        stop.set()
        due.set()
        if thread is not threading.current_thread():
            thread.join(STOP_WAIT_S)
            if thread.is_alive():
                log.warning("the WAL checkpointer of %s did not stop within %.0f s", self._wal, STOP_WAIT_S)

    def _after_fork(self) -> None:
        # The parent's connection lives on in its thread's frame only, which no one runs here: never closed here.
        self._fresh()

    def _start(self) -> None:
        if self._pid != os.getpid():
            self._after_fork()
        with self._state:
            if self._thread is not None and self._thread.is_alive():
                return
            thread = self._thread = threading.Thread(
                target=self._run, args=(self._due, self._stop), name="memledger-wal-checkpoint", daemon=True
            )
            try:
                thread.start()
            except RuntimeError as exc:  # no thread to be had (a process's limit): the commit is done all the same
                log.warning(
                    "the WAL checkpointer of %s could not start (%s); commits checkpoint past %d pages, "
                    "and the next commit past %d tries again",
                    self._wal,
                    exc,
                    SAFETY_PAGES,
                    WAL_PAGES,
                )

    def _run(self, due: threading.Event, stop: threading.Event) -> None:
        with self._connection() as raw:
            if raw is None:
                return
            while not stop.is_set():
                due.wait()
                if not stop.is_set():
                    self._step(raw, self._catch_up)
                due.clear()  # what woke it meanwhile came before the WAL started again; a later commit wakes it anew
            self._step(raw, self._last)

    def _last_here(self) -> None:
        """The thread's last checkpoint, made by the closing thread (no thread runs). Not on a file that is gone:
        connecting would make a new one (a ``file:`` URI is not looked up)."""
        url = self._engine.url
        if url.query.get("uri") or os.path.exists(url.database or ""):
            with self._connection() as raw:
                if raw is not None:
                    self._step(raw, self._last)

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection | None]:
        """A connection of the engine's out of its pool, closed after; None (logged) when none can be had."""
        try:
            with self._one:  # in SQLite or the pool only holding it (a fork waits: _hold_for_fork)
                proxy = self._engine.raw_connection()
                proxy.detach()
        except Exception:
            log.warning(
                "the WAL checkpointer of %s could not connect; commits checkpoint past %d pages",
                self._wal,
                SAFETY_PAGES,
                exc_info=True,
            )
            yield None
            return
        try:
            yield proxy.dbapi_connection  # type: ignore[misc]
        finally:
            try:
                with self._one:
                    proxy.close()
            except Exception:
                log.debug("closing the WAL checkpointer's connection failed", exc_info=True)

    def _step(self, raw: sqlite3.Connection, step: Callable[[sqlite3.Connection], None]) -> None:
        try:
            step(raw)
        except (sqlite3.Error, OSError) as exc:  # a full disk, a file gone: the next commit wakes the thread again
            log.warning("WAL checkpoint of %s failed (%s: %s)", self._wal, type(exc).__name__, exc)
        except Exception:  # never the thread's end: commits would checkpoint only past the safety bound
            log.exception("WAL checkpoint of %s failed", self._wal)

    def _passive(self, raw: sqlite3.Connection) -> tuple[int, int]:
        """One ``PASSIVE`` checkpoint: the WAL's frames and how many of them are in the database (-1, -1: busy,
        another checkpoint runs)."""
        with self._one:
            _blocked, frames, done = raw.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        return int(frames), int(done)

    def _catch_up(self, raw: sqlite3.Connection) -> None:
        """Passes while writers keep adding frames, then the last of them under the write queue.

        A pass copies the frames there were as it began (``frames``), and writers add more meanwhile: the
        WAL starts again only once a pass ended with nothing added since it began. So passes follow each
        other while each finds more than :data:`TAIL_PAGES` added during the one before (at most
        :data:`MAX_PASSES`); the one after runs with this process's writers held back. None does while a
        reader's snapshot holds frames back (it could copy nothing more), nor once a pass found nothing added.
        """
        began = -1
        for _ in range(MAX_PASSES):
            frames, done = self._passive(raw)
            log.debug("WAL checkpoint of %s: %d of %d frames in the database", self._wal, done, frames)
            # Another checkpoint runs, a reader holds the rest, or all of it is in and nothing came since (or the
            # WAL started again meanwhile): nothing for the write queue
            if frames < 0 or done < frames or frames <= began:
                return
            if began >= 0 and frames - began <= TAIL_PAGES:
                break
            began = frames
        if not self._queue.enter(QUEUE_WAIT_S):
            return  # the next commit past the limit wakes the thread again
        try:
            frames, done = self._passive(raw)
            log.debug("WAL checkpoint of %s under the write queue: %d of %d frames", self._wal, done, frames)
        finally:
            self._queue.__exit__(None, None, None)

    def _last(self, raw: sqlite3.Connection) -> None:
        """At close: the whole WAL into the database and its file truncated, as after a forget, without waiting."""
        if not self._queue.enter(QUEUE_WAIT_S):
            return
        try:
            with self._one:
                sqlite_files.checkpoint(raw, retry_s=0.0, busy_timeout_ms=self._busy_timeout_ms, busy=self._busy)
        finally:
            self._queue.__exit__(None, None, None)


# A fork while the thread is inside SQLite (a checkpoint, its connection opening) would copy SQLite's and the
# pool's locks held into the child, whose first connection to the file would wait on them for ever. So a fork
# waits for the pass in progress, and the child starts from no thread (its commits start its own).
_CHECKPOINTERS: weakref.WeakSet[Checkpointer] = weakref.WeakSet()
_HELD: list[Checkpointer] = []


def _hold_for_fork() -> None:
    for checkpointer in list(_CHECKPOINTERS):
        checkpointer._one.acquire()
        _HELD.append(checkpointer)


def _release_after_fork() -> None:
    while _HELD:
        _HELD.pop()._one.release()


def _fresh_after_fork() -> None:
    _HELD.clear()
    for checkpointer in list(_CHECKPOINTERS):
        checkpointer._after_fork()


os.register_at_fork(before=_hold_for_fork, after_in_parent=_release_after_fork, after_in_child=_fresh_after_fork)
