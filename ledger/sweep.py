"""The expiry sweep: one set-based statement per batch, cost proportional to what is due."""

from __future__ import annotations

from sqlalchemy import Connection, bindparam, text

from ledger.instants import from_micros
from ledger.models import SweepStatus
from ledger.store import execute, query, store_for

SWEEP_BATCH = 1000

# The WHERE repeats the partial index's predicate so the planner can use ix_memory_records_due.
_DUE = "status IN ('active','proposed') AND expires_at IS NOT NULL AND expires_at <= :n"

_EVENTS = text(
    "INSERT INTO ledger_events (at, scope_key, event, record_id, reason, detail) "
    "SELECT :n, scope_key, 'expired', id, NULL, '{}' FROM memory_records WHERE seq IN :seqs"
).bindparams(bindparam("seqs", expanding=True))

# An active record closes at its expires_at, not at the sweep instant; a proposal's
# interval stays empty. The UPDATE repeats the due predicate: on PostgreSQL a concurrent
# writer may have superseded, accepted or forgotten a selected row meanwhile (READ
# COMMITTED re-checks the WHERE on the row's new version), and such a row must be left alone.
_EXPIRE = text(
    "UPDATE memory_records SET status = 'expired', "
    "valid_to = CASE WHEN status = 'active' THEN expires_at ELSE valid_to END, updated_at = :n "
    f"WHERE seq IN :seqs AND {_DUE} RETURNING seq"
).bindparams(bindparam("seqs", expanding=True))


def expire_due(conn: Connection, now_us: int, *, scope_key: str | None = None, limit: int = SWEEP_BATCH) -> int:
    """Expire up to ``limit`` due records (of one scope, or all). Returns how many; idempotent."""
    scope_clause = ""
    if scope_key is not None:
        # Every write runs this. On SQLite ``+scope_key`` keeps the planner on
        # ix_memory_records_due (only what is due) instead of ix_memory_records_scope_status
        # (every active record of the scope, each read from the table).
        scope_clause = " AND " + store_for(conn.engine).scope_hint()
    sql = f"SELECT seq FROM memory_records WHERE {_DUE}{scope_clause} ORDER BY expires_at, seq LIMIT :lim"
    seqs = [seq for (seq,) in query(conn, sql, {"n": now_us, "s": scope_key, "lim": limit})]
    if not seqs:
        return 0
    expired = list(conn.execute(_EXPIRE, {"n": now_us, "seqs": seqs}).scalars())
    if expired:
        conn.execute(_EVENTS, {"n": now_us, "seqs": expired})
    return len(expired)


SWEEP_NAME = "expiry"

_RECORD_SWEEP = (
    "INSERT INTO ops_sweep (name, last_started_at, last_finished_at, last_now, last_expired, runs, expired_total) "
    "VALUES (:name, :started, :finished, :now, :expired, 1, :expired) "
    "ON CONFLICT (name) DO UPDATE SET last_started_at = excluded.last_started_at, "
    "last_finished_at = excluded.last_finished_at, last_now = excluded.last_now, "
    "last_expired = excluded.last_expired, runs = ops_sweep.runs + 1, "
    "expired_total = ops_sweep.expired_total + excluded.last_expired"
)


def record_sweep(conn: Connection, *, started_us: int, finished_us: int, now_us: int, expired: int) -> None:
    """Record one finished sweep (upsert of the ``expiry`` row): instants, count, running totals."""
    execute(
        conn,
        _RECORD_SWEEP,
        {"name": SWEEP_NAME, "started": started_us, "finished": finished_us, "now": now_us, "expired": expired},
    )


def last_sweep(conn: Connection) -> SweepStatus | None:
    """The sweep's last recorded run, or None when no sweep has finished in this database yet."""
    rows = query(
        conn,
        "SELECT name, last_started_at, last_finished_at, last_now, last_expired, runs, expired_total "
        "FROM ops_sweep WHERE name = :name",
        {"name": SWEEP_NAME},
    )
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
