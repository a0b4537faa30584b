"""The model target on the protocol's settings methods (docs/consolidation.md, "Choices made").

A server that serves its one account without tokens answers its operator: the settings updates take
``harness``, ``model``, ``baseUrl`` and the two prices, checked as ``memledger consolidation set`` /
``memledger extraction set`` check them, and a run then calls the server they name (the loopback Chat
Completions fake, through the real ``openai`` SDK). With tokens on, every caller is a tenant: each of
the five is refused the same way whatever its value, and nothing changes. Both jobs, through a real
app (Starlette's TestClient) and, for ``memledger rpc``, its method table.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from starlette.testclient import TestClient

from consolidation.fake_anthropic import request_records
from consolidation.fake_openai import FakeOpenAI
from ledger import open_ledger
from ledger.protocol import handle
from worker.http.server import create_app
from worker.http.tokens import TokenStore
from worker.runtime import Runtime

SCOPE = "account:local"
MODEL = "qwen2.5:7b-instruct"
JSON = {"content-type": "application/json"}
JOBS = {
    "consolidation": ("memory/get_consolidation_settings", "memory/update_consolidation_settings"),
    "extraction": ("memory/get_extraction_settings", "memory/update_extraction_settings"),
}
TARGET = ("harness", "model", "baseUrl", "priceInUsdPerMtok", "priceOutUsdPerMtok")
DUPLICATES = ("I prefer metric units", "i prefer  metric units.")


@pytest.fixture(autouse=True)
def no_openai_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def scripted_openai() -> Iterator[FakeOpenAI]:
    merge = [{"op": "merge", "target_bodies": list(DUPLICATES), "body": "I prefer metric units"}]
    proposals = [{"body": "My deploy region is eu-west-1", "kind": "fact"}]
    with FakeOpenAI(operations=merge, proposals=proposals) as server:
        yield server


@pytest.fixture
def loopback(make_runtime: Callable[..., Runtime]) -> Iterator[tuple[TestClient, Runtime]]:
    runtime = make_runtime(sweep_interval_s=0)
    with TestClient(create_app(runtime, run_worker=False), base_url="http://127.0.0.1:8080") as client:
        yield client, runtime


@pytest.fixture
def tenants(make_runtime: Callable[..., Runtime]) -> Iterator[tuple[TestClient, Runtime, str]]:
    runtime = make_runtime(sweep_interval_s=0, auth="tokens")
    with TestClient(create_app(runtime, run_worker=False), base_url="http://memory.example.com") as client:
        _, token = TokenStore.for_ledger(runtime.ledger).create("alice")
        yield client, runtime, token


def post(client: TestClient, method: str, params: dict[str, Any] | None = None, token: str | None = None) -> Any:
    request: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": method}
    if params is not None:
        request["params"] = params
    headers = {**JSON, **({"authorization": f"Bearer {token}"} if token else {})}
    # json.dumps escapes a lone surrogate as JSON allows: the server must refuse it as text.
    response = client.post("/rpc", content=json.dumps(request), headers=headers)
    assert response.status_code == 200
    return response


def ok(client: TestClient, method: str, params: dict[str, Any] | None = None, token: str | None = None) -> Any:
    body = post(client, method, params, token).json()
    assert "result" in body, body
    return body["result"]


def local_target(fake: FakeOpenAI) -> dict[str, Any]:
    return {"harness": "openai", "model": MODEL, "baseUrl": fake.base_url, "priceInUsdPerMtok": 0,
            "priceOutUsdPerMtok": 0}  # fmt: skip


# ---------------------------------------------------------------------- the operator's loopback server
def test_the_operator_points_consolidation_at_a_local_server_and_a_run_uses_it(
    loopback: tuple[TestClient, Runtime], scripted_openai: FakeOpenAI
) -> None:
    client, runtime = loopback
    # Given the scope pointed at a local OpenAI-compatible server, free of charge, over the protocol
    settings = ok(client, "memory/update_consolidation_settings", {"mode": "apply", **local_target(scripted_openai)})
    assert {name: settings[name] for name in TARGET} == local_target(scripted_openai)
    assert settings["mode"] == "apply"
    assert ok(client, "memory/get_consolidation_settings") == settings
    # and two records that say the same thing, and a turn
    for body in DUPLICATES:
        ok(client, "memory/save_memory_record", {"body": body, "kind": "preference"})
    turn = ok(client, "consolidation/notify_turn")
    assert turn["scheduled"] is True

    # When the worker's service runs what is due (after the debounce)
    due = runtime.service.get_run(turn["runId"]).due_at
    [settled] = runtime.service.run_due(now=due + timedelta(seconds=1))

    # Then the call went to that server with that model, and the merge is applied at no cost
    assert scripted_openai.calls == 1
    assert (
        scripted_openai.requests[0].json["model"] == MODEL
        and len(request_records(scripted_openai.requests[0].json)) == 2
    )
    assert (settled.harness, settled.model, settled.outcome, settled.ops_applied) == ("openai", MODEL, "applied", 1)
    assert settled.input_tokens > 0 and settled.spend_micro_usd == 0
    assert [r.body for r in runtime.ledger.list(SCOPE)] == ["I prefer metric units"]


def test_the_operator_points_extraction_at_a_local_server_and_a_run_uses_it(
    loopback: tuple[TestClient, Runtime], scripted_openai: FakeOpenAI
) -> None:
    client, runtime = loopback
    # Given extraction on, on a local server, free of charge, over the protocol
    settings = ok(client, "memory/update_extraction_settings", {"mode": "propose", **local_target(scripted_openai)})
    assert {name: settings[name] for name in TARGET} == local_target(scripted_openai)
    assert ok(client, "memory/get_extraction_settings") == settings
    # and a turn of a conversation
    turn = ok(client, "memory/notify_turn", {"sessionId": "chat-1", "messages": [
        {"role": "user", "text": "Remember that my deploy region is eu-west-1."}]})  # fmt: skip
    run_id = turn["extraction"]["runId"]

    # When its run is due
    due = runtime.service.get_run(run_id).due_at
    runtime.service.run_due(now=due + timedelta(seconds=1))

    # Then the call went to that server with that model, and its proposal waits for the user
    assert scripted_openai.calls == 1 and scripted_openai.requests[0].json["model"] == MODEL
    run = runtime.service.get_run(run_id)
    assert (run.job, run.harness, run.model, run.spend_micro_usd) == ("extract", "openai", MODEL, 0)
    assert [r.body for r in runtime.ledger.proposals(SCOPE)] == ["My deploy region is eu-west-1"]


@pytest.mark.parametrize("job", list(JOBS))
def test_memledger_rpc_is_the_operator_too(job: str, scripted_openai: FakeOpenAI, tmp_path: Any) -> None:
    from worker.cli.rpc import rpc_extra_methods

    get, update = JOBS[job]
    led = open_ledger(f"sqlite:///{tmp_path / 'rpc.db'}")
    try:
        extra = rpc_extra_methods(led)
        request = {"jsonrpc": "2.0", "id": 1, "method": update, "params": local_target(scripted_openai)}
        answer = handle(led, request, extra_methods=extra)
        assert answer is not None and "result" in answer, answer
        shown = handle(led, {"jsonrpc": "2.0", "id": 2, "method": get}, extra_methods=extra)
        assert shown is not None and {name: shown["result"][name] for name in TARGET} == local_target(scripted_openai)
    finally:
        led.close()


@pytest.mark.parametrize("job", list(JOBS))
def test_null_unsets_the_base_url_and_the_prices(job: str, loopback: tuple[TestClient, Runtime]) -> None:
    client, _ = loopback
    get, update = JOBS[job]
    ok(client, update, {"harness": "openai", "model": "gpt-4o-mini", "baseUrl": "http://127.0.0.1:9/v1",
                        "priceInUsdPerMtok": 0.5, "priceOutUsdPerMtok": 2})  # fmt: skip
    unset = ok(client, update, {"baseUrl": None, "priceInUsdPerMtok": None, "priceOutUsdPerMtok": None})
    assert (unset["harness"], unset["model"]) == ("openai", "gpt-4o-mini")  # priced by the table
    assert (unset["baseUrl"], unset["priceInUsdPerMtok"], unset["priceOutUsdPerMtok"]) == (None, None, None)
    assert ok(client, get) == unset


@pytest.mark.parametrize("job", list(JOBS))
def test_a_new_model_with_one_price_is_refused_after_a_free_one(
    job: str, loopback: tuple[TestClient, Runtime], scripted_openai: FakeOpenAI
) -> None:
    client, _ = loopback
    get, update = JOBS[job]
    ok(client, update, local_target(scripted_openai))  # a free local model: 0 and 0
    before = ok(client, get)
    error = post(client, update, {"model": "gpt-4.1", "priceInUsdPerMtok": 2}).json()["error"]
    assert error["data"]["reason"] == "invalid_params" and "set both" in error["message"], error
    assert ok(client, get) == before


BAD_TARGETS = [
    pytest.param({"harness": "openai", "model": MODEL, "baseUrl": "http://127.0.0.1:11434/v1"},
                 "set priceInUsdPerMtok and priceOutUsdPerMtok", id="unpriced-model"),
    pytest.param({"harness": "openai", "model": MODEL, "baseUrl": "ftp://127.0.0.1/v1", "priceInUsdPerMtok": 0,
                  "priceOutUsdPerMtok": 0}, "baseUrl must be an http(s) URL", id="not-http"),
    pytest.param({"harness": "openai", "model": MODEL, "baseUrl": "http://user:sk-secret@127.0.0.1/v1",
                  "priceInUsdPerMtok": 0, "priceOutUsdPerMtok": 0}, "OPENAI_API_KEY", id="credentials"),
    pytest.param({"harness": "openai", "model": MODEL, "baseUrl": "http://127.0.0.1/v1?key=sk-secret",
                  "priceInUsdPerMtok": 0, "priceOutUsdPerMtok": 0}, "must not have a ?query", id="key-in-query"),
    pytest.param({"harness": "openai", "model": MODEL, "baseUrl": "http://127.0.0.1/v1/sk-proj-sk-secretAbCdEfGhIjKl",
                  "priceInUsdPerMtok": 0, "priceOutUsdPerMtok": 0}, "key in its path", id="key-in-path"),
    pytest.param({"harness": "openai", "model": MODEL, "baseUrl": "http://127.0.0.1/v1/%73k-proj-AbCdEfGhIjKlMnOpQrStUv012",
                  "priceInUsdPerMtok": 0, "priceOutUsdPerMtok": 0}, "key in its path", id="key-in-path-encoded"),
    pytest.param({"harness": "openai", "model": MODEL, "priceInUsdPerMtok": -1, "priceOutUsdPerMtok": 0},
                 "priceInUsdPerMtok must be from 0", id="negative-price"),
    pytest.param({"harness": "openai", "model": MODEL, "priceInUsdPerMtok": 0}, "set both", id="one-price"),
    pytest.param({"harness": "openai", "model": "qwen\ud800", "priceInUsdPerMtok": 0, "priceOutUsdPerMtok": 0},
                 "lone surrogate", id="surrogate-model"),
    pytest.param({"harness": "gemini"}, "harness must be one of anthropic", id="unknown-harness"),
    pytest.param({"harness": "openai", "model": MODEL, "priceInUsdPerMtok": "0", "priceOutUsdPerMtok": 0},
                 "priceInUsdPerMtok", id="price-as-text"),
    pytest.param({"model": 7}, "model", id="model-not-text"),
    pytest.param({"mode": "propose", "harness": "offline", "model": "gpt-4o"}, "offline harness calls no model",
                 id="offline-with-model"),
]  # fmt: skip


@pytest.mark.parametrize("job", list(JOBS))
@pytest.mark.parametrize(("params", "message"), BAD_TARGETS)
def test_bad_targets_are_refused_with_the_command_lines_message_and_change_nothing(
    job: str, params: dict[str, Any], message: str, loopback: tuple[TestClient, Runtime]
) -> None:
    client, runtime = loopback
    get, update = JOBS[job]
    before = ok(client, get)
    error = post(client, update, params).json()["error"]
    assert error["code"] == -32602 and error["data"]["reason"] == "invalid_params", error
    assert message in error["message"], error
    assert "sk-secret" not in json.dumps(error)
    assert ok(client, get) == before
    assert runtime.service.runs(SCOPE) == []


# ---------------------------------------------------------------------- many accounts: tenants
@pytest.mark.parametrize("job", list(JOBS))
def test_with_tokens_each_target_param_is_refused_the_same_way_whatever_its_value(
    job: str, tenants: tuple[TestClient, Runtime, str]
) -> None:
    client, runtime, alice = tenants
    get, update = JOBS[job]
    command = f"memledger {job} set"
    before = {SCOPE: runtime.service.settings(SCOPE), "alice": ok(client, get, token=alice)}
    assert set(TARGET) <= set(before["alice"])  # a tenant sees the target (and no key)
    values: dict[str, list[Any]] = {
        "harness": ["openai", "gemini", None, 5],
        "model": [MODEL, "claude-opus-4", "x" * 500, None],  # (a lone surrogate is strict input's, every method)
        "baseUrl": ["http://169.254.169.254/latest", "ftp://x", None, ["x"]],
        "priceInUsdPerMtok": [0, -1, None, "0"],
        "priceOutUsdPerMtok": [0, 10**9, None, True],
    }
    for name in TARGET:
        why = (
            "the model target is the operator's on this server, which serves many accounts "
            f"(MEMLEDGER_AUTH=tokens): the operator sets it with `{command}`; an account cannot change its "
            "model, server or prices"
        )
        expected = {"jsonrpc": "2.0", "id": 1, "error": {
            "code": -32602, "message": f"invalid params: {name}: {why}",
            "data": {"reason": "invalid_params", "errors": [{"field": name, "type": "operator_setting",
                                                              "message": why}]}}}  # fmt: skip
        answers = {post(client, update, {"mode": "propose", name: value}, alice).content for value in values[name]}
        assert len(answers) == 1, (name, answers)  # byte-identical, whatever the value
        assert json.loads(answers.pop()) == expected
    # Nothing changed, not even the mode sent beside them, for alice or the server's own account
    assert ok(client, get, token=alice) == before["alice"]
    assert runtime.service.settings(SCOPE) == before[SCOPE]
    # while the account's own switches still work
    assert ok(client, update, {"mode": "propose"}, alice)["mode"] == "propose"


def test_with_tokens_the_refusal_names_every_target_param_sent(tenants: tuple[TestClient, Runtime, str]) -> None:
    client, _, alice = tenants
    error = post(client, "memory/update_consolidation_settings", {"priceOutUsdPerMtok": 0, "harness": "openai"},
                 alice).json()["error"]  # fmt: skip
    assert error["message"].startswith("invalid params: harness, priceOutUsdPerMtok: ")
    assert [e["field"] for e in error["data"]["errors"]] == ["harness", "priceOutUsdPerMtok"]


# ---------------------------------------------------------------------- how the call is made
CALL = {"responseFormat": "json_object", "temperature": 0.3, "contextWindowTokens": 8192, "systemRole": False,
        "stream": False}  # fmt: skip


def test_the_operator_sets_how_consolidations_call_is_made(
    loopback: tuple[TestClient, Runtime], scripted_openai: FakeOpenAI
) -> None:
    client, runtime = loopback
    defaults = ok(client, "memory/get_consolidation_settings")
    expected = {"responseFormat": "auto", "temperature": 0, "contextWindowTokens": None, "systemRole": True,
                "stream": True}  # fmt: skip
    assert {name: defaults[name] for name in CALL} == expected

    settings = ok(client, "memory/update_consolidation_settings", {**local_target(scripted_openai), **CALL})

    assert {name: settings[name] for name in CALL} == CALL
    stored = runtime.service.settings(SCOPE)
    assert (stored.response_format, stored.temperature, stored.context_window_tokens) == ("json_object", 0.3, 8192)
    unset = ok(client, "memory/update_consolidation_settings", {"contextWindowTokens": None})
    assert unset["contextWindowTokens"] is None and unset["temperature"] == 0.3
    error = post(client, "memory/update_consolidation_settings", {"temperature": 5}).json()["error"]
    assert error["code"] == -32602 and "temperature" in error["message"]


def test_with_tokens_the_call_params_are_the_operators_too(tenants: tuple[TestClient, Runtime, str]) -> None:
    client, runtime, alice = tenants
    before = runtime.service.settings(SCOPE)

    error = post(client, "memory/update_consolidation_settings", {"temperature": 0, "stream": False}, alice).json()

    assert [e["field"] for e in error["error"]["data"]["errors"]] == ["temperature", "stream"]
    assert all(e["type"] == "operator_setting" for e in error["error"]["data"]["errors"])
    assert runtime.service.settings(SCOPE) == before
