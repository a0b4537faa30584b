"""Run storage: debounce, claim and settle, each a conditional statement.

A run moves ``pending → running → settled`` (or ``pending → settled`` when
cancelled), as :data:`consolidation.models.TRANSITIONS` allows. Every move is an UPDATE
guarded by the state it expects (built by :func:`move`), so exactly one caller wins each
move however many workers race for it. Statements are
SQLAlchemy Core over :data:`consolidation.tables.RUNS`, run through a ledger read or write
transaction: the moves of every run (read, claim, store, settle) are module-level statements, built once
(``tx.rows`` / ``tx.run``), the rest ``tx.execute``.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    CursorResult,
    Executable,
    and_,
    bindparam,
    case,
    exists,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.orm import aliased

from consolidation.models import TRANSITIONS, ConsolidationRun, ConsolidationSettings, Outcome, RunState, run_from_row
from consolidation.tables import RUNS
from ledger import Pending, to_micros

C = RUNS.c
_NAMES = tuple(column.name for column in RUNS.c)
_ID: BindParameter[str] = bindparam("v_id")
_NOW: BindParameter[int] = bindparam("now")


class Timing(Protocol):
    """What a debounce reads of a job's settings (both jobs' settings have it)."""

    @property
    def scope_key(self) -> str: ...

    @property
    def debounce_s(self) -> float: ...

    @property
    def max_wait_s(self) -> float | None: ...


class Executor(Protocol):
    def execute(self, statement: Executable, params: Any = None) -> CursorResult[*tuple[Any, ...]]: ...

    def rows(self, statement: Executable, params: Any = None) -> list[tuple[Any, ...]]: ...

    def query(self, statement: Executable, params: Any = None) -> Pending[list[tuple[Any, ...]]]: ...

    def run(self, statement: Executable, params: Any = None) -> int: ...


PENDING = C.state == RunState.PENDING.value
RUNNING = C.state == RunState.RUNNING.value


def move(src: RunState, dst: RunState) -> tuple[ColumnElement[bool], dict[str, str]]:
    """The guard and the new state of the move ``src → dst``: ``update(RUNS).where(guard).values(**state)``.

    Raises:
        ValueError: :data:`~consolidation.models.TRANSITIONS` does not allow the move.
    """
    if dst not in TRANSITIONS[src]:
        raise ValueError(f"a run cannot move from {src} to {dst}")
    return C.state == src.value, {"state": dst.value}


def new_run_id() -> str:
    return "run_" + secrets.token_hex(12)


_GET = select(RUNS).where(C.id == _ID)


def get(db: Executor, run_id: str) -> ConsolidationRun | None:
    found = db.rows(_GET, {"v_id": run_id})
    return run_from_row(dict(zip(_NAMES, found[0], strict=True))) if found else None


def select_runs(
    db: Executor, where: ColumnElement[bool] | None, *, order: tuple[Any, ...], limit: int
) -> list[ConsolidationRun]:
    stmt = select(RUNS)
    if where is not None:
        stmt = stmt.where(where)
    rows = db.execute(stmt.order_by(*order).limit(limit)).mappings()
    return [run_from_row(row) for row in rows]


def _pending(db: Executor, scope_key: str, *, job: str, session_id: str | None) -> ConsolidationRun | None:
    """The scope's pending run of ``job`` (of the session, for extraction), if any (there is at most one)."""
    where = and_(C.scope_key == scope_key, PENDING, C.job == job)
    if session_id is not None:
        where = and_(where, C.session_id == session_id)
    found = select_runs(db, where, order=(C.id,), limit=1)
    return found[0] if found else None


def _one_run(done: CursorResult[Any]) -> ConsolidationRun:
    """The run row a statement ``RETURNING`` every column wrote."""
    return run_from_row(done.mappings().one())


def _insert_pending(
    db: Executor, scope_key: str, *, job: str, session_id: str | None, turns: int, now_us: int, due_us: int
) -> ConsolidationRun:
    """Insert a pending run and return it."""
    values = {"session_id": session_id} if session_id is not None else {}
    return _one_run(
        db.execute(
            insert(RUNS)
            .values(
                id=new_run_id(),
                scope_key=scope_key,
                state=RunState.PENDING.value,
                turns=turns,
                created_at=now_us,
                due_at=due_us,
                refusals="{}",
                job=job,
                **values,
            )
            .returning(*RUNS.c)
        )
    )


def debounce(
    db: Executor, settings: Timing, now_us: int, *, job: str = "consolidate", session_id: str | None = None
) -> ConsolidationRun:
    """Create the pending run of ``job`` (one per scope; for extraction one per session), or push it to
    ``now + debounce_s``, never past ``created_at + max_wait_s``, never earlier than it was; count the turn."""
    debounce_us = round(settings.debounce_s * 1_000_000)
    pending = _pending(db, settings.scope_key, job=job, session_id=session_id)
    if pending is None:
        return _insert_pending(
            db, settings.scope_key, job=job, session_id=session_id, turns=1, now_us=now_us, due_us=now_us + debounce_us
        )
    due = now_us + debounce_us
    if settings.max_wait_s is not None:
        due = min(due, to_micros(pending.created_at) + round(settings.max_wait_s * 1_000_000))
    due = max(due, to_micros(pending.due_at))
    push = update(RUNS).where(C.id == pending.id, PENDING).values(turns=C.turns + 1, due_at=due)
    return _one_run(db.execute(push.returning(*RUNS.c)))


def reschedule_pending(
    db: Executor, scope_key: str, *, job: str, old: tuple[float, float | None], new: tuple[float, float | None]
) -> int:
    """Move the due instant of the scope's pending runs of ``job`` to what ``new`` (debounce_s, max_wait_s) says.

    A pending run is due its debounce after its last turn (``due_at - old debounce``), never later than
    ``created_at`` + max wait: the same rule as :func:`debounce`, under the new timing. Returns how many
    runs moved (0 when the timing did not change).
    """
    if old == new:
        return 0
    debounce_s, max_wait_s = new
    due: Any = C.due_at + (round(debounce_s * 1_000_000) - round(old[0] * 1_000_000))
    if max_wait_s is not None:
        cap = C.created_at + round(max_wait_s * 1_000_000)
        due = case((due > cap, cap), else_=due)
    done = db.execute(update(RUNS).where(C.scope_key == scope_key, PENDING, C.job == job).values(due_at=due))
    return int(done.rowcount)


def bring_forward(db: Executor, scope_key: str, *, job: str, now_us: int) -> list[str]:
    """Make the scope's pending runs of ``job`` due at ``now_us`` (one due later is moved; none is pushed back).

    Returns the ids of every pending run of the scope and job, oldest first.
    """
    where = (C.scope_key == scope_key, PENDING, C.job == job)
    db.execute(update(RUNS).where(*where, C.due_at > now_us).values(due_at=now_us))
    return [str(rid) for (rid,) in db.execute(select(C.id).where(*where).order_by(C.created_at, C.id))]


_CANCEL, _CANCELLED = move(RunState.PENDING, RunState.SETTLED)


def cancel_pending(db: Executor, scope_key: str, now_us: int, *, job: str = "consolidate") -> int:
    """Settle the scope's pending runs of ``job`` ``cancelled`` (an extraction run's transcript is dropped)."""
    done = db.execute(
        update(RUNS)
        .where(C.scope_key == scope_key, _CANCEL, C.job == job)
        .values(**_CANCELLED, outcome=Outcome.CANCELLED.value, settled_at=now_us, prompt=_KEEP_PROMPT)
    )
    return int(done.rowcount)


_OTHER = aliased(RUNS)
_CLAIM_FROM, _CLAIMED = move(RunState.PENDING, RunState.RUNNING)
_CLAIM = (
    update(RUNS)
    .where(
        C.id == _ID,
        _CLAIM_FROM,
        C.due_at <= _NOW,
        ~exists().where(_OTHER.c.scope_key == C.scope_key, _OTHER.c.state == RunState.RUNNING.value),
    )
    .values(
        **_CLAIMED,
        started_at=_NOW,
        harness=bindparam("v_harness"),
        model=bindparam("v_model"),
        mode=bindparam("v_mode"),
        wall_clock_cap_s=bindparam("cap"),
    )
    .returning(C.id)
)


def claim(
    db: Executor, run_id: str, now_us: int, *, harness: str, model: str, mode: str, cap_s: float
) -> Pending[bool]:
    """pending → running, only when due and no other run of the scope is running (of either job).

    Sent now; ``.result()`` says whether this call claimed the run (reads sent before it is read
    share its round trip, see :meth:`ledger.tx.Transaction.query`).
    """
    params = {
        "v_id": run_id,
        "now": now_us,
        "v_harness": harness,
        "v_model": model,
        "v_mode": mode,
        "cap": float(cap_s),
    }
    return db.query(_CLAIM, params).then(bool)


_USAGE_COLUMNS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
# Each of a call's counts is added to the run's: bound as ``add_<column>``.
_ADD_USAGE = {name: C[name] + bindparam(f"add_{name}") for name in (*_USAGE_COLUMNS, "spend_micro_usd")}


def _usage_params(usage: Any, spend_micro_usd: int) -> dict[str, int]:
    params = {f"add_{name}": int(getattr(usage, name, 0) or 0) for name in _USAGE_COLUMNS}
    params["add_spend_micro_usd"] = int(spend_micro_usd)
    return params


# The texts only onto a run still running: an answer that comes back after the janitor settled the run keeps its
# usage, not the transcript (which must not outlive the run) nor an error over the janitor's.
_STILL_RUNNING = C.state == RunState.RUNNING.value
_STORE_ANSWER = (
    update(RUNS)
    .where(C.id == _ID, C.answer_stored_at.is_(None))
    .values(
        prompt=case((_STILL_RUNNING, bindparam("v_prompt")), else_=C.prompt),
        answer=case((_STILL_RUNNING, bindparam("v_answer")), else_=C.answer),
        answer_raw=case((_STILL_RUNNING, bindparam("raw")), else_=C.answer_raw),
        answer_stored_at=_NOW,
        error=case((_STILL_RUNNING, bindparam("v_error")), else_=C.error),
        model_calls=C.model_calls + 1,
        **_ADD_USAGE,
    )
)


def store_answer(
    db: Executor, run_id: str, *, prompt: str, answer: Any, raw: str, usage: Any, spend_micro_usd: int, now_us: int,
    error: str | None = None,
) -> bool:  # fmt: skip
    """Write the answer and its usage before anything is applied. Usage is kept even on a settled run; ``error`` is
    the harness's reading of an answer that did not parse (cut off at ``max_tokens``, …), the run's error."""
    params = {
        "v_id": run_id,
        "now": now_us,
        "v_error": None if error is None else error[:500],
        "v_prompt": prompt,
        "v_answer": None if answer is None else json.dumps(answer),
        "raw": raw,
        **_usage_params(usage, spend_micro_usd),
    }
    return db.run(_STORE_ANSWER, params) == 1


# An extraction run's prompt is the chat transcript: it does not outlive the run (docs/extraction.md).
_KEEP_PROMPT = case((C.job == "extract", None), else_=C.prompt)


def _settle_statement(expect: RunState, *, unanswered: bool) -> Executable:
    guard, settled = move(expect, RunState.SETTLED)
    where = [C.id == _ID, guard]
    if unanswered:
        where.append(C.answer_stored_at.is_(None))
    return (
        update(RUNS)
        .where(*where)
        .values(
            **settled,
            outcome=bindparam("v_outcome"),
            settled_at=_NOW,
            error=bindparam("v_error"),
            ops_proposed=bindparam("v_ops_proposed"),
            ops_applied=bindparam("v_ops_applied"),
            ops_refused=bindparam("v_ops_refused"),
            proposals_written=bindparam("v_proposals"),
            refusals=bindparam("v_refusals"),
            started_at=func.coalesce(C.started_at, _NOW),
            model_calls=C.model_calls + bindparam("calls"),
            prompt=_KEEP_PROMPT,
            **_ADD_USAGE,
        )
        .returning(*RUNS.c)
    )


# A run settles from ``running``, or from ``pending`` (cancelled): one statement per start and kind.
_SETTLE = {
    (expect, unanswered): _settle_statement(expect, unanswered=unanswered)
    for expect in TRANSITIONS
    if RunState.SETTLED in TRANSITIONS[expect]
    for unanswered in (False, True)
}


def settle(
    db: Executor,
    run_id: str,
    outcome: Outcome,
    now_us: int,
    *,
    expect: RunState = RunState.RUNNING,
    error: str | None = None,
    ops_proposed: int = 0,
    ops_applied: int = 0,
    ops_refused: int = 0,
    proposals_written: int = 0,
    refusals: Mapping[str, int] | None = None,
    usage: Any = None,
    spend_micro_usd: int = 0,
    unanswered: bool = False,
    calls: int = 0,
) -> ConsolidationRun | None:
    """The one settlement of a run: a conditional update from ``expect``. The settled run when this call won,
    None when it did not (the row as it was written: no read after it).

    Of the ``ops_proposed`` operations of the answer, ``ops_applied`` took effect without the user,
    ``proposals_written`` wait for the user as proposals, ``ops_refused`` were refused.

    ``unanswered`` also requires that no answer is stored (the janitor's abandon must not
    discard an answer a worker stored a moment ago: that one is applied instead).
    """
    params = {
        "v_id": run_id,
        "now": now_us,
        "v_outcome": outcome.value,
        "v_error": None if error is None else error[:500],
        "v_ops_proposed": ops_proposed,
        "v_ops_applied": ops_applied,
        "v_ops_refused": ops_refused,
        "v_proposals": proposals_written,
        "v_refusals": json.dumps(dict(refusals or {}), sort_keys=True),
        "calls": calls,
        **_usage_params(usage, spend_micro_usd),
    }
    found = db.rows(_SETTLE[expect, unanswered], params)
    return run_from_row(dict(zip(_NAMES, found[0], strict=True))) if found else None


_ADD_CALL = update(RUNS).where(C.id == _ID).values(model_calls=C.model_calls + bindparam("calls"), **_ADD_USAGE)


def add_usage(db: Executor, run_id: str, usage: Any, spend_micro_usd: int, *, calls: int = 0) -> None:
    """Add a call's tokens and spend to a run whatever its state (the call was paid for)."""
    db.run(_ADD_CALL, {"v_id": run_id, "calls": calls, **_usage_params(usage, spend_micro_usd)})


def month_bounds(now: datetime) -> tuple[datetime, datetime]:
    """The calendar month (UTC) holding ``now``: ``[start, end)``, the window of the spend budget."""
    start = now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
    return start, end


def started_in(start_us: Any, end_us: Any) -> tuple[ColumnElement[bool], ColumnElement[bool]]:
    """The runs started in ``[start_us, end_us)``: the runs whose spend counts against that month's budget."""
    return C.started_at >= start_us, C.started_at < end_us


_MONTH_SPEND = select(func.coalesce(func.sum(C.spend_micro_usd), 0)).where(
    C.scope_key == bindparam("scope"), *started_in(bindparam("start"), bindparam("end"))
)


def month_spend(db: Executor, scope_key: str, now: datetime) -> Pending[int]:
    """What the scope's runs of both jobs started in ``now``'s month have spent, in micro-USD.

    Sent now, read with ``.result()`` (statements sent before it is read share its round trip)."""
    start, end = month_bounds(now)
    return db.query(_MONTH_SPEND, {"scope": scope_key, "start": to_micros(start), "end": to_micros(end)}).then(_total)


def _total(found: list[tuple[Any, ...]]) -> int:
    ((total,),) = found
    return int(total or 0)


def ensure_pending(
    db: Executor, settings: ConsolidationSettings, now_us: int, *, due_us: int | None = None
) -> ConsolidationRun:
    """The scope's pending run, created (with no turn) when there is none; an existing one is left as it is.

    Used when a full scope needs room: it schedules a run without pushing back one already due. A new
    run is due at ``due_us`` (default: after the scope's debounce).
    """
    pending = _pending(db, settings.scope_key, job="consolidate", session_id=None)
    if pending is not None:
        return pending
    if due_us is None:
        due_us = now_us + round(settings.debounce_s * 1_000_000)
    return _insert_pending(
        db, settings.scope_key, job="consolidate", session_id=None, turns=0, now_us=now_us, due_us=due_us
    )


def last_prompt_at(db: Executor, scope_key: str) -> int | None:
    """When the scope's last settled run with an answer built its prompt (its start); None before the first."""
    found = db.execute(
        select(func.max(C.started_at)).where(
            C.scope_key == scope_key,
            C.job == "consolidate",
            C.state == RunState.SETTLED.value,
            C.answer_stored_at.is_not(None),
        )
    ).scalar()
    return None if found is None else int(found)
