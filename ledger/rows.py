"""Reading rows: conversion to domain objects and the shared SELECTs."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import fields
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection

from ledger.instants import EPOCH
from ledger.models import RECORDS, Kind, MemoryRecord, Provenance, Status
from ledger.store import query

# Columns the write paths keep for themselves; a MemoryRecord does not carry them.
INTERNAL = frozenset({"proposed_action"})
# The columns a MemoryRecord is built from, in table order, from the SQLModel table (the one schema).
NAMES = tuple(column.name for column in RECORDS.c if column.name not in INTERNAL)
COLUMNS = ", ".join(NAMES)


_KINDS = {k.value: k for k in Kind}
_PROVENANCES = {p.value: p for p in Provenance}
_STATUSES = {s.value: s for s in Status}
# A record is built by setting its slots directly: a frozen dataclass's __init__ goes through
# object.__setattr__ once per field, which costs more than the rest of the conversion (a list of
# 1,500 records converts every one).
_SETTERS = tuple(getattr(MemoryRecord, f.name).__set__ for f in fields(MemoryRecord))
_NEW = object.__new__


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
    values = (
        rid,
        scope,
        _KINDS[kind],
        body,
        _PROVENANCES[prov],
        _STATUSES[status],
        session,
        [] if sup == "[]" else list(json.loads(sup)),
        succ,
        conf,
        why,
        valid_from,
        None if vt is None else _instant(vt),
        None if exp is None else _instant(exp),
        group,
        created_at,
        created_at if ua == ca else _instant(ua),
        erased is not None,
    )
    rec: MemoryRecord = _NEW(MemoryRecord)
    for setter, value in zip(_SETTERS, values, strict=True):
        setter(rec, value)
    return rec


def to_record(row: Mapping[Any, Any]) -> MemoryRecord:
    return record_from_tuple([row[name] for name in NAMES])


def fetch_records(
    conn: Connection, where: str, params: Mapping[str, Any], *, order: str = "valid_from, seq"
) -> list[MemoryRecord]:
    """The records matching ``where``, converted straight from the driver's tuples."""
    found = query(conn, f"SELECT {COLUMNS} FROM memory_records WHERE {where} ORDER BY {order}", dict(params))
    return [record_from_tuple(row) for row in found]


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
