"""The :class:`Ledger`: every lifecycle operation of SPEC 3.3 over one database.

Writes run in one transaction each, serialized per scope (``BEGIN IMMEDIATE`` on
SQLite, a ``FOR UPDATE`` lock on the scope's settings row on PostgreSQL), so the
budget and the one-active-member rule hold under concurrency. Every write first
expires, within its scope, what is due at its ``now``, so no write ever acts on a
record past its expiry.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

from sqlalchemy import Connection, Engine, text

from ledger import rows as R
from ledger.db import execute, is_sqlite, query, run_write
from ledger.erasure import erase_chain, scrub_files
from ledger.errors import (
    BudgetExceeded,
    InvalidArgument,
    InvalidInstant,
    InvalidTransition,
    LedgerError,
    RecordNotFound,
    ScopeError,
)
from ledger.instants import Clock, from_micros, require_aware, system_clock, to_micros
from ledger.models import TRANSITIONS, EventKind, Kind, MemoryRecord, Provenance, Status, SweepStatus
from ledger.reads import LedgerReads, RecordList, check_scope
from ledger.screening import MAX_BODY_CHARS, screen_body
from ledger.sweep import SWEEP_BATCH, expire_due, last_sweep, record_sweep

log = logging.getLogger(__name__)

DEFAULT_MAX_RECORDS = 200
GROUP_MAX_CHARS = 200

# Hooks called inside the delete transaction with the ids whose bodies were erased
# (consolidation uses one to scrub stored prompts and answers).
EraseHook = Callable[[Connection, Sequence[str], Sequence[str]], None]


@dataclass(frozen=True, slots=True)
class ScopeUsage:
    scope_key: str
    max_records: int
    active: int
    proposed: int

    @property
    def held(self) -> int:
        return self.active + self.proposed


# The statements every write runs go through ledger.db.execute/query: straight on the
# DBAPI cursor on SQLite, where SQLAlchemy's per-statement cost would dwarf them.
_ENSURE_SCOPE = (
    "INSERT INTO scope_settings (scope_key, max_records, created_at, updated_at) "
    "VALUES (:s, :m, :n, :n) ON CONFLICT (scope_key) DO NOTHING"
)
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

# json.dumps(..., sort_keys=True) builds a new encoder on every call; this one is built once.
_sorted_json = json.JSONEncoder(sort_keys=True).encode


@lru_cache(maxsize=8)
def _insert_sql(columns: tuple[str, ...]) -> str:
    return f"INSERT INTO memory_records ({', '.join(columns)}) VALUES ({', '.join(f':{c}' for c in columns)})"


def _kind(value: object) -> Kind:
    try:
        return Kind(str(value))
    except ValueError:
        raise InvalidArgument(f"unknown kind {value!r}: use one of {', '.join(k.value for k in Kind)}") from None


def _group(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > GROUP_MAX_CHARS or "\x00" in value:
        raise InvalidArgument(
            f"conflict_group must be a non-empty string of at most {GROUP_MAX_CHARS} characters, without NUL"
        )
    return value.strip()


def _opt_text(value: object, name: str, limit: int = 200) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > limit or "\x00" in value:
        raise InvalidArgument(f"{name} must be a string of at most {limit} characters, without NUL")
    return value


def _confidence(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 10_000:
        raise InvalidArgument("confidence_bps must be an integer from 0 to 10000")
    return value


def new_record_id() -> str:
    return "mem_" + secrets.token_hex(12)


class Ledger(LedgerReads):
    """An account memory ledger bound to one account scope.

    Use :func:`ledger.open_ledger` to get one. Thread-safe: share one per process.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        account: str = "local",
        clock: Clock = system_clock,
        max_body_chars: int = MAX_BODY_CHARS,
        default_max_records: int = DEFAULT_MAX_RECORDS,
    ) -> None:
        self.engine = engine
        self.scope_key = check_scope(f"account:{account}")
        self.clock = clock
        self.max_body_chars = max_body_chars
        self.default_max_records = default_max_records
        self._sqlite = is_sqlite(engine)
        self._erase_hooks: list[EraseHook] = []

    # ------------------------------------------------------------------ plumbing
    def close(self) -> None:
        self.engine.dispose()

    def add_erase_hook(self, hook: EraseHook) -> None:
        """Call ``hook(conn, erased_ids, erased_bodies)`` inside every delete transaction."""
        self._erase_hooks.append(hook)

    def write(self, scope_key: str, fn: Callable[[Connection], Any]) -> Any:
        """Run ``fn`` in a write transaction serialized for ``scope_key``."""

        def pg_lock(conn: Connection) -> None:
            self._ensure_scope(conn, scope_key, 0)
            conn.execute(text("SELECT 1 FROM scope_settings WHERE scope_key = :s FOR UPDATE"), {"s": scope_key})

        return run_write(self.engine, fn, pg_lock=pg_lock)

    def _ensure_scope(self, conn: Connection, scope_key: str, now_us: int) -> None:
        execute(conn, _ENSURE_SCOPE, {"s": scope_key, "m": self.default_max_records, "n": now_us})

    def event(
        self,
        conn: Connection,
        event: EventKind | str,
        *,
        at_us: int,
        scope_key: str,
        record_id: str | None = None,
        reason: str | None = None,
        run_id: str | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        """Append one row to ``ledger_events`` (never a body)."""
        execute(
            conn,
            _INSERT_EVENT,
            {
                "at": at_us,
                "s": scope_key,
                "e": str(event),
                "r": record_id,
                "why": reason,
                "run": run_id,
                "d": _sorted_json(dict(detail or {})),
            },
        )

    def _refusal(self, event: EventKind, scope_key: str, now_us: int, exc: LedgerError, **detail: Any) -> None:
        """Record a refusal in its own transaction (the refused write changed nothing)."""
        info = {k: v for k, v in exc.context.items() if k in ("why", "budget", "active", "proposed", "detail")}
        info.update(detail)

        def fn(conn: Connection) -> None:
            self.event(conn, event, at_us=now_us, scope_key=scope_key, reason=exc.reason, detail=info)

        run_write(self.engine, fn)

    def usage(self, conn: Connection, scope_key: str) -> ScopeUsage:
        ((budget, active, proposed),) = query(conn, _USAGE, {"s": scope_key})
        return ScopeUsage(
            scope_key=scope_key,
            max_records=self.default_max_records if budget is None else int(budget),
            active=int(active),
            proposed=int(proposed),
        )

    def check_growth(self, conn: Connection, scope_key: str) -> None:
        """Raise :class:`BudgetExceeded` unless one more record fits in the scope."""
        use = self.usage(conn, scope_key)
        if use.held + 1 <= use.max_records:
            return
        raise BudgetExceeded(
            f"{scope_key} holds {use.held} of {use.max_records} "
            f"({use.active} active, {use.proposed} proposed); nothing was saved. "
            "Forget a pin you no longer need, reject a waiting proposal, edit an existing pin instead, "
            "turn on consolidation to merge duplicates, or raise the budget.",
            scope_key=scope_key,
            budget=use.max_records,
            active=use.active,
            proposed=use.proposed,
        )

    def _prepare(self, conn: Connection, scope_key: str, now_us: int) -> None:
        self._ensure_scope(conn, scope_key, now_us)
        while expire_due(conn, self, now_us, scope_key=scope_key) >= SWEEP_BATCH:
            pass  # more than one batch due: finish, so no write acts on an expired record

    def _close(self, conn: Connection, row: Mapping[Any, Any], successor: str, now_us: int) -> None:
        """Supersede ``row`` exactly at ``now_us``."""
        if row["valid_from"] > now_us:
            raise InvalidInstant(
                f"cannot supersede {row['id']} at an instant before it took effect "
                f"({from_micros(row['valid_from']).isoformat()})"
            )
        done = execute(
            conn,
            "UPDATE memory_records SET status = 'superseded', valid_to = :n, superseded_by = :succ, "
            "updated_at = :n WHERE id = :id AND status = 'active'",
            {"n": now_us, "succ": successor, "id": row["id"]},
        )
        if done != 1:
            raise InvalidTransition(f"record {row['id']} is no longer active")
        self.event(
            conn,
            EventKind.SUPERSEDED,
            at_us=now_us,
            scope_key=row["scope_key"],
            record_id=row["id"],
            detail={"superseded_by": successor},
        )

    def _active_in_group(self, conn: Connection, scope_key: str, group: str | None) -> Mapping[Any, Any] | None:
        if group is None:
            return None
        found = R.fetch_where(
            conn, "scope_key = :s AND conflict_group = :g AND status = 'active'", {"s": scope_key, "g": group}
        )
        return found[0] if found else None

    def _insert(self, conn: Connection, values: dict[str, Any]) -> None:
        execute(conn, _insert_sql(tuple(values)), values)

    # ------------------------------------------------------------------ writes
    def save(
        self,
        body: str,
        *,
        kind: Kind | str | None = None,
        supersedes: str | None = None,
        expires_at: datetime | None = None,
        conflict_group: str | None = None,
        source_session_id: str | None = None,
        now: datetime | None = None,
    ) -> MemoryRecord:
        """Pin ``body`` in the bound account scope; ``supersedes=id`` edits an active record.

        An edit, or a save into a conflict group whose member is active, replaces
        rather than grows, so it works at the budget ceiling. An edit keeps the
        target's kind and conflict group unless new ones are given.

        Raises:
            BodyRejected, BudgetExceeded, RecordNotFound, InvalidTransition,
            InvalidInstant, InvalidArgument.
        """
        at = self.now(now)
        now_us = to_micros(at)
        scope = self.scope_key
        try:
            clean = screen_body(body, max_chars=self.max_body_chars)
        except LedgerError as exc:
            self._refusal(EventKind.SAVE_REFUSED, scope, now_us, exc)
            raise
        exp_us = self._expiry(expires_at, now_us)
        group = _group(conflict_group)
        session = _opt_text(source_session_id, "source_session_id")
        if supersedes is not None and not isinstance(supersedes, str):
            raise InvalidArgument("supersedes must be one record id (a string)")
        new_kind = None if kind is None else _kind(kind)
        new_id = new_record_id()

        def fn(conn: Connection) -> MemoryRecord:
            self._prepare(conn, scope, now_us)
            replaced: list[Mapping[Any, Any]] = []
            final_kind, final_group = new_kind or Kind.FACT, group
            if supersedes is not None:
                target = self._require_row(conn, supersedes)
                if target["scope_key"] != scope:
                    raise ScopeError(f"record {supersedes} belongs to another scope")
                if target["status"] != Status.ACTIVE:
                    raise InvalidTransition(
                        f"record {supersedes} is {target['status']}, not active: only an active record can be edited"
                        + (f" (its successor is {target['superseded_by']})" if target["superseded_by"] else "")
                    )
                replaced.append(target)
                final_kind = new_kind or Kind(target["kind"])
                final_group = group if group is not None else target["conflict_group"]
            member = self._active_in_group(conn, scope, final_group)
            if member is not None and all(member["id"] != r["id"] for r in replaced):
                replaced.append(member)
            if not replaced:
                self.check_growth(conn, scope)
            return self._write_record(
                conn,
                new_id,
                scope,
                final_kind,
                clean,
                Provenance.USER_EXPLICIT,
                Status.ACTIVE,
                now_us,
                replaced=replaced,
                expires_at=exp_us,
                conflict_group=final_group,
                source_session_id=session,
            )

        try:
            record: MemoryRecord = self.write(scope, fn)
        except BudgetExceeded as exc:
            self._refusal(EventKind.SAVE_REFUSED, scope, now_us, exc)
            raise
        return record

    def _write_record(
        self,
        conn: Connection,
        new_id: str,
        scope: str,
        kind: Kind,
        body: str,
        provenance: Provenance,
        status: Status,
        now_us: int,
        *,
        replaced: Sequence[Mapping[Any, Any]] = (),
        supersedes: Sequence[str] | None = None,
        run_id: str | None = None,
        **fields: Any,
    ) -> MemoryRecord:
        """Close ``replaced`` at ``now_us``, insert the new record, log the event. Every write path ends here.

        ``supersedes`` defaults to the replaced ids; a proposal names targets it does not close yet.
        """
        for row in replaced:
            self._close(conn, row, new_id, now_us)
        names = [r["id"] for r in replaced] if supersedes is None else list(supersedes)
        values = self._values(new_id, scope, kind, body, provenance, status, now_us, supersedes=names, **fields)
        self._insert(conn, values)
        event = EventKind.SAVED if status == Status.ACTIVE else EventKind.PROPOSED
        self.event(
            conn,
            event,
            at_us=now_us,
            scope_key=scope,
            record_id=new_id,
            run_id=run_id,
            detail={"supersedes": names, "provenance": provenance.value},
        )
        return R.to_record({**values, "seq": None})

    def _values(
        self,
        record_id: str,
        scope: str,
        kind: Kind,
        body: str,
        provenance: Provenance,
        status: Status,
        now_us: int,
        *,
        supersedes: Sequence[str] = (),
        expires_at: int | None = None,
        conflict_group: str | None = None,
        source_session_id: str | None = None,
        confidence_bps: int | None = None,
        rationale: str | None = None,
    ) -> dict[str, Any]:
        return {
            "id": record_id,
            "scope_key": scope,
            "kind": kind.value,
            "body": body,
            "provenance": provenance.value,
            "status": status.value,
            "source_session_id": source_session_id,
            "supersedes": json.dumps(list(supersedes)) if supersedes else "[]",
            "superseded_by": None,
            "confidence_bps": confidence_bps,
            "rationale": rationale,
            "valid_from": now_us,
            "valid_to": None if status == Status.ACTIVE else now_us,
            "expires_at": expires_at,
            "conflict_group": conflict_group,
            "erased_at": None,
            "created_at": now_us,
            "updated_at": now_us,
        }

    def _expiry(self, expires_at: datetime | None, now_us: int) -> int | None:
        if expires_at is None:
            return None
        exp_us = to_micros(expires_at, name="expires_at")
        if exp_us <= now_us:
            raise InvalidInstant("expires_at must be after now: a record that is already expired cannot be written")
        return exp_us

    def propose(
        self,
        body: str,
        *,
        kind: Kind | str = Kind.FACT,
        confidence_bps: int | None = None,
        rationale: str | None = None,
        source_session_id: str | None = None,
        conflict_group: str | None = None,
        expires_at: datetime | None = None,
        supersedes: Iterable[str] = (),
        now: datetime | None = None,
        provenance: Provenance | str = Provenance.MODEL_PROPOSAL,
        scope_key: str | None = None,
        run_id: str | None = None,
    ) -> MemoryRecord:
        """Store a proposal (status ``proposed``, empty interval) that waits for accept/reject.

        A proposal is growth: over the budget it is refused before it is stored, and
        the refusal is recorded as ``proposal_refused``.

        Raises:
            BodyRejected, BudgetExceeded, InvalidArgument, InvalidInstant.
        """
        at = self.now(now)
        now_us = to_micros(at)
        scope = check_scope(scope_key or self.scope_key)
        try:
            prov = Provenance(provenance)
            if prov == Provenance.USER_EXPLICIT:
                raise InvalidArgument("a proposal comes from a model: provenance cannot be user_explicit")
            clean = screen_body(body, max_chars=self.max_body_chars)
            rec_kind = _kind(kind)
            conf = _confidence(confidence_bps)
            why = _opt_text(rationale, "rationale", limit=self.max_body_chars)
            session = _opt_text(source_session_id, "source_session_id")
            group = _group(conflict_group)
            exp_us = self._expiry(expires_at, now_us)
            targets = [supersedes] if isinstance(supersedes, str) else list(supersedes)
            if any(not isinstance(t, str) for t in targets) or len(set(targets)) != len(targets):
                raise InvalidArgument("supersedes must be a list of distinct record ids")
        except ValueError:
            raise InvalidArgument(f"unknown provenance {provenance!r}") from None
        except LedgerError as exc:
            self._refusal(EventKind.PROPOSAL_REFUSED, scope, now_us, exc, run_id=run_id)
            raise
        new_id = new_record_id()

        def fn(conn: Connection) -> MemoryRecord:
            self._prepare(conn, scope, now_us)
            self.check_growth(conn, scope)
            return self._write_record(
                conn,
                new_id,
                scope,
                rec_kind,
                clean,
                prov,
                Status.PROPOSED,
                now_us,
                supersedes=targets,
                run_id=run_id,
                expires_at=exp_us,
                conflict_group=group,
                source_session_id=session,
                confidence_bps=conf,
                rationale=why,
            )

        try:
            record: MemoryRecord = self.write(scope, fn)
        except BudgetExceeded as exc:
            self._refusal(EventKind.PROPOSAL_REFUSED, scope, now_us, exc, run_id=run_id)
            raise
        return record

    def accept(self, record_id: str, *, now: datetime | None = None, run_id: str | None = None) -> MemoryRecord:
        """Activate a proposal at ``now``, closing what it supersedes and its group's active member.

        Raises:
            RecordNotFound, InvalidTransition (not proposed, or a target is no longer active).
        """
        now_us = to_micros(self.now(now))
        scope = self._scope_of(record_id)

        def fn(conn: Connection) -> MemoryRecord:
            self._prepare(conn, scope, now_us)
            row = self._require_row(conn, record_id)
            self._check_transition(row, Status.ACTIVE, "accept")
            targets = R.fetch_many(conn, json.loads(row["supersedes"]))
            found = {t["id"] for t in targets}
            missing = [t for t in json.loads(row["supersedes"]) if t not in found]
            stale = [t["id"] for t in targets if t["status"] != Status.ACTIVE or t["scope_key"] != scope]
            if missing or stale:
                raise InvalidTransition(
                    f"cannot accept {record_id}: {', '.join(missing + stale)} no longer active; reject it instead"
                )
            member = self._active_in_group(conn, scope, row["conflict_group"])
            replaced = list(targets)
            if member is not None and member["id"] not in found:
                replaced.append(member)
            for target in replaced:
                self._close(conn, target, record_id, now_us)
            conn.execute(
                text(
                    "UPDATE memory_records SET status = 'active', valid_from = :n, valid_to = NULL, "
                    "supersedes = :sup, updated_at = :n WHERE id = :id AND status = 'proposed'"
                ),
                {"n": now_us, "id": record_id, "sup": json.dumps([t["id"] for t in replaced])},
            )
            self.event(conn, EventKind.ACCEPTED, at_us=now_us, scope_key=scope, record_id=record_id, run_id=run_id)
            fresh = R.fetch_one(conn, record_id)
            assert fresh is not None
            return R.to_record(fresh)

        record: MemoryRecord = self.write(scope, fn)
        return record

    def reject(self, record_id: str, *, now: datetime | None = None) -> MemoryRecord:
        """Turn a proposal down; its interval stays empty. Raises RecordNotFound, InvalidTransition."""
        now_us = to_micros(self.now(now))
        scope = self._scope_of(record_id)

        def fn(conn: Connection) -> MemoryRecord:
            self._prepare(conn, scope, now_us)
            row = self._require_row(conn, record_id)
            self._check_transition(row, Status.REJECTED, "reject")
            conn.execute(
                text("UPDATE memory_records SET status = 'rejected', updated_at = :n WHERE id = :id"),
                {"n": now_us, "id": record_id},
            )
            self.event(conn, EventKind.REJECTED, at_us=now_us, scope_key=scope, record_id=record_id)
            fresh = R.fetch_one(conn, record_id)
            assert fresh is not None
            return R.to_record(fresh)

        record: MemoryRecord = self.write(scope, fn)
        return record

    def delete(self, record_id: str, *, now: datetime | None = None) -> MemoryRecord:
        """Forget a record: a tombstone at ``now`` that erases its body and its whole revision chain.

        The body is gone from the rows, the FTS index, free pages and the WAL
        (SQLite: ``secure_delete``, FTS optimize, a truncating checkpoint).

        Raises:
            RecordNotFound; InvalidTransition on a superseded record (naming its
            successor) or one already forgotten.
        """
        now_us = to_micros(self.now(now))
        scope = self._scope_of(record_id)

        def fn(conn: Connection) -> MemoryRecord:
            self._prepare(conn, scope, now_us)
            row = self._require_row(conn, record_id)
            if row["status"] == Status.SUPERSEDED:
                raise InvalidTransition(
                    f"{record_id} was superseded by {row['superseded_by']}; forget {row['superseded_by']} instead "
                    "(forgetting the head erases the whole chain)"
                )
            self._check_transition(row, Status.DELETED, "forget")
            end_us = row["valid_to"]
            if row["status"] == Status.ACTIVE:
                if row["valid_from"] > now_us:
                    raise InvalidInstant("cannot forget a record at an instant before it took effect")
                end_us = now_us
            conn.execute(
                text("UPDATE memory_records SET status = 'deleted', valid_to = :end, updated_at = :n WHERE id = :id"),
                {"end": end_us, "n": now_us, "id": record_id},
            )
            self.event(conn, EventKind.DELETED, at_us=now_us, scope_key=scope, record_id=record_id)
            erased_ids, bodies = erase_chain(conn, row, now_us)
            for erased in erased_ids:
                self.event(conn, EventKind.ERASED, at_us=now_us, scope_key=scope, record_id=erased)
            for hook in self._erase_hooks:
                hook(conn, erased_ids, bodies)
            fresh = R.fetch_one(conn, record_id)
            assert fresh is not None
            return R.to_record(fresh)

        record: MemoryRecord = self.write(scope, fn)
        if self._sqlite:
            scrub_files(self.engine)
        return record

    def _check_transition(self, row: Mapping[Any, Any], to: Status, verb: str) -> None:
        current = Status(row["status"])
        if to not in TRANSITIONS[current]:
            raise InvalidTransition(f"cannot {verb} {row['id']}: it is {current.value}")

    def _scope_of(self, record_id: object) -> str:
        """The bound scope, when ``record_id`` is one of its records; another account's id is not found."""
        with self.engine.connect() as conn:
            row = self._require_row(conn, record_id)
        if row["scope_key"] != self.scope_key:
            raise RecordNotFound(f"no memory record {record_id!r} in {self.scope_key}", record_id=str(record_id))
        return self.scope_key

    def set_budget(self, scope_key: str, max_records: int, *, now: datetime | None = None) -> ScopeUsage:
        """Set a scope's ``max_records``. Never evicts: a budget below what is held refuses growth only.

        Raises:
            ScopeError, InvalidArgument (not an integer from 0 to 1,000,000).
        """
        scope = check_scope(scope_key)
        if isinstance(max_records, bool) or not isinstance(max_records, int) or not 0 <= max_records <= 1_000_000:
            raise InvalidArgument("max_records must be an integer from 0 to 1000000")
        now_us = to_micros(self.now(now))

        def fn(conn: Connection) -> ScopeUsage:
            self._ensure_scope(conn, scope, now_us)
            conn.execute(
                text("UPDATE scope_settings SET max_records = :m, updated_at = :n WHERE scope_key = :s"),
                {"m": max_records, "n": now_us, "s": scope},
            )
            self.event(conn, EventKind.BUDGET_SET, at_us=now_us, scope_key=scope, detail={"max_records": max_records})
            return self.usage(conn, scope)

        result: ScopeUsage = self.write(scope, fn)
        return result

    def budget(self, scope_key: str) -> ScopeUsage:
        scope = check_scope(scope_key)
        with self.engine.connect() as conn:
            return self.usage(conn, scope)

    def sweep_expired(
        self, now: datetime, *, batch_size: int = SWEEP_BATCH, progress: Callable[[int], None] | None = None
    ) -> int:
        """Expire every active or proposed record with ``expires_at <= now``; idempotent.

        Active records close at ``expires_at`` (not at ``now``); proposals keep their
        empty interval. Runs one set-based statement per batch. Returns how many expired.

        Raises:
            InvalidInstant, InvalidArgument (``batch_size`` not a positive integer).
        """
        now_us = to_micros(require_aware(now, name="now"))
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            # 0 would loop for ever; a negative LIMIT means "no limit" on SQLite and an error on PostgreSQL
            raise InvalidArgument("batch_size must be a positive integer")
        started_us = to_micros(self.now())
        total = 0
        while True:
            done: int = run_write(self.engine, lambda conn: expire_due(conn, self, now_us, limit=batch_size))
            total += done
            if progress is not None and done:
                progress(done)
            if done < batch_size:
                break
        finished_us = max(started_us, to_micros(self.now()))
        # The run is recorded in the database (not only in a process's metrics), so every serving
        # process can export when the sweep last ran and a stopped cron can be alerted on.
        run_write(
            self.engine,
            lambda conn: record_sweep(
                conn, started_us=started_us, finished_us=finished_us, now_us=now_us, expired=total
            ),
        )
        return total

    def last_sweep(self) -> SweepStatus | None:
        """The expiry sweep's last recorded run (any process, any host), or None if none has finished yet."""
        with self.engine.connect() as conn:
            return last_sweep(conn)

    def handle_slash(self, text_: str, *, now: datetime | None = None) -> Any:
        """Handle exactly ``/pin <text>``, ``/pins`` and ``/unpin <id>``; see :mod:`ledger.slash`."""
        from ledger.slash import handle_slash

        return handle_slash(self, text_, now=now)

    # ------------------------------------------------------------------ in-transaction API
    # Used by callers that must make several ledger changes atomically with their own
    # bookkeeping (consolidation applies a batch and settles its run in one transaction).
    # ``conn`` must come from :meth:`write` for the same scope.

    def prepare_in(self, conn: Connection, scope_key: str, now_us: int) -> None:
        """Create the scope's settings row if missing and expire what is due in it."""
        self._prepare(conn, scope_key, now_us)

    def rows_in(self, conn: Connection, record_ids: Sequence[str]) -> dict[str, MemoryRecord]:
        """The named records as they are inside ``conn``'s transaction, by id (missing ids left out)."""
        return {row["id"]: R.to_record(row) for row in R.fetch_many(conn, list(record_ids))}

    def active_in(self, conn: Connection, scope_key: str, now_us: int) -> RecordList:
        rows = R.fetch_where(
            conn,
            "scope_key = :s AND valid_to IS NULL AND valid_from <= :n AND (expires_at IS NULL OR expires_at > :n)",
            {"s": scope_key, "n": now_us},
        )
        return [R.to_record(r) for r in rows]

    def supersede_in(
        self,
        conn: Connection,
        *,
        scope_key: str,
        target_ids: Sequence[str],
        body: str,
        kind: Kind,
        provenance: Provenance,
        now_us: int,
        propose: bool = False,
        expires_at_us: int | None = None,
        conflict_group: str | None = None,
        confidence_bps: int | None = None,
        rationale: str | None = None,
        run_id: str | None = None,
    ) -> MemoryRecord:
        """One new record that supersedes ``target_ids`` (each active in ``scope_key``), at ``now_us``.

        ``propose=False``: the targets close now and the record is active — a
        replacement, not growth, so no budget check. ``propose=True``: a proposal that
        names the targets it will close when accepted — growth, so the budget applies.

        Raises:
            InvalidTransition: a target is no longer active (nothing written).
            BodyRejected: the body fails screening.
            BudgetExceeded: a proposal does not fit (nothing stored; the caller records the refusal).
        """
        clean = screen_body(body, max_chars=self.max_body_chars)
        rows = {r["id"]: r for r in R.fetch_many(conn, list(target_ids))}
        for tid in target_ids:
            row = rows.get(tid)
            if row is None or row["scope_key"] != scope_key or row["status"] != Status.ACTIVE:
                raise InvalidTransition(f"record {tid} is no longer active in {scope_key}")
        replaced = [rows[t] for t in target_ids]
        if propose:
            self.check_growth(conn, scope_key)
            replaced = []
        else:
            member = self._active_in_group(conn, scope_key, conflict_group)
            if member is not None and member["id"] not in rows:
                replaced.append(member)
        return self._write_record(
            conn,
            new_record_id(),
            scope_key,
            kind,
            clean,
            provenance,
            Status.PROPOSED if propose else Status.ACTIVE,
            now_us,
            replaced=replaced,
            supersedes=list(target_ids) if propose else None,
            run_id=run_id,
            expires_at=expires_at_us if expires_at_us is None or expires_at_us > now_us else None,
            conflict_group=conflict_group,
            confidence_bps=_confidence(confidence_bps),
            rationale=None if rationale is None else str(rationale)[: self.max_body_chars],
        )
