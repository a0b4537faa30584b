"""Run storage: debounce, claim and settle, each a conditional statement.

A run moves ``pending → running → settled`` (or ``pending → settled`` when
cancelled or skipped). Every move is an UPDATE guarded by the state it expects, so
exactly one caller wins each move however many workers race for it. Statements are
SQLAlchemy Core over :data:`ledger.models.RUNS`, run through a ledger read or write
transaction (``tx.execute``).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from typing import Any, Protocol

from sqlalchemy import ColumnElement, CursorResult, Executable, and_, case, exists, func, insert, select, update
from sqlalchemy.orm import aliased

from consolidation.models import ConsolidationRun, ConsolidationSettings, Outcome, run_from_row
from ledger.instants import to_micros
from ledger.models import RUNS

C = RUNS.c


class Executor(Protocol):
    def execute(self, statement: Executable, params: Any = None) -> CursorResult[*tuple[Any, ...]]: ...


def new_run_id() -> str:
    return "run_" + secrets.token_hex(12)


def get(db: Executor, run_id: str) -> ConsolidationRun | None:
    found = select_runs(db, C.id == run_id, order=(C.id,), limit=1)
    return found[0] if found else None


def select_runs(
    db: Executor, where: ColumnElement[bool] | None, *, order: tuple[Any, ...], limit: int
) -> list[ConsolidationRun]:
    stmt = select(RUNS)
    if where is not None:
        stmt = stmt.where(where)
    rows = db.execute(stmt.order_by(*order).limit(limit)).mappings()
    return [run_from_row(row) for row in rows]


def _pending(db: Executor, scope_key: str) -> ConsolidationRun | None:
    """The scope's pending consolidation run, if any (there is at most one)."""
    found = select_runs(
        db, and_(C.scope_key == scope_key, C.state == "pending", C.job == "consolidate"), order=(C.id,), limit=1
    )
    return found[0] if found else None


def _insert_pending(db: Executor, scope_key: str, *, turns: int, now_us: int, due_us: int) -> str:
    """Insert a pending consolidation run and return its id."""
    run_id = new_run_id()
    db.execute(
        insert(RUNS).values(
            id=run_id,
            scope_key=scope_key,
            state="pending",
            turns=turns,
            created_at=now_us,
            due_at=due_us,
            refusals="{}",
            job="consolidate",
        )
    )
    return run_id


def debounce(db: Executor, settings: ConsolidationSettings, now_us: int) -> ConsolidationRun:
    """Create the scope's pending run, or push it to ``now + debounce_s`` (capped by ``max_wait_s``)."""
    debounce_us = round(settings.debounce_s * 1_000_000)
    run = _pending(db, settings.scope_key)
    if run is not None:
        due = now_us + debounce_us
        if settings.max_wait_s is not None:
            due = min(due, to_micros(run.created_at) + round(settings.max_wait_s * 1_000_000))
        due = max(due, to_micros(run.due_at))
        db.execute(update(RUNS).where(C.id == run.id, C.state == "pending").values(turns=C.turns + 1, due_at=due))
        run_id = run.id
    else:
        run_id = _insert_pending(db, settings.scope_key, turns=1, now_us=now_us, due_us=now_us + debounce_us)
    fresh = get(db, run_id)
    assert fresh is not None
    return fresh


def cancel_pending(db: Executor, scope_key: str, now_us: int) -> int:
    done = db.execute(
        update(RUNS)
        .where(C.scope_key == scope_key, C.state == "pending", C.job == "consolidate")
        .values(state="settled", outcome="cancelled", settled_at=now_us)
    )
    return int(done.rowcount)


def claim(db: Executor, run_id: str, settings: ConsolidationSettings, now_us: int) -> bool:
    """pending → running, only when due and no other run of the scope is running."""
    other = aliased(RUNS)
    done = db.execute(
        update(RUNS)
        .where(
            C.id == run_id,
            C.state == "pending",
            C.due_at <= now_us,
            ~exists().where(other.c.scope_key == C.scope_key, other.c.state == "running"),
        )
        .values(
            state="running",
            started_at=now_us,
            harness=settings.harness,
            model=settings.model,
            mode=settings.mode.value,
            wall_clock_cap_s=settings.wall_clock_cap_s,
        )
    )
    return bool(done.rowcount == 1)


def _usage_values(usage: Any, spend_micro_usd: int) -> dict[str, Any]:
    return {
        "input_tokens": C.input_tokens + getattr(usage, "input_tokens", 0),
        "output_tokens": C.output_tokens + getattr(usage, "output_tokens", 0),
        "cache_creation_input_tokens": C.cache_creation_input_tokens + getattr(usage, "cache_creation_input_tokens", 0),
        "cache_read_input_tokens": C.cache_read_input_tokens + getattr(usage, "cache_read_input_tokens", 0),
        "spend_micro_usd": C.spend_micro_usd + spend_micro_usd,
    }


def store_answer(
    db: Executor, run_id: str, *, prompt: str, answer: Any, raw: str, usage: Any, spend_micro_usd: int, now_us: int
) -> bool:
    """Write the answer and its usage before anything is applied. Usage is kept even on a settled run."""
    done = db.execute(
        update(RUNS)
        .where(C.id == run_id, C.answer_stored_at.is_(None))
        .values(
            prompt=prompt,
            answer=None if answer is None else json.dumps(answer),
            answer_raw=raw,
            answer_stored_at=now_us,
            model_calls=C.model_calls + 1,
            **_usage_values(usage, spend_micro_usd),
        )
    )
    return bool(done.rowcount == 1)


def settle(
    db: Executor,
    run_id: str,
    outcome: Outcome,
    now_us: int,
    *,
    expect: str = "running",
    error: str | None = None,
    ops_proposed: int = 0,
    ops_applied: int = 0,
    ops_refused: int = 0,
    refusals: Mapping[str, int] | None = None,
    usage: Any = None,
    spend_micro_usd: int = 0,
    unanswered: bool = False,
    calls: int = 0,
) -> bool:
    """The one settlement of a run: a conditional update from ``expect``. True when this call won.

    ``unanswered`` also requires that no answer is stored (the janitor's abandon must not
    discard an answer a worker stored a moment ago: that one is applied instead).
    """
    where = [C.id == run_id, C.state == expect]
    if unanswered:
        where.append(C.answer_stored_at.is_(None))
    done = db.execute(
        update(RUNS)
        .where(*where)
        .values(
            state="settled",
            outcome=outcome.value,
            settled_at=now_us,
            error=None if error is None else error[:500],
            ops_proposed=ops_proposed,
            ops_applied=ops_applied,
            ops_refused=ops_refused,
            refusals=json.dumps(dict(refusals or {}), sort_keys=True),
            started_at=func.coalesce(C.started_at, now_us),
            model_calls=C.model_calls + calls,
            # An extraction run's prompt is the chat transcript: it does not outlive the run (SPEC 4.5).
            prompt=case((C.job == "extract", None), else_=C.prompt),
            **_usage_values(usage, spend_micro_usd),
        )
    )
    return bool(done.rowcount == 1)


def add_usage(db: Executor, run_id: str, usage: Any, spend_micro_usd: int, *, calls: int = 0) -> None:
    """Add a call's tokens and spend to a run whatever its state (the call was paid for)."""
    db.execute(
        update(RUNS)
        .where(C.id == run_id)
        .values(model_calls=C.model_calls + calls, **_usage_values(usage, spend_micro_usd))
    )


def month_spend(db: Executor, scope_key: str, start_us: int, end_us: int) -> int:
    total = db.execute(
        select(func.coalesce(func.sum(C.spend_micro_usd), 0)).where(
            C.scope_key == scope_key, C.started_at >= start_us, C.started_at < end_us
        )
    ).scalar()
    return int(total or 0)


def ensure_pending(db: Executor, settings: ConsolidationSettings, now_us: int) -> ConsolidationRun:
    """The scope's pending run, created (with no turn) when there is none; an existing one is left as it is.

    Used when a full scope needs room: it schedules a run without pushing back one already due.
    """
    pending = _pending(db, settings.scope_key)
    if pending is not None:
        return pending
    due_us = now_us + round(settings.debounce_s * 1_000_000)
    run_id = _insert_pending(db, settings.scope_key, turns=0, now_us=now_us, due_us=due_us)
    fresh = get(db, run_id)
    assert fresh is not None
    return fresh


def last_prompt_at(db: Executor, scope_key: str) -> int | None:
    """When the scope's last settled run with an answer built its prompt (its start); None before the first."""
    found = db.execute(
        select(func.max(C.started_at)).where(
            C.scope_key == scope_key,
            C.job == "consolidate",
            C.state == "settled",
            C.answer_stored_at.is_not(None),
        )
    ).scalar()
    return None if found is None else int(found)
