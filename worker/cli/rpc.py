"""``memledger rpc``: the record protocol on stdin/stdout (:mod:`worker.rpc.stdio`), with the worker's methods.

Exit status: 0 at the end of input (or when the client goes away); 1 the ledger could not be
opened; 2 usage or configuration; 130 interrupted.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

import typer

from ledger import Ledger
from ledger.protocol import ExtraMethod
from worker.cli.conventions import DbUrl
from worker.cli.ledger import cli_ledger


def rpc_extra_methods(led: Ledger) -> Mapping[str, ExtraMethod]:
    """The worker's methods (:data:`worker.rpc.methods.TABLE`) on ``led``, as ``memledger rpc`` serves them,
    with the configuration of the environment (a bad one: every problem on stderr, exit status 2)."""
    from worker.cli.worker import cli_config
    from worker.rpc.methods import operator_methods

    return operator_methods(led, cli_config())


def rpc(database_url: DbUrl = None) -> None:
    """Serve the record protocol (JSON-RPC 2.0) on stdin/stdout: one request per line, one response per line."""
    from worker.rpc.stdio import serve_stdio

    with cli_ledger(database_url) as led:
        extra = rpc_extra_methods(led)
        try:
            serve_stdio(led, sys.stdin.buffer, sys.stdout.buffer, extra_methods=extra)
        except BrokenPipeError:
            _silence_stdout()  # the client went away: nothing left to answer
        except KeyboardInterrupt:
            raise typer.Exit(130) from None


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail on a closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def register(app: typer.Typer) -> None:
    """Attach ``rpc`` to the top-level app."""
    app.command("rpc")(rpc)
