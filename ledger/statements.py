"""The statements of the write transaction (:mod:`ledger.tx`), built once from :mod:`ledger.schema`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Executable, bindparam, case, func, insert, literal_column, or_, select, update

from ledger.models import Provenance, Status
from ledger.record_rows import NAMES, SELECT_ACTIVE, SELECT_RECORDS
from ledger.schema import EVENTS, RECORDS, SCOPES
from ledger.store import Prepared, Store, lit, param
from ledger.store.scope import stamp
from ledger.sweep import any_due

M = RECORDS.c
_S = param("s")
_N = param("n")

# An event's detail as stored: keys sorted, so equal details are equal text (an encoder built once).
sorted_json = json.JSONEncoder(sort_keys=True).encode
# A new record's event detail without supersedes (most of them), encoded once per provenance.
_RECORD_DETAILS = {p: sorted_json({"supersedes": [], "provenance": p.value}) for p in Provenance}


def record_detail(supersedes: Sequence[str], provenance: Provenance) -> str:
    """The detail of a new record's ``saved`` or ``proposed`` event, as :func:`sorted_json` encodes it."""
    if supersedes:
        return sorted_json({"supersedes": list(supersedes), "provenance": provenance.value})
    return _RECORD_DETAILS[provenance]


INSERT_EVENT = Prepared(
    insert(EVENTS), column_keys=("at", "scope_key", "event", "record_id", "reason", "run_id", "detail")
)


def _held(status: Status) -> Any:
    """The scope's count of ``status`` records: the triggers' count, or (no settings row yet) a count."""
    kept = SCOPES.c.active_count if status == Status.ACTIVE else SCOPES.c.proposed_count
    # In the terms SQLite's indexes answer (sqlite_ddl.PROPOSED): the active records are the open ones, and a
    # proposal's interval is empty (the table's checks).
    which = M.valid_to.is_(None) if status == Status.ACTIVE else M.valid_to == M.valid_from
    counted = select(func.count()).where(M.scope_key == _S, which, M.status == lit(status.value)).scalar_subquery()
    return func.coalesce(select(kept).where(SCOPES.c.scope_key == _S).scalar_subquery(), counted)


_USAGE_COLUMNS = (
    select(SCOPES.c.max_records).where(SCOPES.c.scope_key == _S).scalar_subquery(),
    _held(Status.ACTIVE),
    _held(Status.PROPOSED),
)
# The budget and both counts in one round trip, read from the scope's settings row.
USAGE = Prepared(select(*_USAGE_COLUMNS))


def due_now(store: Store) -> Executable:
    """Whether anything in scope ``s`` is due at ``n``, as one row."""
    return select(any_due(store))


def usage_and_due(store: Store) -> Executable:
    """:data:`USAGE` and whether anything in the scope is due at ``n``: what a save reads before it writes."""
    return select(*_USAGE_COLUMNS, any_due(store))


# The stamp's row in a subquery of its RETURNING: SQLAlchemy would add the table to the subquery's FROM.
_STAMPED_LATEST = literal_column(f"{SCOPES.name}.{SCOPES.c.latest_at.name}", SCOPES.c.latest_at.type)


def stamp_and_usage(store: Store) -> Executable:
    """The scope's stamp (:func:`ledger.store.scope.stamp`) returning what :func:`usage_and_due` reads, in one
    statement where the stamp takes the lock (SQLite): the budget and the counts from the row it stamped (it exists
    once stamped, so the counts need no fallback), and whether anything is due at the write's instant (the given
    one, ``x = 1``, else the latest the stamp set)."""
    instant = case((bindparam("x") == 1, param("t")), else_=_STAMPED_LATEST)
    columns = (SCOPES.c.max_records, SCOPES.c.active_count, SCOPES.c.proposed_count, any_due(store, instant))
    return stamp(store).returning(*columns)  # type: ignore[no-any-return]


CLOSE = Prepared(
    update(RECORDS)
    .where(M.id == bindparam("rid"), M.status == lit(Status.ACTIVE.value))
    .values(status=Status.SUPERSEDED.value, valid_to=_N, superseded_by=bindparam("succ"), updated_at=_N)
)
INSERT_RECORD = Prepared(insert(RECORDS), column_keys=NAMES[1:])
# The active set at ``n``: open, in effect, not past its expiry.
ACTIVE_AT = (
    M.scope_key == _S,
    M.valid_to.is_(None),
    M.valid_from <= _N,
    or_(M.expires_at.is_(None), M.expires_at > _N),
)
ACTIVE_NOW = Prepared(SELECT_ACTIVE.where(*ACTIVE_AT).order_by(M.valid_from, M.seq))


def _set_record(*where: Any, **values: Any) -> Prepared:
    return Prepared(update(RECORDS).where(M.id == bindparam("rid"), *where).values(**values))


ACCEPT = _set_record(
    M.status == lit(Status.PROPOSED.value),
    status=Status.ACTIVE.value,
    valid_from=_N,
    valid_to=None,
    supersedes=bindparam("sup"),
    updated_at=_N,
)
REJECT = _set_record(status=Status.REJECTED.value, updated_at=_N)
DELETE = _set_record(status=Status.DELETED.value, valid_to=bindparam("end"), updated_at=_N)
SET_EXPIRY = _set_record(M.status == lit(Status.ACTIVE.value), expires_at=bindparam("e"), updated_at=_N)
SET_ACTION = _set_record(proposed_action=bindparam("a"))
PROPOSED_ACTION = Prepared(select(M.proposed_action).where(M.id == bindparam("rid")))
GROUP_MEMBER = Prepared(
    SELECT_RECORDS.where(
        M.scope_key == _S, M.conflict_group == bindparam("g"), M.status == lit(Status.ACTIVE.value)
    ).order_by(M.valid_from, M.seq)
)
SET_BUDGET = Prepared(update(SCOPES).where(SCOPES.c.scope_key == _S).values(max_records=bindparam("m"), updated_at=_N))
