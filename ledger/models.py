"""The domain objects the API hands out; the tables they are stored in are :mod:`ledger.schema`.

Storage keeps instants as integer microseconds since the epoch; the domain
objects (:class:`MemoryRecord`, :class:`LedgerEvent`) carry aware UTC datetimes.
The allowed lifecycle transitions live in :data:`TRANSITIONS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum


class Kind(StrEnum):
    PREFERENCE = "preference"
    FACT = "fact"
    DECISION = "decision"
    CONSTRAINT = "constraint"


class Provenance(StrEnum):
    USER_EXPLICIT = "user_explicit"
    MODEL_PROPOSAL = "model_proposal"
    MODEL_CONSOLIDATION = "model_consolidation"


class Status(StrEnum):
    ACTIVE = "active"
    PROPOSED = "proposed"
    REJECTED = "rejected"
    SUPERSEDED = "superseded"
    EXPIRED = "expired"
    DELETED = "deleted"


# Which status may move to which; every write path checks against this table.
TRANSITIONS: dict[Status, frozenset[Status]] = {
    Status.PROPOSED: frozenset({Status.ACTIVE, Status.REJECTED, Status.EXPIRED, Status.DELETED}),
    Status.ACTIVE: frozenset({Status.SUPERSEDED, Status.EXPIRED, Status.DELETED}),
    Status.EXPIRED: frozenset({Status.DELETED}),
    Status.SUPERSEDED: frozenset(),
    Status.REJECTED: frozenset({Status.DELETED}),
    Status.DELETED: frozenset(),
}


class EventKind(StrEnum):
    SAVED = "saved"
    SUPERSEDED = "superseded"
    DELETED = "deleted"
    ERASED = "erased"
    PROPOSED = "proposed"
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    EXPIRED = "expired"
    PROPOSAL_REFUSED = "proposal_refused"
    SAVE_REFUSED = "save_refused"
    BUDGET_SET = "budget_set"
    CONSOLIDATION_OP_APPLIED = "consolidation_op_applied"
    CONSOLIDATION_OP_REFUSED = "consolidation_op_refused"


@dataclass(frozen=True, slots=True)
class SweepStatus:
    """The sweep's last run as :meth:`ledger.Ledger.last_sweep` hands it out."""

    name: str
    last_started_at: datetime
    last_finished_at: datetime
    last_now: datetime
    last_expired: int
    runs: int
    expired_total: int


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """A record as the API hands it out. An erased body reads as ``None``."""

    id: str
    scope_key: str
    kind: Kind
    body: str | None
    provenance: Provenance
    status: Status
    source_session_id: str | None
    supersedes: list[str]
    superseded_by: str | None
    confidence_bps: int | None
    rationale: str | None
    valid_from: datetime
    valid_to: datetime | None
    expires_at: datetime | None
    conflict_group: str | None
    created_at: datetime
    updated_at: datetime
    erased: bool = False

    def effective_end(self) -> datetime | None:
        """``min(valid_to, expires_at)``: where the record stops applying."""
        ends = [e for e in (self.valid_to, self.expires_at) if e is not None]
        return min(ends) if ends else None

    def applies_at(self, instant: datetime) -> bool:
        end = self.effective_end()
        return self.valid_from <= instant and (end is None or instant < end)


@dataclass(frozen=True, slots=True)
class LedgerEvent:
    seq: int
    at: datetime
    scope_key: str
    event: str
    record_id: str | None
    reason: str | None
    run_id: str | None
    detail: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ScopeUsage:
    """A scope's budget and how much of it its records hold."""

    scope_key: str
    max_records: int
    active: int
    proposed: int

    @property
    def held(self) -> int:
        return self.active + self.proposed
