"""Where one write's time goes, statement by statement: timing hooks on the drivers, for both sides of a comparison.

``StatementClock`` times every call that reaches the database and labels it by the statement's
first words:

* SQLite, memledger: the store's one DB-API entry (``ledger.store.sqlite._exec_dbapi``);
* SQLite, any other program: a ``sqlite3.Connection`` subclass (:class:`TimedSqlite`, passed as
  ``factory=`` to ``sqlite3.connect``) whose ``execute`` and cursors are timed;
* PostgreSQL, both sides: psycopg's ``Cursor.execute`` and ``fetch*``, ``Pipeline.sync`` and leaving a
  pipeline, ``Connection.commit``. In pipeline mode a statement is only queued when ``execute`` returns,
  so the wait for the server shows where the answer is read (``fetch``) or the pipeline is synced.

Each write is timed as a whole too; what no statement accounts for is the program's own Python
(``python``). The hooks cost a few microseconds a call, so the breakdown is measured in writes of its
own, apart from the interleaved rounds whose ratios are the figures.
"""

from __future__ import annotations

import re
import sqlite3
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest

from tests.bench.conftest import gc_paused, note


def label(sql: str) -> str:
    """A statement's first words: ``INSERT INTO memory_records``, ``SELECT memledger_save``, ``COMMIT``."""
    words = sql.split()
    head = " ".join(words[:3]) if words else "?"
    if head.upper().startswith(("INSERT INTO", "INSERT OR")):
        return " ".join(w for w in words[:5] if w.upper() not in ("(", "OR")).split("(")[0].strip()
    if head.upper().startswith("SELECT"):
        found = re.search(r"\bFROM\s+(\w+)", sql, re.I)
        fn = re.match(r"SELECT\s+(\w+)\(", sql, re.I)
        return f"SELECT {fn.group(1)}()" if fn else f"SELECT FROM {found.group(1) if found else '?'}"
    if head.upper().startswith("UPDATE"):
        return " ".join(words[:2])
    return " ".join(words[:2])


class StatementClock:
    """Seconds spent per labelled call while :meth:`write` runs, and each write's whole time."""

    def __init__(self) -> None:
        self.per_write: list[dict[str, float]] = []
        self.counts: list[dict[str, int]] = []
        self.totals: list[float] = []
        self._now: dict[str, float] | None = None
        self._n: dict[str, int] | None = None

    def add(self, what: str, seconds: float) -> None:
        if self._now is not None and self._n is not None:
            self._now[what] += seconds
            self._n[what] += 1

    def timed(self, what: Callable[[], str], fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.add(what(), time.perf_counter() - started)

    def write(self, fn: Callable[[], object]) -> None:
        """Run one write, collecting its statements' times."""
        self._now, self._n = defaultdict(float), defaultdict(int)
        started = time.perf_counter()
        try:
            fn()
        finally:
            self.totals.append(time.perf_counter() - started)
            self.per_write.append(dict(self._now))
            self.counts.append(dict(self._n))
            self._now = self._n = None

    def print(self, title: str) -> dict[str, float]:
        """One line per label: mean per write, how many per write, median; then the Python left over."""
        n = len(self.totals)
        labels: list[str] = []
        for write in self.per_write:
            labels += [k for k in write if k not in labels]
        means = {k: sum(w.get(k, 0.0) for w in self.per_write) / n for k in labels}
        total = sum(self.totals) / n
        note(
            f"{title}: {total * 1e6:.0f} us a write (mean of {n}), median {statistics.median(self.totals) * 1e6:.0f} us"
        )
        for k in labels:
            calls = sum(c.get(k, 0) for c in self.counts) / n
            med = statistics.median(w.get(k, 0.0) for w in self.per_write)
            note(f"  {means[k] * 1e6:8.1f} us  x{calls:<4.3g} {k}  (median {med * 1e6:.1f} us)")
        python = total - sum(means.values())
        note(f"  {python * 1e6:8.1f} us        python (the program's own code, the driver's bookkeeping)")
        return {**means, "python": python, "total": total}


def breakdown(clock: StatementClock, fn: Callable[[int], object], n: int, title: str) -> dict[str, float]:
    """``fn(i)`` for ``i in range(n)``, each timed by ``clock``, the collector paused; printed."""
    with gc_paused():
        for i in range(n):
            clock.write(lambda i=i: fn(i))
    return clock.print(title)


# --------------------------------------------------------------------------- SQLite
class _TimedCursor(sqlite3.Cursor):
    clock: StatementClock | None = None

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        clock = type(self).clock
        if clock is None:
            return super().execute(sql, parameters)
        return clock.timed(lambda: label(sql), super().execute, sql, parameters)  # type: ignore[no-any-return]


class TimedSqlite(sqlite3.Connection):
    """A sqlite3 connection whose statements go to ``TimedSqlite.clock`` when one is set."""

    clock: StatementClock | None = None

    def cursor(self, factory: Any = None) -> Any:
        _TimedCursor.clock = TimedSqlite.clock
        return super().cursor(_TimedCursor if factory is None else factory)

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        return self.cursor().execute(sql, parameters)


@contextmanager
def sqlite_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[StatementClock]:
    """A clock on memledger's SQLite statements and on every :class:`TimedSqlite` connection."""
    from ledger.store import sqlite as ledger_sqlite

    clock = StatementClock()
    original = ledger_sqlite._exec_dbapi

    def timed(conn: Any, sql: str, *args: Any, **kwargs: Any) -> Any:
        return clock.timed(lambda: label(sql), original, conn, sql, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(ledger_sqlite, "_exec_dbapi", timed)
        patch.setattr(TimedSqlite, "clock", clock)
        patch.setattr(_TimedCursor, "clock", clock)
        yield clock


# --------------------------------------------------------------------------- PostgreSQL
@contextmanager
def psycopg_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[StatementClock]:
    """A clock on every psycopg connection of the process: statements sent, answers read, syncs, commits."""
    import psycopg

    clock = StatementClock()
    last: dict[int, str] = {}

    def wrap(cls: Any, name: str, what: Callable[[Any, tuple[Any, ...]], str]) -> None:
        original = getattr(cls, name)

        def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
            return clock.timed(lambda: what(self, args), original, self, *args, **kwargs)

        patch.setattr(cls, name, timed)

    def sent(cur: Any, args: tuple[Any, ...]) -> str:
        last[id(cur)] = label(str(args[0]))
        return "send " + last[id(cur)]

    def answer(cur: Any, _args: tuple[Any, ...]) -> str:
        return "read " + last.get(id(cur), "?")

    with ExitStack() as stack:
        patch = stack.enter_context(monkeypatch.context())
        wrap(psycopg.Cursor, "execute", sent)
        for name in ("fetchone", "fetchall"):
            wrap(psycopg.Cursor, name, answer)
        wrap(psycopg.Pipeline, "sync", lambda _p, _a: "pipeline sync (round trip)")
        wrap(psycopg.Pipeline, "__exit__", lambda _p, _a: "pipeline end (round trip)")
        wrap(psycopg.Connection, "commit", lambda _c, _a: "commit")
        yield clock
