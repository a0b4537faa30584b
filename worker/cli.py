"""The ``memledger`` command line: one Typer app composed of one module per area.

``memledger files …`` is served by an app holding only the file-ledger commands, so
that a CI step auditing memory files does not load the model SDK, the job queue or
the servers (start-up stays a fraction of a second). ``app`` is the full app.
"""

from __future__ import annotations

import sys
from functools import cache
from typing import Any

import typer

FILES_HELP = "Memory entries kept as markdown files: new, schema, validate, audit, export, import."


def _typer() -> typer.Typer:
    from worker.cli_conventions import ConventionGroup, install

    install()  # flags shown as flags in every help screen
    return typer.Typer(
        cls=ConventionGroup,
        name="memledger",
        help="Account memory ledger and its consolidation worker.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )


@cache
def build_app() -> typer.Typer:
    """The full command line (every area)."""
    from worker import (
        cli_bench,
        cli_extraction,
        cli_files,
        cli_ledger,
        cli_mcp,
        cli_models,
        cli_status,
        cli_tokens,
        cli_worker,
    )

    full = _typer()
    cli_ledger.register(full, rpc_extra_methods=cli_worker.rpc_extra_methods)
    cli_worker.register(full)
    cli_status.register(full)
    cli_extraction.register(full)
    cli_tokens.register(full)
    cli_mcp.register(full)
    cli_bench.register(full)
    cli_models.register(full)
    full.add_typer(cli_files.app, name="files", help=FILES_HELP)
    return full


def files_app() -> typer.Typer:
    """Only ``memledger files …``: imports the file ledger and nothing of the worker."""
    from worker import cli_files

    light = _typer()
    light.add_typer(cli_files.app, name="files", help=FILES_HELP)
    return light


def __getattr__(name: str) -> Any:
    # ``from worker.cli import app`` builds the full app on first use (PEP 562).
    if name == "app":
        return build_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    (files_app() if sys.argv[1:2] == ["files"] else build_app())()
