"""``memledger models``: the harnesses and the priced models a scope can point at; ``models check``: whether what a
scope is set to can be called.

``models`` reads the registry (:data:`consolidation.harnesses.HARNESSES`) and the price table
(the built-in one with the configuration's ``[model_prices]``); loads no model SDK.
Exit status: 0 done; 1 a target failed its check; 2 usage or configuration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from worker.cli.conventions import DbUrl, ScopeOption, ScopePositional, pick_scope
from worker.cli.output import emit_json, print_error, print_message, print_table, print_warning

if TYPE_CHECKING:
    from consolidation import Target

Json = Annotated[bool, typer.Option("--json", help="Print JSON (camelCase) instead of tables.")]


def _rate(value: Any) -> str:
    return format(value.normalize(), "f")


models_app = typer.Typer(
    help="List the harnesses and the priced models (USD per million tokens); any other model needs its prices set.",
    invoke_without_command=True,
)


def models(ctx: typer.Context, as_json: Json = False) -> None:
    """List the harnesses and the priced models (USD per million tokens); any other model needs its prices set.

    `memledger models check` checks what a scope is set to (its key, its server).
    """
    if ctx.invoked_subcommand is None:
        _list_models(as_json)


def _list_models(as_json: bool) -> None:
    from consolidation import HARNESSES
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


def models_check(
    positional_scope: ScopePositional = None,
    scope: ScopeOption = None,
    as_json: Json = False,
    database_url: DbUrl = None,
) -> None:
    """Check the scope's model targets (consolidation's and extraction's): the key is set and the server answers."""
    from worker.cli.worker import bound_scope, cli_runtime

    with cli_runtime(database_url=database_url) as runtime:
        key = pick_scope(positional_scope, scope, default=bound_scope(runtime.config))
        service = runtime.service
        targets: dict[str, Target] = {
            "consolidation": service.settings(key),
            "extraction": service.extraction_settings(key),
        }
        checked = {job: service.check_target(settings) for job, settings in targets.items()}
    if as_json:
        emit_json({"scopeKey": key, **{job: result.to_json() for job, result in checked.items()}})
    else:
        for job, result in checked.items():
            where = f"{result.harness} {result.model}" + (f" at {result.url}" if result.url else "")
            if not result.ok:
                print_error(f"{job} of {key}: {where}: {result.problem}")
            elif result.url is None:
                print_message(f"{job} of {key}: {where}: calls no model, nothing to check")
            else:
                print_message(f"{job} of {key}: {where}: the key is set and the server answers", style="green")
            if result.note:
                print_warning(f"note: {result.note}")
    if not all(result.ok for result in checked.values()):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Attach ``models`` (and ``models check``) to the top-level app."""
    models_app.callback()(models)
    models_app.command("check")(models_check)
    app.add_typer(models_app, name="models")
