"""``memledger bench replay``: score consolidation on generated episodes, beside two baselines.

Imports nothing of the benchmark until the command runs. The corpus, the metrics and how
to score a model of your own: docs/consolidation-quality.md.
"""

from __future__ import annotations

import json
import statistics
import sys
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer

from worker.cli.output import fail, print_message, print_table

if TYPE_CHECKING:
    from rich.table import Table

    from consolidation.replay import ReplayReport
    from consolidation.replay.score import Tally

app = typer.Typer(help="Benchmarks of the product itself.", no_args_is_help=True)
MAX_EPISODES = 10_000
# Static: listing the registry here would import consolidation for every --help.
HARNESS_HELP = (
    "The consolidation harness to score, e.g. offline or anthropic; an unknown name is answered with the list."
)


class Format(StrEnum):
    TEXT = "text"
    JSON = "json"


def _check_harness(name: str) -> str:
    from consolidation.harnesses import HARNESS_NAMES

    if name not in HARNESS_NAMES:
        raise typer.BadParameter(f"unknown harness {name[:80]!r}; choose one of: {', '.join(HARNESS_NAMES)}")
    return name


@app.command("replay")
def replay(
    harness: Annotated[str, typer.Option("--harness", help=HARNESS_HELP, callback=_check_harness)] = "offline",
    model: Annotated[
        str | None,
        typer.Option("--model", help="The model (default: the harness's default).", show_default=False),
    ] = None,
    episodes: Annotated[int, typer.Option("--episodes", min=1, max=MAX_EPISODES, help="How many episodes.")] = 210,
    seed: Annotated[int, typer.Option("--seed", help="The corpus seed: one seed, one corpus.")] = 0,
    fmt: Annotated[Format, typer.Option("--format", help="A table per task class, or one JSON object.")] = Format.TEXT,
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            help="Play in this database (fresh scopes; migrated first). Default: a temporary SQLite file per arm.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Score consolidation on generated episodes through the real pipeline, beside keep_all and latest_wins."""
    from consolidation.replay import replay as run_replay
    from worker.cli.ledger import cli_errors
    from worker.config import OuterEnvironment, load_config
    from worker.errors import ConfigError

    try:
        prices = load_config().price_table()  # MEMLEDGER_MODEL_PRICES prices a model the table does not know
    except ConfigError as exc:
        fail(str(exc), reason="config_error")
    with cli_errors():  # the ledger's refusals as the other commands show them
        report = run_replay(
            harness,
            model=model,
            episodes=episodes,
            seed=seed,
            database_url=database_url,
            prices=prices,
            progress=_progress if sys.stderr.isatty() else None,
            service_kwargs=OuterEnvironment().model_access(),
        )
    if fmt == Format.JSON:
        typer.echo(json.dumps(report.to_json(), indent=2))
        return
    _print_report(report)


def _progress(arm: str, done: int, total: int) -> None:
    sys.stderr.write(f"\r{arm}: {done}/{total} episodes" + ("\n" if done == total else ""))
    sys.stderr.flush()


def _classes_table(report: ReplayReport) -> Table:
    from rich import box
    from rich.table import Table

    from consolidation.replay import BASELINES

    arms = (report.harness, *BASELINES)
    table = Table(title=f"Consolidation quality by task class (seed {report.seed})", box=box.SIMPLE_HEAD)
    table.add_column("Class")
    table.add_column("Episodes", justify="right")
    for arm in arms:
        table.add_column(f"{arm} P", justify="right")
        table.add_column(f"{arm} R", justify="right")
    for name, tally in report.tallies[report.harness].classes.items():
        if not tally.episodes:
            continue
        cells = [name, str(tally.episodes)]
        for arm in arms:
            c = report.tallies[arm].classes[name]
            cells += [f"{c.precision():.2f}", f"{c.recall():.2f}"]
        table.add_row(*cells)
    return table


def _wall(tally: Tally) -> str:
    if not tally.run_wall_s:
        return "-"
    ms = sorted(t * 1000 for t in tally.run_wall_s)
    p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
    return f"{statistics.median(ms):.1f} / {p95:.1f}"


def _totals_table(report: ReplayReport) -> Table:
    from rich import box
    from rich.table import Table

    from consolidation.replay import BASELINES

    arms = (report.harness, *BASELINES)
    table = Table(title="Whole corpus", box=box.SIMPLE_HEAD)
    table.add_column("Metric")
    for arm in arms:
        table.add_column(arm, justify="right")
    rows: list[tuple[str, ...]] = []
    tallies = [report.tallies[a] for a in arms]
    rows.append(("false merges", *(str(t.false_merges) for t in tallies)))
    rows.append(("as-of exact", *(f"{t.as_of_exact():.4f}" for t in tallies)))
    rows.append(("erased leaks", *(str(t.erased_leaks) for t in tallies)))
    rows.append(("runs (failed)", *(f"{t.runs} ({t.failed_runs})" for t in tallies)))
    rows.append(("tokens", *(str(t.tokens) for t in tallies)))
    rows.append(("spend (USD)", *(f"{t.spend_micro_usd / 1e6:.4f}" for t in tallies)))
    rows.append(("wall ms per run, p50 / p95", *(_wall(t) for t in tallies)))
    for row in rows:
        table.add_row(*row)
    return table


def _print_report(report: ReplayReport) -> None:
    ours = report.tallies[report.harness]
    model = f", model {report.model}" if report.model else ""
    print_message(f"Replay: {ours.episodes} episodes, harness {report.harness}{model}. P = precision, R = recall.")
    print_table(_classes_table(report))
    print_table(_totals_table(report))
    for arm, tally in report.tallies.items():
        for place in tally.leak_places[:5]:
            print_message(f"{arm}: a forgotten body was found in {place}", style="red")
    if ours.failed_runs:
        print_message(
            f"{ours.failed_runs} of {ours.runs} runs failed: {'; '.join(ours.run_errors)}. (A run whose records "
            "are forgotten while it waits for its model fails by design: docs/consolidation-quality.md.)",
            style="yellow",
        )


def register(app_: typer.Typer) -> None:
    app_.add_typer(app, name="bench", help="Benchmarks: `memledger bench replay` scores consolidation quality.")


def _add_cluster() -> None:
    """``bench cluster`` lives in its own module (it imports :class:`Format` from this one)."""
    from worker.cli.bench_cluster import cluster

    app.command("cluster")(cluster)


_add_cluster()
