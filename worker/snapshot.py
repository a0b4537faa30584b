"""One read of what an operator looks at: scopes this month, recent runs, the backlog, the sweep.

Shared by ``GET /ops``, the scrape-time gauges and ``memledger status`` so the three always agree.
Nothing here holds a body: runs are reduced to their counters before they leave this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from consolidation import (
    DEFAULT_SPEND_BUDGET_MICRO_USD,
    ConsolidationRun,
    ConsolidationService,
    Overview,
    RunState,
    scope_overview,
)
from ledger import Ledger, SweepStatus, format_rfc3339

RECENT_RUNS = 20


@dataclass(frozen=True, slots=True)
class RunSummary:
    """A run without its prompt or answer: what the operator page and ``status`` show."""

    id: str
    scope_key: str
    state: str
    outcome: str | None
    harness: str | None
    model: str | None
    turns: int
    due_at: datetime
    settled_at: datetime | None
    input_tokens: int
    output_tokens: int
    spend_micro_usd: int
    ops_applied: int
    proposals_written: int
    ops_refused: int
    refusals: dict[str, int]
    error: str | None

    @classmethod
    def of(cls, run: ConsolidationRun) -> RunSummary:
        return cls(
            id=run.id,
            scope_key=run.scope_key,
            state=str(run.state),
            outcome=None if run.outcome is None else str(run.outcome),
            harness=run.harness,
            model=run.model,
            turns=run.turns,
            due_at=run.due_at,
            settled_at=run.settled_at,
            input_tokens=run.input_tokens,
            output_tokens=run.output_tokens,
            spend_micro_usd=run.spend_micro_usd,
            ops_applied=run.ops_applied,
            proposals_written=run.proposals_written,
            ops_refused=run.ops_refused,
            refusals=dict(run.refusals),
            error=run.error,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "scopeKey": self.scope_key,
            "state": self.state,
            "outcome": self.outcome,
            "harness": self.harness,
            "model": self.model,
            "turns": self.turns,
            "dueAt": format_rfc3339(self.due_at),
            "settledAt": format_rfc3339(self.settled_at),
            "inputTokens": self.input_tokens,
            "outputTokens": self.output_tokens,
            "spendMicroUsd": self.spend_micro_usd,
            "opsApplied": self.ops_applied,
            "proposalsWritten": self.proposals_written,
            "opsRefused": self.ops_refused,
            "refusals": dict(self.refusals),
            "error": self.error,
        }


@dataclass(frozen=True, slots=True)
class OpsSnapshot:
    """Everything ``/ops``, the gauges and ``memledger status`` show, read at ``at``."""

    at: datetime
    overview: Overview
    runs: list[RunSummary]
    sweep: SweepStatus | None

    def sweep_age_s(self) -> float | None:
        """Seconds since the sweep last finished (None when it never ran against this database)."""
        if self.sweep is None:
            return None
        return max(0.0, (self.at - self.sweep.last_finished_at).total_seconds())

    def to_json(self) -> dict[str, Any]:
        """camelCase, RFC 3339 (``memledger status --json``)."""
        sweep = self.sweep
        return {
            "at": format_rfc3339(self.at),
            "month": {
                "start": format_rfc3339(self.overview.month_start),
                "end": format_rfc3339(self.overview.month_end),
            },
            "backlog": {RunState.PENDING.value: self.overview.pending, RunState.RUNNING.value: self.overview.running},
            "scopes": [scope.to_json() for scope in self.overview.scopes],
            "runs": [run.to_json() for run in self.runs],
            "sweep": None
            if sweep is None
            else {
                "lastStartedAt": format_rfc3339(sweep.last_started_at),
                "lastFinishedAt": format_rfc3339(sweep.last_finished_at),
                "lastSweptTo": format_rfc3339(sweep.last_now),
                "lastExpired": sweep.last_expired,
                "runs": sweep.runs,
                "expiredTotal": sweep.expired_total,
                "ageS": self.sweep_age_s(),
            },
        }


def take_snapshot(
    led: Ledger,
    service: ConsolidationService | None = None,
    *,
    now: datetime | None = None,
    recent_runs: int = RECENT_RUNS,
    default_budget_micro_usd: int = DEFAULT_SPEND_BUDGET_MICRO_USD,
) -> OpsSnapshot:
    """Read the scopes, the ``recent_runs`` newest runs and the sweep's last run (at the ledger's clock).

    Raises:
        SQLAlchemyError / LedgerError: the database cannot be read.
    """
    at = led.now(now)
    overview = scope_overview(led, now=at, default_budget_micro_usd=default_budget_micro_usd)
    runs = [] if service is None or recent_runs <= 0 else service.runs(None, limit=recent_runs)
    return OpsSnapshot(at=at, overview=overview, runs=[RunSummary.of(run) for run in runs], sweep=led.last_sweep())
