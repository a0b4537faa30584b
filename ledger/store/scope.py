"""A scope's write lock, then its instant (docs/ledger.md, "Lock, then instant").

:func:`enter_scope` holds the scope's lock (SQLite: the write transaction itself; PostgreSQL: the
scope's ``scope_settings`` row, :meth:`Store.lock_scope`), *then* reads the clock and moves the
scope's latest instant forward, so instants within a scope strictly increase in commit order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, Executable, bindparam, case, or_, update

from ledger.schema import SCOPES
from ledger.store.base import Store
from ledger.store.prepared import Prepared, param

_T = param("t")
_LATEST = SCOPES.c.latest_at


def _next_latest(clock: Any) -> Any:
    """Past ``clock`` when the clock is ahead of the latest instant, else one microsecond past the latest
    (an explicit instant, ``x = 1``, never moves it backwards)."""
    return case(
        (or_(_LATEST.is_(None), clock > _LATEST), clock),
        (bindparam("x") == 1, _LATEST),
        else_=_LATEST + 1,
    )


def stamp(store: Store) -> Any:
    """Create the scope's settings row if missing (PostgreSQL: and lock it) and move its latest instant
    forward, in one statement, returning that instant (more columns may be added with ``.returning()``)."""
    new = store.upsert(SCOPES).values(
        scope_key=bindparam("s"), max_records=bindparam("m"), created_at=_T, updated_at=_T, latest_at=_T
    )
    stmt = new.on_conflict_do_update(
        index_elements=[SCOPES.c.scope_key], set_={"latest_at": _next_latest(new.excluded.latest_at)}
    )
    return stmt.returning(_LATEST)


# A scope without a settings row keeps none (a refusal's event).
_STAMP_EXISTING = Prepared(
    update(SCOPES).where(SCOPES.c.scope_key == bindparam("s")).values(latest_at=_next_latest(_T)).returning(_LATEST)
)


# The scope's latest instant when the lock has read it already (PostgreSQL).
_SET_LATEST = Prepared(update(SCOPES).where(SCOPES.c.scope_key == bindparam("s")).values(latest_at=_T))


def next_instant(latest_us: int | None, clock_us: int, *, explicit: bool) -> int:
    """The scope's latest instant after a write at ``clock_us``: what :func:`_next_latest` computes in SQL."""
    if latest_us is None or clock_us > latest_us:
        return clock_us
    return latest_us if explicit else latest_us + 1


def enter_scope(
    store: Store,
    conn: Connection,
    scope_key: str,
    *,
    explicit_us: int | None,
    clock_us: Callable[[], int],
    default_max: int,
    create: bool = True,
    reading: Callable[[Store], Executable] | None = None,
) -> tuple[int, tuple[Any, ...] | None]:
    """Lock ``scope_key`` for ``conn``'s write transaction, then return its instant.

    ``explicit_us`` (a caller's ``now``) is returned as given, and recorded when it is the
    latest. Without it the instant is ``clock_us()``, read once the lock is held, or, when the
    clock is at or before the scope's latest instant, that instant + 1 µs: strictly increasing in
    commit order. ``create=False`` leaves a scope without a settings row without one (a refusal's
    event); ``default_max`` is the budget of a row created here.

    ``reading``: a :func:`stamp` with more columns (built with ``driver_values``), used where the store
    allows it (:attr:`Store.stamp_reads`: SQLite) so what the write reads first comes back with the
    instant. Returns the instant and those further columns (None where ``reading`` was not used).
    """
    locked = store.lock_scope(conn, scope_key)
    explicit = explicit_us is not None
    now_us = explicit_us if explicit_us is not None else clock_us()
    if locked is not None:  # the lock read the latest instant: its row exists and is held
        latest = next_instant(locked.latest_us, now_us, explicit=explicit)
        if latest != locked.latest_us:
            store.send(conn, _SET_LATEST, {"s": scope_key, "t": latest})
        return (now_us if explicit else latest), None
    params = {"s": scope_key, "m": default_max, "t": now_us, "x": int(explicit)}
    reads = reading if create and store.stamp_reads else None
    if not create:
        found = store.rows(conn, _STAMP_EXISTING, params)
    elif reads is not None:
        found = store.rows(conn, store.built(reads, driver_values=True), params)
    else:
        found = store.rows(conn, store.built(stamp), params)
    instant = now_us if explicit or not found else int(found[0][0])
    return instant, (None if reads is None else found[0][1:])
