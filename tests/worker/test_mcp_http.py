"""``/mcp`` on a running ``memledger serve``, driven by the mcp SDK's streamable-HTTP client.

``serve`` runs as a real subprocess on a free port (as in test_serve_and_worker): one shared by the module's
tests, one with tokens on. Proposals are checked through ``POST /rpc``
(``memory/list_proposed_memory_records``), and forged browser requests and oversized bodies
with plain HTTP.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from typer.testing import CliRunner

from ledger import open_ledger
from tests.worker.conftest import Proc, free_port, memledger_env, start_process, wait_until
from tests.worker.mcp_helpers import TOOL_NAMES, check_pins, http_session, ok, refused
from worker.cli import app
from worker.mcp.server import McpHttp

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


@dataclass
class Served:
    base: str
    env: dict[str, str]


@pytest.fixture(scope="module")
def serve_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One ``memledger serve`` (no tokens) for the tests that need nothing else of it. Of them only
    ``test_mcp_over_streamable_http_on_serve`` writes (to account ``local``); the others write nothing."""
    directory = tmp_path_factory.mktemp("mcp-serve")
    env = memledger_env(directory)
    port = free_port()
    proc = start_process("serve", ["memledger", "serve", "--port", str(port)], env, directory)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: healthy(base) or proc.popen.poll() is not None, timeout_s=30)
        assert proc.popen.poll() is None, proc.text()[-6000:]
        yield Served(base, env)
    finally:
        proc.kill()


def test_mcp_over_streamable_http_on_serve(serve_process: Served) -> None:
    # Given: a pin saved by another process (this one) while serve runs
    led = open_ledger(serve_process.env["MEMLEDGER_DATABASE_URL"])
    pin = led.save("I prefer metric units", kind="preference")
    led.close()
    base = serve_process.base
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


def test_mcp_http_refuses_what_a_browser_or_a_rebinding_page_can_forge(serve_process: Served) -> None:
    base = serve_process.base
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
    assert simple.status_code == 415  # a "simple" cross-site request (text/plain) is not served
    stream = httpx.get(url, headers={"Accept": "text/event-stream"}, timeout=10)
    assert stream.status_code == 405 and stream.headers["allow"] == "POST"  # no stream held open for nothing
    too_big = httpx.post(url, content=b"{" + b" " * 1_100_000 + b"}", headers=ACCEPT, timeout=30)
    assert too_big.status_code == 413
    # Loopback names are served
    for host in ("127.0.0.1", "localhost"):
        port = base.rsplit(":", 1)[1]
        answer = httpx.post(url, json=initialize_request(), headers={**ACCEPT, "Host": f"{host}:{port}"}, timeout=10)
        assert answer.status_code == 200, (host, answer.text)


def test_mcp_http_answers_a_lone_surrogate_with_a_clean_error(serve_process: Served) -> None:
    base = serve_process.base
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
        result = body["result"]
        assert result["isError"] is True and result["_meta"]["memledger/error"]["reason"] == "invalid_params"
    assert "Traceback" not in answer.text
    # and the server goes on answering
    answer = httpx.post(f"{base}/mcp", content=line.replace("\\ud800", "metric"), headers=headers, timeout=10)
    assert answer.status_code == 200 and answer.json()["result"]["isError"] is False, answer.text


def tokens_command(env: dict[str, str], *args: str) -> str:
    """``memledger tokens …`` (run in this process: the command is the same, without a Python start-up)."""
    done = CliRunner().invoke(app, ["tokens", *args], env=env)
    assert done.exit_code == 0, (done.stdout, done.stderr)
    return done.stdout


def create_token(env: dict[str, str], account: str) -> dict[str, Any]:
    token: dict[str, Any] = json.loads(tokens_command(env, "create", account, "--json"))
    return token


def test_mcp_http_with_tokens_on_the_token_alone_picks_the_account(
    spawn: Callable[..., Proc], base_env: dict[str, str]
) -> None:
    # Given: tokens on, a pin in each of two accounts, a token for each
    env = {**base_env, "MEMLEDGER_AUTH": "tokens"}
    for account, body in (("local", "I prefer metric units"), ("bob", "Bob's deploy region is eu-west-1")):
        led = open_ledger(env["MEMLEDGER_DATABASE_URL"], account=account)
        led.save(body)
        led.close()
    local, bob = create_token(env, "local"), create_token(env, "bob")
    base = start_serve(spawn, env)
    url = f"{base}/mcp"
    # Without a valid token: refused before any MCP is spoken
    for headers in ({}, {"Authorization": "Bearer not-a-token"}, {"Authorization": f"Basic {local['token']}"}):
        answer = httpx.post(url, json=initialize_request(), headers={**ACCEPT, **headers}, timeout=10)
        assert answer.status_code == 401, (headers, answer.status_code, answer.text)
    got: dict[str, Any] = {}

    async def scenario() -> None:
        for name, token in (("local", local), ("bob", bob)):
            async with http_session(url, headers={"Authorization": f"Bearer {token['token']}"}) as session:
                got[name] = ok(await session.call_tool("list_pins", {}))
                got[f"{name}-proposed"] = ok(
                    await session.call_tool("propose_pin", {"body": f"{name} likes tea", "kind": "preference"})
                )

    anyio.run(scenario)
    assert got["local"]["scopeKey"] == "account:local" and got["bob"]["scopeKey"] == "account:bob"
    assert [p["body"] for p in got["local"]["pins"]] == ["I prefer metric units"]
    assert [p["body"] for p in got["bob"]["pins"]] == ["Bob's deploy region is eu-west-1"]
    bob_waiting = rpc(
        base,
        "memory/list_proposed_memory_records",
        {"scopeKey": "account:bob"},
        headers={"Authorization": f"Bearer {bob['token']}"},
    )["records"]
    assert [r["body"] for r in bob_waiting] == ["bob likes tea"]
    # Revoked: the next request is refused
    tokens_command(env, "revoke", bob["id"])
    answer = httpx.post(
        url, json=initialize_request(), headers={**ACCEPT, "Authorization": f"Bearer {bob['token']}"}, timeout=10
    )
    assert answer.status_code == 401


def test_the_account_is_the_callers_never_the_arguments(tmp_path: Path) -> None:
    """McpHttp with a host app's ``admit`` (as ``serve`` wires it to its token check): one server, two accounts."""
    url = f"sqlite:///{tmp_path / 'two.db'}"
    ledgers = {name: open_ledger(url, account=name) for name in ("alice", "bob")}
    ledgers["alice"].save("Alice prefers metric units")
    bob_pin = ledgers["bob"].save("Bob's deploy region is eu-west-1")
    callers = {"Bearer token-a": "alice", "Bearer token-b": "bob"}

    async def admit(request: Request) -> Response | bytes | None:
        account = callers.get(request.headers.get("authorization", ""))
        if account is None:
            return PlainTextResponse("unauthorized", status_code=401)
        request.state.account = account
        body = await request.body()  # as serve's guard does: read (bounded) here, replayed to the SDK
        return PlainTextResponse("too large", status_code=413) if len(body) > 10_000 else body

    mcp_http = McpHttp(lambda ctx: ledgers[ctx.request.state.account], admit=admit)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with mcp_http.run():
            yield

    port = free_port()
    config = uvicorn.Config(
        Starlette(routes=[Route("/mcp", mcp_http)], lifespan=lifespan), port=port, log_config=None, lifespan="on"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, timeout_s=20)
    got: dict[str, Any] = {}

    async def scenario() -> None:
        for token, account in callers.items():
            async with http_session(f"http://127.0.0.1:{port}/mcp", headers={"Authorization": token}) as session:
                got[account] = ok(await session.call_tool("list_pins", {}))
                got[f"{account}-bob-pin"] = await session.call_tool("pin_history", {"id": bob_pin.id})
                got[f"{account}-scope"] = await session.call_tool("list_pins", {"scopeKey": "account:bob"})

    try:
        anyio.run(scenario)
        mcp_url = f"http://127.0.0.1:{port}/mcp"
        anonymous = httpx.post(mcp_url, json=initialize_request(), headers=ACCEPT, timeout=10)
        big = {**initialize_request(), "padding": "x" * 20_000}
        too_big = httpx.post(mcp_url, json=big, headers={**ACCEPT, "Authorization": "Bearer token-a"}, timeout=10)
    finally:
        server.should_exit = True
        thread.join(20)
        for led in ledgers.values():
            led.close()
    assert anonymous.status_code == 401 and too_big.status_code == 413
    assert [p["body"] for p in got["alice"]["pins"]] == ["Alice prefers metric units"]
    assert got["alice"]["scopeKey"] == "account:alice" and got["bob"]["scopeKey"] == "account:bob"
    assert [p["body"] for p in got["bob"]["pins"]] == ["Bob's deploy region is eu-west-1"]
    refused(got["alice-bob-pin"], "not_found")  # another account's id, as if unknown
    assert ok(got["bob-bob-pin"])["records"][0]["id"] == bob_pin.id
    refused(got["alice-scope"], "invalid_params")  # no argument can name a scope
