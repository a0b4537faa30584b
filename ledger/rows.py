"""Reading rows: conversion to domain objects and the shared SELECTs."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection

from ledger.instants import from_micros, opt_from_micros
from ledger.models import RECORDS, Kind, MemoryRecord, Provenance, Status
from ledger.store import query

# The columns, in table order, from the SQLModel table (the one schema).
NAMES = tuple(column.name for column in RECORDS.c)
COLUMNS = ", ".join(NAMES)


def to_record(row: Mapping[Any, Any]) -> MemoryRecord:
    # Most records were created when they took effect and many were never touched
    # since: convert each distinct instant once (every read converts every row).
    valid_from_us, created_us, updated_us = row["valid_from"], row["created_at"], row["updated_at"]
    valid_from = from_micros(valid_from_us)
    created_at = valid_from if created_us == valid_from_us else from_micros(created_us)
    return MemoryRecord(
        id=row["id"],
        scope_key=row["scope_key"],
        kind=Kind(row["kind"]),
        body=row["body"],
        provenance=Provenance(row["provenance"]),
        status=Status(row["status"]),
        source_session_id=row["source_session_id"],
        supersedes=[] if row["supersedes"] == "[]" else list(json.loads(row["supersedes"])),
        superseded_by=row["superseded_by"],
        confidence_bps=row["confidence_bps"],
        rationale=row["rationale"],
        valid_from=valid_from,
        valid_to=opt_from_micros(row["valid_to"]),
        expires_at=opt_from_micros(row["expires_at"]),
        conflict_group=row["conflict_group"],
        created_at=created_at,
        updated_at=created_at if updated_us == created_us else from_micros(updated_us),
        erased=row["erased_at"] is not None,
    )


def _rows(conn: Connection, sql: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [dict(zip(NAMES, row, strict=True)) for row in query(conn, sql, params)]


def fetch_one(conn: Connection, record_id: str) -> Mapping[Any, Any] | None:
    found = _rows(conn, f"SELECT {COLUMNS} FROM memory_records WHERE id = :id", {"id": record_id})
    return found[0] if found else None


def fetch_many(conn: Connection, record_ids: Sequence[str]) -> list[Mapping[Any, Any]]:
    if not record_ids:
        return []
    params = {f"i{n}": rid for n, rid in enumerate(record_ids)}
    marks = ", ".join(f":{k}" for k in params)
    return list(_rows(conn, f"SELECT {COLUMNS} FROM memory_records WHERE id IN ({marks})", params))


def fetch_where(
    conn: Connection, where: str, params: Mapping[Any, Any], *, order: str = "valid_from, seq"
) -> list[Any]:
    return _rows(conn, f"SELECT {COLUMNS} FROM memory_records WHERE {where} ORDER BY {order}", dict(params))


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
