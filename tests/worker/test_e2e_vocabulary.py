"""The new operations end to end: `memledger turn` → a worker → the fake model (its own process) → the ledger.

Embedded (`memledger serve` runs the worker in-process) on the anthropic harness, and on Redis
(`serve --no-worker` + `memledger worker`) on the openai one: the operations do not depend on the
SDK, each process that runs a paying harness imports its SDK (the Anthropic one about 0.6 s of CPU
more here), and each SDK is run by one of them. The fake's script names its targets by body
(``target_bodies``), as a run's ids are per run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from consolidation import ConsolidationService, RunState
from ledger import open_ledger
from tests.consolidation.vendors import VENDORS, Vendor
from tests.worker.conftest import FakeModel, Proc, free_port, wait_until
from tests.worker.test_e2e import active, cli, healthy, rpc

TRIP, PARIS, LYON, STALE = "I am in Tokyo this week", "I live in Paris", "I live in Lyon", "My old pager number is 1234"
SCRIPT = [
    {"op": "expire", "target_bodies": [TRIP], "after_days": 7},
    {"op": "group", "target_bodies": [PARIS, LYON], "subject": "Home city"},
    {"op": "retire", "target_bodies": [STALE]},
]


def session(base: str, env: dict[str, str], fake: FakeModel, vendor: Vendor) -> None:
    for body in (TRIP, PARIS, LYON, STALE):
        rpc(base, "memory/save_memory_record", {"body": body})
    # The vendor's settings as the command's options: --harness, --model and, for the openai one, its prices
    target = [f"--{name.replace('_', '-')}={value}" for name, value in vendor.settings().items()]
    cli(env, "consolidation", "set", "account:local", "--mode", "apply", *target, "--debounce-s", "0.5",
        "--allow-removal")  # fmt: skip
    cli(env, "turn", "account:local")
    # Polled in this process (a `memledger runs` subprocess per poll cost a start-up each time) …
    watcher = ConsolidationService(open_ledger(env["MEMLEDGER_DATABASE_URL"]))
    try:
        wait_until(lambda: [r for r in watcher.runs() if r.state == RunState.SETTLED], timeout_s=60)
    finally:
        watcher.led.close()
    # … and read once through the command line
    runs: list[dict[str, Any]] = json.loads(cli(env, "runs", "--json"))
    (run,) = [r for r in runs if r["state"] == "settled"]
    assert run["outcome"] == "applied" and (run["opsApplied"], run["opsRefused"]) == (3, 0), run
    assert fake.calls == 1
    records = {r["body"]: r for r in active(base)}
    assert set(records) == {TRIP, LYON}
    assert records[TRIP]["expiresAt"] is not None
    assert records[LYON]["conflictGroup"] == "home-city"
    assert records[LYON]["provenance"] == "model_consolidation"


ANTHROPIC, OPENAI = ({v.name: v for v in VENDORS}[name] for name in ("anthropic", "openai"))


def fake_env(base_env: dict[str, str], fake: FakeModel, vendor: Vendor) -> dict[str, str]:
    return {**base_env, **vendor.environment(fake.base_url)}


def test_expire_group_and_retire_through_the_embedded_worker(
    spawn: Callable[..., Proc], base_env: dict[str, str], fake_model: Callable[..., FakeModel]
) -> None:
    fake = fake_model(script={"operations": SCRIPT})
    env = fake_env(base_env, fake, ANTHROPIC)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    serve = spawn("serve", ["memledger", "serve", "--port", str(port)], env)
    wait_until(lambda: healthy(base), timeout_s=60)

    session(base, env, fake, ANTHROPIC)

    assert serve.terminate(timeout_s=20) == 0
    assert STALE not in serve.err.read_text()


@pytest.mark.redis
def test_expire_group_and_retire_through_worker_processes_on_redis(
    spawn: Callable[..., Proc], base_env: dict[str, str], redis_url: str, fake_model: Callable[..., FakeModel]
) -> None:
    fake = fake_model(script={"operations": SCRIPT}, vendor=OPENAI.name)
    env = {**fake_env(base_env, fake, OPENAI), "MEMLEDGER_REDIS_URL": redis_url}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    api = spawn("api", ["memledger", "serve", "--port", str(port), "--no-worker"], env)
    workers = spawn("worker", ["memledger", "worker", "--processes", "1", "--threads", "2"], env)
    wait_until(lambda: healthy(base), timeout_s=60)

    session(base, env, fake, OPENAI)

    assert api.terminate(timeout_s=20) == 0
    assert workers.terminate(timeout_s=30) == 0
