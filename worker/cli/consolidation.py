"""Consolidation commands: ``turn``, ``runs`` and the ``consolidation`` group (set, status, enable, disable,
propose, run-due, run-now), with the tables and model-target options ``extraction`` shares.

Exit status: 0 done; 1 refused or failed (a red message on stderr); 2 usage or configuration.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from consolidation import ConsolidationRun, ConsolidationSettings, Mode, Outcome, ResponseFormat, RunState
from worker.cli.conventions import DbUrl, ScopeOption, ScopePositional, pick_scope
from worker.cli.output import emit_json, fail, instant_text, print_message, print_table, print_warning
from worker.cli.worker import bound_scope, cli_runtime

if TYPE_CHECKING:
    from consolidation import TargetCheck
    from worker.runtime import Runtime

consolidation_app = typer.Typer(
    help="Per-scope consolidation: set, status, enable, disable, propose, run-due, run-now.", no_args_is_help=True
)

Json = Annotated[bool, typer.Option("--json", help="Print JSON (camelCase, RFC 3339) instead of a table.")]
ScopeArg = ScopePositional
# The model target, the same for both jobs (see docs/consolidation.md, "Models").
HarnessOpt = Annotated[
    str | None, typer.Option("--harness", help="anthropic, openai or offline (memledger models lists them).")
]
ModelOpt = Annotated[
    str | None, typer.Option("--model", help="Model id, as the server knows it (priced, or give its prices).")
]
BaseUrlOpt = Annotated[
    str | None,
    typer.Option("--base-url", help="Server of the openai harness, e.g. http://127.0.0.1:11434/v1 (Ollama)."),
]
PriceInOpt = Annotated[
    float | None,
    typer.Option("--price-in-usd-per-mtok", help="Input price, USD per million tokens (0: a free local model)."),
]
MaxOutputTokensOpt = Annotated[
    int | None, typer.Option("--max-output-tokens", help="Most tokens the model may answer with in one run.")
]
NoCheckOpt = Annotated[
    bool,
    typer.Option(
        "--no-check", help="Store a new model target without checking its key and server (memledger models check)."
    ),
]
PriceOutOpt = Annotated[
    float | None,
    typer.Option("--price-out-usd-per-mtok", help="Output price, USD per million tokens (0: a free local model)."),
]


AllowedOpsOpt = Annotated[
    str | None, typer.Option("--allowed-ops", help="Comma-separated, of: merge,correct,expire,group,retire,keep.")
]
AllowRemovalOpt = Annotated[
    bool | None,
    typer.Option("--allow-removal/--no-allow-removal", help="Let consolidation retire (forget) pins. Off by default."),
]
MaxPromptCharsOpt = Annotated[
    int | None, typer.Option("--max-prompt-chars", help="Bound of the records one run sends (characters).")
]
# How the openai harness makes the call (see docs/consolidation.md, "Models").
ResponseFormatOpt = Annotated[
    ResponseFormat | None,
    typer.Option("--response-format", help="openai harness: how the answer's JSON is asked for (auto falls back)."),
]
TemperatureOpt = Annotated[
    float | None, typer.Option("--temperature", help="openai harness: sampling temperature (default 0).")
]
ContextWindowOpt = Annotated[
    int | None,
    typer.Option(
        "--context-window-tokens",
        help="openai harness: the model's context window, in its tokens (0: what the server reports).",
    ),
]
SystemRoleOpt = Annotated[
    bool | None,
    typer.Option(
        "--system-role/--no-system-role",
        help="openai harness: instructions in a system message (--no-system-role: in the user message, "
        "for chat templates without a system role, such as Gemma's).",
    ),
]
StreamOpt = Annotated[
    bool | None,
    typer.Option(
        "--stream/--no-stream", help="openai harness: stream the answer, so a call given up stops the server."
    ),
]


def call_options(
    response_format: ResponseFormat | None,
    temperature: float | None,
    context_window_tokens: int | None,
    system_role: bool | None,
    stream: bool | None,
) -> dict[str, Any]:
    """The call options the operator gave, as keyword arguments of a settings update (a window of 0 unsets it)."""
    changes = given_options(
        ("response_format", response_format), ("temperature", temperature), ("system_role", system_role),
        ("stream", stream),
    )  # fmt: skip
    if context_window_tokens is not None:
        changes["context_window_tokens"] = context_window_tokens or None
    return changes


def target_options(
    harness: str | None, model: str | None, base_url: str | None, price_in: float | None, price_out: float | None
) -> dict[str, Any]:
    """The model-target options the operator gave, as keyword arguments of a settings update."""
    return given_options(
        ("harness", harness),
        ("model", model),
        ("base_url", base_url),
        ("price_in_usd_per_mtok", price_in),
        ("price_out_usd_per_mtok", price_out),
    )


def update_checked(
    runtime: Runtime, key: str, changes: dict[str, Any], *, extraction: bool, no_check: bool
) -> tuple[Any, TargetCheck | None]:
    """Store a job's settings ``changes`` once a new model target in them passed :func:`check_new_target`;
    the new settings, and what the check found (None: nothing checked)."""
    service = runtime.service
    preview = service.preview_extraction_settings if extraction else service.preview_settings
    checked = check_new_target(runtime, changes, lambda: preview(key, **changes), no_check=no_check)
    update = service.update_extraction_settings if extraction else service.update_settings
    return update(key, **changes), checked


def check_new_target(
    runtime: Runtime, changes: dict[str, Any], preview: Callable[[], Any], *, no_check: bool
) -> TargetCheck | None:
    """Before a new model target is stored: its key is there and its server answers (docs/consolidation.md,
    "Checking a model target"). A target that cannot work fails the command, nothing stored; None when
    nothing was checked (no target given, or ``--no-check``)."""
    if no_check or not any(name in changes for name in ("harness", "model", "base_url")):
        return None
    checked = runtime.service.check_target(preview())
    if not checked.ok:
        fail(
            f"the model target was not changed: {checked.problem}. Give --no-check to store it anyway.",
            reason="target_check_failed",
        )
    return checked


def warn_note(checked: TargetCheck | None) -> None:
    """Say what a passed check noticed (a model the server does not list), on stderr."""
    if checked is not None and checked.note:
        print_warning(f"note: {checked.note}")


# ---------------------------------------------------------------------- turns and runs
def turn(
    positional_scope: ScopeArg = None, scope: ScopeOption = None, as_json: Json = False, database_url: DbUrl = None
) -> None:
    """Record a chat turn for the scope (debounced) and queue its run."""
    with cli_runtime(database_url=database_url) as runtime:
        scope = pick_scope(positional_scope, scope, default=bound_scope(runtime.config))
        run = runtime.notify_turn(scope).consolidation
        embedded = runtime.config.embedded
    if as_json:
        emit_json(None if run is None else run.to_json())
    elif run is None:
        print_message(
            f"consolidation is off for {scope}: nothing scheduled "
            f"(turn it on with `memledger consolidation set {scope} --mode propose`)"
        )
    else:
        where = "a running `memledger serve` picks it up once due" if embedded else "queued"
        print_message(
            f"turn {run.turns} recorded for {scope}: run {run.id} due at {instant_text(run.due_at)} ({where}; "
            "`memledger consolidation run-now` runs it now); `memledger runs` shows its outcome, "
            "`memledger proposals` what it proposed"
        )


runs_app = typer.Typer(
    help="List runs of both jobs (consolidate, extract), newest first, every scope unless --scope "
    "(a table, or --json).",
    invoke_without_command=True,
)


def runs(
    ctx: typer.Context,
    scope: ScopeOption = None,
    as_json: Json = False,
    limit: Annotated[int, typer.Option("--limit", min=1, max=10_000, help="At most this many, newest first.")] = 50,
    database_url: DbUrl = None,
) -> None:
    """List runs of both jobs (consolidate, extract), newest first, every scope unless --scope (a table, or --json).

    `memledger runs retry RUN_ID` queues a failed or abandoned run again.
    """
    if ctx.invoked_subcommand is not None:
        return
    with cli_runtime(database_url=database_url) as runtime:
        found = runtime.service.runs(scope, limit=limit)
    if as_json:
        emit_json([run.to_json() for run in found])
    elif not found:
        print_message("no consolidation runs" + (f" for {scope}" if scope else ""), style="dim")
    else:
        print_table(runs_table(found))


def runs_retry(
    run_id: Annotated[str, typer.Argument(help="The failed or abandoned run (run_…).", show_default=False)],
    as_json: Json = False,
    database_url: DbUrl = None,
) -> None:
    """Queue a failed or abandoned consolidation run again, as a new run of its scope due now."""
    with cli_runtime(database_url=database_url) as runtime:
        run, created = runtime.retry_run(run_id)
        embedded = runtime.config.embedded
    if as_json:
        emit_json({"retried": run_id, "run": run.to_json(), "created": created})
        return
    what = f"queued as run {run.id}" if created else f"{run.scope_key} already had run {run.id} pending; it is"
    where = "a running `memledger serve` runs it within about 15 s" if embedded else "a worker runs it"
    print_message(
        f"run {run_id} {what} due now ({where}; `memledger consolidation run-now {run.scope_key}` runs it here); "
        "`memledger runs` shows its outcome",
        style="green",
    )


def _usd(micro: int) -> str:
    return f"${Decimal(micro) / 1_000_000:.6f}".rstrip("0").rstrip(".") if micro else "$0"


def runs_table(found: list[ConsolidationRun], *, title: str = "Consolidation runs") -> Table:
    """A table of runs: id, scope, state/outcome, turns, instants, model, tokens, spend, ops, error."""
    table = Table(title=title)
    for name, style in (
        ("ID", "cyan"),
        ("Job", None),
        ("Scope", None),
        ("State", None),
        ("Turns", None),
        ("Due (UTC)", None),
        ("Settled (UTC)", None),
        ("Model", None),
        ("Tokens in/out", None),
        ("Spend", None),
        ("Ops applied/ proposals/ refused", None),
        ("Error", "red"),
    ):
        table.add_column(name, style=style, overflow="fold", no_wrap=name == "ID")
    for run in found:
        state = str(run.state) if run.outcome is None else f"{run.state}: {run.outcome}"
        table.add_row(
            Text(run.id),
            Text(run.job if not run.session_id else f"{run.job} ({run.session_id})"),
            Text(run.scope_key),
            Text(state),
            str(run.turns),
            instant_text(run.due_at),
            instant_text(run.settled_at),
            Text(run.model or ""),
            f"{run.input_tokens}/{run.output_tokens}",
            _usd(run.spend_micro_usd),
            f"{run.ops_applied}/{run.proposals_written}/{run.ops_refused}",
            Text(run.error or ""),
        )
    return table


# ---------------------------------------------------------------------- consolidation settings
def _budget_micro(budget_usd: str) -> int:
    try:
        micro = Decimal(budget_usd) * 1_000_000
    except InvalidOperation:
        raise typer.BadParameter(f"{budget_usd!r} is not an amount in USD (e.g. 5 or 0.25)") from None
    if not micro.is_finite() or micro < 0 or micro != micro.to_integral_value():
        raise typer.BadParameter("the budget must be a non-negative amount in USD with at most 6 decimals")
    return int(micro)


def given_options(*options: tuple[str, Any]) -> dict[str, Any]:
    """The ``(name, value)`` options the operator gave (not ``None``), as keyword arguments of a settings update."""
    return {key: value for key, value in options if value is not None}


def job_changes(
    mode: Any, debounce_s: float | None, max_wait_s: float | None, cap_s: float | None, max_output_tokens: int | None
) -> dict[str, Any]:
    """The options both jobs take (consolidation's and extraction's ``set``) that the operator gave, as keyword
    arguments of a settings update."""
    return given_options(
        ("mode", mode),
        ("debounce_s", debounce_s),
        ("max_wait_s", max_wait_s),
        ("wall_clock_cap_s", cap_s),
        ("max_output_tokens", max_output_tokens),
    )


def settings_table(title: str, rows: Iterable[tuple[str, str]]) -> Table:
    """A two-column table of a scope's settings, one ``(name, shown value)`` row each."""
    table = Table(title=title, show_header=False)
    table.add_column("Setting", style="bold")
    table.add_column("Value")
    for key, value in rows:
        table.add_row(key, Text(value))
    return table


def _show_settings(
    settings: ConsolidationSettings,
    *,
    as_json: bool,
    pending: ConsolidationRun | None = None,
    recent: list[ConsolidationRun] | None = None,
) -> None:
    if as_json:
        data: dict[str, Any] = {"settings": settings.to_json()}
        if recent is not None:
            data["pending"] = None if pending is None else pending.to_json()
            data["runs"] = [run.to_json() for run in recent]
        emit_json(data)
        return
    rows: list[tuple[str, str]] = []
    for key, value in settings.to_json().items():
        if key == "spend_budget_micro_usd":
            key, value = "spend_budget (per month)", _usd(int(value))
        rows.append((key, ", ".join(value) if isinstance(value, list) else str(value)))
    print_table(settings_table(f"Consolidation for {settings.scope_key}", rows))
    if recent is not None:
        if pending is not None:
            print_message(f"pending run {pending.id}: {pending.turns} turns, due {instant_text(pending.due_at)}")
        if recent:
            print_table(runs_table(recent, title="Recent runs"))


def consolidation_set(
    positional_scope: ScopeArg = None,
    mode: Annotated[Mode | None, typer.Option("--mode", help="off, propose or apply.")] = None,
    harness: HarnessOpt = None,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    price_in: PriceInOpt = None,
    price_out: PriceOutOpt = None,
    debounce_s: Annotated[float | None, typer.Option("--debounce-s", help="Seconds of quiet before a run.")] = None,
    max_wait_s: Annotated[
        float | None, typer.Option("--max-wait-s", help="Longest delay after the first turn.")
    ] = None,
    budget_usd: Annotated[
        str | None, typer.Option("--budget-usd", help="Spend budget per calendar month, USD.")
    ] = None,
    cap_s: Annotated[float | None, typer.Option("--wall-clock-cap-s", help="Wall-clock cap of one run.")] = None,
    max_output_tokens: MaxOutputTokensOpt = None,
    allowed_ops: AllowedOpsOpt = None,
    allow_removal: AllowRemovalOpt = None,
    max_prompt_chars: MaxPromptCharsOpt = None,
    response_format: ResponseFormatOpt = None,
    temperature: TemperatureOpt = None,
    context_window_tokens: ContextWindowOpt = None,
    system_role: SystemRoleOpt = None,
    stream: StreamOpt = None,
    no_check: NoCheckOpt = False,
    as_json: Json = False,
    scope: ScopeOption = None,
    database_url: DbUrl = None,
) -> None:
    """Change the scope's consolidation settings (mode off also cancels its pending run)."""
    changes = job_changes(mode, debounce_s, max_wait_s, cap_s, max_output_tokens)
    changes |= target_options(harness, model, base_url, price_in, price_out)
    changes |= given_options(("allow_removal", allow_removal), ("max_prompt_chars", max_prompt_chars))
    changes |= call_options(response_format, temperature, context_window_tokens, system_role, stream)
    if budget_usd is not None:
        changes["spend_budget_micro_usd"] = _budget_micro(budget_usd)
    if allowed_ops is not None:
        changes["allowed_ops"] = [op.strip() for op in allowed_ops.split(",") if op.strip()]
    with cli_runtime(database_url=database_url) as runtime:
        key = pick_scope(positional_scope, scope, default=bound_scope(runtime.config))
        settings, checked = update_checked(runtime, key, changes, extraction=False, no_check=no_check)
    _show_settings(settings, as_json=as_json)
    warn_note(checked)


def _set_mode(
    positional_scope: str | None, scope: str | None, mode: Mode, as_json: bool, database_url: str | None
) -> None:
    with cli_runtime(database_url=database_url) as runtime:
        key = pick_scope(positional_scope, scope, default=bound_scope(runtime.config))
        settings = runtime.service.update_settings(key, mode=mode)
    _show_settings(settings, as_json=as_json)


def consolidation_enable(
    positional_scope: ScopeArg = None, scope: ScopeOption = None, as_json: Json = False, database_url: DbUrl = None
) -> None:
    """Turn the scope's consolidation on in apply mode (gate-passed operations are applied)."""
    _set_mode(positional_scope, scope, Mode.APPLY, as_json, database_url)


def consolidation_propose(
    positional_scope: ScopeArg = None, scope: ScopeOption = None, as_json: Json = False, database_url: DbUrl = None
) -> None:
    """Turn the scope's consolidation on in propose mode (operations become proposals for the user)."""
    _set_mode(positional_scope, scope, Mode.PROPOSE, as_json, database_url)


def consolidation_disable(
    positional_scope: ScopeArg = None, scope: ScopeOption = None, as_json: Json = False, database_url: DbUrl = None
) -> None:
    """Turn the scope's consolidation off; its pending run is settled cancelled without a model call."""
    _set_mode(positional_scope, scope, Mode.OFF, as_json, database_url)


def consolidation_status(
    positional_scope: ScopeArg = None, scope: ScopeOption = None, as_json: Json = False, database_url: DbUrl = None
) -> None:
    """Show the scope's settings, its pending run and its recent runs."""
    with cli_runtime(database_url=database_url) as runtime:
        scope = pick_scope(positional_scope, scope, default=bound_scope(runtime.config))
        settings = runtime.service.settings(scope)
        recent = runtime.service.runs(scope, limit=10)
    pending = next((run for run in recent if run.state == RunState.PENDING), None)
    _show_settings(settings, as_json=as_json, pending=pending, recent=recent)


def consolidation_run_due(
    limit: Annotated[int, typer.Option("--limit", min=1, max=10_000, help="At most this many runs.")] = 100,
    as_json: Json = False,
    database_url: DbUrl = None,
) -> None:
    """Execute every due pending run here and now, without the queue (an operator's escape hatch).

    Exits 1 when a run it settled failed (the table, or the JSON, still lists every run it settled).
    """
    with cli_runtime(database_url=database_url) as runtime:
        settled = runtime.service.run_due(limit=limit)
        for run in settled:
            runtime.metrics.observe_settled(run)
    if as_json:
        emit_json([run.to_json() for run in settled])
    elif not settled:
        print_message("no due runs", style="dim")
    else:
        print_table(runs_table(settled, title="Settled now"))
    failed = [run for run in settled if run.outcome == Outcome.FAILED]
    if failed:
        first = failed[0]
        fail(
            f"{len(failed)} of {len(settled)} runs failed; {first.id} ({first.scope_key}): {first.error}",
            reason="run_failed",
        )


def run_now(job: str, positional_scope: str | None, scope: str | None, as_json: bool, database_url: str | None) -> None:
    """Execute the scope's pending runs of ``job`` here and now and show what they did (both jobs' ``run-now``)."""
    what = "consolidation" if job == "consolidate" else "extraction"
    with cli_runtime(database_url=database_url) as runtime:
        key = pick_scope(positional_scope, scope, default=bound_scope(runtime.config))
        tried = runtime.service.run_now(key, job=job)
        for result in tried:
            if result.settled is not None:
                runtime.metrics.observe_settled(result.settled)
        busy = [result.run_id for result in tried if result.settled is None]
        left = [runtime.service.get_run(run_id) for run_id in busy]
    settled = [result.settled for result in tried if result.settled is not None]
    if as_json:
        emit_json({"settled": [run.to_json() for run in settled], "notStarted": [run.to_json() for run in left]})
        return
    if not tried:
        print_message(
            f"no pending {what} run for {key}: nothing to run "
            f"(a chat turn schedules one once {what} is on; `memledger {what} status {key}` shows the settings)"
        )
        return
    if settled:
        print_table(runs_table(settled, title="Settled now"))
        print_message("`memledger proposals` lists what a propose-mode run proposed; `memledger runs` every run")
    for run in left:
        print_message(
            f"run {run.id} did not start: another run of {key} is running; it stays {run.state}, "
            "try again once that one settles",
            style="yellow",
        )


def consolidation_run_now(
    positional_scope: ScopeArg = None, scope: ScopeOption = None, as_json: Json = False, database_url: DbUrl = None
) -> None:
    """Execute the scope's pending run here and now, whatever its due time (or say there is none)."""
    run_now("consolidate", positional_scope, scope, as_json, database_url)


def register(app: typer.Typer) -> None:
    """Attach turn, runs and the consolidation group to the top-level app."""
    app.command("turn")(turn)
    runs_app.callback()(runs)
    runs_app.command("retry")(runs_retry)
    app.add_typer(runs_app, name="runs")
    group: tuple[tuple[str, Callable[..., None]], ...] = (
        ("set", consolidation_set),
        ("status", consolidation_status),
        ("enable", consolidation_enable),
        ("disable", consolidation_disable),
        ("propose", consolidation_propose),
        ("run-due", consolidation_run_due),
        ("run-now", consolidation_run_now),
    )
    for name, command in group:
        consolidation_app.command(name)(command)
    app.add_typer(consolidation_app, name="consolidation")
