"""What ``memledger bench cluster`` was asked to do (:class:`ClusterPlan`) and what it measured."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ClusterPlan:
    database_url: str
    api: int = 2
    workers: tuple[int, ...] = (1, 2, 4)
    threads: int = 1
    clients: int = 16
    seconds: float = 12.0
    model_latency_s: float = 0.2
    client_rate: float = 1.0  # pairs of saves (and a turn) per second per client
    notes: int = 4  # each client repeats this many notes, so its scope stays small whatever the duration
    faults: bool = True
    fault_workers: int = 2
    redis_server: str = "redis-server"
    logs: Path | None = None  # keep the processes' logs here (else a temporary directory)


@dataclass
class Phase:
    """One load phase's figures."""

    workers: int
    seconds: float
    saves: int = 0
    save_latencies_s: list[float] = field(default_factory=list)
    runs: int = 0
    run_latencies_s: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            "workers": self.workers,
            "seconds": round(self.seconds, 2),
            "saves": self.saves,
            "saves_per_s": round(self.saves / self.seconds, 2),
            "save_p50_ms": _ms(_quantile(self.save_latencies_s, 0.5)),
            "save_p99_ms": _ms(_quantile(self.save_latencies_s, 0.99)),
            "runs": self.runs,
            "runs_per_s": round(self.runs / self.seconds, 2),
            "run_p50_ms": _ms(_quantile(self.run_latencies_s, 0.5)),
            "run_p99_ms": _ms(_quantile(self.run_latencies_s, 0.99)),
        }


@dataclass
class ClusterReport:
    plan: ClusterPlan
    phases: list[Phase]
    faults: dict[str, Any] | None

    def to_json(self) -> dict[str, Any]:
        by_m = {str(p.workers): p.summary() for p in self.phases}
        return {
            "api": self.plan.api,
            "threads": self.plan.threads,
            "clients": self.plan.clients,
            "model_latency_ms": round(self.plan.model_latency_s * 1000),
            "saves_per_s": {m: s["saves_per_s"] for m, s in by_m.items()},
            "runs_per_s": {m: s["runs_per_s"] for m, s in by_m.items()},
            "phases": by_m,
            "faults": self.faults,
        }


def _quantile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[max(0, min(98, round(q * 100) - 1))]


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def format_report(report: ClusterReport) -> str:
    lines = [
        f"{report.plan.api} API processes, {report.plan.clients} clients, "
        f"{report.plan.threads} thread(s) per worker, model latency {report.plan.model_latency_s * 1000:.0f} ms",
        f"{'M':>3} {'saves/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'runs/s':>8} {'p50 ms':>8} {'p99 ms':>8}",
    ]
    for phase in report.phases:
        s = phase.summary()
        lines.append(
            f"{phase.workers:>3} {s['saves_per_s']:>9} {s['save_p50_ms']!s:>8} {s['save_p99_ms']!s:>8} "
            f"{s['runs_per_s']:>8} {s['run_p50_ms']!s:>8} {s['run_p99_ms']!s:>8}"
        )
    if report.faults is not None:
        f = report.faults
        lines.append("faults: " + "; ".join(f["faults"]))
        lines.append(
            f"lost saves {f['lost_saves']} of {f['acknowledged_saves']} acknowledged, "
            f"runs applied twice {f['double_applied']}, runs unsettled {f['unsettled']}"
        )
    return "\n".join(lines)


def report_json(report: ClusterReport) -> str:
    return json.dumps(report.to_json(), indent=2)
