"""Apply a gated batch through the ledger, inside the transaction that settles the run."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from consolidation.gate import BODY_REJECTED, BUDGET_EXCEEDED, NOT_ACTIVE, GatedOp, GateResult
from consolidation.models import Mode, Op
from ledger import EventKind, MemoryRecord, Provenance, Transaction
from ledger.errors import BodyRejected, BudgetExceeded, InvalidTransition, LedgerError


@dataclass(slots=True)
class ApplyResult:
    """What a batch did: ``applied`` took effect (every keep; in apply mode every write), ``proposed`` became
    proposals waiting for the user (propose mode)."""

    applied: int = 0
    proposed: int = 0
    refusals: Counter[str] = field(default_factory=Counter)
    record_ids: list[str] = field(default_factory=list)


def _refuse(
    tx: Transaction,
    op: GatedOp | None,
    reason: str,
    *,
    run_id: str,
    index: int,
    name: str | None,
    targets: tuple[str, ...] = (),
) -> None:
    tx.event(
        EventKind.CONSOLIDATION_OP_REFUSED,
        reason=reason,
        run_id=run_id,
        detail={"index": index, "op": name, "targets": list(targets)},
    )
    if reason == BUDGET_EXCEEDED:
        tx.event(
            EventKind.PROPOSAL_REFUSED,
            reason=reason,
            run_id=run_id,
            detail={"index": index},
        )


def apply_batch(tx: Transaction, gate: GateResult, *, mode: Mode, run_id: str) -> ApplyResult:
    """Apply (or propose) every passed op; each in a savepoint so one failure spares the rest."""
    result = ApplyResult()
    for refusal in gate.refused:
        _refuse(
            tx,
            None,
            refusal.reason,
            run_id=run_id,
            index=refusal.index,
            name=refusal.op,
            targets=refusal.targets,
        )
    for op in gate.passed:
        reason = _apply_one(tx, op, mode=mode, run_id=run_id, result=result)
        if reason is not None:
            result.refusals[reason] += 1
            _refuse(
                tx,
                op,
                reason,
                run_id=run_id,
                index=op.index,
                name=op.op.value,
                targets=op.targets,
            )
    return result


def _apply_one(tx: Transaction, op: GatedOp, *, mode: Mode, run_id: str, result: ApplyResult) -> str | None:
    if op.op == Op.KEEP:
        result.applied += 1
        tx.event(
            EventKind.CONSOLIDATION_OP_APPLIED,
            run_id=run_id,
            detail={"index": op.index, "op": "keep", "targets": list(op.targets)},
        )
        return None
    try:
        with tx.savepoint():
            record = _write_op(tx, op, mode=mode, run_id=run_id)
    except (InvalidTransition, BodyRejected, BudgetExceeded) as exc:
        return {InvalidTransition: NOT_ACTIVE, BodyRejected: BODY_REJECTED, BudgetExceeded: BUDGET_EXCEEDED}[type(exc)]
    except LedgerError:
        return NOT_ACTIVE
    if mode == Mode.PROPOSE:
        result.proposed += 1
    else:
        result.applied += 1
    result.record_ids.append(record.id)
    tx.event(
        EventKind.CONSOLIDATION_OP_APPLIED,
        record_id=record.id,
        run_id=run_id,
        detail={"index": op.index, "op": op.op.value, "targets": list(op.targets), "mode": mode.value},
    )
    return None


def _write_op(tx: Transaction, op: GatedOp, *, mode: Mode, run_id: str) -> MemoryRecord:
    """What one passed op writes (docs/consolidation.md), in apply or propose mode.

    Returns the record written or changed.
    """
    propose = mode == Mode.PROPOSE
    first = op.targets[0]
    if op.op == Op.EXPIRE and not propose:
        assert op.expires_at is not None
        return tx.set_expiry(first, op.expires_at)
    if op.op == Op.RETIRE:
        if propose:  # a pending forget: nothing is forgotten until the user accepts it
            return tx.propose_forget(first, rationale=op.rationale, run_id=run_id)
        return tx.delete(first)  # exactly the user's forget: the chain's bodies erased, files scrubbed after commit
    # merge, correct, group (the survivor's body in the subject's group) and a proposal to expire: one new
    # record that supersedes every target (apply: now; propose: when the user accepts it).
    assert op.body is not None
    return tx.supersede(
        op.targets,
        op.body,
        kind=op.kind,
        provenance=Provenance.MODEL_CONSOLIDATION,
        propose=propose,
        expires_at=op.expires_at,
        conflict_group=op.conflict_group,
        confidence_bps=op.confidence_bps,
        rationale=op.rationale,
        run_id=run_id,
    )
