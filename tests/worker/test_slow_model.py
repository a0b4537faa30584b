"""A model server that trickles its answer holds neither the worker's threads nor its shutdown.

The model is :class:`consolidation.fake_openai.FakeOpenAI` in trickle mode (one byte of the answer
every 50 ms: every read the SDK makes gets a byte, so no per-read timeout ever trips), reached
through the real ``openai`` SDK; the queue is real Redis. About 6 s in all.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest

from consolidation import Outcome, RunState
from consolidation.fake_openai import FakeOpenAI
from ledger import open_ledger
from tests.worker.conftest import TWO_DUPLICATES, Proc, wait_until
from worker.runtime import Runtime

CAP_S = 2.0  # the client's set-up counts against it: a loaded machine took over 1 s before the first attempt
LOCAL = {"harness": "openai", "model": "local", "price_in_usd_per_mtok": 0, "price_out_usd_per_mtok": 0}


@pytest.fixture
def dripping() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(trickle_s=0.05) as fake:  # an answer of ~400 bytes: ~20 s
        yield fake


def seeded(database_url: str, account: str) -> str:
    led = open_ledger(database_url, account=account)
    try:
        for body in TWO_DUPLICATES:
            led.save(body)
        return led.scope_key
    finally:
        led.close()


@pytest.mark.redis
def test_a_dripping_server_holds_no_thread_past_the_cap_and_another_accounts_run_goes_on(
    make_runtime: Callable[..., Runtime], redis_url: str, dripping: FakeOpenAI
) -> None:
    # Given a worker with two threads, and two accounts whose model server drips its answers
    runtime = make_runtime(redis_url=redis_url)
    slow = [seeded(runtime.config.database_url, name) for name in ("drip1", "drip2")]
    quick = seeded(runtime.config.database_url, "offline")
    for scope in slow:
        runtime.service.update_settings(
            scope, mode="apply", debounce_s=0, wall_clock_cap_s=CAP_S, base_url=dripping.base_url, **LOCAL
        )
    runtime.service.update_settings(quick, mode="apply", harness="offline", debounce_s=0)
    runtime.start_worker(threads=2)
    for scope in slow:
        runtime.notify_turn(scope)
    assert dripping.wait_for_calls(2, timeout_s=10)  # both threads are in a dripping call

    # When another account's run falls due
    due = time.monotonic()
    runtime.notify_turn(quick)

    # Then it settles once a thread is free: after the cap, not after the drip
    def settled(scope: str) -> bool:
        return all(run.state == RunState.SETTLED for run in runtime.service.runs(scope))

    wait_until(lambda: settled(quick), timeout_s=10)
    assert time.monotonic() - due < CAP_S + 1.5
    (merged,) = runtime.service.runs(quick)
    assert merged.outcome == Outcome.APPLIED
    wait_until(lambda: all(settled(scope) for scope in slow), timeout_s=5)
    for scope in slow:
        (run,) = runtime.service.runs(scope)
        assert run.outcome == Outcome.FAILED and "answer was not complete when the cap ended" in (run.error or "")
    assert dripping.wait_for_hangups(2, timeout_s=2)  # each connection was closed


@pytest.mark.redis
def test_sigterm_during_a_drip_gives_the_call_up_and_the_worker_stops_promptly(
    make_runtime: Callable[..., Runtime],
    spawn: Callable[..., Proc],
    base_env: dict[str, str],
    redis_url: str,
    dripping: FakeOpenAI,
) -> None:
    # Given a worker whose run waits on a dripping server under a cap that suits a slow CPU model
    env = {**base_env, "MEMLEDGER_REDIS_URL": redis_url, "MEMLEDGER_SHUTDOWN_TIMEOUT_S": "4"}
    api = make_runtime(
        redis_url=redis_url,
        database_url=env["MEMLEDGER_DATABASE_URL"],
        redis_namespace=env["MEMLEDGER_REDIS_NAMESPACE"],
    )
    scope = seeded(api.config.database_url, "term")
    api.service.update_settings(
        scope, mode="apply", debounce_s=0, wall_clock_cap_s=600, base_url=dripping.base_url, **LOCAL
    )
    worker = spawn("worker", ["memledger", "worker", "--threads", "2"], env)
    wait_until(lambda: "memledger worker ready" in worker.err.read_text(), timeout_s=60)
    run = api.notify_turn(scope).consolidation
    assert run is not None
    assert dripping.wait_for_calls(1, timeout_s=30)

    # When SIGTERM arrives during the drip
    stopping = datetime.now(UTC)
    assert worker.terminate(timeout_s=15) == 0

    # Then the worker gave the call up after its grace (half the 4 s shutdown timeout) and settled the run itself
    done = api.service.get_run(run.id)
    assert done.state == RunState.SETTLED and done.outcome == Outcome.FAILED
    assert "given up: the worker was stopping" in (done.error or "")
    assert done.settled_at is not None and done.settled_at - stopping < timedelta(seconds=2 + 1.5)
    assert dripping.wait_for_hangups(1, timeout_s=2)
