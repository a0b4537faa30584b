"""``memledger mcp``: the bound account's memory as an MCP server on stdin/stdout.

An MCP client spawns it (``claude mcp add memledger -- memledger mcp``); see docs/mcp.md.
stdout carries only MCP messages; logs go to stderr
(``MEMLEDGER_LOG_FORMAT`` / ``MEMLEDGER_LOG_LEVEL``).

Exit status: 0 the client closed the connection; 1 the ledger could not be opened (a
red message on stderr, never a traceback); 2 a usage or configuration error.
"""

from __future__ import annotations

import typer

from worker.cli.ledger import DbUrl, cli_ledger


def mcp(database_url: DbUrl = None) -> None:
    """Serve the MCP tools (list_pins, search_pins, pins_as_of, pin_history, get_packet, propose_pin) on stdio."""
    from worker.cli.worker import cli_config
    from worker.logging import configure_logging

    config = cli_config()
    configure_logging(fmt=config.log_format, level=config.log_level)
    with cli_ledger(database_url) as led:
        # The MCP SDK is most of the start-up's CPU: imported once the configuration and the ledger are
        # known to be good, so a server that cannot start says why without paying for it.
        from worker.mcp.server import run_stdio

        try:
            run_stdio(led)
        except KeyboardInterrupt:
            raise typer.Exit(130) from None


def register(app: typer.Typer) -> None:
    """Attach ``mcp`` to the top-level app."""
    app.command("mcp")(mcp)
