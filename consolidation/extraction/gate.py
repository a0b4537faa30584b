"""The extraction gate: which of the model's proposals may be stored (docs/extraction.md).

The answer is untrusted. At most :data:`MAX_CONSIDERED` proposals are considered; the
rest are refused (``too_many_proposals``) and counted, never dropped in silence. Each
considered proposal must have the right shape, a known kind, a body that passes
screening, and a body that duplicates no non-forgotten body of the scope (active,
proposed, rejected, superseded or expired) nor an earlier proposal of the same answer
— compared case- and whitespace-insensitively, trailing ``.``/``!`` ignored. A
``source_message_id``, when given, must name a user message of the digest (never the
assistant's). The budget is checked when the proposal is stored (the ledger refuses
before storing, and the run counts it ``budget_exceeded``).

The gate derives — the answer cannot set — status (``proposed``), provenance
(``model_proposal``), scope, interval and ``source_session_id``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from consolidation.extraction.digest import DigestMessage
from ledger import Kind
from ledger.errors import BodyRejected

MAX_CONSIDERED = 10

# Refusal reasons (stable: metric labels, event reasons, run refusals).
TOO_MANY = "too_many_proposals"
MALFORMED = "malformed"
UNKNOWN_KIND = "unknown_kind"
BODY_REJECTED = "body_rejected"
DUPLICATE = "duplicate"
UNKNOWN_MESSAGE = "unknown_message"
NOT_FROM_USER = "not_from_user"
BUDGET_EXCEEDED = "budget_exceeded"
UNPARSEABLE = "unparseable"

_ALLOWED_KEYS = frozenset({"body", "kind", "confidence_bps", "rationale", "source_message_id"})
_RATIONALE_MAX = 2000


@dataclass(frozen=True, slots=True)
class GatedProposal:
    index: int
    body: str
    kind: Kind
    confidence_bps: int | None
    rationale: str | None
    source_message_id: str | None


@dataclass(slots=True)
class GateResult:
    proposed: int = 0
    passed: list[GatedProposal] = field(default_factory=list)
    refused: list[tuple[int, str]] = field(default_factory=list)

    @property
    def refusals(self) -> dict[str, int]:
        return dict(Counter(reason for _, reason in self.refused))


def normalize(body: str) -> str:
    """The form duplicates are compared in: case-folded, whitespace collapsed, trailing ``.``/``!`` dropped."""
    return " ".join(body.casefold().split()).rstrip(".! ")


def _shape(raw: object) -> tuple[str, dict[str, Any]] | str:
    """(kind text, fields) or a refusal reason."""
    if not isinstance(raw, dict) or set(raw) - _ALLOWED_KEYS or not isinstance(raw.get("body"), str):
        return MALFORMED
    conf = raw.get("confidence_bps")
    if conf is not None and (isinstance(conf, bool) or not isinstance(conf, int) or not 0 <= conf <= 10_000):
        return MALFORMED
    rationale = raw.get("rationale")
    if rationale is not None and (not isinstance(rationale, str) or len(rationale) > _RATIONALE_MAX):
        return MALFORMED
    source = raw.get("source_message_id")
    if source is not None and not isinstance(source, str):
        return MALFORMED
    kind = raw.get("kind")
    if not isinstance(kind, str) or kind not in {k.value for k in Kind}:
        return UNKNOWN_KIND
    return kind, raw


def check_proposals(
    answer: Mapping[str, Any] | None,
    *,
    existing_bodies: Iterable[str],
    digest: Sequence[DigestMessage],
    screen: Callable[[str], str],
) -> GateResult:
    """Gate every proposal of ``answer`` (``{"proposals": [...]}``); ``screen`` is the ledger's screening."""
    result = GateResult()
    proposals = answer.get("proposals") if isinstance(answer, Mapping) else None
    if not isinstance(proposals, list):
        return result
    result.proposed = len(proposals)
    seen = {normalize(b) for b in existing_bodies if b}
    roles = {m.id: m.role for m in digest}
    for index, raw in enumerate(proposals):
        checked = TOO_MANY if index >= MAX_CONSIDERED else _check(index, raw, roles, seen, screen)
        if isinstance(checked, str):
            result.refused.append((index, checked))
        else:
            seen.add(normalize(checked.body))
            result.passed.append(checked)
    return result


def _check(
    index: int, raw: object, roles: Mapping[str, str], seen: set[str], screen: Callable[[str], str]
) -> GatedProposal | str:
    """One proposal as it passes the gate, or the reason it is refused."""
    shaped = _shape(raw)
    if isinstance(shaped, str):
        return shaped
    kind, fields = shaped
    source = fields.get("source_message_id")
    if source is not None and source not in roles:
        return UNKNOWN_MESSAGE
    if source is not None and roles[source] != "user":
        return NOT_FROM_USER
    try:
        body = screen(fields["body"])
    except BodyRejected:
        return BODY_REJECTED
    if normalize(body) in seen:
        return DUPLICATE
    return GatedProposal(
        index=index,
        body=body,
        kind=Kind(kind),
        confidence_bps=fields.get("confidence_bps"),
        rationale=fields.get("rationale"),
        source_message_id=source,
    )
