"""Fault tests with real processes, real Redis (keys of their own), real SQLite/PostgreSQL and the fake model over HTTP.

Workers are ``memledger worker`` processes; the model is
:class:`consolidation.fake_anthropic.FakeAnthropic` (or, for the openai harness,
:class:`consolidation.fake_openai.FakeOpenAI`) served from the test process (so killing a worker
never takes the model down), reached through the real SDK.
``MEMLEDGER_FAULT_POINT`` makes a worker ``os._exit`` at a named step of a run.
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
import redis
from sqlalchemy import text

from consolidation import ConsolidationRun, Outcome, RunState
from consolidation.fake_anthropic import FakeAnthropic, FakeModelServer, Reply, request_records
from ledger import Ledger, Provenance, Status, open_ledger
from ledger.store import PostgresStore
from tests.consolidation.vendors import VENDORS, Vendor
from tests.hygiene import kill_group, lose_namespace, popen, redis_namespace
from tests.worker.conftest import TWO_DUPLICATES, Proc, wait_until
from worker.jobs.broker import SENTINEL_KEY
from worker.runtime import FAULT_EXIT_CODE, Runtime

MODEL = "claude-haiku-4-5"
MERGED = TWO_DUPLICATES[0]


@pytest.fixture
def fakes() -> Iterator[Callable[..., FakeAnthropic]]:
    """Factory of started fake models, stopped after the test."""
    made: list[FakeAnthropic] = []

    def factory(**kwargs: Any) -> FakeAnthropic:
        fake = FakeAnthropic(**kwargs).start()
        made.append(fake)
        return fake

    yield factory
    for fake in made:
        fake.stop()


def seed(db_url: str, account: str) -> tuple[Ledger, list[str]]:
    """Two duplicate pins in ``account:<account>``; returns the (open) ledger and their ids."""
    led = open_ledger(db_url, account=account)
    return led, [led.save(body).id for body in TWO_DUPLICATES]


def merge_all(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The fake model's answer: merge every record it was shown (by the ids or aliases of the prompt)."""
    targets = [record.id for record in request_records(request)]
    return [{"op": "merge", "targets": targets, "body": MERGED, "rationale": "duplicates"}]


def assert_ledger_sound(led: Ledger, scope: str) -> None:
    """Invariants 3.2 that a crash could break: exact supersession, at most one batch per run."""
    records = {r.id: r for r in led.records(scope)}
    for record in records.values():
        if record.status == Status.ACTIVE:
            assert record.valid_to is None
        if record.status == Status.SUPERSEDED:
            successor = records[record.superseded_by]  # type: ignore[index]
            assert record.id in successor.supersedes and record.valid_to == successor.valid_from
    consolidated = [r for r in records.values() if r.provenance == Provenance.MODEL_CONSOLIDATION]
    assert len(consolidated) <= 1, "a batch was applied twice"


def run_of(runtime: Runtime, scope: str) -> ConsolidationRun:
    (run,) = runtime.service.runs(scope)
    return run


def api_on(
    make_runtime: Callable[..., Runtime], base_env: dict[str, str], redis_url: str, **extra_env: str
) -> tuple[dict[str, str], Runtime]:
    """The environment for worker processes on ``redis_url``, and an API runtime sharing their database and queue."""
    env = {**base_env, "MEMLEDGER_REDIS_URL": redis_url, **extra_env}
    api = make_runtime(
        redis_url=redis_url,
        database_url=env["MEMLEDGER_DATABASE_URL"],
        redis_namespace=env["MEMLEDGER_REDIS_NAMESPACE"],
    )
    return env, api


def unacknowledged(redis_url: str, namespace: str) -> int:
    """Messages sent under ``namespace`` (or a namespace that starts with it) that no worker has acknowledged:
    delayed, queued or being run. Dramatiq keeps each in a ``.msgs`` hash until its ack; once there are none,
    every duplicate of a message has run, so whatever it could do twice is done."""
    client = redis.Redis.from_url(redis_url)
    try:
        keys = [key for key in client.scan_iter(f"{namespace}*.msgs") if not key.endswith(b".XQ.msgs")]
        return sum(int(client.hlen(key)) for key in keys)
    finally:
        client.close()


def settled_all(runtime: Runtime, scopes: list[str]) -> bool:
    return all(run_of(runtime, s).state == RunState.SETTLED for s in scopes)


@dataclass
class Case:
    point: str
    scope: str
    led: Ledger
    fake: FakeModelServer
    worker: Proc | None = None


# Step of the run -> (outcome after recovery, paid model calls). The call in flight is the documented window:
# the request was sent, the answer never stored, so the janitor can only settle it abandoned.
KILL_STEPS = {
    "after_claim": (Outcome.ABANDONED, 0),
    "in_call": (Outcome.ABANDONED, 1),
    "after_answer_stored": (Outcome.APPLIED, 1),
    "mid_apply": (Outcome.APPLIED, 1),
    "after_apply": (Outcome.APPLIED, 1),
}


def shared_db(request: pytest.FixtureRequest, base_env: dict[str, str], backend: str) -> str:
    """The database the worker processes share: the tmp SQLite file, or a migrated PostgreSQL schema."""
    if backend == "sqlite":
        return base_env["MEMLEDGER_DATABASE_URL"]
    url = str(request.getfixturevalue("pg_migrated"))
    open_ledger(url, migrate=True).close()
    base_env["MEMLEDGER_DATABASE_URL"] = url
    return url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def worker_db(request: pytest.FixtureRequest, base_env: dict[str, str]) -> str:
    return shared_db(request, base_env, request.param)


# Every step on each backend, and the call in flight killed under each paying harness's SDK (the one step
# where the SDK is the subject: a request sent and never answered). The other steps run the openai harness:
# before the call, and once the answer is stored (the SDK's answer parsed into operations, the same whichever
# harness made it), a run's steps do not depend on the SDK, and each worker process pays its SDK's import
# (the Anthropic one about 1.5 s of CPU more than the openai one here).
KILL_STACKS = [("anthropic", "sqlite"), pytest.param(("openai", "postgres"), marks=pytest.mark.postgres)]


def kill_vendor(stack: tuple[str, str], point: str) -> Vendor:
    """The harness a kill-a-worker case runs: the stack's for the call in flight, else the openai one."""
    return {v.name: v for v in VENDORS}[stack[0] if point == "in_call" else "openai"]


@pytest.mark.redis
@pytest.mark.parametrize("stack", KILL_STACKS, ids=lambda s: f"{s[0]}-{s[1]}")
def test_kill_a_worker_at_each_step_of_a_run(
    request: pytest.FixtureRequest,
    make_runtime: Callable[..., Runtime],
    spawn: Callable[..., Proc],
    base_env: dict[str, str],
    stack: tuple[str, str],
    redis_url: str,
) -> None:
    api = make_runtime(redis_url=redis_url, database_url=shared_db(request, base_env, stack[1]))
    db_url = api.config.database_url
    cases = []
    for i, point in enumerate(KILL_STEPS):
        led, _ = seed(db_url, f"kill{i}")
        # The call in flight hangs long enough to be killed in it; the others answer at once.
        fake = kill_vendor(stack, point).fake(operations=merge_all, delay_s=30 if point == "in_call" else 0).start()
        request.addfinalizer(fake.stop)
        cases.append(Case(point, led.scope_key, led, fake))
    # Given one worker per step, each in its own queue namespace, each dying at its step. A worker preloads the
    # SDK of every harness a scope of its database has on: the openai cases' workers are ready before another
    # harness is turned on, so that only the call in flight's worker imports the Anthropic SDK
    senders = {}
    client = redis.Redis.from_url(redis_url)
    openai_cases = [c for c in cases if kill_vendor(stack, c.point).name == "openai"]
    for batch in (openai_cases, [c for c in cases if c not in openai_cases]):
        for case in batch:
            vendor = kill_vendor(stack, case.point)
            api.service.update_settings(case.scope, mode="apply", **vendor.settings(), debounce_s=0, wall_clock_cap_s=3)
            namespace = f"{redis_namespace()}-{case.point}"
            # The queue has lost nothing: no worker's start-up janitor pass re-sends another step's run into its
            # queue
            client.set(f"{namespace}:{SENTINEL_KEY}", "kept")
            env = {
                **base_env,
                "MEMLEDGER_REDIS_URL": redis_url,
                "MEMLEDGER_REDIS_NAMESPACE": namespace,
                **vendor.environment(case.fake.base_url),
                "MEMLEDGER_JANITOR_INTERVAL_S": "3600",
            }
            if case.point != "in_call":
                env["MEMLEDGER_FAULT_POINT"] = case.point
            case.worker = spawn(f"worker-{case.point}", ["memledger", "worker", "--threads", "2"], env)
            senders[case.point] = make_runtime(redis_url=redis_url, database_url=db_url, redis_namespace=namespace)
        # Five workers importing a model SDK at once took more than 60 s to be ready on two loaded cores: the
        # deadline only bounds a failure
        for case in batch:
            assert case.worker is not None
            wait_until(lambda w=case.worker: "memledger worker ready" in w.err.read_text(), timeout_s=180)
    client.close()
    for case in cases:
        senders[case.point].notify_turn(case.scope)
    # When each reaches its step: the fault point exits the process; the call in flight is killed by us
    in_call = next(c for c in cases if c.point == "in_call")
    wait_until(lambda: in_call.fake.calls >= 1, timeout_s=60)
    assert in_call.worker is not None
    in_call.worker.popen.send_signal(signal.SIGKILL)
    for case in cases:
        assert case.worker is not None
        status = case.worker.popen.wait(60)
        assert status == (-signal.SIGKILL if case.point == "in_call" else FAULT_EXIT_CODE), case.worker.text()
    assert all(run_of(api, c.scope).state == RunState.RUNNING for c in cases if c.point != "after_apply")
    # Then a new runtime's janitor settles every run exactly once, past cap + grace: settling needs no worker
    # and no model (a stored answer is applied, a lost call abandoned; the model's URL here answers nothing),
    # so it runs in this process (a `memledger worker` that starts the janitor is in the tests below)
    recovery = make_runtime(
        redis_url=redis_url,
        database_url=db_url,
        janitor_grace_s=0.5,
        janitor_interval_s=0.5,
        service_kwargs={key: value for v in VENDORS for key, value in v.service_kwargs("http://127.0.0.1:9").items()},
    )
    recovery.start_janitor()
    wait_until(lambda: settled_all(api, [c.scope for c in cases]), timeout_s=60)
    for case in cases:
        outcome, calls = KILL_STEPS[case.point]
        run = run_of(api, case.scope)
        assert (case.point, run.outcome) == (case.point, outcome), run.error
        assert (case.point, case.fake.calls) == (case.point, calls)
        active = case.led.list(case.scope)
        if outcome == Outcome.APPLIED:
            assert [r.body for r in active] == [MERGED] and run.ops_applied == 1 and run.model_calls == 1
        else:
            assert sorted(r.body or "" for r in active) == sorted(TWO_DUPLICATES)
        assert_ledger_sound(case.led, case.scope)
        case.led.close()


@pytest.mark.redis
def test_redis_losing_everything_loses_no_run(
    make_runtime: Callable[..., Runtime], spawn: Callable[..., Proc], base_env: dict[str, str], redis_url: str
) -> None:
    env, api = api_on(make_runtime, base_env, redis_url)
    scopes = []
    for i in range(4):
        led, _ = seed(api.config.database_url, f"loss{i}")
        scopes.append(led.scope_key)
        led.close()
        api.service.update_settings(scopes[-1], mode="apply", harness="offline", debounce_s=1.5)
    # Given two pending runs whose messages Redis then loses, before any worker ran
    for scope in scopes[:2]:
        api.notify_turn(scope)
    lose_namespace(redis_url, env["MEMLEDGER_REDIS_NAMESPACE"])
    # When a worker starts, and two more runs are queued and lost again while it runs
    worker = spawn("worker", ["memledger", "worker", "--threads", "2"], env)
    wait_until(lambda: "memledger worker ready" in worker.err.read_text(), timeout_s=60)
    for scope in scopes[2:]:
        api.notify_turn(scope)
    assert unacknowledged(redis_url, env["MEMLEDGER_REDIS_NAMESPACE"]) >= 2  # their messages wait in Redis
    lose_namespace(redis_url, env["MEMLEDGER_REDIS_NAMESPACE"])
    # Then every run executes exactly once
    wait_until(lambda: settled_all(api, scopes), timeout_s=30)
    wait_until(lambda: unacknowledged(redis_url, env["MEMLEDGER_REDIS_NAMESPACE"]) == 0, timeout_s=30)
    for scope in scopes:
        (run,) = api.service.runs(scope)
        assert run.outcome == Outcome.APPLIED and run.ops_applied == 1
    assert worker.terminate() == 0


@pytest.mark.redis
def test_one_message_delivered_many_times_to_many_workers(
    make_runtime: Callable[..., Runtime],
    spawn: Callable[..., Proc],
    base_env: dict[str, str],
    redis_url: str,
    request: pytest.FixtureRequest,
) -> None:
    env, api = api_on(make_runtime, base_env, redis_url)
    led, _ = seed(api.config.database_url, "dup")
    # The openai harness: each of the three worker processes imports its SDK (the Anthropic one costs three times
    # the CPU here), and the kill-a-worker test above runs both
    vendor = {v.name: v for v in VENDORS}["openai"]
    fake = vendor.fake(operations=merge_all, delay_s=0.3).start()
    request.addfinalizer(fake.stop)
    env.update(vendor.environment(fake.base_url))
    api.service.update_settings(led.scope_key, mode="apply", **vendor.settings(), debounce_s=2)
    # Given two worker processes with four threads each
    workers = spawn("workers", ["memledger", "worker", "--processes", "2", "--threads", "4"], env)
    # When the run's message is sent 24 times, all due at the same instant
    run = api.notify_turn(led.scope_key).consolidation
    assert run is not None
    for _ in range(23):
        assert api.actors.send_run(run)
    wait_until(lambda: api.service.get_run(run.id).state == RunState.SETTLED, timeout_s=60)
    wait_until(lambda: unacknowledged(redis_url, env["MEMLEDGER_REDIS_NAMESPACE"]) == 0, timeout_s=60)  # all 24 ran
    # Then one execution, one paid call, one settlement, one merge
    done = api.service.get_run(run.id)
    assert done.outcome == Outcome.APPLIED and done.model_calls == 1 and fake.calls == 1
    assert [r.body for r in led.list(led.scope_key)] == [MERGED]
    assert_ledger_sound(led, led.scope_key)
    settled_lines = [
        line for line in workers.log_lines() if str(line.get("event", "")).startswith(f"run {run.id} settled")
    ]
    assert len(settled_lines) == 1
    assert workers.terminate() == 0
    led.close()


def events(proc: Proc, pattern: str) -> list[re.Match[str]]:
    """The matches of ``pattern`` in ``proc``'s log lines' events, in order."""
    found = (re.fullmatch(pattern, str(line.get("event", ""))) for line in proc.log_lines())
    return [match for match in found if match is not None]


@pytest.mark.redis
def test_a_worker_process_killed_outright_is_replaced(
    spawn: Callable[..., Proc], base_env: dict[str, str], redis_url: str
) -> None:
    # Given a supervisor of two worker processes
    env = {**base_env, "MEMLEDGER_REDIS_URL": redis_url}
    workers = spawn("workers", ["memledger", "worker", "--processes", "2", "--threads", "1"], env)
    (supervising,) = wait_until(lambda: events(workers, r"supervising 2 worker processes: \[(\d+), (\d+)\]"))
    children = {int(supervising.group(1)), int(supervising.group(2))}
    # When one is killed outright, as soon as it is started (before it could say it is ready)
    victim = int(supervising.group(1))
    os.kill(victim, signal.SIGKILL)
    # Then the supervisor sees it die and starts another, which becomes ready
    wait_until(lambda: events(workers, rf"worker process {victim} exited with status -9; restarting it in \d+ s"))
    ready = r"memledger worker ready \(pid (\d+)\)"
    replacement = wait_until(
        lambda: [int(m.group(1)) for m in events(workers, ready) if int(m.group(1)) not in children], timeout_s=60
    )
    assert len(replacement) == 1
    assert workers.terminate() == 0


@pytest.mark.redis
def test_a_slow_failing_or_garbled_model_fails_the_run_once(
    make_runtime: Callable[..., Runtime], redis_url: str, fakes: Callable[..., FakeAnthropic]
) -> None:
    behaviours: dict[str, dict[str, Any]] = {
        "slow": {"delay_s": 5},
        "error500": {"replies": [Reply(status=500)] * 50},
        "overloaded529": {"replies": [Reply(status=529, retry_after_s=0.2)] * 50},
        "garbage": {"text": "Sure! Here are the operations you asked for: merge them all."},
    }
    runtime = make_runtime(redis_url=redis_url, service_kwargs={"api_key": "test-key"})
    scopes: dict[str, tuple[Ledger, FakeAnthropic]] = {}
    for name, behaviour in behaviours.items():
        led, _ = seed(runtime.config.database_url, name)
        fake = fakes(operations=merge_all, **behaviour)
        scopes[name] = (led, fake)
    # One service per fake base URL: settings are per scope, the base URL is per service.
    services = {}
    for name, (led, fake) in scopes.items():
        own = make_runtime(
            redis_url=redis_url,
            database_url=runtime.config.database_url,
            redis_namespace=f"{runtime.config.redis_namespace}-{name}",
            service_kwargs={"api_key": "test-key", "base_url": fake.base_url},
        )
        own.service.update_settings(
            led.scope_key, mode="apply", harness="anthropic", model=MODEL, debounce_s=0, wall_clock_cap_s=1.5
        )
        own.start_worker(threads=1)
        own.notify_turn(led.scope_key)
        services[name] = own
    wait_until(lambda: all(settled_all(own, [scopes[n][0].scope_key]) for n, own in services.items()), timeout_s=30)
    # No retry storm: every message (a retry is one) has run, so the model's call counts are final
    wait_until(lambda: unacknowledged(redis_url, runtime.config.redis_namespace) == 0, timeout_s=30)
    for name, (led, fake) in scopes.items():
        run = run_of(runtime, led.scope_key)
        assert (name, run.outcome) == (name, Outcome.FAILED), run.error
        assert run.ops_applied == 0 and sorted(r.body or "" for r in led.list(led.scope_key)) == sorted(TWO_DUPLICATES)
        assert run.started_at is not None and run.settled_at is not None
        assert run.settled_at - run.started_at < timedelta(seconds=4)
        calls = fake.calls
        if name == "overloaded529":
            assert 1 <= calls <= 8, calls  # retried inside the cap only, then given up
        else:
            assert calls == 1, (name, calls)
        led.close()


def test_sqlite_busy_is_waited_out(make_runtime: Callable[..., Runtime], tmp_path: Any) -> None:
    runtime = make_runtime()
    ids = [runtime.ledger.save(body).id for body in TWO_DUPLICATES]
    assert len(ids) == 2
    runtime.service.update_settings("account:local", mode="apply", harness="offline", debounce_s=0.3)
    runtime.start_worker(threads=2)
    # Given another writer holding the database's write lock for 2 s
    path = runtime.config.database_url.removeprefix("sqlite:///")
    blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN IMMEDIATE")
    release = threading.Timer(2.0, lambda: blocker.execute("COMMIT"))
    release.start()
    try:
        # When a turn is reported and its run falls due while the lock is held
        started = time.monotonic()
        run = runtime.notify_turn().consolidation
        assert run is not None and time.monotonic() - started >= 1.5
        # Then both complete once the lock is released: nothing lost, nothing doubled
        wait_until(lambda: runtime.service.get_run(run.id).state == RunState.SETTLED, timeout_s=15)
    finally:
        release.join()
        blocker.close()
    assert runtime.service.get_run(run.id).outcome == Outcome.APPLIED
    assert [r.body for r in runtime.ledger.list("account:local")] == [MERGED]


@pytest.mark.postgres
def test_postgres_serialization_failures_are_retried(
    make_runtime: Callable[..., Runtime], pg_migrated: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given PostgreSQL at SERIALIZABLE isolation, where concurrent writers fail with SQLSTATE 40001
    url = pg_migrated.replace("options=", "options=-cdefault_transaction_isolation%3Dserializable%20")
    from ledger import open_ledger as _open

    _open(url, migrate=True).close()
    runtime = make_runtime(database_url=url)
    for body in TWO_DUPLICATES:
        runtime.ledger.save(body)
    runtime.service.update_settings("account:local", mode="apply", harness="offline", debounce_s=0)
    with runtime.ledger.engine.connect() as conn:
        assert conn.execute(text("SHOW transaction_isolation")).scalar() == "serializable"
    retried: list[str] = []
    original = PostgresStore.is_busy

    def counting(self: PostgresStore, exc: BaseException) -> bool:
        verdict = original(self, exc)
        if verdict:
            retried.append(getattr(getattr(exc, "orig", None), "sqlstate", "?"))
        return verdict

    monkeypatch.setattr(PostgresStore, "is_busy", counting)
    # When many turns and many executions of the same run race
    errors: list[BaseException] = []
    barrier = threading.Barrier(16)

    def turn_then_execute() -> None:
        try:
            barrier.wait()
            run = runtime.service.notify_turn("account:local")
            assert run is not None
            runtime.service.execute(run.id)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=turn_then_execute) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    # Then nothing failed, every turn was counted, and each run settled once
    assert errors == []
    assert "40001" in retried, retried
    leftover = runtime.service.run_due()
    runs = runtime.service.runs("account:local")
    assert sum(r.turns for r in runs) == 16
    assert all(r.state == RunState.SETTLED for r in runs) and len(leftover) <= 1
    assert sum(r.ops_applied for r in runs) == 1
    assert [r.body for r in runtime.ledger.list("account:local")] == [MERGED]


@pytest.mark.redis
def test_sigterm_lets_the_run_in_flight_finish(
    make_runtime: Callable[..., Runtime],
    spawn: Callable[..., Proc],
    base_env: dict[str, str],
    redis_url: str,
    fakes: Callable[..., FakeAnthropic],
) -> None:
    env, api = api_on(make_runtime, base_env, redis_url)
    led, _ = seed(api.config.database_url, "term")
    fake = fakes(operations=merge_all, delay_s=2)
    env.update(ANTHROPIC_API_KEY="test-key", ANTHROPIC_BASE_URL=fake.base_url)
    api.service.update_settings(
        led.scope_key, mode="apply", harness="anthropic", model=MODEL, debounce_s=0, wall_clock_cap_s=20
    )
    worker = spawn("worker", ["memledger", "worker", "--threads", "2"], env)
    wait_until(lambda: "memledger worker ready" in worker.err.read_text(), timeout_s=60)
    run = api.notify_turn(led.scope_key).consolidation
    assert run is not None
    # When SIGTERM arrives while the model call is in flight
    wait_until(lambda: fake.calls >= 1, timeout_s=30)
    # Then the worker finishes the run before it exits, cleanly
    assert worker.terminate(timeout_s=30) == 0
    done = api.service.get_run(run.id)
    assert done.state == RunState.SETTLED and done.outcome == Outcome.APPLIED and fake.calls == 1
    led.close()


@pytest.mark.soak
def test_soak_sqlite_locked_past_the_busy_timeout(make_runtime: Callable[..., Runtime]) -> None:
    """Held longer than SQLite's own busy timeout (5 s): the ledger's retry loop takes over."""
    runtime = make_runtime()
    for body in TWO_DUPLICATES:
        runtime.ledger.save(body)
    runtime.service.update_settings("account:local", mode="apply", harness="offline", debounce_s=0.3)
    runtime.start_worker(threads=2)
    path = runtime.config.database_url.removeprefix("sqlite:///")
    blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN IMMEDIATE")
    release = threading.Timer(8.0, lambda: blocker.execute("COMMIT"))
    release.start()
    try:
        run = runtime.notify_turn().consolidation
        assert run is not None
        wait_until(lambda: runtime.service.get_run(run.id).state == RunState.SETTLED, timeout_s=30)
    finally:
        release.join()
        blocker.close()
    assert [r.body for r in runtime.ledger.list("account:local")] == [MERGED]


@pytest.mark.soak
@pytest.mark.redis
def test_soak_workers_killed_at_random_while_turns_keep_coming(
    make_runtime: Callable[..., Runtime],
    spawn: Callable[..., Proc],
    base_env: dict[str, str],
    redis_url: str,
    fakes: Callable[..., FakeAnthropic],
) -> None:
    import random

    rng = random.Random(7)
    env, api = api_on(make_runtime, base_env, redis_url, MEMLEDGER_JANITOR_GRACE_S="0.5")
    fake = fakes(operations=merge_all, delay_s=0.4)
    env.update(ANTHROPIC_API_KEY="test-key", ANTHROPIC_BASE_URL=fake.base_url)
    ledgers = [seed(api.config.database_url, f"soak{i}")[0] for i in range(6)]
    for led in ledgers:
        api.service.update_settings(
            led.scope_key, mode="apply", harness="anthropic", model=MODEL, debounce_s=0.3, wall_clock_cap_s=3
        )
    workers = [spawn(f"w{i}", ["memledger", "worker", "--threads", "2"], env) for i in range(2)]
    kills, deadline, spawned = 0, time.monotonic() + 60, 2
    while time.monotonic() < deadline:
        api.notify_turn(rng.choice(ledgers).scope_key)
        time.sleep(rng.uniform(0.05, 0.3))
        if rng.random() < 0.06:
            victim = workers.pop(rng.randrange(len(workers)))
            victim.popen.send_signal(signal.SIGKILL)
            victim.popen.wait(10)
            kills += 1
            workers.append(spawn(f"w{spawned}", ["memledger", "worker", "--threads", "2"], env))
            spawned += 1
    every = [led.scope_key for led in ledgers]
    wait_until(
        lambda: all(r.state == RunState.SETTLED for s in every for r in api.service.runs(s, limit=10_000)), timeout_s=90
    )
    runs = [r for s in every for r in api.service.runs(s, limit=10_000)]
    assert {r.outcome for r in runs} <= {Outcome.APPLIED, Outcome.ABANDONED}
    assert fake.calls <= sum(r.model_calls for r in runs) + kills  # a paid call lost only with a killed worker
    for led in ledgers:
        assert_ledger_sound(led, led.scope_key)
        led.close()


def _start_private_redis(port: int, workdir: Any) -> Any:
    import shutil
    import subprocess

    binary = shutil.which("redis-server")
    if binary is None:
        from tests.conftest import service_missing

        service_missing("redis-server (to run a private Redis that the test can restart)", FileNotFoundError())
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    proc = popen([*args, "--dir", str(workdir)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(port=port)
    wait_until(lambda: _pings(client), timeout_s=15)
    client.close()
    return proc


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


@pytest.mark.redis
def test_a_restarted_redis_that_kept_nothing_loses_no_run(
    make_runtime: Callable[..., Runtime],
    spawn: Callable[..., Proc],
    base_env: dict[str, str],
    redis_url: str,
    tmp_path: Any,
) -> None:
    # Given a Redis server of the test's own (so it can be killed), an API runtime and a worker on it
    from tests.worker.conftest import free_port

    port = free_port()
    server = _start_private_redis(port, tmp_path)
    url = f"redis://127.0.0.1:{port}/0"
    env, api = api_on(make_runtime, base_env, url)
    scopes = []
    for i in range(3):
        led, _ = seed(api.config.database_url, f"restart{i}")
        scopes.append(led.scope_key)
        led.close()
        api.service.update_settings(scopes[-1], mode="apply", harness="offline", debounce_s=2.0)
    worker = spawn("worker", ["memledger", "worker", "--threads", "2"], env)
    try:
        wait_until(lambda: "memledger worker ready" in worker.err.read_text(), timeout_s=60)
        for scope in scopes:
            api.notify_turn(scope)
        # When Redis dies with the delayed messages and comes back empty (it keeps nothing on disk), and for good
        # measure whatever of the namespace a restart could have kept is deleted
        kill_group(server)
        server = _start_private_redis(port, tmp_path)
        lose_namespace(url, env["MEMLEDGER_REDIS_NAMESPACE"])
        # Then every pending run still executes, exactly once
        wait_until(lambda: settled_all(api, scopes), timeout_s=90)
        wait_until(lambda: unacknowledged(url, env["MEMLEDGER_REDIS_NAMESPACE"]) == 0, timeout_s=30)
        for scope in scopes:
            (run,) = api.service.runs(scope)
            assert run.outcome == Outcome.APPLIED and run.ops_applied == 1
        assert worker.terminate() == 0
    finally:
        kill_group(server)
