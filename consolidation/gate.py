"""The gate: which of the model's operations may touch the ledger.

The answer is untrusted. The gate checks each operation against the closed
vocabulary (docs/consolidation.md) and the scope as it is *at apply time*, refuses what breaks a
rule (counted by a stable reason), and derives every field the answer must not set:
status, provenance, scope, interval, expiry, kind, conflict group and a group's
survivor. The rest of the batch still applies when one operation is refused, and
``len(passed) + len(refused)`` always equals the number of operations the answer held.

========  =======  ==================================================
op        targets  carries (besides ``op`` and ``targets``)
========  =======  ==================================================
merge     2-10     ``body``, ``kind``?, ``confidence_bps``?, ``rationale``?
correct   1        ``body``, ``confidence_bps``?, ``rationale``?
expire    1        ``after_days`` (1-3650), ``rationale``?
group     2-10     ``subject`` (1-80 characters trimmed), ``rationale``?
retire    1        ``rationale``? (only with ``allow_removal``)
keep      1        nothing
========  =======  ==================================================
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from consolidation.models import Op
from consolidation.prompt import MAX_AFTER_DAYS, MAX_OPERATIONS, MAX_SUBJECT_CHARS, MAX_TARGETS
from ledger import Kind, MemoryRecord, Status
from ledger.errors import BodyRejected

# Refusal reasons (stable: they are metric labels, event reasons and keys of a run's `refusals`).
UNKNOWN_OP = "unknown_op"
MALFORMED = "malformed"
FIELD_NOT_CARRIED = "field_not_carried"
TOO_FEW_TARGETS = "too_few_targets"
TOO_MANY_TARGETS = "too_many_targets"
NOT_IN_SCOPE = "target_not_in_scope"
NOT_ACTIVE = "target_not_active"
NOT_ALLOWED = "op_not_allowed"
REMOVAL_OFF = "removal_off"
DUPLICATE_TARGET = "duplicate_target"
BODY_REJECTED = "body_rejected"
HORIZON_OUT_OF_RANGE = "horizon_out_of_range"
SUBJECT_OUT_OF_RANGE = "subject_out_of_range"
TOO_MANY_OPERATIONS = "too_many_operations"
BUDGET_EXCEEDED = "budget_exceeded"
UNPARSEABLE = "unparseable"

REASONS = (
    UNKNOWN_OP,
    MALFORMED,
    FIELD_NOT_CARRIED,
    TOO_FEW_TARGETS,
    TOO_MANY_TARGETS,
    NOT_IN_SCOPE,
    NOT_ACTIVE,
    NOT_ALLOWED,
    REMOVAL_OFF,
    DUPLICATE_TARGET,
    BODY_REJECTED,
    HORIZON_OUT_OF_RANGE,
    SUBJECT_OUT_OF_RANGE,
    TOO_MANY_OPERATIONS,
    BUDGET_EXCEEDED,
    UNPARSEABLE,
)
"""Every reason the gate or the apply step can count (a closed set: metric label values)."""

_OPTIONAL = {"rationale"}
CARRIES: dict[Op, tuple[frozenset[str], frozenset[str]]] = {
    # op: (required fields, optional fields)
    Op.MERGE: (frozenset({"body"}), frozenset({"kind", "confidence_bps", *_OPTIONAL})),
    Op.CORRECT: (frozenset({"body"}), frozenset({"confidence_bps", *_OPTIONAL})),
    Op.EXPIRE: (frozenset({"after_days"}), frozenset(_OPTIONAL)),
    Op.GROUP: (frozenset({"subject"}), frozenset(_OPTIONAL)),
    Op.RETIRE: (frozenset(), frozenset(_OPTIONAL)),
    Op.KEEP: (frozenset(), frozenset()),
}
TARGETS: dict[Op, tuple[int, int]] = {
    Op.MERGE: (2, MAX_TARGETS),
    Op.GROUP: (2, MAX_TARGETS),
    Op.CORRECT: (1, 1),
    Op.EXPIRE: (1, 1),
    Op.RETIRE: (1, 1),
    Op.KEEP: (1, 1),
}
GROUP_KEY_MAX_CHARS = 64


@dataclass(frozen=True, slots=True)
class GatedOp:
    """An operation that passed, with every derived field filled in by the gate.

    ``body`` is the new record's body (merge, correct; for group, the survivor's body; for
    expire, the target's own, which a proposal to expire it carries);
    ``expires_at`` the new record's expiry (merge, correct, group: the earliest among the
    targets; expire: the apply instant + ``after_days``, or the target's earlier expiry);
    ``conflict_group`` the targets' common group (merge, correct) or the key derived from
    the subject (group); ``survivor`` the newest target of a group.
    """

    index: int
    op: Op
    targets: tuple[str, ...]
    body: str | None
    kind: Kind
    conflict_group: str | None
    expires_at: datetime | None
    confidence_bps: int | None
    rationale: str | None
    survivor: str | None = None
    after_days: int | None = None


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


def group_key(subject: str) -> str:
    """The conflict-group key for a ``group`` op's subject: derived, never the model's text verbatim.

    NFKC, case-folded, every run of characters other than letters and digits turned into
    one ``-``, trimmed, at most 64 characters: "Home city" and " home  CITY! " share a key.
    Empty when the subject holds no letter or digit.
    """
    folded = unicodedata.normalize("NFKC", subject).casefold()
    return re.sub(r"[\W_]+", "-", folded).strip("-")[:GROUP_KEY_MAX_CHARS].strip("-")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _present(raw: Mapping[str, Any]) -> set[str]:
    # A field sent as null counts as absent (structured output never sends one; a lenient reading).
    return {key for key, value in raw.items() if key not in ("op", "targets") and value is not None}


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
    reason = _field_problem(op, tids, raw)
    if reason is not None:
        return Refusal(index, op.value, reason, tids)
    if len(set(tids)) != len(tids):
        return Refusal(index, op.value, DUPLICATE_TARGET, tids)
    return op, tids, {key: raw[key] for key in _present(raw)}


def _field_problem(op: Op, tids: tuple[str, ...], raw: Mapping[str, Any]) -> str | None:
    required, optional = CARRIES[op]
    present = _present(raw)
    if present - required - optional:
        return FIELD_NOT_CARRIED
    low, high = TARGETS[op]
    if len(tids) < low:
        return TOO_FEW_TARGETS
    if len(tids) > high:
        return TOO_MANY_TARGETS
    if required - present:
        return MALFORMED
    conf, kind, rationale = raw.get("confidence_bps"), raw.get("kind"), raw.get("rationale")
    if "body" in required and not isinstance(raw.get("body"), str):
        return MALFORMED
    if conf is not None and not (_is_int(conf) and 0 <= conf <= 10_000):
        return MALFORMED
    if kind is not None and not (isinstance(kind, str) and kind in {k.value for k in Kind}):
        return MALFORMED
    if rationale is not None and not isinstance(rationale, str):
        return MALFORMED
    if op == Op.EXPIRE:
        days = raw.get("after_days")
        if not isinstance(days, int) or isinstance(days, bool):
            return MALFORMED
        if not 1 <= days <= MAX_AFTER_DAYS:
            return HORIZON_OUT_OF_RANGE
    if op == Op.GROUP:
        subject = raw.get("subject")
        if not isinstance(subject, str):
            return MALFORMED
        if not 1 <= len(subject.strip()) <= MAX_SUBJECT_CHARS or not group_key(subject):
            return SUBJECT_OUT_OF_RANGE
    return None


def _newest(targets: Sequence[MemoryRecord]) -> MemoryRecord:
    return max(targets, key=lambda t: (t.valid_from, t.created_at, t.id))


def _derive(index: int, op: Op, fields: Mapping[str, Any], targets: Sequence[MemoryRecord], now: datetime) -> GatedOp:
    kinds = {t.kind for t in targets}
    asked = fields.get("kind")
    kind = next(iter(kinds)) if len(kinds) == 1 else (Kind(asked) if asked in kinds else targets[0].kind)
    groups = {t.conflict_group for t in targets}
    group = next(iter(groups)) if len(groups) == 1 else None
    expiries = [t.expires_at for t in targets if t.expires_at is not None]
    expires_at = min(expiries) if expiries else None
    body = fields.get("body")
    survivor = None
    days = fields.get("after_days")
    if op == Op.EXPIRE:
        horizon = now + timedelta(days=int(fields["after_days"]))  # gated: an int in range
        expires_at = horizon if expires_at is None else min(expires_at, horizon)
        body, group = targets[0].body, targets[0].conflict_group  # what a proposal to expire it carries
    elif op == Op.GROUP:
        newest = _newest(targets)
        survivor, body, kind, group = newest.id, newest.body, newest.kind, group_key(str(fields["subject"]))
    elif op in (Op.RETIRE, Op.KEEP):
        group = targets[0].conflict_group
    return GatedOp(
        index=index,
        op=op,
        targets=tuple(t.id for t in targets),
        body=body,
        kind=kind,
        conflict_group=group,
        expires_at=expires_at,
        confidence_bps=fields.get("confidence_bps"),
        rationale=fields.get("rationale"),
        survivor=survivor,
        after_days=days if op == Op.EXPIRE else None,
    )


def check_batch(
    answer: Mapping[str, Any] | None,
    *,
    scope_key: str,
    records: Mapping[str, MemoryRecord],
    allowed_ops: Sequence[str],
    now: datetime,
    screen: Callable[[str], str],
    allow_removal: bool = False,
) -> GateResult:
    """Gate a whole answer. ``records`` holds every named target as it is now (any scope).

    At most :data:`~consolidation.prompt.MAX_OPERATIONS` operations are considered; the
    rest are refused ``too_many_operations``. ``retire`` passes only with
    ``allow_removal`` (else ``removal_off``, never downgraded). Never raises on a bad
    answer: each bad operation becomes a :class:`Refusal`.
    """
    result = GateResult()
    ops = answer.get("operations") if isinstance(answer, Mapping) else None
    if not isinstance(ops, list):
        result.proposed = 1
        result.refused.append(Refusal(0, None, MALFORMED))
        return result
    result.proposed = len(ops)
    shaped: list[tuple[int, Op, tuple[str, ...], Mapping[str, Any]]] = []
    for index, raw in enumerate(ops[:MAX_OPERATIONS]):
        checked = _shape(index, raw)
        if isinstance(checked, Refusal):
            result.refused.append(checked)
        else:
            shaped.append((index, *checked))
    for index in range(MAX_OPERATIONS, len(ops)):
        raw = ops[index]
        name = raw.get("op") if isinstance(raw, dict) else None
        result.refused.append(Refusal(index, name if isinstance(name, str) else None, TOO_MANY_OPERATIONS))
    # A target named by two operations of the batch is contested: refuse every op naming it.
    counts = Counter(t for _, _, tids, _ in shaped for t in tids)
    rules = _Rules(scope_key, records, allowed_ops, allow_removal, now, screen)
    for index, op, tids, fields in shaped:
        reason = rules.refuse(op, tids, fields, counts)
        if reason is not None:
            result.refused.append(Refusal(index, op.value, reason, tids))
            continue
        result.passed.append(_derive(index, op, fields, [records[t] for t in tids], now))
    result.refused.sort(key=lambda r: r.index)
    return result


@dataclass(frozen=True, slots=True)
class _Rules:
    scope_key: str
    records: Mapping[str, MemoryRecord]
    allowed_ops: Sequence[str]
    allow_removal: bool
    now: datetime
    screen: Callable[[str], str]

    def refuse(self, op: Op, tids: tuple[str, ...], fields: Mapping[str, Any], counts: Counter[str]) -> str | None:
        """The first rule ``op`` breaks against the scope as it is now, or None."""
        if op.value not in self.allowed_ops:
            return NOT_ALLOWED
        if op == Op.RETIRE and not self.allow_removal:
            return REMOVAL_OFF
        if any(counts[t] > 1 for t in tids):
            return DUPLICATE_TARGET
        records = self.records
        if any(t not in records or records[t].scope_key != self.scope_key for t in tids):
            return NOT_IN_SCOPE
        if any(records[t].status != Status.ACTIVE or not records[t].applies_at(self.now) for t in tids):
            return NOT_ACTIVE
        if op in (Op.MERGE, Op.CORRECT):
            try:
                self.screen(str(fields["body"]))
            except BodyRejected:
                return BODY_REJECTED
        return None
