"""Actors and the enqueue path, on the in-process broker and on Redis (a real dramatiq Worker in threads)."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta

import pytest
from sqlalchemy import text

from consolidation import Outcome, RunState
from ledger import Provenance, format_rfc3339, to_micros
from tests.worker.conftest import TWO_DUPLICATES, free_port, wait_until
from worker.jobs.actors import CONSOLIDATE_MAX_RETRIES, SEND_RETRY_S, SWEEP_MAX_RETRIES
from worker.runtime import Runtime


def prepare(runtime: Runtime, *, debounce_s: float = 0.2, **settings: object) -> list[str]:
    """Two duplicate pins and consolidation on (apply, offline harness)."""
    ids = [runtime.ledger.save(body).id for body in TWO_DUPLICATES]
    runtime.service.update_settings(
        runtime.ledger.scope_key, mode="apply", harness="offline", debounce_s=debounce_s, **settings
    )
    return ids


def queued_messages(runtime: Runtime) -> int:
    """Messages waiting on the in-process broker (ready and delayed)."""
    queues = runtime.broker.queues  # type: ignore[attr-defined]
    return sum(q.qsize() for q in queues.values())


def settled(runtime: Runtime, run_id: str) -> bool:
    return runtime.service.get_run(run_id).state == RunState.SETTLED


def test_a_turn_wakes_its_run_at_due_at_on_the_embedded_queue(make_runtime: Callable[..., Runtime]) -> None:
    # Given the embedded queue with worker threads, and two duplicate pins
    runtime = make_runtime()
    ids = prepare(runtime)
    runtime.start_worker(threads=2)
    # When a turn is reported
    run = runtime.notify_turn().consolidation
    assert run is not None and run.state == RunState.PENDING
    # Then the run executes once due, and the duplicates are merged
    wait_until(lambda: settled(runtime, run.id), timeout_s=5)
    done = runtime.service.get_run(run.id)
    assert done.outcome == Outcome.APPLIED and done.ops_applied == 1
    assert done.started_at is not None and done.started_at >= run.due_at
    assert (done.started_at - run.due_at) < timedelta(seconds=1)  # p50 is measured in the benchmarks
    (merged,) = runtime.ledger.list(runtime.ledger.scope_key)
    assert merged.provenance == Provenance.MODEL_CONSOLIDATION and sorted(merged.supersedes) == sorted(ids)


def test_turns_in_a_burst_make_one_run_that_waits_for_the_last(make_runtime: Callable[..., Runtime]) -> None:
    # Given a scope with a debounce of 0.4 s
    runtime = make_runtime()
    prepare(runtime, debounce_s=0.4)
    # When four turns come 0.1 s apart (explicit instants: the machine's load cannot space them further)
    first = runtime.ledger.now()
    runs = [runtime.notify_turn(now=first + timedelta(seconds=0.1 * n)).consolidation for n in range(4)]
    # Then they make one run, and only the turn that created it sent a message
    assert len({r.id for r in runs if r is not None}) == 1
    assert queued_messages(runtime) == 1
    runtime.start_worker(threads=2)
    last = runs[-1]
    assert last is not None
    wait_until(lambda: settled(runtime, last.id), timeout_s=5)
    done = runtime.service.get_run(last.id)
    assert done.turns == 4 and done.started_at is not None and done.started_at >= last.due_at
    assert len(runtime.service.runs(runtime.ledger.scope_key)) == 1


def test_stale_duplicate_and_unknown_messages_do_nothing(make_runtime: Callable[..., Runtime]) -> None:
    runtime = make_runtime()
    prepare(runtime, debounce_s=0)
    run = runtime.notify_turn().consolidation
    assert run is not None
    consolidate = runtime.actors.consolidate_scope.fn
    consolidate(run.id)  # executes: due now
    first = runtime.service.get_run(run.id)
    assert first.state == RunState.SETTLED
    consolidate(run.id)  # a redelivery: no-op
    consolidate("run_not_in_this_database")  # a message from another deployment: dropped, not retried
    assert runtime.service.get_run(run.id) == first
    assert len(runtime.ledger.list(runtime.ledger.scope_key)) == 1


def test_a_run_due_while_its_scope_is_busy_is_retried_shortly(make_runtime: Callable[..., Runtime]) -> None:
    # Given a scope whose earlier run is still running (its worker is slow)
    runtime = make_runtime()
    prepare(runtime, debounce_s=0)
    first = runtime.notify_turn().consolidation
    assert first is not None
    with runtime.ledger.engine.begin() as conn:
        conn.execute(
            text("UPDATE consolidation_runs SET state = 'running', started_at = :n WHERE id = :id"),
            {"n": to_micros(runtime.ledger.now()), "id": first.id},
        )
    second = runtime.service.notify_turn(runtime.ledger.scope_key)
    assert second is not None and second.id != first.id
    # When the second run's message arrives while the scope is busy
    runtime.start_worker(threads=2)
    runtime.actors.send_run(second)
    time.sleep(0.4)
    assert runtime.service.get_run(second.id).state == RunState.PENDING
    # Then it re-sends itself, and runs once the first run is settled
    with runtime.ledger.engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE consolidation_runs SET state = 'settled', outcome = 'abandoned', settled_at = :n WHERE id = :id"
            ),
            {"n": to_micros(runtime.ledger.now()), "id": first.id},
        )
    wait_until(lambda: settled(runtime, second.id), timeout_s=5)
    assert runtime.service.get_run(second.id).outcome == Outcome.APPLIED


def test_an_unreachable_queue_never_fails_the_turn(make_runtime: Callable[..., Runtime]) -> None:
    # Given a Redis URL where nothing listens
    runtime = make_runtime(redis_url=f"redis://127.0.0.1:{free_port()}/9")
    prepare(runtime)
    failures = runtime.metrics.enqueue_failures._value.get()
    # When a turn is reported
    started = time.monotonic()
    run = runtime.notify_turn().consolidation
    elapsed = time.monotonic() - started
    # Then the turn is recorded, the send was retried for about a second, and the failure is counted
    assert run is not None and runtime.service.get_run(run.id).state == RunState.PENDING
    assert SEND_RETRY_S * 0.5 <= elapsed < SEND_RETRY_S + 2
    assert runtime.metrics.enqueue_failures._value.get() == failures + 1


def test_retries_are_explicit_and_small(make_runtime: Callable[..., Runtime]) -> None:
    runtime = make_runtime()
    assert runtime.actors.consolidate_scope.options["max_retries"] == CONSOLIDATE_MAX_RETRIES <= 5
    assert runtime.actors.sweep_expiry.options["max_retries"] == SWEEP_MAX_RETRIES <= 5
    assert runtime.actors.consolidate_scope.queue_name == runtime.actors.sweep_expiry.queue_name == "memledger"


def test_sweep_actor_expires_due_records_and_counts_them(make_runtime: Callable[..., Runtime]) -> None:
    runtime = make_runtime()
    now = runtime.ledger.now()
    runtime.ledger.save("temporary pin", expires_at=now + timedelta(seconds=1))
    runtime.ledger.save("lasting pin")
    before = runtime.metrics.sweep_expired._value.get()
    runtime.actors.sweep_expiry.fn(format_rfc3339(now + timedelta(seconds=2)))
    assert runtime.metrics.sweep_expired._value.get() == before + 1
    runtime.actors.sweep_expiry.fn(None)  # "now": nothing more is due
    assert runtime.metrics.sweep_expired._value.get() == before + 1


@pytest.mark.redis
def test_redis_broker_delivers_the_delayed_message_on_time(
    make_runtime: Callable[..., Runtime], redis_url: str
) -> None:
    runtime = make_runtime(redis_url=redis_url)
    prepare(runtime, debounce_s=0.3)
    runtime.start_worker(threads=2)
    run = runtime.notify_turn().consolidation
    assert run is not None
    wait_until(lambda: settled(runtime, run.id), timeout_s=5)
    done = runtime.service.get_run(run.id)
    assert done.outcome == Outcome.APPLIED and done.started_at is not None
    assert timedelta(0) <= done.started_at - run.due_at < timedelta(seconds=1)


@pytest.mark.parametrize(("harness", "imported"), [("anthropic", "True"), ("offline", "False")])
def test_a_worker_imports_the_model_sdk_its_scopes_use_before_it_consumes(
    base_env: dict[str, str], harness: str, imported: str
) -> None:
    # On first use the SDK's import (1-3 s here) fell inside the first run's wall-clock cap; a worker
    # whose scopes use no SDK does not pay for one (a second or more of CPU at every start).
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from worker.config import load_config\n"
        "from worker.runtime import build_runtime\n"
        "runtime = build_runtime(load_config())\n"
        f"runtime.service.update_settings('account:local', mode='apply', harness={harness!r})\n"
        "before = 'anthropic' in sys.modules\n"
        "runtime.start_worker(threads=1)\n"
        "print(before, 'anthropic' in sys.modules, 'openai' in sys.modules)\n"
        "runtime.close()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env=base_env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", imported, "False"]
