"""Random notify_turn / run_due / update_settings / ledger edits at random instants.

Checks after every step: at most one pending and one running run per scope; a
settled run never changes its outcome or settlement instant; every executed run
made at most one model call, and cancelled or skipped runs made none.
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from sqlalchemy import text

from consolidation import ConsolidationService, Outcome, RunState
from consolidation.harnesses import Harness, HarnessResult, PromptRecord
from consolidation.harnesses.offline import OfflineHarness
from ledger import LedgerError, open_ledger
from tests.conftest import T0, Clock

SCOPE = "account:local"
BODIES = ["I prefer metric units", "i prefer metric units.", "My dog is Rex", "my dog is rex", "Deploy to eu-west-1"]


class CountingHarness(Harness):
    """Counts calls per run prompt and delegates to the real offline harness."""

    name = "offline"

    def __init__(self) -> None:
        self.inner = OfflineHarness()
        self.calls = 0
        self.lock = threading.Lock()

    def call(self, records: Sequence[PromptRecord], **kwargs: Any) -> HarnessResult:
        with self.lock:
            self.calls += 1
        return self.inner.call(records, **kwargs)


class RunMachine(RuleBasedStateMachine):
    @initialize()
    def setup(self) -> None:
        self.dir = tempfile.TemporaryDirectory()
        self.clock = Clock(T0)
        self.led = open_ledger(f"sqlite:///{Path(self.dir.name) / 'sm.db'}", clock=self.clock)
        self.harness = CountingHarness()
        self.svc = ConsolidationService(self.led, api_key="", base_url="", harnesses={"offline": self.harness})
        self.settled: dict[str, tuple[str, object]] = {}
        self.executed = 0

    def teardown(self) -> None:
        if hasattr(self, "led"):
            self.led.close()
            self.dir.cleanup()

    @rule(seconds=st.sampled_from([0, 0, 1, 5, 10, 30]))
    def advance(self, seconds: int) -> None:
        self.clock.advance(seconds=seconds)

    @rule(
        mode=st.sampled_from(["off", "propose", "apply"]),
        debounce=st.sampled_from([0, 5, 10]),
        wait=st.sampled_from([None, 10, 20]),
    )
    def set_mode(self, mode: str, debounce: int, wait: int | None) -> None:
        if wait is not None and wait < debounce:
            wait = debounce
        self.svc.update_settings(SCOPE, mode=mode, debounce_s=debounce, max_wait_s=wait)

    @rule()
    def turn(self) -> None:
        run = self.svc.notify_turn(SCOPE)
        mode = self.svc.settings(SCOPE).mode
        assert (run is None) == (mode == "off")

    @rule()
    def run_due(self) -> None:
        before = self.harness.calls
        done = self.svc.run_due()
        self.executed += len(done)
        assert self.harness.calls - before <= len(done)

    @rule(body=st.sampled_from(BODIES))
    def save(self, body: str) -> None:
        with contextlib.suppress(LedgerError):  # the budget may refuse; that is fine here
            self.led.save(body)

    @precondition(lambda self: bool(self.led.list(SCOPE)))
    @rule(data=st.data())
    def forget(self, data: st.DataObject) -> None:
        record = data.draw(st.sampled_from(self.led.list(SCOPE)))
        self.led.delete(record.id)

    @invariant()
    def one_pending_one_running_per_scope(self) -> None:
        with self.led.engine.connect() as conn:
            counts = dict(
                conn.execute(
                    text("SELECT state, COUNT(*) FROM consolidation_runs WHERE state <> 'settled' GROUP BY state")
                ).all()
            )
        assert counts.get("pending", 0) <= 1 and counts.get("running", 0) == 0

    @invariant()
    def settled_runs_never_change(self) -> None:
        for run in self.svc.runs(SCOPE, limit=1000):
            if run.state == RunState.SETTLED:
                seen = self.settled.setdefault(run.id, (run.outcome, run.settled_at))
                assert seen == (run.outcome, run.settled_at)
                assert run.model_calls <= 1
                if run.outcome in (Outcome.CANCELLED, Outcome.SKIPPED_BUDGET):
                    assert run.model_calls == 0
            else:
                assert run.id not in self.settled

    @invariant()
    def calls_match_executed_runs(self) -> None:
        runs = self.svc.runs(SCOPE, limit=1000)
        assert self.harness.calls == sum(r.model_calls for r in runs)


TestRunMachine = RunMachine.TestCase
TestRunMachine.settings = settings(
    max_examples=25, stateful_step_count=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@pytest.mark.soak
def test_run_machine_soak() -> None:
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(RunMachine, settings=settings(max_examples=300, stateful_step_count=50, deadline=None))
