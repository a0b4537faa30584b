"""End to end with real processes: `memledger serve` embedded, then `serve --no-worker` + `memledger worker`."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from consolidation import ConsolidationService, RunState
from ledger import open_ledger
from tests.consolidation.vendors import VENDORS, Vendor
from tests.worker.conftest import TWO_DUPLICATES, FakeModel, Proc, free_port, run_cli, wait_until


def rpc(base: str, method: str, params: dict[str, Any] | None = None) -> Any:
    request: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": method}
    if params is not None:
        request["params"] = params
    response = httpx.post(f"{base}/rpc", json=request, timeout=10)
    response.raise_for_status()
    body = response.json()
    assert "error" not in body, body
    return body["result"]


def healthy(base: str) -> bool:
    try:
        return httpx.get(f"{base}/healthz", timeout=1).json()["status"] == "ok"
    except (httpx.HTTPError, ValueError):
        return False


def active(base: str) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = rpc(base, "memory/list_memory_records", {"scopeKey": "account:local"})["records"]
    return records


def cli(env: dict[str, str], *args: str) -> str:
    """An operator's command, run in this process: the processes under test are ``serve`` and ``worker``."""
    result = run_cli(env, *args)
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    return result.stdout


def chat_session(base: str, env: dict[str, str]) -> None:
    """Pins over HTTP, consolidation on, three turns, the merged record after the debounce."""
    for body in TWO_DUPLICATES:
        rpc(base, "memory/save_memory_record", {"body": body})
    cli(env, "consolidation", "set", "account:local", "--mode", "apply", "--harness", "offline", "--debounce-s", "2")
    # Three turns in one batch: the server takes them within milliseconds, well inside the debounce,
    # however loaded the machine (turns spaced by the test's own sleeps made two runs under load).
    batch = [{"jsonrpc": "2.0", "id": n, "method": "consolidation/notify_turn"} for n in range(3)]
    answers = httpx.post(f"{base}/rpc", json=batch, timeout=10).json()
    assert all(answer["result"]["scheduled"] is True for answer in answers), answers
    runs = {answer["result"]["runId"] for answer in answers}
    assert len(runs) == 1
    assert len(active(base)) == 2  # still inside the debounce window
    wait_until(lambda: len(active(base)) == 1, timeout_s=30)
    (merged,) = active(base)
    assert merged["provenance"] == "model_consolidation" and merged["body"] == TWO_DUPLICATES[0]
    (run,) = json.loads(cli(env, "runs", "--json"))
    assert run["id"] in runs and run["state"] == "settled" and run["outcome"] == "applied" and run["turns"] == 3


def assert_clean_logs(proc: Proc) -> None:
    lines = proc.log_lines()
    assert lines, proc.text()
    assert all("run_id" in line and "scope_key" in line for line in lines)
    assert all(line["scope_key"] for line in lines if line["run_id"]), "a line inside a run names its scope"
    assert not any(body in proc.err.read_text() for body in TWO_DUPLICATES)


def test_embedded_serve_is_a_complete_single_machine_service(
    spawn: Callable[..., Proc], base_env: dict[str, str]
) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    serve = spawn("serve", ["memledger", "serve", "--port", str(port)], base_env)
    wait_until(lambda: healthy(base), timeout_s=60)
    assert serve.out.read_text() == ""  # no banner when not on a terminal (its output is a file here)
    chat_session(base, base_env)
    assert 'memledger_runs_settled_total{outcome="applied"} 1.0' in httpx.get(f"{base}/metrics").text
    assert serve.terminate(timeout_s=20) == 0
    assert_clean_logs(serve)
    events = [str(line.get("event", "")) for line in serve.log_lines()]
    assert any(e.startswith("run ") and " settled applied" in e for e in events)
    assert any(e.startswith("sweep at ") for e in events), "the embedded sweep schedule ran at start"


@pytest.mark.redis
def test_api_node_and_worker_processes_on_redis(
    spawn: Callable[..., Proc], base_env: dict[str, str], redis_url: str
) -> None:
    env = {**base_env, "MEMLEDGER_REDIS_URL": redis_url}
    port, metrics_port = free_port(), free_port()
    base = f"http://127.0.0.1:{port}"
    api = spawn("api", ["memledger", "serve", "--port", str(port), "--no-worker"], env)
    worker_env = {**env, "MEMLEDGER_METRICS_PORT": str(metrics_port)}
    workers = spawn("worker", ["memledger", "worker", "--processes", "2", "--threads", "2"], worker_env)
    wait_until(lambda: healthy(base), timeout_s=60)
    assert httpx.get(f"{base}/healthz").json()["worker"] is False
    chat_session(base, env)

    def aggregated() -> bool:
        try:
            text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=1).text
        except httpx.HTTPError:
            return False
        # the children's counters, summed, and the operator gauges the supervisor reads from the database
        scope_runs = 'memledger_scope_month_runs{outcome="applied",scope="account:local"} 1.0'
        return 'memledger_runs_settled_total{outcome="applied"} 1.0' in text and scope_runs in text

    wait_until(aggregated, timeout_s=10)
    assert api.terminate(timeout_s=20) == 0
    assert workers.terminate(timeout_s=30) == 0
    assert_clean_logs(api)
    assert_clean_logs(workers)


# The operations expire, group and retire end to end: `memledger turn` → a worker → the fake model (its own
# process) → the ledger. Embedded (`memledger serve` runs the worker in-process) on the anthropic harness, and on
# Redis (`serve --no-worker` + `memledger worker`) on the openai one: the operations do not depend on the SDK, each
# process that runs a paying harness imports its SDK (the Anthropic one about 0.6 s of CPU more here), and each SDK
# is run by one of them. The fake's script names its targets by body (``target_bodies``), as a run's ids are per run.
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
