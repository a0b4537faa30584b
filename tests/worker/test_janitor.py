"""The janitor: re-sends what the queue lost, settles what dead workers left running; safe in numbers."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta

import pytest

from consolidation import Outcome, RunState
from ledger import open_ledger
from tests.hygiene import lose_namespace
from tests.worker.conftest import TWO_DUPLICATES
from worker.jobs.broker import QUEUE_NAME
from worker.runtime import Runtime


class Crash(Exception):
    """Stands in for a worker that died at a fault point."""


def crash_at(point: str) -> Callable[[str], None]:
    def hook(step: str) -> None:
        if step == point:
            raise Crash(step)

    return hook


def stub_messages(runtime: Runtime) -> int:
    """Messages waiting on the in-process broker (ready and delayed)."""
    queues = runtime.broker.queues  # type: ignore[attr-defined]
    return sum(q.qsize() for name, q in queues.items() if name.startswith(QUEUE_NAME))


def setup_scope(runtime: Runtime, scope: str | None = None, *, debounce_s: float = 0) -> str:
    scope = scope or runtime.ledger.scope_key
    runtime.service.update_settings(scope, mode="apply", harness="offline", debounce_s=debounce_s, wall_clock_cap_s=1)
    return scope


def test_queue_loss_rearms_every_pending_run_then_only_orphans_are_resent(
    make_runtime: Callable[..., Runtime],
) -> None:
    # Given two pending runs recorded without any message (as after a restart of the embedded queue)
    runtime = make_runtime(janitor_resend_after_s=5)
    for scope in ("account:a", "account:b"):
        setup_scope(runtime, scope, debounce_s=60)
        runtime.service.notify_turn(scope)
    now = runtime.ledger.now()
    # When the janitor makes its first pass, it re-arms both (delayed to their due_at)
    first = runtime.janitor.run_once(now=now)
    assert (first.rearmed, first.resent) == (2, 0)
    assert stub_messages(runtime) == 2
    # A later pass sends nothing while the runs are not overdue...
    assert runtime.janitor.run_once(now=now).actions == 0
    # ...and re-sends both once they are past due_at + resend_after_s with nobody executing them
    late = runtime.janitor.run_once(now=now + timedelta(seconds=60 + 6))
    assert (late.rearmed, late.resent) == (0, 2)
    assert runtime.metrics.janitor_actions.labels(action="resend")._value.get() >= 2
    # ...backing off per run while they stay pending (workers backlogged): 5 s, then 10 s, 20 s, ...
    resent = [runtime.janitor.run_once(now=now + timedelta(seconds=66 + s)).resent for s in (1, 5, 6, 14, 15)]
    assert resent == [0, 2, 0, 0, 2]


def test_a_resent_run_executes_once_even_with_its_original_message_alive(
    make_runtime: Callable[..., Runtime],
) -> None:
    runtime = make_runtime(janitor_resend_after_s=0)
    for body in TWO_DUPLICATES:
        runtime.ledger.save(body)
    setup_scope(runtime)
    run = runtime.notify_turn().consolidation
    assert run is not None
    runtime.janitor.run_once()
    runtime.janitor.run_once()
    assert stub_messages(runtime) >= 3
    runtime.start_worker(threads=4)
    runtime.worker.join()  # type: ignore[union-attr]
    done = runtime.service.get_run(run.id)
    assert done.state == RunState.SETTLED and done.ops_applied == 1
    assert len(runtime.service.runs()) == 1 and len(runtime.ledger.list(runtime.ledger.scope_key)) == 1


@pytest.mark.redis
def test_redis_coming_back_empty_is_detected_once(make_runtime: Callable[..., Runtime], redis_url: str) -> None:
    runtime = make_runtime(redis_url=redis_url)
    setup_scope(runtime, debounce_s=60)
    runtime.service.notify_turn(runtime.ledger.scope_key)
    assert runtime.janitor.run_once().rearmed == 1
    assert runtime.janitor.run_once().rearmed == 0
    lose_namespace(redis_url, runtime.config.redis_namespace)  # Redis restarted without its data
    assert runtime.janitor.run_once().rearmed == 1


@pytest.mark.parametrize(
    ("point", "outcome"), [("after_claim", Outcome.ABANDONED), ("after_answer_stored", Outcome.APPLIED)]
)
def test_a_stuck_run_is_settled_after_cap_plus_grace(
    make_runtime: Callable[..., Runtime], point: str, outcome: Outcome
) -> None:
    # Given a run whose worker died at ``point``
    runtime = make_runtime(janitor_grace_s=2, service_kwargs={"fault_hook": crash_at(point)})
    for body in TWO_DUPLICATES:
        runtime.ledger.save(body)
    setup_scope(runtime)
    run = runtime.service.notify_turn(runtime.ledger.scope_key)
    assert run is not None
    with pytest.raises(Crash):
        runtime.service.execute(run.id)
    stuck = runtime.service.get_run(run.id)
    assert stuck.state == RunState.RUNNING and stuck.started_at is not None
    # When the janitor looks before cap (1 s) + grace (2 s), nothing happens; after it, the run settles
    assert runtime.janitor.run_once(now=stuck.started_at + timedelta(seconds=2.5)).recovered == []
    report = runtime.janitor.run_once(now=stuck.started_at + timedelta(seconds=3.5))
    assert [r.id for r in report.recovered] == [run.id]
    done = runtime.service.get_run(run.id)
    assert done.state == RunState.SETTLED and done.outcome == outcome
    action = "abandon" if outcome == Outcome.ABANDONED else "apply_stored"
    assert runtime.metrics.janitor_actions.labels(action=action)._value.get() >= 1
    # And a second pass finds nothing more to do
    assert runtime.janitor.run_once(now=stuck.started_at + timedelta(seconds=10)).recovered == []


def test_several_janitors_settle_each_stuck_run_exactly_once(make_runtime: Callable[..., Runtime]) -> None:
    # Given stuck runs in several scopes (their worker died after the answer was stored)
    janitors = [make_runtime(service_kwargs={"fault_hook": crash_at("after_answer_stored")}) for _ in range(4)]
    first = janitors[0]
    scopes = [f"account:u{i}" for i in range(6)]
    for scope in scopes:
        led = open_ledger(first.config.database_url, account=scope.split(":")[1])
        for body in TWO_DUPLICATES:
            led.save(body)
        led.close()
        setup_scope(first, scope)
    for scope in scopes:
        run = first.service.notify_turn(scope)
        assert run is not None
        with pytest.raises(Crash):
            first.service.execute(run.id)
    later = first.ledger.now() + timedelta(minutes=5)
    # When four janitors (four processes' worth) race over them
    results: list[int] = []
    barrier = threading.Barrier(len(janitors))

    def race(runtime: Runtime) -> None:
        barrier.wait()
        results.append(len(runtime.janitor.run_once(now=later).recovered))

    threads = [threading.Thread(target=race, args=(j,)) for j in janitors]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    # Then every run was settled by exactly one of them
    assert sum(results) == len(scopes)
    assert all(r.state == RunState.SETTLED for r in first.service.runs())
