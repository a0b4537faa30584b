"""Apply a gated batch through the ledger, inside the transaction that settles the run."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from sqlalchemy import Connection

from consolidation.gate import BODY_REJECTED, BUDGET_EXCEEDED, NOT_ACTIVE, GatedOp, GateResult
from consolidation.models import Mode, Op
from ledger import Ledger
from ledger.errors import BodyRejected, BudgetExceeded, InvalidTransition, LedgerError
from ledger.instants import to_micros
from ledger.models import EventKind, MemoryRecord, Provenance


@dataclass(slots=True)
class ApplyResult:
    applied: int = 0
    refusals: Counter[str] = field(default_factory=Counter)
    record_ids: list[str] = field(default_factory=list)
    forgot: int = 0  # records a retire forgot (their files need a scrub after the commit)


def _refuse(
    led: Ledger,
    conn: Connection,
    op: GatedOp | None,
    reason: str,
    *,
    scope: str,
    now_us: int,
    run_id: str,
    index: int,
    name: str | None,
    targets: tuple[str, ...] = (),
) -> None:
    led.event(
        conn,
        EventKind.CONSOLIDATION_OP_REFUSED,
        at_us=now_us,
        scope_key=scope,
        reason=reason,
        run_id=run_id,
        detail={"index": index, "op": name, "targets": list(targets)},
    )
    if reason == BUDGET_EXCEEDED:
        led.event(
            conn,
            EventKind.PROPOSAL_REFUSED,
            at_us=now_us,
            scope_key=scope,
            reason=reason,
            run_id=run_id,
            detail={"index": index},
        )


def apply_batch(
    led: Ledger, conn: Connection, gate: GateResult, *, mode: Mode, scope: str, now_us: int, run_id: str
) -> ApplyResult:
    """Apply (or propose) every passed op; each in a savepoint so one failure spares the rest."""
    result = ApplyResult()
    for refusal in gate.refused:
        _refuse(
            led,
            conn,
            None,
            refusal.reason,
            scope=scope,
            now_us=now_us,
            run_id=run_id,
            index=refusal.index,
            name=refusal.op,
            targets=refusal.targets,
        )
    for op in gate.passed:
        reason = _apply_one(led, conn, op, mode=mode, scope=scope, now_us=now_us, run_id=run_id, result=result)
        if reason is not None:
            result.refusals[reason] += 1
            _refuse(
                led,
                conn,
                op,
                reason,
                scope=scope,
                now_us=now_us,
                run_id=run_id,
                index=op.index,
                name=op.op.value,
                targets=op.targets,
            )
    return result


def _apply_one(
    led: Ledger, conn: Connection, op: GatedOp, *, mode: Mode, scope: str, now_us: int, run_id: str, result: ApplyResult
) -> str | None:
    if op.op == Op.KEEP:
        result.applied += 1
        led.event(
            conn,
            EventKind.CONSOLIDATION_OP_APPLIED,
            at_us=now_us,
            scope_key=scope,
            run_id=run_id,
            detail={"index": op.index, "op": "keep", "targets": list(op.targets)},
        )
        return None
    savepoint = conn.begin_nested()
    try:
        record = _write_op(led, conn, op, mode=mode, scope=scope, now_us=now_us, run_id=run_id)
    except (InvalidTransition, BodyRejected, BudgetExceeded) as exc:
        savepoint.rollback()
        return {InvalidTransition: NOT_ACTIVE, BodyRejected: BODY_REJECTED, BudgetExceeded: BUDGET_EXCEEDED}[type(exc)]
    except LedgerError:
        savepoint.rollback()
        return NOT_ACTIVE
    savepoint.commit()
    result.applied += 1
    result.record_ids.append(record.id)
    if op.op == Op.RETIRE and mode == Mode.APPLY:
        result.forgot += 1
    led.event(
        conn,
        EventKind.CONSOLIDATION_OP_APPLIED,
        at_us=now_us,
        scope_key=scope,
        record_id=record.id,
        run_id=run_id,
        detail={"index": op.index, "op": op.op.value, "targets": list(op.targets), "mode": mode.value},
    )
    return None


def _write_op(
    led: Ledger, conn: Connection, op: GatedOp, *, mode: Mode, scope: str, now_us: int, run_id: str
) -> MemoryRecord:
    """What one passed op writes (SPEC 4.4), in apply or propose mode; returns the record it wrote or changed."""
    propose = mode == Mode.PROPOSE
    (first, *_) = op.targets
    if op.op == Op.EXPIRE and not propose:
        assert op.expires_at is not None
        return led.set_expiry_in(
            conn, scope_key=scope, record_id=first, expires_at_us=to_micros(op.expires_at), now_us=now_us
        )
    if op.op == Op.RETIRE:
        if propose:  # a pending forget: nothing is forgotten until the user accepts it
            return led.propose_forget_in(conn, scope_key=scope, target_id=first, now_us=now_us, rationale=op.rationale,
                                         run_id=run_id)  # fmt: skip
        return led.forget_in(conn, scope_key=scope, record_id=first, now_us=now_us, run_id=run_id)
    # merge, correct, group (the survivor's body, in the subject's group), and a proposal to expire: one new
    # record that supersedes every target (apply: now; propose: on accept).
    assert op.body is not None
    return led.supersede_in(
        conn,
        scope_key=scope,
        target_ids=op.targets,
        body=op.body,
        kind=op.kind,
        provenance=Provenance.MODEL_CONSOLIDATION,
        now_us=now_us,
        propose=propose,
        expires_at_us=None if op.expires_at is None else to_micros(op.expires_at),
        conflict_group=op.conflict_group,
        confidence_bps=op.confidence_bps,
        rationale=op.rationale,
        run_id=run_id,
    )
