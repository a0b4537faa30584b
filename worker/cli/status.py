"""``memledger status``: what ``/ops`` and the operator gauges show, as Rich tables or ``--json``.

Scopes this month (mode, records against the budget, spend against the cap, runs by outcome,
backlog), the sweep's last run and the recent runs, from one read of the database
(:func:`worker.snapshot.take_snapshot`): the same figures as the page and the metrics.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from consolidation import ConsolidationService
from worker.cli.conventions import DbUrl, check_scope_option
from worker.cli.ledger import Json, cli_ledger
from worker.cli.output import emit_json, instant_text, print_message, print_table
from worker.config import OuterEnvironment
from worker.http.ops_page import SWEEP_STALE_AFTER, format_usd
from worker.snapshot import OpsSnapshot, take_snapshot

Scope = Annotated[
    str | None,
    typer.Option(
        "--scope", help="Only this scope (default: every scope).", show_default=False, callback=check_scope_option
    ),
]


def _scopes_table(snapshot: OpsSnapshot) -> Table:
    month = snapshot.overview.month_start.strftime("%B %Y")
    table = Table(title=f"Scopes, {month}", box=box.SIMPLE_HEAD)
    for name in ("Scope", "Mode", "Model", "Records", "Spend", "Cap", "Remaining", "Runs this month", "Pending"):
        table.add_column(
            name, justify="right" if name in ("Records", "Spend", "Cap", "Remaining", "Pending") else "left"
        )
    for s in snapshot.overview.scopes:
        runs = ", ".join(f"{outcome} {count}" for outcome, count in sorted(s.runs_by_outcome.items()))
        table.add_row(
            Text(s.scope_key),
            s.mode,
            Text(s.model or ""),
            f"{s.held}" + (f"/{s.max_records}" if s.max_records else ""),
            Text(format_usd(s.month_spend_micro_usd), style="red" if s.remaining_micro_usd == 0 else ""),
            format_usd(s.spend_budget_micro_usd),
            format_usd(s.remaining_micro_usd),
            runs,
            str(s.pending),
        )
    return table


def _runs_table(snapshot: OpsSnapshot) -> Table:
    table = Table(title="Recent runs", box=box.SIMPLE_HEAD)
    for name in ("Run", "Scope", "Outcome", "Settled (UTC)", "Tokens in/out", "Spend", "Refusals"):
        table.add_column(name)
    for r in snapshot.runs:
        refusals = ", ".join(f"{reason} {count}" for reason, count in sorted(r.refusals.items()))
        table.add_row(
            Text(r.id),
            Text(r.scope_key),
            r.outcome or r.state,
            instant_text(r.settled_at),
            f"{r.input_tokens}/{r.output_tokens}",
            format_usd(r.spend_micro_usd),
            Text(refusals),
        )
    return table


def _sweep_line(snapshot: OpsSnapshot) -> tuple[str, str | None]:
    sweep, age = snapshot.sweep, snapshot.sweep_age_s()
    if sweep is None or age is None:
        return "Sweep: never ran against this database (schedule `memledger sweep`).", "red"
    stale = age > SWEEP_STALE_AFTER.total_seconds()
    return (
        f"Sweep: last finished {instant_text(sweep.last_finished_at)} UTC ({int(age)} s ago), "
        f"expired {sweep.last_expired}; {sweep.runs} sweeps recorded" + (" — overdue" if stale else ""),
        "red" if stale else None,
    )


def status(
    as_json: Json = False,
    scope: Scope = None,
    runs: Annotated[int, typer.Option("--runs", min=0, max=1000, help="How many recent runs to show.")] = 10,
    database_url: DbUrl = None,
) -> None:
    """Show every scope's mode, budget use and month's spend, the backlog, the sweep's last run and recent runs."""
    with cli_ledger(database_url) as led:
        service = ConsolidationService(led, **OuterEnvironment().model_access())
        snapshot = take_snapshot(led, service, recent_runs=runs if scope is None else 10_000)
    if scope is not None:
        overview = replace(snapshot.overview, scopes=[s for s in snapshot.overview.scopes if s.scope_key == scope])
        picked = [r for r in snapshot.runs if r.scope_key == scope][:runs]
        snapshot = replace(snapshot, overview=overview, runs=picked)
    if as_json:
        emit_json(snapshot.to_json())
        return
    print_message(
        f"Backlog: {snapshot.overview.pending} pending, {snapshot.overview.running} running "
        f"(as of {instant_text(snapshot.at)} UTC)."
    )
    line, style = _sweep_line(snapshot)
    print_message(line, style=style)
    if snapshot.overview.scopes:
        print_table(_scopes_table(snapshot))
    else:
        print_message("No scopes yet.", style="dim")
    if snapshot.runs:
        print_table(_runs_table(snapshot))


def register(app: typer.Typer) -> None:
    app.command("status")(status)
