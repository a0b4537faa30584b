"""MCP answers as strict clients read them: the TypeScript SDK's client, and the MCP Inspector itself.

The TypeScript SDK (the MCP Inspector, Claude Desktop, Claude Code) validates ``structuredContent``
against the tool's ``outputSchema`` on every ``tools/call`` result, refusals included; the Python
SDK's client skips refusals, so the other MCP tests cannot see a refusal it would not read.
:class:`StrictSession` validates as the TypeScript client does; the Inspector test runs the real
Inspector CLI (pinned, installed once per machine with npm, in the user's cache) against ``memledger mcp``.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession
from mcp_types import CallToolResult
from starlette.testclient import TestClient

from ledger import Ledger, open_ledger
from tests.conftest import require_services
from tests.worker.conftest import MEMLEDGER
from tests.worker.mcp_helpers import TOOL_NAMES, SharedStdio, check_as_strict_client, ok, refused
from tests.worker.test_mcp_http import ACCEPT
from worker.http.server import create_app
from worker.mcp.tools import ERROR_META_KEY, TOOLS, call_tool
from worker.runtime import Runtime

INSPECTOR_VERSION = "2.12.0"  # `npm view @modelcontextprotocol/inspector version` when this was written
INSPECTOR = f"@modelcontextprotocol/inspector@{INSPECTOR_VERSION}"
TOOL_ERROR_EXIT = 5  # the Inspector CLI's exit status for a result with isError: true


class StrictSession:
    """A ``ClientSession`` whose every ``tools/call`` result is checked as the TypeScript SDK checks it."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session
        self.schemas: dict[str, dict[str, Any] | None] = {}
        self.checked = 0

    async def list_tools(self) -> None:
        self.schemas = {tool.name: tool.output_schema for tool in (await self.session.list_tools()).tools}

    async def call(self, name: str, arguments: dict[str, Any]) -> CallToolResult:
        result = await self.session.call_tool(name, arguments)
        check_as_strict_client(self.schemas.get(name), result.model_dump(mode="json", by_alias=True))
        self.checked += 1
        return result


# Every refusal a client can cause, for every tool: (tool, arguments, reason).
REFUSALS: list[tuple[str, dict[str, Any], str]] = [
    ("list_pins", {"scope": "account:other"}, "invalid_params"),
    ("search_pins", {"query": ""}, "invalid_params"),
    ("search_pins", {"query": "tea", "limit": 0}, "invalid_params"),
    ("pins_as_of", {"instant": "yesterday"}, "invalid_params"),
    ("pins_as_of", {}, "invalid_params"),
    ("pin_history", {"id": "mem_nope"}, "not_found"),
    ("pin_history", {"id": 42}, "invalid_params"),
    ("get_packet", {"session_id": "chat\x07"}, "invalid_params"),
    ("propose_pin", {"body": "my wifi password is Tr0ub4dor&3xyz"}, "body_rejected"),
    ("propose_pin", {"body": "   ", "kind": "fact"}, "body_rejected"),
    ("propose_pin", {"body": "Likes tea", "kind": "opinion"}, "invalid_params"),
    ("propose_pin", {"kind": "fact"}, "invalid_params"),
    ("forget_pin", {"id": "mem_nope"}, "invalid_params"),  # no such tool
]


def test_every_refusal_of_every_tool_reads_in_a_strict_client(shared_mcp_sqlite: SharedStdio) -> None:
    # Given: a ledger with a pin, and an account whose budget is full for the last call
    shared_mcp_sqlite.fresh()
    led = open_ledger(shared_mcp_sqlite.url)
    pin = led.save("I prefer metric units")
    got: dict[str, Any] = {}

    async def scenario(session: ClientSession) -> None:
        strict = StrictSession(session)
        await strict.list_tools()
        got["refusals"] = [await strict.call(name, args) for name, args, _ in REFUSALS]
        got["reads"] = [
            await strict.call("list_pins", {}),
            await strict.call("search_pins", {"query": "metric"}),
            await strict.call("pins_as_of", {"instant": "2030-01-01T00:00:00Z"}),
            await strict.call("pin_history", {"id": pin.id}),
            await strict.call("get_packet", {}),
        ]
        led.set_budget(led.scope_key, 1)
        got["over_budget"] = await strict.call("propose_pin", {"body": "Likes green tea"})
        got["checked"] = strict.checked
        got["tools"] = set(strict.schemas)

    try:
        shared_mcp_sqlite.run(scenario)
    finally:
        led.close()
    assert got["tools"] == TOOL_NAMES and got["checked"] == len(REFUSALS) + 6
    for (name, arguments, reason), result in zip(REFUSALS, got["refusals"], strict=True):
        data = refused(result, reason)
        assert data["message"] in result.content[0].text, (name, arguments)
    assert refused(got["over_budget"], "budget_exceeded")["budget"] == 1
    for result in got["reads"]:
        ok(result)


def test_an_internal_error_reads_in_a_strict_client(sqlite_led: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(Ledger, "history", broken)
    result = call_tool(sqlite_led, "pin_history", {"id": "mem_x"})
    refused(result, "internal_error")
    check_as_strict_client(TOOLS["pin_history"].result_schema, result.model_dump(mode="json", by_alias=True))


@pytest.fixture
def sqlite_led(tmp_path: Path) -> Any:
    ledger = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}", migrate=True)
    yield ledger
    ledger.close()


def test_propose_pin_defaults_kind_to_fact_as_the_record_protocol_does(sqlite_led: Ledger) -> None:
    proposal = ok(call_tool(sqlite_led, "propose_pin", {"body": "Works from Lisbon"}))["proposal"]
    assert proposal["kind"] == "fact" and proposal["status"] == "proposed"
    assert [r.kind for r in sqlite_led.proposals(sqlite_led.scope_key)] == ["fact"]


def test_mcp_takes_content_type_in_any_case_as_rpc_does(make_runtime: Callable[..., Runtime]) -> None:
    listing = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    capabilities = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "memory/get_memory_capabilities"})
    app = create_app(make_runtime(sweep_interval_s=0), run_worker=False)
    with TestClient(app, base_url="http://127.0.0.1:8080") as client:
        for media in ("Application/JSON", "APPLICATION/JSON; charset=UTF-8", "application/json"):
            headers = {**ACCEPT, "Content-Type": media, "MCP-Protocol-Version": "2025-06-18"}
            answer = client.post("/mcp", content=listing, headers=headers)
            assert answer.status_code == 200, (media, answer.status_code, answer.text)
            assert {tool["name"] for tool in answer.json()["result"]["tools"]} == TOOL_NAMES
            assert client.post("/rpc", content=capabilities, headers=headers).status_code == 200
        plain = {**ACCEPT, "Content-Type": "Text/Plain"}
        assert client.post("/mcp", content=listing, headers=plain).status_code == 415


# ---------------------------------------------------------------------- the MCP Inspector itself
def inspector_cache() -> Path:
    """Where the pinned Inspector is installed: the user's cache (``$XDG_CACHE_HOME``, else ``~/.cache``),
    outside the checkout, so a fresh clone on the same machine (CI's) finds it installed."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "memledger" / f"mcp-inspector-{INSPECTOR_VERSION}"


@pytest.fixture(scope="session")
def inspector() -> Path:
    """The pinned Inspector's command, installed once per machine (npm) and reused; fails in CI when node is
    missing."""
    npm, node = shutil.which("npm"), shutil.which("node")
    if npm is None or node is None:
        message = "node (and npm) is not on the PATH: the MCP Inspector test needs it"
        if require_services() or os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
            pytest.fail(message + " (CI, or MEMLEDGER_REQUIRE_SERVICES=1)")
        pytest.skip(message)
    where = inspector_cache()
    where.mkdir(parents=True, exist_ok=True)
    package = where / "node_modules" / "@modelcontextprotocol" / "inspector"
    with (where / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test runs at once install it once
        installed = package / "package.json"
        if not installed.exists() or json.loads(installed.read_text())["version"] != INSPECTOR_VERSION:
            done = subprocess.run(
                [npm, "install", "--no-audit", "--no-fund", "--prefer-offline", "--prefix", str(where), INSPECTOR],
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert done.returncode == 0, f"npm install {INSPECTOR} failed:\n{done.stderr[-2000:]}"
    bin_name = json.loads((package / "package.json").read_text())["bin"]["inspector"]
    return package / bin_name


def run_inspector(command: Path, server_env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``inspector --cli memledger mcp …``: the pinned Inspector's own command (what ``npx`` would run).

    The Inspector starts the server with a minimal environment of its own, plus ``-e`` pairs.
    """
    node = shutil.which("node")
    assert node is not None
    pairs = [arg for key, value in server_env.items() for arg in ("-e", f"{key}={value}")]
    argv = [node, str(command), "--cli", *pairs, MEMLEDGER, "mcp", *args]
    return subprocess.run(argv, cwd=command.parent, capture_output=True, text=True, timeout=90)


def test_the_mcp_inspector_shows_memledgers_refusal(inspector: Path, base_env: dict[str, str]) -> None:
    env = {"MEMLEDGER_DATABASE_URL": base_env["MEMLEDGER_DATABASE_URL"], "MEMLEDGER_LOG_LEVEL": "ERROR"}
    led = open_ledger(base_env["MEMLEDGER_DATABASE_URL"], migrate=True)
    pin = led.save("I prefer metric units")
    led.close()
    call = ["--method", "tools/call", "--tool-name", "pin_history"]

    nope = run_inspector(inspector, env, *call, "--tool-arg", "id=mem_nope")
    # The Inspector prints the result, then exits 5 for a tool result with isError (a refusal it read);
    # a result it cannot read (one that fails its output-schema check) prints no result at all.
    assert nope.returncode == TOOL_ERROR_EXIT and "tool_is_error" in nope.stderr, nope.stdout + nope.stderr
    answer = json.loads(nope.stdout)
    assert answer["isError"] is True, answer
    assert answer["content"][0]["text"].startswith("not_found: no pin 'mem_nope' in this account")
    assert answer["_meta"][ERROR_META_KEY]["reason"] == "not_found" and "structuredContent" not in answer

    found = run_inspector(inspector, env, *call, "--tool-arg", f"id={pin.id}")
    assert found.returncode == 0, found.stdout + found.stderr
    assert json.loads(found.stdout)["structuredContent"]["records"][0]["id"] == pin.id
