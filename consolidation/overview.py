"""What an operator sees per scope: mode, budget use, the month's spend against its cap, runs, backlog.

A handful of grouped reads (never one query per scope), so the operator page and a metrics
scrape cost the same whether a deployment has ten scopes or ten thousand. Nothing here reads
a body: the prompt and answer columns of runs are never selected.

>>> overview = scope_overview(led, now=datetime.now(UTC), default_budget_micro_usd=5_000_000)
>>> overview.scopes[0].month_spend_micro_usd
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import func, literal, select, union_all

from consolidation.models import DEFAULT_SPEND_BUDGET_MICRO_USD, RunState
from consolidation.runs import month_bounds, started_in
from consolidation.tables import CONSOLIDATION_SETTINGS as CS
from consolidation.tables import RUNS
from ledger import Ledger, format_rfc3339, from_micros, to_micros
from ledger.schema import RECORDS, SCOPES

OUTCOMES: tuple[str, ...] = ("applied", "proposed", "cancelled", "skipped_budget", "failed", "abandoned")


@dataclass(frozen=True, slots=True)
class ScopeOverview:
    """One scope this month. Money in micro-USD; counts of runs settled this month by outcome."""

    scope_key: str
    mode: str
    harness: str | None
    model: str | None
    max_records: int | None
    active: int
    proposed: int
    spend_budget_micro_usd: int
    month_spend_micro_usd: int
    month_input_tokens: int
    month_output_tokens: int
    runs_by_outcome: dict[str, int] = field(default_factory=dict)
    refusals: dict[str, int] = field(default_factory=dict)
    pending: int = 0
    running: int = 0
    oldest_due_at: datetime | None = None

    @property
    def held(self) -> int:
        return self.active + self.proposed

    @property
    def remaining_micro_usd(self) -> int:
        """What this month's budget still allows (never negative)."""
        return max(0, self.spend_budget_micro_usd - self.month_spend_micro_usd)

    def to_json(self) -> dict[str, object]:
        """camelCase, as the protocol and ``memledger status --json``."""
        return {
            "scopeKey": self.scope_key,
            "mode": self.mode,
            "harness": self.harness,
            "model": self.model,
            "maxRecords": self.max_records,
            "active": self.active,
            "proposed": self.proposed,
            "held": self.held,
            "spendBudgetMicroUsd": self.spend_budget_micro_usd,
            "monthSpendMicroUsd": self.month_spend_micro_usd,
            "remainingMicroUsd": self.remaining_micro_usd,
            "monthInputTokens": self.month_input_tokens,
            "monthOutputTokens": self.month_output_tokens,
            "runsByOutcome": dict(self.runs_by_outcome),
            "refusals": dict(self.refusals),
            RunState.PENDING.value: self.pending,
            RunState.RUNNING.value: self.running,
            "oldestDueAt": format_rfc3339(self.oldest_due_at),
        }


@dataclass(frozen=True, slots=True)
class Overview:
    """Every scope (ordered by this month's spend, then name), and the month it covers."""

    month_start: datetime
    month_end: datetime
    scopes: list[ScopeOverview]

    @property
    def pending(self) -> int:
        return sum(s.pending for s in self.scopes)

    @property
    def running(self) -> int:
        return sum(s.running for s in self.scopes)


@dataclass(frozen=True, slots=True)
class _Figures:
    """What the grouped reads found, by scope."""

    budgets: dict[str, int]
    usage: dict[str, Counter[str]]
    modes: dict[str, tuple[Any, ...]]
    spend: dict[str, tuple[int, int, int]]
    outcomes: dict[str, dict[str, int]]
    refusals: dict[str, Counter[str]]
    backlog: dict[str, dict[str, tuple[int, int]]]

    def scopes(self) -> set[str]:
        return (
            set(self.budgets)
            | set(self.usage)
            | set(self.modes)
            | set(self.spend)
            | set(self.outcomes)
            | set(self.backlog)
        )


def scope_overview(
    led: Ledger, *, now: datetime, default_budget_micro_usd: int = DEFAULT_SPEND_BUDGET_MICRO_USD
) -> Overview:
    """Every scope the database knows (ledger or consolidation), with this month's figures.

    Month spend counts runs *started* in the month (as the budget check does); runs by outcome
    and refusals count runs *settled* in the month; pending/running are the current backlog.
    """
    start, end = month_bounds(now)
    with led.reading() as db:
        figures = _read(db, to_micros(start), to_micros(end))
    scopes = [_scope(key, figures, default_budget_micro_usd) for key in figures.scopes()]
    scopes.sort(key=lambda s: (-s.month_spend_micro_usd, -(s.pending + s.running), s.scope_key))
    return Overview(month_start=start, month_end=end, scopes=scopes)


_R = RECORDS.c
# Each scope's active and proposed records, each counted through an index on both databases (SQLite has none by
# status): the active records are the open ones, and a proposal's interval is empty (the table's checks).
_HELD = union_all(
    select(_R.scope_key, literal("active"), func.count()).where(_R.valid_to.is_(None)).group_by(_R.scope_key),
    select(_R.scope_key, literal("proposed"), func.count())
    .where(_R.valid_to == _R.valid_from, _R.status == "proposed")
    .group_by(_R.scope_key),
)


def _read(db: Any, a: int, b: int) -> _Figures:
    """The six grouped reads, in one read transaction, for the month ``[a, b)`` (microseconds)."""
    usage: dict[str, Counter[str]] = {}
    for scope, status, count in db.execute(_HELD):
        usage.setdefault(scope, Counter())[status] = int(count)
    month_spend = select(
        RUNS.c.scope_key,
        func.sum(RUNS.c.spend_micro_usd),
        func.sum(RUNS.c.input_tokens),
        func.sum(RUNS.c.output_tokens),
    ).where(*started_in(a, b))
    settled_in_month = (RUNS.c.settled_at >= a, RUNS.c.settled_at < b)
    outcomes: dict[str, dict[str, int]] = {}
    for scope, outcome, count in db.execute(
        select(RUNS.c.scope_key, RUNS.c.outcome, func.count())
        .where(*settled_in_month)
        .group_by(RUNS.c.scope_key, RUNS.c.outcome)
    ):
        outcomes.setdefault(scope, {})[str(outcome)] = int(count)
    refusals: dict[str, Counter[str]] = {}
    for scope, text in db.execute(
        select(RUNS.c.scope_key, RUNS.c.refusals).where(*settled_in_month, RUNS.c.refusals != "{}")
    ):
        refusals.setdefault(scope, Counter()).update({str(k): int(v) for k, v in json.loads(text or "{}").items()})
    return _Figures(
        budgets={s: int(m) for s, m in db.execute(select(SCOPES.c.scope_key, SCOPES.c.max_records))},
        usage=usage,
        modes={
            row[0]: tuple(row)
            for row in db.execute(
                select(CS.c.scope_key, CS.c.mode, CS.c.harness, CS.c.model, CS.c.spend_budget_micro_usd)
            )
        },
        spend={
            scope: (int(sp or 0), int(tin or 0), int(tout or 0))
            for scope, sp, tin, tout in db.execute(month_spend.group_by(RUNS.c.scope_key))
        },
        outcomes=outcomes,
        refusals=refusals,
        backlog=_backlog(db),
    )


def _backlog(db: Any) -> dict[str, dict[str, tuple[int, int]]]:
    """Per scope and state (pending, running): how many runs, and the earliest due."""
    backlog: dict[str, dict[str, tuple[int, int]]] = {}
    for scope, state, count, oldest in db.execute(
        select(RUNS.c.scope_key, RUNS.c.state, func.count(), func.min(RUNS.c.due_at))
        .where(RUNS.c.state.in_((RunState.PENDING.value, RunState.RUNNING.value)))
        .group_by(RUNS.c.scope_key, RUNS.c.state)
    ):
        backlog.setdefault(scope, {})[str(state)] = (int(count), int(oldest))
    return backlog


def _scope(key: str, figures: _Figures, default_budget_micro_usd: int) -> ScopeOverview:
    mode_row = figures.modes.get(key)
    sp, tin, tout = figures.spend.get(key, (0, 0, 0))
    held = figures.usage.get(key, Counter())
    states = figures.backlog.get(key, {})
    pending = states.get(RunState.PENDING)
    return ScopeOverview(
        scope_key=key,
        mode="off" if mode_row is None else str(mode_row[1]),
        harness=None if mode_row is None else str(mode_row[2]),
        model=None if mode_row is None else str(mode_row[3]),
        max_records=figures.budgets.get(key),
        active=held.get("active", 0),
        proposed=held.get("proposed", 0),
        spend_budget_micro_usd=default_budget_micro_usd if mode_row is None else int(mode_row[4]),
        month_spend_micro_usd=sp,
        month_input_tokens=tin,
        month_output_tokens=tout,
        runs_by_outcome=figures.outcomes.get(key, {}),
        refusals=dict(figures.refusals.get(key, {})),
        pending=0 if pending is None else pending[0],
        running=states.get(RunState.RUNNING, (0, 0))[0],
        oldest_due_at=None if pending is None else from_micros(pending[1]),
    )
