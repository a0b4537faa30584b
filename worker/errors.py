"""Errors raised by the worker (the service, its command line and its servers).

::

    Exception
    ├── ConfigError          the configuration is invalid (every problem listed, one per line)
    ├── PortUnavailable      ``serve`` cannot listen on the address
    └── ValueError
        └── BindRefused      ``serve`` asked to listen beyond loopback without tokens
    ledger.LedgerError
    └── TokenNotFound        reason not_found: no API token with that id

``worker.mcp.tools.ToolFailure`` (a tool call the MCP client sees as an error) is still
defined beside the tools. The ledger's and consolidation's errors are in
:mod:`ledger.errors` and :mod:`consolidation.errors`.
"""

from __future__ import annotations

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
