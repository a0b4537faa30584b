"""Run storage: debounce, claim and settle, each a conditional statement.

A run moves ``pending → running → settled`` (or ``pending → settled`` when
cancelled or skipped). Every move is an UPDATE guarded by the state it expects, so
exactly one caller wins each move however many workers race for it.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection

from consolidation.models import ConsolidationRun, ConsolidationSettings, Outcome, run_from_row
from ledger.db import execute, query

_NO_OTHER_RUNNING = (
    "NOT EXISTS (SELECT 1 FROM consolidation_runs o WHERE o.scope_key = consolidation_runs.scope_key "
    "AND o.state = 'running')"
)


def new_run_id() -> str:
    return "run_" + secrets.token_hex(12)


RUN_COLUMNS = (
    "id", "scope_key", "state", "outcome", "mode", "turns", "created_at", "due_at", "started_at", "settled_at",
    "harness", "model", "wall_clock_cap_s", "input_tokens", "output_tokens", "cache_creation_input_tokens",
    "cache_read_input_tokens", "spend_micro_usd", "model_calls", "ops_proposed", "ops_applied", "ops_refused",
    "refusals", "error", "prompt", "answer", "answer_raw", "answer_stored_at", "job", "session_id",
)  # fmt: skip
_SELECT = f"SELECT {', '.join(RUN_COLUMNS)} FROM consolidation_runs"


def get(conn: Connection, run_id: str) -> ConsolidationRun | None:
    found = select(conn, "id = :id", {"id": run_id}, order="id", limit=1)
    return found[0] if found else None


def select(
    conn: Connection, where: str, params: Mapping[str, Any], *, order: str, limit: int
) -> list[ConsolidationRun]:
    rows = query(conn, f"{_SELECT} WHERE {where} ORDER BY {order} LIMIT :lim", {**params, "lim": limit})
    return [run_from_row(dict(zip(RUN_COLUMNS, row, strict=True))) for row in rows]


def debounce(conn: Connection, settings: ConsolidationSettings, now_us: int) -> ConsolidationRun:
    """Create the scope's pending run, or push it to ``now + debounce_s`` (capped by ``max_wait_s``)."""
    debounce_us = round(settings.debounce_s * 1_000_000)
    pending = select(
        conn,
        "scope_key = :s AND state = 'pending' AND job = 'consolidate'",
        {"s": settings.scope_key},
        order="id",
        limit=1,
    )
    if pending:
        run = pending[0]
        created_us = _us(run.created_at)
        due = now_us + debounce_us
        if settings.max_wait_s is not None:
            due = min(due, created_us + round(settings.max_wait_s * 1_000_000))
        due = max(due, _us(run.due_at))
        execute(
            conn,
            "UPDATE consolidation_runs SET turns = turns + 1, due_at = :d WHERE id = :id AND state = 'pending'",
            {"d": due, "id": run.id},
        )
        run_id = run.id
    else:
        run_id = new_run_id()
        execute(
            conn,
            (
                "INSERT INTO consolidation_runs (id, scope_key, state, turns, created_at, due_at, refusals) "
                "VALUES (:id, :s, 'pending', 1, :n, :d, '{}')"
            ),
            {"id": run_id, "s": settings.scope_key, "n": now_us, "d": now_us + debounce_us},
        )
    fresh = get(conn, run_id)
    assert fresh is not None
    return fresh


def _us(value: Any) -> int:
    from ledger.instants import to_micros

    return to_micros(value)


def cancel_pending(conn: Connection, scope_key: str, now_us: int) -> int:
    return execute(
        conn,
        (
            "UPDATE consolidation_runs SET state = 'settled', outcome = 'cancelled', settled_at = :n "
            "WHERE scope_key = :s AND state = 'pending' AND job = 'consolidate'"
        ),
        {"n": now_us, "s": scope_key},
    )


def claim(conn: Connection, run_id: str, settings: ConsolidationSettings, now_us: int) -> bool:
    """pending → running, only when due and no other run of the scope is running."""
    done = execute(
        conn,
        (
            "UPDATE consolidation_runs SET state = 'running', started_at = :n, harness = :h, model = :m, "
            "mode = :mode, wall_clock_cap_s = :cap "
            f"WHERE id = :id AND state = 'pending' AND due_at <= :n AND {_NO_OTHER_RUNNING}"
        ),
        {
            "n": now_us,
            "id": run_id,
            "h": settings.harness,
            "m": settings.model,
            "mode": settings.mode.value,
            "cap": settings.wall_clock_cap_s,
        },
    )
    return bool(done == 1)


def store_answer(
    conn: Connection, run_id: str, *, prompt: str, answer: Any, raw: str, usage: Any, spend_micro_usd: int, now_us: int
) -> bool:
    """Write the answer and its usage before anything is applied. Usage is kept even on a settled run."""
    done = execute(
        conn,
        (
            "UPDATE consolidation_runs SET prompt = :p, answer = :a, answer_raw = :raw, answer_stored_at = :n, "
            "input_tokens = input_tokens + :it, output_tokens = output_tokens + :ot, "
            "cache_creation_input_tokens = cache_creation_input_tokens + :cw, "
            "cache_read_input_tokens = cache_read_input_tokens + :cr, spend_micro_usd = spend_micro_usd + :sp, "
            "model_calls = model_calls + 1 WHERE id = :id AND answer_stored_at IS NULL"
        ),
        {
            "p": prompt,
            "a": None if answer is None else json.dumps(answer),
            "raw": raw,
            "n": now_us,
            "it": usage.input_tokens,
            "ot": usage.output_tokens,
            "cw": usage.cache_creation_input_tokens,
            "cr": usage.cache_read_input_tokens,
            "sp": spend_micro_usd,
            "id": run_id,
        },
    )
    return bool(done == 1)


def settle(
    conn: Connection,
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
) -> bool:
    """The one settlement of a run: a conditional update from ``expect``. True when this call won.

    ``unanswered`` also requires that no answer is stored (the janitor's abandon must not
    discard an answer a worker stored a moment ago: that one is applied instead).
    """
    done = execute(
        conn,
        (
            "UPDATE consolidation_runs SET state = 'settled', outcome = :o, settled_at = :n, error = :e, "
            "ops_proposed = :op, ops_applied = :oa, ops_refused = :orf, refusals = :r, "
            "input_tokens = input_tokens + :it, output_tokens = output_tokens + :ot, "
            "cache_creation_input_tokens = cache_creation_input_tokens + :cw, "
            "cache_read_input_tokens = cache_read_input_tokens + :cr, spend_micro_usd = spend_micro_usd + :sp, "
            # An extraction run's prompt is the chat transcript: it does not outlive the run.
            "prompt = CASE WHEN job = 'extract' THEN NULL ELSE prompt END, "
            "started_at = COALESCE(started_at, :n) WHERE id = :id AND state = :expect"
            + (" AND answer_stored_at IS NULL" if unanswered else "")
        ),
        {
            "o": outcome.value,
            "n": now_us,
            "e": None if error is None else error[:500],
            "op": ops_proposed,
            "oa": ops_applied,
            "orf": ops_refused,
            "r": json.dumps(dict(refusals or {}), sort_keys=True),
            "it": getattr(usage, "input_tokens", 0),
            "ot": getattr(usage, "output_tokens", 0),
            "cw": getattr(usage, "cache_creation_input_tokens", 0),
            "cr": getattr(usage, "cache_read_input_tokens", 0),
            "sp": spend_micro_usd,
            "id": run_id,
            "expect": expect,
        },
    )
    return bool(done == 1)


def add_usage(conn: Connection, run_id: str, usage: Any, spend_micro_usd: int) -> None:
    """Add a call's tokens and spend to a run whatever its state (the call was paid for)."""
    execute(
        conn,
        "UPDATE consolidation_runs SET input_tokens = input_tokens + :it, output_tokens = output_tokens + :ot, "
        "cache_creation_input_tokens = cache_creation_input_tokens + :cw, "
        "cache_read_input_tokens = cache_read_input_tokens + :cr, spend_micro_usd = spend_micro_usd + :sp "
        "WHERE id = :id",
        {
            "it": getattr(usage, "input_tokens", 0),
            "ot": getattr(usage, "output_tokens", 0),
            "cw": getattr(usage, "cache_creation_input_tokens", 0),
            "cr": getattr(usage, "cache_read_input_tokens", 0),
            "sp": spend_micro_usd,
            "id": run_id,
        },
    )


def month_spend(conn: Connection, scope_key: str, start_us: int, end_us: int) -> int:
    rows = query(
        conn,
        "SELECT COALESCE(SUM(spend_micro_usd), 0) FROM consolidation_runs "
        "WHERE scope_key = :s AND started_at >= :a AND started_at < :b",
        {"s": scope_key, "a": start_us, "b": end_us},
    )
    return int(rows[0][0] or 0)
