"""Errors raised by the worker (the service, its command line and its servers).

::

    Exception
    ├── ConfigError          the configuration is invalid (every problem listed, one per line)
    ├── PortUnavailable      ``serve`` cannot listen on the address
    ├── ToolFailure          an MCP tool call refused: the client sees an ``isError`` result (reason, message)
    └── ValueError
        └── BindRefused      ``serve`` asked to listen beyond loopback without tokens
    ledger.LedgerError
    └── TokenNotFound        reason not_found: no API token with that id

Each surface turns a :class:`~ledger.LedgerError` into its own error shape in one place:
``POST /rpc`` and ``memledger rpc`` in :func:`ledger.protocol.handle_line` (a JSON-RPC error),
the MCP tools in :func:`worker.mcp.tools.call_tool` (a :class:`ToolFailure` result), the command
line in :func:`worker.cli.ledger.cli_errors` (a message and exit status 1). The ledger's and
consolidation's errors are in :mod:`ledger.errors` and :mod:`consolidation.errors`; the record
protocol's ``RpcError`` is the ledger's (:mod:`ledger.protocol`).
"""

from __future__ import annotations

from typing import Any

from ledger.errors import LedgerError


class ConfigError(Exception):
    """The configuration is invalid; the message lists every problem, one per line."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
        super().__init__(f"invalid configuration ({count}):\n" + "\n".join(f"  - {p}" for p in problems))


class PortUnavailable(Exception):
    """The address cannot be listened on (in use, or not this machine's)."""


class BindRefused(ValueError):
    """``serve`` was asked to listen beyond loopback without tokens."""


class TokenNotFound(LedgerError):
    """No token with that id."""

    reason = "not_found"


class ToolFailure(Exception):
    """A refusal of an MCP tool call, reported as an ``isError`` tool result: ``reason``, ``message`` and any
    context (keyword arguments, camelCase names)."""

    def __init__(self, reason: str, message: str, **context: Any) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.context = context


class ClusterError(Exception):
    """``memledger bench cluster`` cannot run here (no PostgreSQL, no redis-server, a process that did not start)."""
