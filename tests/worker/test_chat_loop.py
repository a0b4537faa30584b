"""A chat backend's whole loop (docs/extraction.md) over HTTP and over stdio: after each turn
``memory/notify_turn`` with the new messages; before each turn ``memory/build_packet`` with
the session; the user reviews suggestions with ``/pins`` and accepts or rejects them; the
audit says what the chat received; the injection switch; capabilities; and the operator's
``memledger extraction set|status`` and ``memledger runs --json`` with the job."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient
from typer.testing import Result

from consolidation import RunState
from tests.hygiene import kill_group, lose_namespace, popen
from tests.worker.conftest import MEMLEDGER, run_cli, wait_until
from worker.runtime import Runtime

SCOPE = "account:local"


def rpc(client: TestClient, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    request: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": method}
    if params is not None:
        request["params"] = params
    # json.dumps escapes a lone surrogate (\ud800) as JSON allows; the server must refuse it as text.
    response = client.post("/rpc", content=json.dumps(request), headers={"content-type": "application/json"})
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


def ok(client: TestClient, method: str, params: dict[str, Any] | None = None) -> Any:
    body = rpc(client, method, params)
    assert "result" in body, body
    return body["result"]


def test_the_whole_loop_over_http(app_with_worker: tuple[TestClient, Runtime]) -> None:
    client, runtime = app_with_worker
    # The client asks what the ledger offers
    caps = ok(client, "memory/get_memory_capabilities")
    assert caps["scopeKey"] == SCOPE and caps["injection"] is True and caps["extraction"]["enabled"] is False
    assert caps["consolidation"]["available"] is True and "merge" in caps["consolidation"]["operations"]
    # The account switches extraction on (offline harness: no API key here)
    settings = ok(client, "memory/update_extraction_settings", {"mode": "propose", "debounceS": 0.2})
    assert settings == {
        "scopeKey": SCOPE,
        "mode": "propose",
        "debounceS": 0.2,
        "harness": "offline",
        "model": "offline",
        "baseUrl": None,
        "priceInUsdPerMtok": None,
        "priceOutUsdPerMtok": None,
    }
    assert ok(client, "memory/get_extraction_settings") == settings
    ok(client, "memory/save_memory_record", {"body": "I use vim"})
    # Before the turn: the packet for the session, and its audit
    packet = ok(client, "memory/build_packet", {"scopeKey": SCOPE, "sessionId": "chat-1"})
    assert packet["text"].splitlines()[1].endswith("fact: I use vim") and packet["sessionId"] == "chat-1"
    # After the turn: its messages
    turn = ok(
        client,
        "memory/notify_turn",
        {
            "sessionId": "chat-1",
            "messages": [
                {"id": "u1", "role": "user", "text": "Remember that my deploy region is eu-west-1."},
                {"id": "a1", "role": "assistant", "text": "Noted. I prefer to remember that you like YAML."},
            ],
        },
    )
    assert turn["extraction"]["scheduled"] is True and turn["consolidation"] == {"scheduled": False}
    run_id = turn["extraction"]["runId"]
    wait_until(lambda: runtime.service.get_run(run_id).state == RunState.SETTLED, timeout_s=10)
    # The user reviews the suggestion with /pins and accepts it
    pins = ok(client, "memory/handle_slash_command", {"text": "/pins"})
    assert "My deploy region is eu-west-1" in pins["reply"] and "YAML" not in pins["reply"]
    [proposal] = ok(client, "memory/list_proposed_memory_records", {"scopeKey": SCOPE})["records"]
    assert proposal["provenance"] == "model_proposal" and proposal["sourceSessionId"] == "chat-1"
    packet = ok(client, "memory/build_packet", {"scopeKey": SCOPE, "sessionId": "chat-1"})
    assert {"id": proposal["id"], "code": "proposed"} in packet["excluded"]
    ok(client, "memory/accept_proposed_memory_record", {"id": proposal["id"]})
    # Before the next turn the packet carries it, after the explicit pin, and the audit says so
    packet = ok(client, "memory/build_packet", {"scopeKey": SCOPE, "sessionId": "chat-1"})
    assert [s["reason"] for s in packet["selected"]] == ["explicit_pin", "accepted_suggestion"]
    audit = ok(client, "memory/get_packet_audit", {"sessionId": "chat-1"})
    assert audit["text"] == packet["text"] and audit["selected"][1]["body"] == "My deploy region is eu-west-1"
    assert ok(client, "memory/get_packet_audit", {"sessionId": "never-built"}) is None
    # /unpin by the prefix the packet cites
    cited = packet["text"].splitlines()[1][1:9]
    assert ok(client, "memory/handle_slash_command", {"text": f"/unpin {cited}"})["ok"] is True
    # The user switches injection off: an empty packet and no new audit
    assert ok(client, "memory/set_memory_injection", {"enabled": False}) == {"scopeKey": SCOPE, "enabled": False}
    assert ok(client, "memory/get_memory_injection") == {"scopeKey": SCOPE, "enabled": False}
    empty = ok(client, "memory/build_packet", {"scopeKey": SCOPE, "sessionId": "chat-2"})
    assert empty["text"] == "" and empty["injection"] is False
    assert ok(client, "memory/get_packet_audit", {"sessionId": "chat-2"}) is None
    assert ok(client, "memory/get_memory_capabilities")["injection"] is False
    metrics = client.get("/metrics").text
    assert 'memledger_runs_by_job_total{job="extract",outcome="proposed"}' in metrics


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("memory/notify_turn", {"messages": [{"role": "user", "text": "x"}]}),
        ("memory/notify_turn", {"sessionId": "s", "messages": []}),
        ("memory/notify_turn", {"sessionId": "s", "messages": [{"role": "robot", "text": "x"}]}),
        ("memory/notify_turn", {"sessionId": "bad\u0007id", "messages": [{"role": "user", "text": "x"}]}),
        ("memory/notify_turn", {"sessionId": "s", "messages": [{"role": "user", "text": "lone \ud800"}]}),
        ("memory/notify_turn", {"sessionId": "s", "messages": "hello"}),
        ("memory/notify_turn", {"sessionId": "s", "messages": [{"role": "user", "text": "x"}], "scopeKey": "x:y"}),
        ("memory/update_extraction_settings", {"mode": "apply"}),
        ("memory/update_extraction_settings", {"harness": "gemini"}),
        ("memory/update_extraction_settings", {"debounceS": -1}),
        ("memory/get_extraction_settings", {"x": 1}),
        ("memory/build_packet", {"scopeKey": SCOPE, "sessionId": ""}),
        ("memory/build_packet", {"scopeKey": SCOPE, "sessionId": "tab\there"}),
        ("memory/get_packet_audit", {}),
        ("memory/set_memory_injection", {"enabled": "no"}),
        ("memory/get_memory_capabilities", {"scopeKey": SCOPE}),
    ],
)
def test_bad_params_are_invalid_params_and_change_nothing(
    app_with_worker: tuple[TestClient, Runtime], method: str, params: dict[str, Any]
) -> None:
    client, runtime = app_with_worker
    ok(client, "memory/update_extraction_settings", {"mode": "propose", "debounceS": 60})
    body = rpc(client, method, params)
    assert body["error"]["code"] == -32602 and body["error"]["data"]["reason"] == "invalid_params", body
    assert runtime.service.runs(SCOPE) == []
    assert runtime.service.extraction_settings(SCOPE).mode == "propose"
    assert runtime.ledger.injection(SCOPE) is True


class StdioRpc:
    """One ``memledger rpc`` process for the whole conversation, as a chat backend keeps it: a request line
    out, its answer line back (a process per exchange would pay the start-up each time)."""

    def __init__(self, env: dict[str, str], stderr: Path) -> None:
        self._stderr = stderr
        with stderr.open("wb") as err:
            self._popen = popen([MEMLEDGER, "rpc"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
        self._next_id = 0

    def ask(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        assert self._popen.stdin is not None and self._popen.stdout is not None
        self._next_id += 1
        request = {"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params}
        self._popen.stdin.write(json.dumps(request).encode() + b"\n")
        self._popen.stdin.flush()
        line = self._popen.stdout.readline()  # the per-test timeout bounds a server that never answers
        assert line, self._stderr.read_text()
        answer: dict[str, Any] = json.loads(line)
        assert answer["id"] == self._next_id, answer
        return answer

    def close(self) -> int:
        """End of input: the server exits; its status."""
        assert self._popen.stdin is not None and self._popen.stdout is not None
        self._popen.stdin.close()
        status = self._popen.wait(60)
        self._popen.stdout.close()
        return status

    def kill(self) -> None:
        kill_group(self._popen)
        for pipe in (self._popen.stdin, self._popen.stdout):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def stdio_rpc(tmp_path: Path) -> Iterator[Callable[[dict[str, str]], StdioRpc]]:
    """Factory of ``memledger rpc`` processes, killed after the test if still running."""
    started: list[StdioRpc] = []

    def start(env: dict[str, str]) -> StdioRpc:
        started.append(StdioRpc(env, tmp_path / f"rpc-{len(started)}.err"))
        return started[-1]

    yield start
    for process in started:
        process.kill()


def test_the_loop_over_stdio_and_the_operator_commands(
    base_env: dict[str, str], stdio_rpc: Callable[[dict[str, str]], StdioRpc]
) -> None:
    env = {**base_env, "MEMLEDGER_LOG_LEVEL": "WARNING"}

    def cli(*args: str) -> Result:  # the operator's commands in this process; `memledger rpc` is the process here
        result = run_cli(env, *args)
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exception  # no crash
        return result

    # The operator turns extraction on for the account, offline, with no debounce
    done = cli("extraction", "set", SCOPE, "--mode", "propose", "--harness", "offline", "--debounce-s", "0", "--json")
    assert done.exit_code == 0, (done.stderr, done.exception)
    assert json.loads(done.stdout)["settings"]["mode"] == "propose"
    bad = cli("extraction", "set", SCOPE, "--mode", "apply")
    assert bad.exit_code == 2
    bad = cli("extraction", "set", SCOPE, "--harness", "gpt")
    assert bad.exit_code == 1 and "harness" in bad.stderr
    # The chat backend reports a turn over stdio
    chat = stdio_rpc(env)
    turn = chat.ask("memory/notify_turn", {"sessionId": "s1", "messages": [
        {"role": "user", "text": "Call me Sam. What's the weather like?"}]})  # fmt: skip
    assert turn["result"]["extraction"]["scheduled"] is True
    assert cli("consolidation", "run-due").exit_code == 0  # `memledger serve` would run it; here by hand
    runs = json.loads(cli("runs", "--json").stdout)
    assert [(r["job"], r["outcome"], r["sessionId"]) for r in runs] == [("extract", "proposed", "s1")]
    status = json.loads(cli("extraction", "status", SCOPE, "--json").stdout)
    assert [r["id"] for r in status["runs"]] == [runs[0]["id"]]
    # The same rpc process sees what the other process wrote
    listed = chat.ask("memory/list_proposed_memory_records", {"scopeKey": SCOPE})
    packet = chat.ask("memory/build_packet", {"scopeKey": SCOPE, "sessionId": "s1"})
    [proposal] = listed["result"]["records"]
    assert proposal["body"] == "Call me Sam"
    assert packet["result"]["excluded"] == [{"id": proposal["id"], "code": "proposed"}]
    accepted = chat.ask("memory/accept_proposed_memory_record", {"id": proposal["id"]})
    packet = chat.ask("memory/build_packet", {"scopeKey": SCOPE, "sessionId": "s1"})
    audit = chat.ask("memory/get_packet_audit", {"sessionId": "s1"})
    assert chat.close() == 0
    assert accepted["result"]["status"] == "active"
    assert packet["result"]["text"].endswith("preference: Call me Sam")
    assert audit["result"]["selected"][0]["body"] == "Call me Sam"
    table = cli("runs")
    assert table.exit_code == 0 and "extract" in table.stdout


@pytest.mark.redis
def test_extraction_runs_on_the_redis_broker_and_the_janitor_wakes_a_lost_run(
    make_runtime: Callable[..., Runtime], redis_url: str
) -> None:
    runtime = make_runtime(redis_url=redis_url, sweep_interval_s=0)
    runtime.service.update_extraction_settings(SCOPE, mode="propose", harness="offline", debounce_s=0)
    # Given a turn whose message is lost (Redis lost it before any worker ran)
    _, lost = runtime.notify_turn(SCOPE, session_id="s1", messages=[{"role": "user", "text": "Call me Ana."}])
    assert lost is not None
    lose_namespace(redis_url, runtime.config.redis_namespace)
    runtime.start_worker(threads=2)
    # When the janitor passes, the run is re-sent and executed once by a dramatiq worker on Redis
    report = runtime.janitor.run_once()
    assert report.rearmed + report.resent >= 1
    wait_until(lambda: runtime.service.get_run(lost.id).state == RunState.SETTLED, timeout_s=15)
    assert runtime.service.get_run(lost.id).proposals_written == 1
    # And a second turn goes through the queue as any other
    _, second = runtime.notify_turn(SCOPE, session_id="s2", messages=[{"role": "user", "text": "I prefer tea."}])
    assert second is not None
    wait_until(lambda: runtime.service.get_run(second.id).state == RunState.SETTLED, timeout_s=15)
    assert sorted(p.body for p in runtime.ledger.proposals(SCOPE)) == ["Call me Ana", "I prefer tea"]
