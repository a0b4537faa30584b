"""Pieces of the write transaction: the read handle, usage, and the values of a new record."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Connection, CursorResult, Executable

from ledger import rows
from ledger.errors import InvalidTransition
from ledger.models import TRANSITIONS, Kind, MemoryRecord, Provenance, Status

Row = Mapping[str, Any]

_INSERT_EVENT = (
    "INSERT INTO ledger_events (at, scope_key, event, record_id, reason, run_id, detail) "
    "VALUES (:at, :s, :e, :r, :why, :run, :d)"
)
# The budget and both counts in one round trip; each count is a covering-index lookup.
_USAGE = (
    "SELECT (SELECT max_records FROM scope_settings WHERE scope_key = :s), "
    "(SELECT COUNT(*) FROM memory_records WHERE scope_key = :s AND status = 'active'), "
    "(SELECT COUNT(*) FROM memory_records WHERE scope_key = :s AND status = 'proposed')"
)
_CLOSE = (
    "UPDATE memory_records SET status = 'superseded', valid_to = :n, superseded_by = :succ, "
    "updated_at = :n WHERE id = :id AND status = 'active'"
)
_INSERT_RECORD = (
    f"INSERT INTO memory_records ({', '.join(rows.NAMES[1:])}) VALUES ({', '.join(f':{c}' for c in rows.NAMES[1:])})"
)
_ACTIVE_NOW = "scope_key = :s AND valid_to IS NULL AND valid_from <= :n AND (expires_at IS NULL OR expires_at > :n)"


@dataclass(frozen=True, slots=True)
class ScopeUsage:
    scope_key: str
    max_records: int
    active: int
    proposed: int

    @property
    def held(self) -> int:
        return self.active + self.proposed


@dataclass(frozen=True, slots=True)
class _NewRecord:
    """What a write path hands to :meth:`Transaction._write_record` (screened and validated)."""

    body: str
    kind: Kind
    provenance: Provenance
    status: Status
    expires_at: int | None = None
    conflict_group: str | None = None
    source_session_id: str | None = None
    confidence_bps: int | None = None
    rationale: str | None = None
    run_id: str | None = None


class Reader:
    """A read transaction (one snapshot). ``execute`` runs SQLAlchemy Core statements."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def execute(
        self, statement: Executable, params: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None
    ) -> CursorResult[*tuple[Any, ...]]:
        """Run one SQLAlchemy Core statement (built from the SQLModel tables in :mod:`ledger.models`)."""
        return self.conn.execute(statement, params)

    def records(self, record_ids: Iterable[str]) -> dict[str, MemoryRecord]:
        """The named records as this transaction sees them, by id (missing ids left out)."""
        return {row["id"]: rows.to_record(row) for row in rows.fetch_many(self.conn, list(record_ids))}


def _values(record_id: str, scope: str, new: _NewRecord, now_us: int, supersedes: Sequence[str]) -> dict[str, Any]:
    return {
        "id": record_id,
        "scope_key": scope,
        "kind": new.kind.value,
        "body": new.body,
        "provenance": new.provenance.value,
        "status": new.status.value,
        "source_session_id": new.source_session_id,
        "supersedes": json.dumps(list(supersedes)) if supersedes else "[]",
        "superseded_by": None,
        "confidence_bps": new.confidence_bps,
        "rationale": new.rationale,
        "valid_from": now_us,
        "valid_to": None if new.status == Status.ACTIVE else now_us,
        "expires_at": new.expires_at,
        "conflict_group": new.conflict_group,
        "erased_at": None,
        "created_at": now_us,
        "updated_at": now_us,
    }


def _replace_expiry(new: _NewRecord, expires_at: int | None) -> _NewRecord:
    return replace(new, expires_at=expires_at)


def _replace_status(new: _NewRecord, status: Status) -> _NewRecord:
    return replace(new, status=status)


def _check_transition(row: Row, to: Status, verb: str) -> None:
    current = Status(row["status"])
    if to not in TRANSITIONS[current]:
        raise InvalidTransition(f"cannot {verb} {row['id']}: it is {current.value}")
