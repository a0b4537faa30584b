"""Pieces of the write transaction: the read handle, usage, and the values of a new record."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Connection, CursorResult, Executable, bindparam, func, insert, or_, select, update

from ledger import rows
from ledger.errors import InvalidTransition
from ledger.models import EVENTS, RECORDS, SCOPES, TRANSITIONS, Kind, MemoryRecord, Provenance, Status
from ledger.store import Pending, Prepared, Rows, Store, lit, param
from ledger.store import query as store_query
from ledger.store import rows as store_rows
from ledger.store import run as store_run
from ledger.sweep import any_due

Row = Mapping[str, Any]
M = RECORDS.c
_S = param("s")
_N = param("n")

# An event's detail as stored: keys sorted, so equal details are equal text.
sorted_json = json.JSONEncoder(sort_keys=True).encode
EVENT_COLUMNS = ("at", "scope_key", "event", "record_id", "reason", "run_id", "detail")
_INSERT_EVENT = Prepared(insert(EVENTS), column_keys=EVENT_COLUMNS)


def _held(status: Status) -> Any:
    """The scope's count of ``status`` records: the triggers' count, or (no settings row yet) a count."""
    kept = SCOPES.c.active_count if status == Status.ACTIVE else SCOPES.c.proposed_count
    counted = select(func.count()).where(M.scope_key == _S, M.status == lit(status.value)).scalar_subquery()
    return func.coalesce(select(kept).where(SCOPES.c.scope_key == _S).scalar_subquery(), counted)


_USAGE_COLUMNS = (
    select(SCOPES.c.max_records).where(SCOPES.c.scope_key == _S).scalar_subquery(),
    _held(Status.ACTIVE),
    _held(Status.PROPOSED),
)
# The budget and both counts in one round trip, read from the scope's settings row.
_USAGE = Prepared(select(*_USAGE_COLUMNS))


def due_now(store: Store) -> Executable:
    """Whether anything in scope ``s`` is due at ``n``, as one row."""
    return select(any_due(store))


def usage_and_due(store: Store) -> Executable:
    """:data:`_USAGE` and whether anything in the scope is due at ``n``: what a save reads before it writes."""
    return select(*_USAGE_COLUMNS, any_due(store))


_CLOSE = Prepared(
    update(RECORDS)
    .where(M.id == bindparam("rid"), M.status == lit(Status.ACTIVE.value))
    .values(status=Status.SUPERSEDED.value, valid_to=_N, superseded_by=bindparam("succ"), updated_at=_N)
)
_INSERT_RECORD = Prepared(insert(RECORDS), column_keys=rows.NAMES[1:])
# The active set at ``n``: open, in effect, not past its expiry.
ACTIVE_AT = (
    M.scope_key == _S,
    M.valid_to.is_(None),
    M.valid_from <= _N,
    or_(M.expires_at.is_(None), M.expires_at > _N),
)
ACTIVE_NOW = Prepared(rows.SELECT_ACTIVE.where(*ACTIVE_AT).order_by(M.valid_from, M.seq))


@dataclass(frozen=True, slots=True)
class ScopeUsage:
    scope_key: str
    max_records: int
    active: int
    proposed: int

    @property
    def held(self) -> int:
        return self.active + self.proposed


@dataclass(slots=True)  # not frozen: a frozen __init__ pays object.__setattr__ per field, on every save
class _NewRecord:
    """What a write path hands to :meth:`Transaction._write_record` (screened and validated); never changed."""

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
    """A read transaction (one snapshot) for SQLAlchemy Core statements built from :mod:`ledger.models`.

    ``execute`` returns SQLAlchemy's result. ``rows`` and ``run`` take a :class:`ledger.Prepared`
    statement (built once, bound by name) through the store's fastest path: on SQLite, straight to
    the cursor, which is what a hot path (a consolidation run's claim and settle) wants.
    """

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def execute(
        self, statement: Executable, params: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None
    ) -> CursorResult[*tuple[Any, ...]]:
        """Run one SQLAlchemy Core statement (built from the tables in :mod:`ledger.models`)."""
        return self.conn.execute(statement, params)

    def rows(self, statement: Prepared | Executable, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        """Run one statement that returns rows: the rows as tuples, in the statement's column order."""
        return store_rows(self.conn, statement, params)

    def query(self, statement: Prepared | Executable, params: Mapping[str, Any] | None = None) -> Pending[Rows]:
        """Send one statement that returns rows now and read them later (``.result()``).

        Statements sent one after another before the first is read share one round trip on
        PostgreSQL; elsewhere this is :meth:`rows`, run at once.
        """
        return store_query(self.conn, statement, params)

    def run(
        self, statement: Prepared | Executable, params: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None
    ) -> int:
        """Run one statement (a list of parameter sets: once per set); how many rows it changed."""
        return store_run(self.conn, statement, params)

    def records(self, record_ids: Iterable[str]) -> dict[str, MemoryRecord]:
        """The named records as this transaction sees them, by id (missing ids left out)."""
        return {row["id"]: rows.to_record(row) for row in rows.fetch_many(self.conn, list(record_ids))}


def _values(record_id: str, scope: str, new: _NewRecord, now_us: int, supersedes: Sequence[str]) -> dict[str, Any]:
    """The new row's columns, in :data:`ledger.rows.NAMES` order after ``seq`` (the record is built from them)."""
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


def _set_record(*where: Any, **values: Any) -> Prepared:
    return Prepared(update(RECORDS).where(M.id == bindparam("rid"), *where).values(**values))


_ACCEPT = _set_record(
    M.status == lit(Status.PROPOSED.value),
    status=Status.ACTIVE.value,
    valid_from=_N,
    valid_to=None,
    supersedes=bindparam("sup"),
    updated_at=_N,
)
_REJECT = _set_record(status=Status.REJECTED.value, updated_at=_N)
_DELETE = _set_record(status=Status.DELETED.value, valid_to=bindparam("end"), updated_at=_N)
_SET_EXPIRY = _set_record(M.status == lit(Status.ACTIVE.value), expires_at=bindparam("e"), updated_at=_N)
_SET_ACTION = _set_record(proposed_action=bindparam("a"))
_PROPOSED_ACTION = Prepared(select(M.proposed_action).where(M.id == bindparam("rid")))
_GROUP_MEMBER = Prepared(
    rows.SELECT_RECORDS.where(
        M.scope_key == _S, M.conflict_group == bindparam("g"), M.status == lit(Status.ACTIVE.value)
    ).order_by(M.valid_from, M.seq)
)
_SET_BUDGET = Prepared(update(SCOPES).where(SCOPES.c.scope_key == _S).values(max_records=bindparam("m"), updated_at=_N))
