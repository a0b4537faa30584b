"""The domain objects the API hands out; the tables they are stored in are :mod:`ledger.schema`.

A field is stated once, in a SQLModel class here that both the table and the API's class inherit
(:class:`MemoryRecordFields`: ``MemoryRecordRow`` and :class:`MemoryRecord`; :class:`LedgerEvent` and
:class:`SweepStatus` are their tables' fields as they are). Storage keeps instants as integer
microseconds since the epoch; the API's objects carry aware UTC datetimes (:mod:`ledger.columns`).
The allowed lifecycle transitions live in :data:`TRANSITIONS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlmodel import SQLModel

from ledger.columns import FROZEN, big_field, instant_field, int_field, json_field, serial_field, text_field


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


class SweepStatus(SQLModel):
    """The sweep's last run as :meth:`ledger.Ledger.last_sweep` hands it out (the ``ops_sweep`` table's row)."""

    model_config = FROZEN

    name: str = text_field(primary_key=True)
    last_started_at: datetime = instant_field()
    last_finished_at: datetime = instant_field()
    last_now: datetime = instant_field()
    last_expired: int = big_field()
    runs: int = big_field()
    expired_total: int = big_field()


class MemoryRecordFields(SQLModel):
    """A record's fields: the ``memory_records`` table (``ledger.schema.MemoryRecordRow``) and
    :class:`MemoryRecord` both inherit them."""

    model_config = FROZEN

    id: str = text_field(unique=True)
    scope_key: str = text_field()
    kind: Kind = text_field()
    body: str | None = text_field()
    provenance: Provenance = text_field()
    status: Status = text_field()
    source_session_id: str | None = text_field()
    supersedes: list[str] = json_field()
    superseded_by: str | None = text_field()
    confidence_bps: int | None = int_field()
    rationale: str | None = text_field()
    valid_from: datetime = instant_field()
    valid_to: datetime | None = instant_field()
    expires_at: datetime | None = instant_field()
    conflict_group: str | None = text_field()
    created_at: datetime = instant_field()
    updated_at: datetime = instant_field()


class MemoryRecord(MemoryRecordFields):
    """A record as the API hands it out. An erased body reads as ``None``."""

    erased: bool = False

    def effective_end(self) -> datetime | None:
        """``min(valid_to, expires_at)``: where the record stops applying."""
        ends = [e for e in (self.valid_to, self.expires_at) if e is not None]
        return min(ends) if ends else None

    def applies_at(self, instant: datetime) -> bool:
        end = self.effective_end()
        return self.valid_from <= instant and (end is None or instant < end)


class LedgerEvent(SQLModel):
    """One entry of the event log, as :meth:`ledger.Ledger.events` hands it out (the ``ledger_events`` row).
    Never holds a body."""

    model_config = FROZEN

    seq: int = serial_field()
    at: datetime = instant_field()
    scope_key: str = text_field()
    event: str = text_field()
    record_id: str | None = text_field()
    reason: str | None = text_field()
    run_id: str | None = text_field()
    detail: dict[str, Any] = json_field()  # JSON with its keys sorted, in the table


class PacketAuditFields(SQLModel):
    """What one chat received: the ``packet_audits`` table and :class:`ledger.audit.PacketAudit` inherit these.

    ``selected`` entries are ``{id, kind, reason, body, erased}`` (``body`` as sent, or None once
    forgotten); ``excluded`` entries ``{id, code}``.
    """

    model_config = FROZEN

    scope_key: str = text_field(primary_key=True)
    session_id: str = text_field(primary_key=True)
    built_at: datetime = instant_field()
    max_chars: int = int_field()
    token_estimate: int = int_field()
    selected: list[dict[str, Any]] = json_field()
    excluded: list[dict[str, str]] = json_field()


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
