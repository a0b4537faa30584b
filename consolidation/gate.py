"""The gate: which of the model's operations may touch the ledger.

The answer is untrusted. The gate checks each operation against the closed
vocabulary and the scope as it is *at apply time*, refuses what breaks a rule
(counted by reason), and derives every field the answer must not set: status,
provenance, scope, interval, expiry, kind and conflict group. The rest of the
batch still applies when one operation is refused.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from consolidation.models import Op
from ledger.errors import BodyRejected
from ledger.models import Kind, MemoryRecord, Status

# Refusal reasons (stable: they are metric labels and event reasons).
UNKNOWN_OP = "unknown_op"
MALFORMED = "malformed"
NOT_IN_SCOPE = "target_not_in_scope"
NOT_ACTIVE = "target_not_active"
NOT_ALLOWED = "op_not_allowed"
DUPLICATE_TARGET = "duplicate_target"
BODY_REJECTED = "body_rejected"
BUDGET_EXCEEDED = "budget_exceeded"
UNPARSEABLE = "unparseable"

_ALLOWED_KEYS = {"op", "targets", "body", "kind", "confidence_bps", "rationale"}
_MAX_OPS = 500


@dataclass(frozen=True, slots=True)
class GatedOp:
    """An operation that passed, with every derived field filled in by the gate."""

    index: int
    op: Op
    targets: tuple[str, ...]
    body: str | None
    kind: Kind
    conflict_group: str | None
    expires_at: datetime | None
    confidence_bps: int | None
    rationale: str | None


@dataclass(frozen=True, slots=True)
class Refusal:
    index: int
    op: str | None
    reason: str
    targets: tuple[str, ...] = ()


@dataclass(slots=True)
class GateResult:
    proposed: int = 0
    passed: list[GatedOp] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)

    @property
    def refusals(self) -> dict[str, int]:
        return dict(Counter(r.reason for r in self.refused))


def _shape(index: int, raw: object) -> tuple[Op, tuple[str, ...], dict[str, Any]] | Refusal:
    """Check one operation's form; return (op, targets, fields) or a refusal."""
    if not isinstance(raw, dict):
        return Refusal(index, None, MALFORMED)
    name = raw.get("op")
    try:
        op = Op(str(name))
    except ValueError:
        return Refusal(index, name if isinstance(name, str) else None, UNKNOWN_OP)
    targets = raw.get("targets")
    if not isinstance(targets, list) or not all(isinstance(t, str) and t for t in targets):
        return Refusal(index, op.value, MALFORMED)
    tids = tuple(targets)
    extra = set(raw) - _ALLOWED_KEYS
    body = raw.get("body")
    conf = raw.get("confidence_bps")
    rationale = raw.get("rationale")
    wrong_count = (op == Op.MERGE and len(tids) < 2) or (op != Op.MERGE and len(tids) != 1)
    wrong_body = (op == Op.KEEP and body is not None) or (op != Op.KEEP and not isinstance(body, str))
    wrong_conf = conf is not None and (isinstance(conf, bool) or not isinstance(conf, int) or not 0 <= conf <= 10_000)
    asked_kind = raw.get("kind")
    wrong_kind = asked_kind is not None and not (isinstance(asked_kind, str) and asked_kind in {k.value for k in Kind})
    if (
        extra
        or wrong_count
        or wrong_body
        or wrong_conf
        or wrong_kind
        or not (rationale is None or isinstance(rationale, str))
    ):
        return Refusal(index, op.value, MALFORMED, tids)
    if len(set(tids)) != len(tids):
        return Refusal(index, op.value, DUPLICATE_TARGET, tids)
    return op, tids, raw


def _derive(index: int, op: Op, fields: Mapping[str, Any], targets: Sequence[MemoryRecord]) -> GatedOp:
    kinds = {t.kind for t in targets}
    asked = fields.get("kind")
    kind = next(iter(kinds)) if len(kinds) == 1 else (Kind(asked) if asked in kinds else targets[0].kind)
    groups = {t.conflict_group for t in targets}
    group = next(iter(groups)) if len(groups) == 1 else None
    expiries = [t.expires_at for t in targets if t.expires_at is not None]
    return GatedOp(
        index=index,
        op=op,
        targets=tuple(t.id for t in targets),
        body=fields.get("body"),
        kind=kind,
        conflict_group=group,
        expires_at=min(expiries) if expiries else None,
        confidence_bps=fields.get("confidence_bps"),
        rationale=fields.get("rationale"),
    )


def check_batch(
    answer: Mapping[str, Any] | None,
    *,
    scope_key: str,
    records: Mapping[str, MemoryRecord],
    allowed_ops: Sequence[str],
    now: datetime,
    screen: Callable[[str], str],
) -> GateResult:
    """Gate a whole answer. ``records`` holds every named target as it is now (any scope).

    Never raises on a bad answer: each bad operation becomes a :class:`Refusal`.
    """
    result = GateResult()
    ops = answer.get("operations") if isinstance(answer, Mapping) else None
    if not isinstance(ops, list):
        result.proposed = 1
        result.refused.append(Refusal(0, None, MALFORMED))
        return result
    result.proposed = len(ops)
    shaped: list[tuple[int, Op, tuple[str, ...], Mapping[str, Any]]] = []
    for index, raw in enumerate(ops[:_MAX_OPS]):
        checked = _shape(index, raw)
        if isinstance(checked, Refusal):
            result.refused.append(checked)
        else:
            shaped.append((index, *checked))
    result.refused.extend(Refusal(i, None, MALFORMED) for i in range(_MAX_OPS, len(ops)))
    # A target named by two operations of the batch is contested: refuse every op naming it.
    counts = Counter(t for _, _, tids, _ in shaped for t in tids)
    for index, op, tids, fields in shaped:
        refusal = _refuse(index, op, tids, fields, counts, scope_key, records, allowed_ops, now, screen)
        if refusal is not None:
            result.refused.append(refusal)
            continue
        result.passed.append(_derive(index, op, fields, [records[t] for t in tids]))
    result.refused.sort(key=lambda r: r.index)
    return result


def _refuse(
    index: int,
    op: Op,
    tids: tuple[str, ...],
    fields: Mapping[str, Any],
    counts: Counter[str],
    scope_key: str,
    records: Mapping[str, MemoryRecord],
    allowed_ops: Sequence[str],
    now: datetime,
    screen: Callable[[str], str],
) -> Refusal | None:
    def no(reason: str) -> Refusal:
        return Refusal(index, op.value, reason, tids)

    if op.value not in allowed_ops:
        return no(NOT_ALLOWED)
    if any(counts[t] > 1 for t in tids):
        return no(DUPLICATE_TARGET)
    if any(t not in records or records[t].scope_key != scope_key for t in tids):
        return no(NOT_IN_SCOPE)
    if any(records[t].status != Status.ACTIVE or not records[t].applies_at(now) for t in tids):
        return no(NOT_ACTIVE)
    if op != Op.KEEP:
        try:
            screen(str(fields["body"]))
        except BodyRejected:
            return no(BODY_REJECTED)
    return None
