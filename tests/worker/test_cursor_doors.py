"""Forged cursors through the doors beside the record protocol (tests/ledger/test_paging.py has it): MCP's
``list_pins`` through the SDK's own client, and ``memledger pins --cursor``. Each is refused as invalid
params with what to do, never an internal error. About a second (one shared ``memledger mcp``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mcp import ClientSession
from typer.testing import CliRunner

from ledger import open_ledger
from tests.conftest import copy_migrated_sqlite
from tests.ledger.test_paging import forged_cursors
from tests.worker.mcp_helpers import SharedStdio, ok, refused
from worker.cli import app


def test_mcp_list_pins_refuses_forged_cursors(shared_mcp_sqlite: SharedStdio) -> None:
    shared_mcp_sqlite.fresh()
    led, bob = open_ledger(shared_mcp_sqlite.url), open_ledger(shared_mcp_sqlite.url, account="bob")
    try:
        for n in range(3):
            led.save(f"pin {n}")
        cursors = forged_cursors(led.scope_key, bob.save("bob's pin").id)
    finally:
        led.close()
        bob.close()
    got: dict[str, Any] = {}

    async def scenario(session: ClientSession) -> None:
        got["refusals"] = [await session.call_tool("list_pins", {"limit": 1, "cursor": c}) for c in cursors]
        got["after"] = ok(await session.call_tool("list_pins", {"limit": 1}))

    shared_mcp_sqlite.run(scenario)
    for result in got["refusals"]:
        assert "not one this ledger issued" in refused(result, "invalid_params")["message"]
    assert got["after"]["count"] == 1 and got["after"]["nextCursor"] is not None  # the server went on


def test_memledger_pins_refuses_forged_cursors(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    copy_migrated_sqlite(url)
    led, bob = open_ledger(url), open_ledger(url, account="bob")
    try:
        led.save("pin 0")
        led.save("pin 1")
        cursors = forged_cursors(led.scope_key, bob.save("bob's pin").id)
    finally:
        led.close()
        bob.close()
    for cursor in cursors:
        result = CliRunner().invoke(app, ["pins", "--limit", "1", "--cursor", cursor, "--database-url", url])
        assert result.exit_code == 1, (result.stdout, result.stderr, result.exception)
        assert "not one this ledger issued" in result.stderr and "Traceback" not in result.stderr
