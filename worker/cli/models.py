"""``memledger models``: the harnesses and the priced models a scope can point at.

Reads the registry (:data:`consolidation.harnesses.HARNESSES`) and the price table
(the built-in one with the configuration's ``[model_prices]``); loads no model SDK.
Exit status: 0 done; 2 configuration.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from worker.cli.output import emit_json, print_message, print_table

Json = Annotated[bool, typer.Option("--json", help="Print JSON (camelCase) instead of tables.")]


def _rate(value: Any) -> str:
    return format(value.normalize(), "f")


def models(as_json: Json = False) -> None:
    """List the harnesses and the priced models (USD per million tokens); any other model needs its prices set."""
    from consolidation.harnesses import HARNESSES
    from worker.cli.worker import cli_config

    prices = cli_config().price_table()
    harnesses = [
        {"name": spec.name, "pays": spec.pays, "takesBaseUrl": spec.takes_base_url, "summary": spec.summary}
        for spec in HARNESSES.values()
    ]
    priced = [
        {
            "model": model,
            "harness": next(
                (s.name for s in HARNESSES.values() if s.model_prefix and model.startswith(s.model_prefix)), ""
            ),
            "inputUsdPerMtok": _rate(price.input_usd_per_mtok),
            "outputUsdPerMtok": _rate(price.output_usd_per_mtok),
            "cacheWriteUsdPerMtok": _rate(price.cache_write_usd_per_mtok),
            "cacheReadUsdPerMtok": _rate(price.cache_read_usd_per_mtok),
            "assumed": price.assumed,
        }
        for model, price in prices.items()
    ]
    if as_json:
        emit_json({"harnesses": harnesses, "models": priced})
        return
    table = Table(title="Harnesses")
    for column in ("Harness", "Pays", "Base URL", "What it is"):
        table.add_column(column)
    for row in harnesses:
        yes_no = ["yes" if row[flag] else "no" for flag in ("pays", "takesBaseUrl")]
        table.add_row(str(row["name"]), *yes_no, str(row["summary"]))
    print_table(table)
    table = Table(title="Priced models (USD per million tokens)")
    for column in ("Model", "Harness", "Input", "Output", "Cache write", "Cache read", "Note"):
        table.add_column(column)
    columns = ("model", "harness", "inputUsdPerMtok", "outputUsdPerMtok", "cacheWriteUsdPerMtok", "cacheReadUsdPerMtok")
    for row in priced:
        table.add_row(
            *(str(row[name]) for name in columns), "assumed: check before budgeting" if row["assumed"] else ""
        )
    print_table(table)
    print_message(
        "Any other model (a local one included) runs once its scope sets --price-in-usd-per-mtok and "
        "--price-out-usd-per-mtok (0 and 0 for a free local model).",
        style="dim",
    )


def register(app: typer.Typer) -> None:
    """Attach ``models`` to the top-level app."""
    app.command("models")(models)
