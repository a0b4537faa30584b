"""``memledger bench cluster``: N API and M worker processes on one PostgreSQL and one Redis, with faults.

What it runs and counts: :mod:`worker.cluster` and docs/performance.md ("Past one machine").
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from worker.cli.output import Format, fail, print_message

if TYPE_CHECKING:
    from worker.cluster import ClusterPlan


def _workers(value: str) -> str:
    parts = value.split(",")
    if not all(p.strip().isdigit() and 1 <= int(p) <= 32 for p in parts):
        raise typer.BadParameter("a comma-separated list of worker counts from 1 to 32, e.g. 1,2,4")
    return value


def cluster(
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            help="A PostgreSQL database to work in (a schema of its own, dropped after). "
            "Default: MEMLEDGER_DATABASE_URL when it is PostgreSQL.",
            show_default=False,
        ),
    ] = None,
    api: Annotated[int, typer.Option("--api", min=1, max=16, help="API processes (serve --no-worker).")] = 2,
    workers: Annotated[
        str, typer.Option("--workers", callback=_workers, help="Worker process counts to measure, in order.")
    ] = "1,2,4",
    threads: Annotated[int, typer.Option("--threads", min=1, max=64, help="Threads per worker process.")] = 1,
    clients: Annotated[int, typer.Option("--clients", min=1, max=256, help="Clients, one account each.")] = 16,
    seconds: Annotated[float, typer.Option("--seconds", min=1, max=3600, help="Measuring time per M.")] = 12.0,
    latency_ms: Annotated[
        int, typer.Option("--model-latency-ms", min=0, max=60_000, help="The fake model's answer time.")
    ] = 200,
    faults: Annotated[
        bool,
        typer.Option("--faults/--no-faults", help="Then the same load with a worker, an API process and Redis lost."),
    ] = True,
    quick: Annotated[bool, typer.Option("--quick", help="The CI size: M = 1 and 2, 5 s each.")] = False,
    fmt: Annotated[Format, typer.Option("--format", help="A table, or one JSON object.")] = Format.TEXT,
    logs: Annotated[
        Path | None, typer.Option("--logs", help="Keep every process's log in this directory.", show_default=False)
    ] = None,
) -> None:
    """Measure saves/s and runs/s with N API and M worker processes; then lose a node of each kind under load."""
    from worker.cluster import ClusterPlan

    counts = (1, 2) if quick else tuple(int(p) for p in workers.split(","))
    plan = ClusterPlan(
        _database_url(database_url), api=api, workers=counts, threads=threads, clients=clients,
        seconds=5.0 if quick else seconds, model_latency_s=latency_ms / 1000, faults=faults, logs=logs,
    )  # fmt: skip
    _run(plan, fmt)


def _database_url(given: str | None) -> str:
    from worker.config import load_config
    from worker.errors import ConfigError

    try:
        return given or load_config().database_url
    except ConfigError as exc:
        fail(str(exc), reason="config_error")


def _run(plan: ClusterPlan, fmt: Format) -> None:
    """Run ``plan``, print its report; exit 1 when a fault lost a save, applied a run twice or left one unsettled."""
    from worker.cluster import format_report, report_json, run_cluster
    from worker.errors import ClusterError

    progress = (lambda line: print_message(line, style="dim")) if fmt == Format.TEXT else (lambda line: None)
    try:
        report = run_cluster(plan, progress=progress)
    except ClusterError as exc:
        fail(str(exc), reason="cluster_error")
    print(report_json(report) if fmt == Format.JSON else format_report(report))
    zeros = report.faults is None or not any(report.faults[k] for k in ("lost_saves", "double_applied", "unsettled"))
    if not zeros:
        raise typer.Exit(1)
