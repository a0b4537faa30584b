"""The path of a turn and its consolidation run, measured: the project modules it visits, the transactions it
opens and how often it reads its run's row. The ceilings hold the run engine to one read of the run row per
step that needs it; ``python -m tests.worker.test_run_path`` prints the figures."""

from __future__ import annotations

import re
import sqlite3
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.pool import Pool

from consolidation import Outcome
from tests.conftest import copy_migrated_sqlite
from tests.worker.conftest import TWO_DUPLICATES
from worker.config import WorkerConfig
from worker.runtime import Runtime, build_runtime

PACKAGES = ("ledger", "consolidation", "worker")
# A statement that reads a whole run row (a run as ConsolidationRun holds it).
RUN_ROW = re.compile(r"^\s*SELECT consolidation_runs\.id, consolidation_runs\.scope_key, consolidation_runs\.state\b")
# The modules a consolidation run's control passes between: the job's and the run's life (engine) modules.
RUN_MODULES = ("consolidation.consolidate", "consolidation.lifecycle", "consolidation.engine")


@dataclass
class Phase:
    """What one phase did (SQL as SQLite saw it, so the store's direct path counts too)."""

    statements: list[str] = field(default_factory=list)

    @property
    def reads(self) -> int:
        """Read transactions (a deferred ``BEGIN``: the store's reads and single statements)."""
        return sum(1 for s in self.statements if s.strip().upper() == "BEGIN")

    @property
    def writes(self) -> int:
        return sum(1 for s in self.statements if s.strip().upper() == "BEGIN IMMEDIATE")

    @property
    def run_row_reads(self) -> int:
        return sum(1 for s in self.statements if RUN_ROW.search(s))


@dataclass
class PathFigures:
    """What a turn and its run did: the project modules they called, and each phase's statements."""

    modules: set[str] = field(default_factory=set)
    turn: Phase = field(default_factory=Phase)
    run: Phase = field(default_factory=Phase)
    flow: list[str] = field(default_factory=list)
    depth: int = 0

    @property
    def hops(self) -> int:
        """How often control passed between the job's module and the run's life (calls and returns)."""
        return max(0, len(self.flow) - 1)


@dataclass
class _Recorder:
    figures: PathFigures = field(default_factory=PathFigures)
    phase: Phase | None = None

    def trace(self, dbapi_conn: Any, _record: object) -> None:
        if isinstance(dbapi_conn, sqlite3.Connection):
            dbapi_conn.set_trace_callback(self._statement)

    def _statement(self, sql: str) -> None:
        if self.phase is not None:
            self.phase.statements.append(sql)

    def _profile(self, frame: FrameType, what: str, _arg: object) -> None:
        if what not in ("call", "return") or not frame.f_code.co_filename.endswith(".py"):
            return  # generated code (a dataclass's __init__) is no step of a run
        name = _module(frame)
        if what == "call" and name.partition(".")[0] in PACKAGES:
            self.figures.modules.add(name)
        if what == "call" and name in RUN_MODULES:
            self.figures.depth = max(self.figures.depth, _nesting(frame))
        # After a return, control is in the caller's module.
        now_in = name if what == "call" else _module(frame.f_back)
        flow = self.figures.flow
        if now_in in RUN_MODULES and (not flow or flow[-1] != now_in):
            flow.append(now_in)


def _module(frame: FrameType | None) -> str:
    return "" if frame is None else str(frame.f_globals.get("__name__", ""))


def _nesting(frame: FrameType | None) -> int:
    """How many times the stack passes from one of the run's modules to the other, plus one."""
    seen: list[str] = []
    while frame is not None:
        name = _module(frame)
        if name in RUN_MODULES and frame.f_code.co_filename.endswith(".py") and (not seen or seen[-1] != name):
            seen.append(name)
        frame = frame.f_back
    return len(seen)


@pytest.fixture
def recorded_runtime(tmp_path: Path) -> Iterator[tuple[Runtime, _Recorder]]:
    yield from _recorded_runtime(tmp_path)


def _recorded_runtime(directory: Path) -> Iterator[tuple[Runtime, _Recorder]]:
    recorder = _Recorder()
    event.listen(Pool, "connect", recorder.trace)  # every SQLite connection the runtime opens
    try:
        url = f"sqlite:///{directory / 'ledger.db'}"
        copy_migrated_sqlite(url)
        runtime = build_runtime(WorkerConfig(database_url=url, worker_poll_ms=50, shutdown_timeout_s=10))
        try:
            yield runtime, recorder
        finally:
            runtime.close(timeout_s=5)
    finally:
        event.remove(Pool, "connect", recorder.trace)


def measure(runtime: Runtime, recorder: _Recorder) -> PathFigures:
    """A turn is reported and its run's message is handled (due at once), in this thread, recorded."""
    for body in TWO_DUPLICATES:
        runtime.ledger.save(body)
    runtime.service.update_settings(runtime.ledger.scope_key, mode="apply", harness="offline", debounce_s=0)
    consolidate: Callable[..., None] = runtime.actors.consolidate_scope.fn
    sys.setprofile(recorder._profile)
    try:
        recorder.phase = recorder.figures.turn
        run = runtime.notify_turn().consolidation
        assert run is not None
        recorder.phase = recorder.figures.run
        consolidate(run.id)
    finally:
        sys.setprofile(None)
        recorder.phase = None
    done = runtime.service.get_run(run.id)
    assert done.outcome == Outcome.APPLIED and done.ops_applied == 1
    return recorder.figures


def test_a_run_reads_its_row_once_per_step_that_needs_it(recorded_runtime: tuple[Runtime, _Recorder]) -> None:
    figures = measure(*recorded_runtime)
    # Given a turn: one write, in which the debounce reads the scope's pending run (none) and inserts it
    assert (figures.turn.writes, figures.turn.reads, figures.turn.run_row_reads) == (1, 0, 1)
    # Then its run: claim, store the answer, apply + settle (three writes); one read, the message's, of the row
    # (its scope for the log lines, its job for the engine); the apply reads the stored answer in its write
    assert figures.run.writes == 3
    assert figures.run.reads <= 1
    assert figures.run.run_row_reads <= 2


def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        runs = _recorded_runtime(Path(directory))
        runtime, recorder = next(runs)
        figures = measure(runtime, recorder)
        runs.close()
    print(f"modules visited: {len(figures.modules)}")
    for name in sorted(figures.modules):
        print(f"  {name}")
    print(f"switches between {' and '.join(sorted(set(figures.flow)))}: {figures.hops}")
    print(f"their deepest nesting on one stack: {figures.depth}")
    for label, phase in (("turn", figures.turn), ("run", figures.run)):
        print(
            f"{label}: {phase.writes} write transactions, {phase.reads} read transactions, "
            f"{phase.run_row_reads} reads of a run row"
        )


if __name__ == "__main__":
    main()
