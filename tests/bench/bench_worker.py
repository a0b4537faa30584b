"""Worker benchmarks (``make bench``): figures measured side by side in one run, on the machine's Redis (db 9).

* enqueue cost per turn — ``Actors.send_run`` (the delayed dramatiq message a turn
  sends after its database write) against a bare Redis round trip of the same
  message (``RPUSH``), interleaved (target: <= 2x); the whole ``notify_turn`` (SQLite
  write + send) is shown for context;
* runs per second through dramatiq on Redis, offline harness, SQLite, one worker
  process — against dramatiq's own no-op actor on the same broker and thread count
  (target: >= 0.5x);
* delay from a run's ``due_at`` to its start, dramatiq's Redis broker with the
  default ``worker_poll_ms`` (target: p50 <= 100 ms).

Each test prints its rows; the module prints the whole table at the end. The figures
are recorded in ``docs/performance.md``.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import dramatiq
import pytest
import redis

from consolidation import RunState
from ledger import open_ledger
from tests.bench.conftest import FigureTable
from tests.hygiene import lose_namespace, redis_namespace
from worker.config import WorkerConfig
from worker.runtime import Runtime, build_runtime

pytestmark = [pytest.mark.bench, pytest.mark.redis, pytest.mark.timeout(900)]

ENQUEUE_SAMPLES = 3_000
THROUGHPUT_MESSAGES = 1_500
THROUGHPUT_RUNS = 600
LATENCY_RUNS = 60
CONVERSATION_TURNS = 10
THREADS = 8
DUPLICATES = ("I prefer metric units", "i prefer  metric units.")

TABLE = FigureTable("worker benchmarks", widths=(46, 16, 16, 10, 4))
table = TABLE.fixture()
record = TABLE.record


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.0f} µs"


def _percentile(values: Sequence[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


@pytest.fixture
def runtimes(tmp_path: Path, redis_url: str) -> Iterator[Callable[..., Runtime]]:
    made: list[Runtime] = []

    def factory(**config: Any) -> Runtime:
        config.setdefault("database_url", f"sqlite:///{tmp_path / 'bench.db'}")
        config.setdefault("redis_url", redis_url)
        config.setdefault("redis_namespace", redis_namespace())
        config.setdefault("log_level", "WARNING")
        runtime = build_runtime(WorkerConfig(**config))
        made.append(runtime)
        return runtime

    yield factory
    for runtime in made:
        runtime.close(timeout_s=10)
        lose_namespace(redis_url, runtime.config.redis_namespace)


def seed_scopes(runtime: Runtime, count: int, **settings: Any) -> list[str]:
    """``count`` scopes, each with two duplicate pins and consolidation on (apply, offline)."""
    scopes = []
    for i in range(count):
        led = open_ledger(runtime.config.database_url, account=f"b{i}")
        for body in DUPLICATES:
            led.save(body)
        led.close()
        runtime.service.update_settings(f"account:b{i}", mode="apply", harness="offline", **settings)
        scopes.append(f"account:b{i}")
    return scopes


def test_enqueue_cost_per_turn_against_a_bare_redis_round_trip(
    runtimes: Callable[..., Runtime], redis_url: str
) -> None:
    runtime = runtimes()
    runtime.service.update_settings("account:local", mode="apply", harness="offline", debounce_s=3600, max_wait_s=None)
    run = runtime.service.notify_turn("account:local")
    assert run is not None
    client = redis.Redis.from_url(redis_url)
    actor = runtime.actors.consolidate_scope
    payload = actor.message(run.id).encode()
    scratch = redis_namespace() + ":scratch"
    sends, raw, pushes = [], [], []
    for i in range(ENQUEUE_SAMPLES):  # interleaved, so all three see the same machine
        started = time.perf_counter()
        assert runtime.actors.send_run(run)
        sends.append(time.perf_counter() - started)
        started = time.perf_counter()
        actor.send_with_options(args=(run.id,), delay=3_600_000)
        raw.append(time.perf_counter() - started)
        started = time.perf_counter()
        client.rpush(scratch, payload)
        pushes.append(time.perf_counter() - started)
        if i % 500 == 499:
            client.delete(scratch)
    client.delete(scratch)
    # A conversation: turns a few seconds apart inside one debounce window make one run.
    delayed = f"{runtime.config.redis_namespace}:memledger.DQ"
    before = client.llen(delayed)
    runtime.service.update_settings("account:local", mode="off")  # settles the benchmark's run
    runtime.service.update_settings("account:local", mode="apply")
    for _ in range(CONVERSATION_TURNS):
        runtime.notify_turn("account:local")
    sent = client.llen(delayed) - before
    client.close()
    send, push = statistics.median(sends), statistics.median(pushes)
    per_turn = send * sent / CONVERSATION_TURNS
    first = send / push
    record("enqueue, turn creating a run: p50", _us(send), f"{_us(push)} RPUSH")
    record("  ratio (one delayed message)", f"{first:.2f}x", "")
    record("  of which dramatiq's own send_with_options", _us(statistics.median(raw)), "")
    record(
        f"enqueue per turn, {CONVERSATION_TURNS}-turn conversation",
        _us(per_turn),
        _us(push),
        "<= 2x",
        per_turn <= 2 * push,
    )
    record("  messages sent", f"{sent}", f"{CONVERSATION_TURNS} turns")
    assert per_turn <= 2 * push, f"enqueue per turn is {per_turn / push:.2f}x a bare RPUSH; target <= 2x"


def _drain(broker: dramatiq.Broker, done: Callable[[], bool], *, timeout_s: float, poll_s: float = 0.005) -> float:
    """Start a worker on ``broker``, return the seconds until ``done()``."""
    worker = dramatiq.Worker(broker, worker_threads=THREADS, worker_timeout=20)
    started = time.perf_counter()
    worker.start()
    try:
        deadline = started + timeout_s
        while not done():
            assert time.perf_counter() < deadline, "the benchmark did not finish in time"
            time.sleep(poll_s)
        return time.perf_counter() - started
    finally:
        worker.stop(timeout=10_000)


def _due_runs(runtime: Runtime, count: int) -> None:
    for scope in seed_scopes(runtime, count, debounce_s=0):
        assert runtime.service.notify_turn(scope) is not None


def test_runs_per_second_against_dramatiq_noop_throughput(runtimes: Callable[..., Runtime], tmp_path: Path) -> None:
    # Baseline: dramatiq's own no-op actor on the same Redis broker and thread count.
    noop_runtime = runtimes()
    processed = 0
    lock = threading.Lock()

    def noop(_i: int) -> None:
        nonlocal processed
        with lock:
            processed += 1

    noop_actor = dramatiq.actor(noop, broker=noop_runtime.broker, actor_name="noop", queue_name="noop")
    for i in range(THROUGHPUT_MESSAGES):
        noop_actor.send(i)
    noop_rate = THROUGHPUT_MESSAGES / _drain(
        noop_runtime.broker, lambda: processed >= THROUGHPUT_MESSAGES, timeout_s=120
    )
    # Ours: one due run per scope, each merging two duplicates with the offline harness.
    runtime = runtimes()
    _due_runs(runtime, THROUGHPUT_RUNS)
    for run in runtime.service.pending_runs(limit=THROUGHPUT_RUNS):
        assert runtime.actors.send_run(run)
    settled = runtime.metrics.runs_settled.labels(outcome="applied")
    before = settled._value.get()
    ours_s = _drain(runtime.broker, lambda: settled._value.get() - before >= THROUGHPUT_RUNS, timeout_s=600)
    runs = runtime.service.runs(limit=THROUGHPUT_RUNS + 1)
    assert len(runs) == THROUGHPUT_RUNS and all(r.state == RunState.SETTLED and r.ops_applied == 1 for r in runs)
    rate = THROUGHPUT_RUNS / ours_s
    # Context: the same runs executed in a plain loop, without any queue (the database's own bound).
    direct = runtimes(database_url=f"sqlite:///{tmp_path / 'direct.db'}")
    _due_runs(direct, THROUGHPUT_RUNS)
    started = time.perf_counter()
    assert len(direct.service.run_due(limit=THROUGHPUT_RUNS)) == THROUGHPUT_RUNS
    direct_rate = THROUGHPUT_RUNS / (time.perf_counter() - started)
    ratio = rate / noop_rate
    record(f"runs/s through dramatiq, 1 process x {THREADS} threads", f"{rate:.0f}/s", f"{noop_rate:.0f}/s no-op")
    record("  ratio to dramatiq's no-op actor", f"{ratio:.2f}x", "", ">= 0.5x", ratio >= 0.5)
    record("  same runs in a loop, no queue (SQLite bound)", f"{direct_rate:.0f}/s")
    record("  ratio to the no-queue loop", f"{rate / direct_rate:.2f}x")
    assert ratio >= 0.5, f"runs/s is {ratio:.2f}x dramatiq's no-op throughput; target >= 0.5x (docs/performance.md)"


def test_due_at_to_run_start_latency(runtimes: Callable[..., Runtime]) -> None:
    runtime = runtimes()
    scopes = seed_scopes(runtime, LATENCY_RUNS, debounce_s=0.5)
    runtime.start_worker(threads=THREADS)
    time.sleep(0.5)  # the worker is idle and polling, as it is most of the time
    for scope in scopes:
        runtime.notify_turn(scope)
        time.sleep(0.03)  # spread the due instants
    deadline = time.monotonic() + 60
    while runtime.service.pending_runs(limit=1) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)
    delays = []
    for run in runtime.service.runs(limit=LATENCY_RUNS):
        assert run.state == RunState.SETTLED and run.started_at is not None
        delays.append((run.started_at - run.due_at).total_seconds())
    p50, p95 = statistics.median(delays), _percentile(delays, 95)
    poll = runtime.config.worker_poll_ms
    record(f"due_at → start, p50 (Redis, poll {poll} ms)", f"{p50 * 1000:.0f} ms", "", "<= 100 ms", p50 <= 0.1)
    record("  p95", f"{p95 * 1000:.0f} ms", "")
    assert p50 <= 0.1, f"due_at -> start p50 is {p50 * 1000:.0f} ms; target <= 100 ms"
