"""Shared pieces of the MCP tests: the SDK's own clients, and the full form every pin must have."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anyio.from_thread import BlockingPortal, start_blocking_portal
from jsonschema import Draft202012Validator
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types import CallToolResult

from ledger import make_engine
from ledger.schema import load_every_table
from tests.worker.conftest import MEMLEDGER
from worker.mcp.tools import ERROR_META_KEY

METADATA = load_every_table()  # every package's tables

TOOL_NAMES = {"list_pins", "search_pins", "pins_as_of", "pin_history", "get_packet", "propose_pin"}
INSTANT = {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$"}
OPT_STRING = {"type": ["string", "null"]}
# What every pin must look like in detail (the published item schema is deliberately lighter).
STRICT_PIN = {
    "type": "object",
    "additionalProperties": False,
    "required": ["id", "kind", "body", "provenance", "status", "validFrom"],
    "properties": {
        "id": {"type": "string", "pattern": "^mem_"},
        "kind": {"enum": ["preference", "fact", "decision", "constraint"]},
        "body": OPT_STRING,
        "provenance": {"enum": ["user_explicit", "model_proposal", "model_consolidation"]},
        "status": {"enum": ["active", "proposed", "rejected", "superseded", "expired", "deleted"]},
        "validFrom": INSTANT,
        "validTo": INSTANT,
        "expiresAt": INSTANT,
        "conflictGroup": {"type": "string"},
        "supersedes": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "supersededBy": {"type": "string"},
        "confidenceBps": {"type": "integer", "minimum": 0, "maximum": 10000},
        "rationale": {"type": "string"},
        "sourceSessionId": {"type": "string"},
        "erased": {"const": True},
    },
}
_PIN_CHECK = Draft202012Validator(STRICT_PIN)


def check_pins(pins: list[dict[str, Any]]) -> None:
    """Every pin has the full, typed form (fields that are unset are absent, never null-but-present)."""
    for pin in pins:
        errors = sorted(_PIN_CHECK.iter_errors(pin), key=str)
        assert not errors, f"{pin}: {errors[0].message}"


def ok(result: CallToolResult) -> dict[str, Any]:
    """The structured content of a successful result (its text is a readable rendering, not a traceback)."""
    assert not result.is_error, result.content
    assert result.structured_content is not None
    text = result.content[0].text  # type: ignore[union-attr]
    assert "Traceback" not in text
    return result.structured_content


def refused(result: CallToolResult, reason: str) -> dict[str, Any]:
    """An ``isError`` result with ``reason`` in the text and in ``_meta``, no structured content, no traceback.

    Returns the refusal's data (``_meta["memledger/error"]``: reason, message, context).
    """
    assert result.is_error, result.structured_content
    assert result.structured_content is None, result.structured_content  # strict clients validate it
    data = (result.meta or {}).get(ERROR_META_KEY)
    assert data is not None and data["reason"] == reason, data
    text = result.content[0].text  # type: ignore[union-attr]
    assert text.startswith(f"{reason}: ") and "Traceback" not in text and 'File "' not in text
    return dict(data)


def check_as_strict_client(output_schema: dict[str, Any] | None, result: dict[str, Any]) -> None:
    """Check a ``tools/call`` result (its wire form) as the TypeScript SDK's client does on every result.

    That client (the MCP Inspector's, Claude Desktop's, Claude Code's) validates ``structuredContent``
    against the tool's ``outputSchema`` whenever it is present, errors included, and refuses a
    successful result without it; the Python SDK's client skips error results, so it cannot see this.
    """
    if output_schema is None:
        return
    structured = result.get("structuredContent")
    if structured is None:
        assert result.get("isError") is True, (
            f"a tool with an output schema answered without structuredContent: {result}"
        )
        return
    errors = sorted(Draft202012Validator(output_schema).iter_errors(structured), key=str)
    assert not errors, f"structuredContent does not match the tool's output schema: {errors[0].message} in {result}"


@asynccontextmanager
async def stdio_session(database_url: str, errlog: Path, **env: str) -> AsyncIterator[ClientSession]:
    """``memledger mcp`` spawned by the SDK's ``stdio_client``, initialized."""
    params = StdioServerParameters(
        command=MEMLEDGER,
        args=["mcp"],
        env={"MEMLEDGER_DATABASE_URL": database_url, "MEMLEDGER_LOG_LEVEL": "WARNING", **env},
    )
    with errlog.open("a") as err:
        async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session


@asynccontextmanager
async def http_session(url: str, *, headers: dict[str, str] | None = None) -> AsyncIterator[ClientSession]:
    """The SDK's streamable-HTTP client on ``url``, initialized."""
    async with (
        create_mcp_http_client(headers=headers) as client,
        streamable_http_client(url, http_client=client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


Scenario = Callable[[ClientSession], Awaitable[None]]


def retire_accounts(database_url: str) -> None:
    """Move every account's rows on ``database_url`` to a scope of its own that nothing reads.

    Each ``account:…`` scope becomes ``retired-<n>:account:…`` in every table that has a scope key
    (records, settings and their counts, events, audits, runs), in one transaction: the rows stay
    consistent with each other, and every account starts empty again, as on a new database. Records
    are never deleted (a trigger refuses it), so this is how tests sharing one server start afresh.
    """
    prefix = f"retired-{uuid.uuid4().hex[:8]}:"
    engine = make_engine(database_url)
    try:
        with engine.begin() as conn:
            for table in METADATA.sorted_tables:
                if "scope_key" in table.c:
                    column = table.c.scope_key
                    conn.execute(table.update().where(column.like("account:%")).values(scope_key=prefix + column))
    finally:
        engine.dispose()


@dataclass
class SharedStdio:
    """One ``memledger mcp`` for many tests: the SDK's client session, held open on a portal's event loop.

    A test calls :meth:`fresh` first (its accounts start empty: :func:`retire_accounts`), then drives
    the session with :meth:`run`. The server is bound to account ``local`` as usual.
    """

    url: str
    errlog: Path
    portal: BlockingPortal
    session: ClientSession

    def fresh(self) -> None:
        retire_accounts(self.url)

    def run(self, scenario: Scenario) -> None:
        self.portal.call(scenario, self.session)


@contextmanager
def shared_stdio(database_url: str, errlog: Path) -> Iterator[SharedStdio]:
    """A :class:`SharedStdio` on ``database_url`` (migrated already) for the block."""
    with (
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(stdio_session(database_url, errlog)) as session,
    ):
        yield SharedStdio(database_url, errlog, portal, session)
