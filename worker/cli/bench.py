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

from worker.cli.consolidation import (  # the harness's scope settings, as `memledger consolidation set` takes them
    BaseUrlOpt,
    ContextWindowOpt,
    MaxOutputTokensOpt,
    PriceInOpt,
    PriceOutOpt,
    ResponseFormatOpt,
    StreamOpt,
    SystemRoleOpt,
    TemperatureOpt,
    call_options,
)
from worker.cli.output import Format, fail, print_message, print_table

if TYPE_CHECKING:
    from rich.table import Table

    from consolidation import PriceTable, ReplayReport, Tally

app = typer.Typer(help="Benchmarks of the product itself.", no_args_is_help=True)
MAX_EPISODES = 10_000
# Static: listing the registry here would import consolidation for every --help.
HARNESS_HELP = (
    "The consolidation harness to score, e.g. offline or anthropic; an unknown name is answered with the list."
)


class Split(StrEnum):
    TUNING = "tuning"
    HELDOUT = "heldout"
    ALL = "all"


def _check_harness(name: str) -> str:
    from consolidation import HARNESS_NAMES

    if name not in HARNESS_NAMES:
        raise typer.BadParameter(f"unknown harness {name[:80]!r}; choose one of: {', '.join(HARNESS_NAMES)}")
    return name


HarnessOpt = Annotated[str, typer.Option("--harness", help=HARNESS_HELP, callback=_check_harness)]
ModelOpt = Annotated[
    str | None, typer.Option("--model", help="The model (default: the harness's default).", show_default=False)
]
EpisodesOpt = Annotated[int, typer.Option("--episodes", min=1, max=MAX_EPISODES, help="How many episodes a split.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="The corpus seed: one seed, one corpus.")]
FormatOpt = Annotated[Format, typer.Option("--format", help="A table per task class, or one JSON object.")]
DatabaseUrlOpt = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        help="Play in this database (fresh scopes; migrated first). Default: a temporary SQLite file per arm.",
        show_default=False,
    ),
]
SplitOpt = Annotated[
    Split, typer.Option("--split", help="The tuning split, the held-out one, or both (reported apart).")
]
CapOpt = Annotated[
    float | None, typer.Option("--wall-clock-cap-s", help="Wall-clock cap of one run (a CPU model needs more).")
]


@app.command("replay")
def replay(
    harness: HarnessOpt = "offline",
    model: ModelOpt = None,
    episodes: EpisodesOpt = 210,
    seed: SeedOpt = 0,
    fmt: FormatOpt = Format.TEXT,
    database_url: DatabaseUrlOpt = None,
    split: SplitOpt = Split.ALL,
    base_url: BaseUrlOpt = None,
    price_in: PriceInOpt = None,
    price_out: PriceOutOpt = None,
    cap_s: CapOpt = None,
    max_output_tokens: MaxOutputTokensOpt = None,
    response_format: ResponseFormatOpt = None,
    temperature: TemperatureOpt = None,
    context_window_tokens: ContextWindowOpt = None,
    system_role: SystemRoleOpt = None,
    stream: StreamOpt = None,
) -> None:
    """Score consolidation on generated episodes through the real pipeline, beside keep_all and latest_wins.

    Exits 1 when the harness cannot be used (nothing is played), and when a run failed for any
    cause but the designed one (a record forgotten while its run waits for the model).
    """
    from consolidation import run_replay
    from worker.cli.ledger import cli_errors
    from worker.config import OuterEnvironment

    prices = _prices()
    with cli_errors():  # the ledger's refusals as the other commands show them
        report = run_replay(
            harness,
            model=model,
            episodes=episodes,
            seed=seed,
            split=split.value,
            database_url=database_url,
            prices=prices,
            progress=_progress if sys.stderr.isatty() else None,
            service_kwargs=OuterEnvironment().model_access(),
            target=_target(base_url, price_in, price_out, cap_s, max_output_tokens)
            | call_options(response_format, temperature, context_window_tokens, system_role, stream),
        )
    if fmt == Format.JSON:
        typer.echo(json.dumps(report.to_json(), indent=2))
    else:
        _print_report(report)
    _fail_on_failed_runs(report.tallies[report.harness])


def _prices() -> PriceTable:
    """The configured price table (``MEMLEDGER_MODEL_PRICES`` prices a model the built-in table does not know)."""
    from worker.config import load_config
    from worker.errors import ConfigError

    try:
        return load_config().price_table()
    except ConfigError as exc:
        fail(str(exc), reason="config_error")


def _fail_on_failed_runs(ours: Tally) -> None:
    """Exit 1 when a run failed for any cause but the designed one: those scores are not the model's."""
    if ours.undesigned_failures:
        causes = ", ".join(f"{cause} {n}" for cause, n in sorted(ours.failed_by_cause.items()))
        fail(
            f"{ours.undesigned_failures} of {ours.runs} runs failed ({causes}); first errors: "
            f"{'; '.join(ours.run_errors)}. The scores above are not the model's: fix the harness and run again.",
            reason="runs_failed",
        )


def _target(
    base_url: str | None, price_in: float | None, price_out: float | None, cap_s: float | None, max_out: int | None
) -> dict[str, object]:
    """The scope settings given on the command line, named as ``consolidation set`` names them."""
    given = (
        ("base_url", base_url),
        ("price_in_usd_per_mtok", price_in),
        ("price_out_usd_per_mtok", price_out),
        ("wall_clock_cap_s", cap_s),
        ("max_output_tokens", max_out),
    )
    return {key: value for key, value in given if value is not None}


def _progress(arm: str, done: int, total: int) -> None:
    sys.stderr.write(f"\r{arm}: {done}/{total} episodes" + ("\n" if done == total else ""))
    sys.stderr.flush()


def _classes_table(report: ReplayReport, split: str, tallies: dict[str, Tally]) -> Table:
    from rich import box
    from rich.table import Table

    from consolidation import BASELINES

    arms = (report.harness, *BASELINES)
    title = f"Consolidation quality by task class, {split} split (seed {report.seed})"
    table = Table(title=title, box=box.SIMPLE_HEAD)
    table.add_column("Class")
    table.add_column("Episodes", justify="right")
    for arm in arms:
        table.add_column(f"{arm} P", justify="right")
        table.add_column(f"{arm} R", justify="right")
    for name, tally in tallies[report.harness].classes.items():
        if not tally.episodes:
            continue
        cells = [name, str(tally.episodes)]
        for arm in arms:
            c = tallies[arm].classes[name]
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

    from consolidation import BASELINES

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
    rows.append(("operations applied / refused", *(f"{t.ops_applied} / {t.ops_refused}" for t in tallies)))
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
    for split, tallies in report.by_split.items():
        print_table(_classes_table(report, split, tallies))
    print_table(_totals_table(report))
    for arm, tally in report.tallies.items():
        for place in tally.leak_places[:5]:
            print_message(f"{arm}: a forgotten body was found in {place}", style="red")
    if ours.failed_runs and not ours.undesigned_failures:
        print_message(
            f"{ours.failed_runs} of {ours.runs} runs failed, each because a record was forgotten while its run waited "
            "for the model: by design (docs/consolidation-quality.md).",
            style="yellow",
        )


def register(app_: typer.Typer) -> None:
    app_.add_typer(app, name="bench", help="Benchmarks: `memledger bench replay` scores consolidation quality.")


def _add_cluster() -> None:
    """``bench cluster`` lives in its own module (it imports :class:`Format` from this one)."""
    from worker.cli.bench_cluster import cluster

    app.command("cluster")(cluster)


_add_cluster()
