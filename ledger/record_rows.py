"""Rows of ``memory_records``: the column order (:data:`NAMES`, from the table), the shared SELECTs, a new
record's row and the conversion of rows to :class:`~ledger.models.MemoryRecord`.

The order is stated once, here: a SELECT reads :data:`NAMES`, :func:`new_row` writes them in that order
(checked at import) and :func:`record_from_tuple` unpacks them in that order.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, bindparam, select

from ledger.columns import construct
from ledger.instants import EPOCH
from ledger.models import Kind, MemoryRecord, Provenance, Status
from ledger.schema import RECORD_NAMES, RECORDS
from ledger.store import Prepared, rows
from ledger.store.base import Statement

# The columns a MemoryRecord is built from, in table order (stated with the table).
NAMES = RECORD_NAMES
M = RECORDS.c
# Every read of records selects these columns (in NAMES order): SELECT_RECORDS.where(...).
SELECT_RECORDS = select(*(M[name] for name in NAMES))
BY_ID = Prepared(SELECT_RECORDS.where(M.id == bindparam("id")))
BY_IDS = Prepared(SELECT_RECORDS.where(M.id.in_(bindparam("ids", expanding=True))))


_KINDS = {k.value: k for k in Kind}
_PROVENANCES = {p.value: p for p in Provenance}
_STATUSES = {s.value: s for s in Status}
# A record is built from the row unchecked (ledger.columns.construct): the table's types and CHECKs already
# hold the values to the fields, and validating them again would cost more than the rest of the conversion
# (a list of 1,500 records converts every one). Every record shares one set of the fields it was given.
_FIELDS_SET = set(MemoryRecord.model_fields)
# The row holds the record's fields in order, ``seq`` first and ``erased_at`` (read as ``erased``) before
# ``created_at``: a field added to the record and not to the row fails here.
_FROM_ROW = (*(name for name in NAMES if name not in ("seq", "erased_at")), "erased")
assert tuple(MemoryRecord.model_fields) == _FROM_ROW, f"{tuple(MemoryRecord.model_fields)} != {_FROM_ROW}"


def _instant(value: int) -> datetime:
    return EPOCH + timedelta(0, 0, value)  # positional: a third faster than microseconds=


def record_from_tuple(row: Sequence[Any]) -> MemoryRecord:
    """A record from a row in :data:`NAMES` order (the fast path of every list read)."""
    (_seq, rid, scope, kind, body, prov, status, session, sup, succ, conf, why, vf, vt, exp, group, erased, ca, ua) = (
        row
    )
    # Most records were created when they took effect and many were never touched
    # since: convert each distinct instant once.
    valid_from = _instant(vf)
    created_at = valid_from if ca == vf else _instant(ca)
    values = {
        "id": rid,
        "scope_key": scope,
        "kind": _KINDS[kind],
        "body": body,
        "provenance": _PROVENANCES[prov],
        "status": _STATUSES[status],
        "source_session_id": session,
        "supersedes": [] if sup == "[]" else list(json.loads(sup)),
        "superseded_by": succ,
        "confidence_bps": conf,
        "rationale": why,
        "valid_from": valid_from,
        "valid_to": None if vt is None else _instant(vt),
        "expires_at": None if exp is None else _instant(exp),
        "conflict_group": group,
        "created_at": created_at,
        "updated_at": created_at if ua == ca else _instant(ua),
        "erased": erased is not None,
    }
    return construct(MemoryRecord, values, _FIELDS_SET)


# The active set's rows leave out what the schema fixes for an active record (the CHECKs:
# status 'active', valid_to and superseded_by NULL, never erased) and the scope the query names:
# a list of 1,500 records reads and converts a quarter fewer values.
_FIXED_WHEN_ACTIVE = ("seq", "scope_key", "status", "superseded_by", "valid_to", "erased_at")
ACTIVE_NAMES = tuple(n for n in NAMES if n not in _FIXED_WHEN_ACTIVE)
SELECT_ACTIVE = select(*(M[name] for name in ACTIVE_NAMES))
_ACTIVE = Status.ACTIVE


def active_record_from_tuple(scope: str, row: Sequence[Any]) -> MemoryRecord:
    """A record from a row in :data:`ACTIVE_NAMES` order, of a query for ``scope``'s active records."""
    (rid, kind, body, prov, session, sup, conf, why, vf, exp, group, ca, ua) = row
    valid_from = _instant(vf)
    created_at = valid_from if ca == vf else _instant(ca)
    values = {
        "id": rid,
        "scope_key": scope,
        "kind": _KINDS[kind],
        "body": body,
        "provenance": _PROVENANCES[prov],
        "status": _ACTIVE,
        "source_session_id": session,
        "supersedes": [] if sup == "[]" else list(json.loads(sup)),
        "superseded_by": None,
        "confidence_bps": conf,
        "rationale": why,
        "valid_from": valid_from,
        "valid_to": None,
        "expires_at": None if exp is None else _instant(exp),
        "conflict_group": group,
        "created_at": created_at,
        "updated_at": created_at if ua == ca else _instant(ua),
        "erased": False,
    }
    return construct(MemoryRecord, values, _FIELDS_SET)


def fetch_active(conn: Connection, stmt: Statement, scope: str, params: Mapping[str, Any]) -> list[MemoryRecord]:
    """The active records ``stmt`` (a :data:`SELECT_ACTIVE` query of ``scope``) finds."""
    return [active_record_from_tuple(scope, row) for row in rows(conn, stmt, params)]


def to_record(row: Mapping[Any, Any]) -> MemoryRecord:
    return record_from_tuple([row[name] for name in NAMES])


def fetch_records(conn: Connection, stmt: Statement, params: Mapping[str, Any]) -> list[MemoryRecord]:
    """The records ``stmt`` (a :data:`SELECT_RECORDS` query) finds, converted straight from the driver's tuples."""
    return [record_from_tuple(row) for row in rows(conn, stmt, params)]


def fetch_rows(conn: Connection, stmt: Statement, params: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Like :func:`fetch_records`, as rows by column name (what the write paths decide on)."""
    return [dict(zip(NAMES, row, strict=True)) for row in rows(conn, stmt, params)]


def fetch_one(conn: Connection, record_id: str) -> Mapping[Any, Any] | None:
    found = fetch_rows(conn, BY_ID, {"id": record_id})
    return found[0] if found else None


def fetch_many(conn: Connection, record_ids: Sequence[str]) -> list[Mapping[Any, Any]]:
    if not record_ids:
        return []
    return list(fetch_rows(conn, BY_IDS, {"ids": list(record_ids)}))


def ancestors(conn: Connection, head: Mapping[Any, Any]) -> list[Mapping[Any, Any]]:
    """Every predecessor of ``head`` through ``supersedes`` (a merge has several), head excluded.

    Only records actually closed by their successor count: a proposal's ``supersedes``
    names targets it *would* close, which are not its history until it is accepted.
    """
    seen: dict[str, Mapping[Any, Any]] = {}
    frontier = [(rid, head["id"]) for rid in json.loads(head["supersedes"])]
    while frontier:
        wanted = {rid: child for rid, child in frontier if rid not in seen}
        frontier = []
        for row in fetch_many(conn, list(wanted)):
            if row["superseded_by"] != wanted[row["id"]]:
                continue
            seen[row["id"]] = row
            frontier.extend((rid, row["id"]) for rid in json.loads(row["supersedes"]) if rid not in seen)
    return list(seen.values())


def chain_head(conn: Connection, row: Mapping[Any, Any]) -> Mapping[Any, Any]:
    """Follow ``superseded_by`` to the end of the chain."""
    current = row
    for _ in range(100_000):
        successor = current["superseded_by"]
        if successor is None:
            return current
        nxt = fetch_one(conn, successor)
        if nxt is None:
            return current
        current = nxt
    raise RuntimeError("supersession chain does not end")  # pragma: no cover


@dataclass(slots=True)  # not frozen: a frozen __init__ pays object.__setattr__ per field, on every save
class NewRecord:
    """What a write path hands to the write transaction's insert (screened and validated); never changed."""

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

    def with_expiry(self, expires_at: int | None) -> NewRecord:
        return replace(self, expires_at=expires_at)

    def with_status(self, status: Status) -> NewRecord:
        return replace(self, status=status)

    def with_group(self, conflict_group: str | None) -> NewRecord:
        return replace(self, conflict_group=conflict_group)


def new_row(record_id: str, scope: str, new: NewRecord, now_us: int, supersedes: Sequence[str]) -> dict[str, Any]:
    """The new row's columns, in :data:`NAMES` order after ``seq`` (:func:`record_of_new_row` reads them so)."""
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


def record_of_new_row(values: Mapping[str, Any]) -> MemoryRecord:
    """The record a :func:`new_row` inserted, without reading it back."""
    return record_from_tuple((None, *values.values()))


_SAMPLE = NewRecord("", Kind.FACT, Provenance.USER_EXPLICIT, Status.ACTIVE)
assert tuple(new_row("", "", _SAMPLE, 0, ())) == NAMES[1:], "new_row() must follow the table's column order"
