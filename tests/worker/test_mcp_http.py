"""``/mcp`` on a running ``memledger serve``, driven by the mcp SDK's streamable-HTTP client.

``serve`` runs as a real subprocess on a free port (as in test_e2e); proposals are checked
through ``POST /rpc`` (``memory/list_proposed_memory_records``), and forged browser
requests and oversized bodies with plain HTTP.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest

from ledger import open_ledger
from tests.worker.conftest import MEMLEDGER, Proc, free_port, wait_until
from tests.worker.mcp_helpers import TOOL_NAMES, check_pins, http_session, ok, refused
from worker.config import WorkerConfig

ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
LIST_TOOLS = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}


def healthy(base: str) -> bool:
    try:
        return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def start_serve(spawn: Callable[..., Proc], env: dict[str, str]) -> str:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    spawn("serve", ["memledger", "serve", "--port", str(port)], env)
    wait_until(lambda: healthy(base), timeout_s=30)
    return base


def rpc(base: str, method: str, params: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
    request = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    body = httpx.post(f"{base}/rpc", json=request, headers=headers or {}, timeout=10).json()
    assert "result" in body, body
    return body["result"]


def initialize_request() -> dict[str, Any]:
    params = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}
    return {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}


def test_mcp_over_streamable_http_on_serve(spawn: Callable[..., Proc], base_env: dict[str, str]) -> None:
    # Given: a pin saved before serve starts
    led = open_ledger(base_env["MEMLEDGER_DATABASE_URL"])
    pin = led.save("I prefer metric units", kind="preference")
    led.close()
    base = start_serve(spawn, base_env)
    got: dict[str, Any] = {}

    async def scenario() -> None:
        async with http_session(f"{base}/mcp") as session:
            got["tools"] = {tool.name for tool in (await session.list_tools()).tools}
            got["list"] = ok(await session.call_tool("list_pins", {}))
            got["search"] = ok(await session.call_tool("search_pins", {"query": "metric"}))
            got["history"] = ok(await session.call_tool("pin_history", {"id": pin.id}))
            got["packet"] = ok(await session.call_tool("get_packet", {"session_id": "http-1"}))
            got["proposed"] = ok(await session.call_tool("propose_pin", {"body": "Uses vim", "kind": "preference"}))
            got["after"] = ok(await session.call_tool("list_pins", {}))
            got["secret"] = await session.call_tool(
                "propose_pin", {"body": "my password is correct-horse-battery-9", "kind": "fact"}
            )
            got["foreign"] = await session.call_tool("pin_history", {"id": "mem_" + "f" * 24})

    anyio.run(scenario)
    assert got["tools"] == TOOL_NAMES
    assert [p["id"] for p in got["list"]["pins"]] == [pin.id] and got["search"]["count"] == 1
    check_pins(got["list"]["pins"] + got["history"]["records"] + got["packet"]["records"])
    assert "I prefer metric units" in got["packet"]["text"]
    proposal = got["proposed"]["proposal"]
    assert proposal["status"] == "proposed" and proposal["provenance"] == "model_proposal"
    # The proposal is where the user decides (the record protocol), not among the pins
    waiting = rpc(base, "memory/list_proposed_memory_records", {"scopeKey": "account:local"})["records"]
    assert [r["id"] for r in waiting] == [proposal["id"]]
    assert [p["id"] for p in got["after"]["pins"]] == [pin.id]
    active = rpc(base, "memory/list_memory_records", {"scopeKey": "account:local"})["records"]
    assert [r["id"] for r in active] == [pin.id]
    assert refused(got["secret"], "body_rejected")["why"] == "credential"
    refused(got["foreign"], "not_found")


def test_mcp_http_refuses_what_a_browser_or_a_rebinding_page_can_forge(
    spawn: Callable[..., Proc], base_env: dict[str, str]
) -> None:
    base = start_serve(spawn, base_env)
    url = f"{base}/mcp"
    forged = [
        ({"Origin": "https://evil.example"}, 403),
        ({"Origin": "http://localhost:3000"}, 403),  # a local web page is not the user either
        ({"Host": "evil.example"}, 421),  # DNS rebinding: the page's own name pointing at 127.0.0.1
        ({"Host": "evil.example:8080"}, 421),
    ]
    for headers, status in forged:
        answer = httpx.post(url, json=initialize_request(), headers={**ACCEPT, **headers}, timeout=10)
        assert answer.status_code == status, (headers, answer.status_code, answer.text)
    simple = httpx.post(url, content=json.dumps(LIST_TOOLS), headers={"Content-Type": "text/plain"}, timeout=10)
    assert simple.status_code == 400  # a "simple" cross-site request (text/plain) is not served
    stream = httpx.get(url, headers={"Accept": "text/event-stream"}, timeout=10)
    assert stream.status_code == 405 and stream.headers["allow"] == "POST"  # no stream held open for nothing
    too_big = httpx.post(url, content=b"{" + b" " * 1_100_000 + b"}", headers=ACCEPT, timeout=30)
    assert too_big.status_code == 413
    # Loopback names are served
    for host in ("127.0.0.1", "localhost"):
        port = base.rsplit(":", 1)[1]
        answer = httpx.post(url, json=initialize_request(), headers={**ACCEPT, "Host": f"{host}:{port}"}, timeout=10)
        assert answer.status_code == 200, (host, answer.text)


def test_mcp_http_answers_a_lone_surrogate_with_a_clean_error(
    spawn: Callable[..., Proc], base_env: dict[str, str]
) -> None:
    base = start_serve(spawn, base_env)
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "search_pins", "arguments": {"query": "PLACEHOLDER"}},
    }
    line = json.dumps(call).replace("PLACEHOLDER", "\\ud800")  # a lone surrogate, as raw JSON can carry it
    headers = {**ACCEPT, "MCP-Protocol-Version": "2025-06-18"}
    answer = httpx.post(f"{base}/mcp", content=line, headers=headers, timeout=10)
    # The SDK's JSON reader refuses the text itself (a JSON-RPC parse error); were it to let it through,
    # the tool's own check answers invalid_params. Either way: a clean JSON-RPC answer, never a 5xx.
    assert answer.status_code in (200, 400), answer.text
    body = answer.json()
    if "error" in body:
        assert body["error"]["code"] == -32700
    else:
        assert body["result"]["isError"] is True and body["result"]["structuredContent"]["reason"] == "invalid_params"
    assert "Traceback" not in answer.text
    # and the server goes on answering
    answer = httpx.post(f"{base}/mcp", content=line.replace("\\ud800", "metric"), headers=headers, timeout=10)
    assert answer.status_code == 200 and answer.json()["result"]["isError"] is False, answer.text


TOKENS_EXIST = "auth" in WorkerConfig.model_fields


@pytest.mark.skipif(not TOKENS_EXIST, reason="needs MEMLEDGER_AUTH=tokens (issue 9's API tokens) on this branch")
def test_mcp_http_without_a_token_is_refused_when_tokens_are_on(
    spawn: Callable[..., Proc], base_env: dict[str, str]
) -> None:
    env = {**base_env, "MEMLEDGER_AUTH": "tokens"}
    created = subprocess.run(
        [MEMLEDGER, "tokens", "create", "local"], env=env, capture_output=True, text=True, timeout=60
    )
    assert created.returncode == 0, created.stderr
    token = created.stdout.split()[-1]
    base = start_serve(spawn, env)
    url = f"{base}/mcp"
    for headers in ({}, {"Authorization": "Bearer not-a-token"}):
        answer = httpx.post(url, json=initialize_request(), headers={**ACCEPT, **headers}, timeout=10)
        assert answer.status_code == 401, (headers, answer.status_code, answer.text)
    got: dict[str, Any] = {}

    async def scenario() -> None:
        async with http_session(url, headers={"Authorization": f"Bearer {token}"}) as session:
            got["list"] = ok(await session.call_tool("list_pins", {}))

    anyio.run(scenario)
    assert got["list"]["scopeKey"] == "account:local"
