"""The expiry sweep: one set-based statement per batch, cost proportional to what is due."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Executable,
    and_,
    bindparam,
    case,
    exists,
    insert,
    literal,
    select,
    update,
)

from ledger.instants import from_micros
from ledger.models import EventKind, Status, SweepStatus
from ledger.schema import EVENTS, RECORDS, SCOPES, SWEEPS
from ledger.store import Prepared, Store, lit, param, store_for

SWEEP_BATCH = 1000
M = RECORDS.c
_N = param("n")
_SEQS = param("seqs", expanding=True)


# The WHERE repeats the partial index's predicate (its constants spelled out) so the planner can
# use ix_memory_records_due.
def _due(at: Any) -> ColumnElement[bool]:
    """Held and expiring at or before ``at``."""
    return and_(
        M.status.in_(lit((Status.ACTIVE.value, Status.PROPOSED.value))), M.expires_at.is_not(None), M.expires_at <= at
    )


_DUE = _due(_N)
_DUE_ORDER = (M.expires_at, M.seq)
_DUE_ANYWHERE = Prepared(select(M.seq).where(_DUE).order_by(*_DUE_ORDER).limit(bindparam("lim")))


def _due_in_scope(store: Store) -> Executable:
    # Every write runs this. On SQLite ``+scope_key`` keeps the planner on ix_memory_records_due
    # (only what is due) instead of an index by scope (every record of the scope, each read from
    # the table).
    return select(M.seq).where(_DUE, store.scope_hint()).order_by(*_DUE_ORDER).limit(bindparam("lim"))


def any_due(store: Store, at: Any = _N) -> ColumnElement[bool]:
    """Whether a record of scope ``s`` is due at ``at`` (default: ``n``), what :func:`expire_due` would expire, as
    one column."""
    return exists().where(_due(at), store.scope_hint())


_EVENTS = Prepared(
    insert(EVENTS).from_select(
        ["at", "scope_key", "event", "record_id", "reason", "detail"],
        select(_N, M.scope_key, literal(EventKind.EXPIRED.value), M.id, literal(None), literal("{}")).where(
            M.seq.in_(_SEQS)
        ),
    )
)

# An active record closes at its expires_at, not at the sweep instant; a proposal's
# interval stays empty. The UPDATE repeats the due predicate: on PostgreSQL a concurrent
# writer may have superseded, accepted or forgotten a selected row meanwhile (READ
# COMMITTED re-checks the WHERE on the row's new version), and such a row must be left alone.
_EXPIRE = Prepared(
    update(RECORDS)
    .where(M.seq.in_(_SEQS), _DUE)
    .values(
        status=Status.EXPIRED.value,
        valid_to=case((M.status == lit(Status.ACTIVE.value), M.expires_at), else_=M.valid_to),
        updated_at=_N,
    )
    .returning(M.seq)
)


# The sweep of every scope locks the scopes it expires in, in one order, before it writes: each
# status change moves its scope's counts (a trigger updates the scope's settings row), and a
# writer holds that row from its first statement, so taking them in the UPDATE's row order could
# deadlock with writers on PostgreSQL. (SQLite has one writer at a time and renders no FOR UPDATE.)
_LOCK_SCOPES = Prepared(
    select(SCOPES.c.scope_key)
    .where(SCOPES.c.scope_key.in_(select(M.scope_key).where(M.seq.in_(_SEQS))))
    .order_by(SCOPES.c.scope_key)
    .with_for_update()
)


def expire_due(conn: Connection, now_us: int, *, scope_key: str | None = None, limit: int = SWEEP_BATCH) -> int:
    """Expire up to ``limit`` due records (of one scope, or all). Returns how many; idempotent.

    With ``scope_key`` the caller holds that scope's write lock (a write transaction).
    """
    store = store_for(conn.engine)
    due = _DUE_ANYWHERE if scope_key is None else store.built(_due_in_scope)
    seqs = [seq for (seq,) in store.rows(conn, due, {"n": now_us, "s": scope_key, "lim": limit})]
    if not seqs:
        return 0
    if scope_key is None:
        store.rows(conn, _LOCK_SCOPES, {"seqs": seqs})
    expired = [seq for (seq,) in store.rows(conn, _EXPIRE, {"n": now_us, "seqs": seqs})]
    if expired:
        store.run(conn, _EVENTS, {"n": now_us, "seqs": expired})
    return len(expired)


SWEEP_NAME = "expiry"
_SWEEP_COLUMNS = ("last_started_at", "last_finished_at", "last_now", "last_expired")


def _record_sweep(store: Store) -> Executable:
    new = store.upsert(SWEEPS).values(
        name=bindparam("name"),
        last_started_at=bindparam("started"),
        last_finished_at=bindparam("finished"),
        last_now=bindparam("now"),
        last_expired=bindparam("expired"),
        runs=1,
        expired_total=bindparam("expired"),
    )
    done = {name: new.excluded[name] for name in _SWEEP_COLUMNS}
    done["runs"] = SWEEPS.c.runs + 1
    done["expired_total"] = SWEEPS.c.expired_total + new.excluded.last_expired
    return new.on_conflict_do_update(index_elements=[SWEEPS.c.name], set_=done)  # type: ignore[no-any-return]


def record_sweep(conn: Connection, *, started_us: int, finished_us: int, now_us: int, expired: int) -> None:
    """Record one finished sweep (upsert of the ``expiry`` row): instants, count, running totals."""
    store = store_for(conn.engine)
    params: dict[str, Any] = {
        "name": SWEEP_NAME,
        "started": started_us,
        "finished": finished_us,
        "now": now_us,
        "expired": expired,
    }
    store.run(conn, store.built(_record_sweep), params)


_LAST_SWEEP = Prepared(
    select(SWEEPS.c.name, *(SWEEPS.c[n] for n in _SWEEP_COLUMNS), SWEEPS.c.runs, SWEEPS.c.expired_total).where(
        SWEEPS.c.name == bindparam("name")
    )
)


def last_sweep(conn: Connection) -> SweepStatus | None:
    """The sweep's last recorded run, or None when no sweep has finished in this database yet."""
    rows = store_for(conn.engine).rows(conn, _LAST_SWEEP, {"name": SWEEP_NAME})
    if not rows:
        return None
    name, started, finished, now, expired, runs, total = rows[0]
    return SweepStatus(
        name=name,
        last_started_at=from_micros(int(started)),
        last_finished_at=from_micros(int(finished)),
        last_now=from_micros(int(now)),
        last_expired=int(expired),
        runs=int(runs),
        expired_total=int(total),
    )
