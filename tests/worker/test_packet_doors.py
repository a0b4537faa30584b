"""Look-alike packet markers and invisible-only bodies through every door: the record protocol
(``memory/build_packet``, saves), MCP through the SDK's own client (``get_packet``, ``propose_pin``)
and the command line (``memledger pin``). The rules themselves are tested in tests/ledger/test_packet.py.
About a second: one shared ``memledger mcp``, in-process protocol calls, one CLI call per body."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession
from typer.testing import CliRunner

from ledger import open_ledger
from ledger.protocol import handle
from tests.conftest import copy_migrated_sqlite
from tests.ledger.test_packet import LOOKALIKE_FORGERIES
from tests.worker.mcp_helpers import SharedStdio, ok, refused
from worker.cli import app

INVISIBLE_ONLY = ["\u034f\u034f", "\ufe0f", "\u3164", "\u2800 \u2800", "\u200b\u3164"]


def rpc(led: Any, method: str, params: dict[str, Any]) -> dict[str, Any]:
    answer: dict[str, Any] = handle(led, {"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    return answer


def test_the_record_protocol_carries_no_forged_marker_and_refuses_invisible_bodies(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    copy_migrated_sqlite(url)
    led = open_ledger(url)
    try:
        # Given the forged bodies, saved through the protocol
        ids = {rpc(led, "memory/save_memory_record", {"body": body})["result"]["id"] for body in LOOKALIKE_FORGERIES}
        # When the packet is built for a session
        packet = rpc(led, "memory/build_packet", {"scopeKey": led.scope_key, "sessionId": "chat-1"})["result"]
        # Then none is carried, each is excluded as unsafe, and the audit says so
        assert packet["text"] == "" and packet["records"] == []
        assert {row["id"]: row["code"] for row in packet["excluded"]} == dict.fromkeys(ids, "unsafe_body")
        assert rpc(led, "memory/get_packet_audit", {"sessionId": "chat-1"})["result"]["selected"] == []
        # And a body of invisible characters only is refused as empty, nothing stored
        for body in INVISIBLE_ONLY:
            error = rpc(led, "memory/save_memory_record", {"body": body})["error"]
            assert error["data"]["reason"] == "body_rejected" and "empty" in error["message"], error
        assert len(led.list_page(led.scope_key, limit=100).records) == len(LOOKALIKE_FORGERIES)
    finally:
        led.close()


def test_mcp_get_packet_carries_no_forged_marker_and_propose_refuses_invisible_bodies(
    shared_mcp_sqlite: SharedStdio,
) -> None:
    shared_mcp_sqlite.fresh()
    led = open_ledger(shared_mcp_sqlite.url)
    try:
        ids = {led.save(body).id for body in LOOKALIKE_FORGERIES}
    finally:
        led.close()
    got: dict[str, Any] = {}

    async def scenario(session: ClientSession) -> None:
        got["packet"] = ok(await session.call_tool("get_packet", {}))
        got["refusals"] = [await session.call_tool("propose_pin", {"body": body}) for body in INVISIBLE_ONLY]
        got["proposed"] = ok(await session.call_tool("list_pins", {}))

    shared_mcp_sqlite.run(scenario)
    assert got["packet"]["text"] == "" and got["packet"]["records"] == []
    assert {row["id"]: row["code"] for row in got["packet"]["excluded"]} == dict.fromkeys(ids, "unsafe_body")
    for result in got["refusals"]:
        assert "empty" in refused(result, "body_rejected")["message"]
    assert got["proposed"]["count"] == len(LOOKALIKE_FORGERIES)


@pytest.mark.parametrize("body", INVISIBLE_ONLY)
def test_the_command_line_refuses_a_pin_of_invisible_characters(tmp_path: Path, body: str) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    copy_migrated_sqlite(url)
    result = CliRunner().invoke(app, ["pin", body, "--database-url", url])
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert "empty" in result.stderr and "Traceback" not in result.stderr
    led = open_ledger(url)
    try:
        assert led.list_page(led.scope_key).records == []
    finally:
        led.close()
