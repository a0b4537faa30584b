"""The ``memledger`` command line: one Typer app composed of one module per area."""

from __future__ import annotations

import typer

from worker import cli_files, cli_ledger, cli_status, cli_worker

app = typer.Typer(
    name="memledger",
    help="Account memory ledger and its consolidation worker.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
cli_ledger.register(app, rpc_extra_methods=cli_worker.rpc_extra_methods)
cli_worker.register(app)
cli_status.register(app)
app.add_typer(
    cli_files.app, name="files", help="Memory entries kept as markdown files: new, validate, audit, export, import."
)


def main() -> None:
    app()
