"""``memledger files …`` (filled in by the file-ledger work)."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True)
