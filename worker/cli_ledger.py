"""Ledger commands: pin, pins, unpin, history, as-of, search, sweep, db upgrade, rpc."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Attach the ledger commands to the top-level app."""
