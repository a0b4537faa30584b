"""``memledger extraction set|status|run-now``: an operator's per-scope extraction settings (docs/extraction.md).

Exit status: 0 done; 1 refused (a red message on stderr); 2 usage or configuration.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from consolidation import ExtractionMode, ExtractionSettings
from worker.cli.consolidation import (
    BaseUrlOpt,
    HarnessOpt,
    Json,
    MaxOutputTokensOpt,
    ModelOpt,
    NoCheckOpt,
    PriceInOpt,
    PriceOutOpt,
    ScopeArg,
    job_changes,
    run_now,
    runs_table,
    settings_table,
    target_options,
    update_checked,
    warn_note,
)
from worker.cli.conventions import DbUrl, ScopeOption, pick_scope
from worker.cli.output import emit_json, print_message, print_table
from worker.cli.worker import bound_scope, cli_runtime

extraction_app = typer.Typer(
    help="Per-scope extraction (proposals from conversations): set, status, run-now.", no_args_is_help=True
)


def _show(settings: ExtractionSettings, *, as_json: bool, recent: list[Any] | None = None) -> None:
    if as_json:
        data: dict[str, Any] = {"settings": settings.to_json()}
        if recent is not None:
            data["runs"] = [run.to_json() for run in recent]
        emit_json(data)
        return
    rows = [(key, str(value)) for key, value in settings.to_json().items()]
    print_table(settings_table(f"Extraction for {settings.scope_key}", rows))
    if recent:
        print_table(runs_table(recent, title="Recent extraction runs"))
    elif recent is not None:
        print_message("no extraction runs yet", style="dim")


def extraction_set(
    positional_scope: ScopeArg = None,
    mode: Annotated[ExtractionMode | None, typer.Option("--mode", help="propose or off.")] = None,
    harness: HarnessOpt = None,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    price_in: PriceInOpt = None,
    price_out: PriceOutOpt = None,
    debounce_s: Annotated[
        float | None, typer.Option("--debounce-s", help="Seconds of quiet in a session before its run.")
    ] = None,
    max_wait_s: Annotated[
        float | None, typer.Option("--max-wait-s", help="Longest delay after a session's first turn.")
    ] = None,
    cap_s: Annotated[float | None, typer.Option("--wall-clock-cap-s", help="Wall-clock cap of one call.")] = None,
    max_output_tokens: MaxOutputTokensOpt = None,
    no_check: NoCheckOpt = False,
    as_json: Json = False,
    scope: ScopeOption = None,
    database_url: DbUrl = None,
) -> None:
    """Change the scope's extraction settings (mode off also cancels its pending extraction runs and digests)."""
    changes = job_changes(mode, debounce_s, max_wait_s, cap_s, max_output_tokens)
    changes |= target_options(harness, model, base_url, price_in, price_out)
    with cli_runtime(database_url=database_url) as runtime:
        key = pick_scope(positional_scope, scope, default=bound_scope(runtime.config))
        settings, checked = update_checked(runtime, key, changes, extraction=True, no_check=no_check)
    _show(settings, as_json=as_json)
    warn_note(checked)


def extraction_status(
    positional_scope: ScopeArg = None, scope: ScopeOption = None, as_json: Json = False, database_url: DbUrl = None
) -> None:
    """Show the scope's extraction settings and its recent extraction runs."""
    with cli_runtime(database_url=database_url) as runtime:
        scope = pick_scope(positional_scope, scope, default=bound_scope(runtime.config))
        settings = runtime.service.extraction_settings(scope)
        recent = [run for run in runtime.service.runs(scope, limit=50) if run.job == "extract"][:10]
    _show(settings, as_json=as_json, recent=recent)


def extraction_run_now(
    positional_scope: ScopeArg = None, scope: ScopeOption = None, as_json: Json = False, database_url: DbUrl = None
) -> None:
    """Execute the scope's pending extraction runs (one per session) here and now, whatever their due time."""
    run_now("extract", positional_scope, scope, as_json, database_url)


def register(app: typer.Typer) -> None:
    """Attach the ``extraction`` group to the top-level app."""
    extraction_app.command("set")(extraction_set)
    extraction_app.command("status")(extraction_status)
    extraction_app.command("run-now")(extraction_run_now)
    app.add_typer(extraction_app, name="extraction")
