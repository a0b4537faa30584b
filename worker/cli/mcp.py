"""``memledger mcp``: the bound account's memory as an MCP server on stdin/stdout.

An MCP client spawns it (``claude mcp add memledger -- memledger mcp``); see docs/mcp.md.
stdout carries only MCP messages; logs go to stderr
(``MEMLEDGER_LOG_FORMAT`` / ``MEMLEDGER_LOG_LEVEL``).

The client waits for the answer to ``initialize`` before anything else, so the command loads only the
configuration, the logging and the MCP SDK before it answers; the ledger's modules load and the database
opens on a thread after that (:func:`worker.mcp.server.run_stdio`).

Exit status: 0 the client closed the connection; 1 the ledger could not be opened (a
red message on stderr, never a traceback); 2 a usage or configuration error.
"""

from __future__ import annotations

import os
import sys
from functools import partial
from typing import TYPE_CHECKING

import typer

from worker.cli.conventions import DbUrl

if TYPE_CHECKING:
    from ledger import Ledger


def mcp(database_url: DbUrl = None) -> None:
    """Serve the MCP tools (list_pins, search_pins, pins_as_of, pin_history, get_packet, propose_pin) on stdio."""
    from worker.cli.worker import cli_config
    from worker.logging import configure_logging

    config = cli_config(database_url)
    configure_logging(fmt=config.log_format, level=config.log_level)
    # The MCP SDK is most of the start-up's CPU: imported once the configuration is known to be good, so
    # a server that cannot start says why without paying for it.
    from worker.mcp.server import run_stdio

    try:
        run_stdio(partial(open_or_exit, database_url))
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def open_or_exit(database_url: str | None) -> Ledger:
    """The ledger, or, when it cannot be opened, a red message on stderr and exit status 1 at once.

    It runs on the thread that opens the ledger while the server reads stdin, a read nothing can
    interrupt, so the process ends here: the client sees the server go, and stderr says why.
    """
    from worker.cli.ledger import cli_errors, ledger_from_env

    try:
        with cli_errors():  # the command line's one translation of errors: never a traceback
            led = ledger_from_env(database_url)
    except typer.Exit as exc:
        sys.stderr.flush()
        os._exit(exc.exit_code)
    return led


def register(app: typer.Typer) -> None:
    """Attach ``mcp`` to the top-level app."""
    app.command("mcp")(mcp)
