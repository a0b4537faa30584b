"""Reads of the ledger: get, history, list, as-of, records, proposals, search, packet, events.

A mixin of :class:`ledger.core.Ledger`; it needs only an engine, a clock and the
bound scope. No read takes a lock or reads a clock of its own. Each read runs in
one read transaction (SQLite: one snapshot; PostgreSQL: REPEATABLE READ), so a read
of several statements (history) sees one snapshot even while writers commit.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, text

from ledger import audit
from ledger import rows as rowsmod
from ledger.db import engine_lock, query, translated
from ledger.errors import InvalidArgument, RecordNotFound, ScopeError
from ledger.instants import Clock, from_micros, require_aware, to_micros
from ledger.models import LedgerEvent, MemoryRecord, Status
from ledger.packet import Packet, build_packet, empty_packet
from ledger.search import search_active
from ledger.tx import Reader, Transaction

SCOPE_RE = re.compile(r"^[a-z][a-z0-9_-]{0,31}:[A-Za-z0-9][A-Za-z0-9._@/+-]{0,199}$")

RecordList = list[MemoryRecord]  # aliases: inside the class, ``list`` names the method
EventList = list[LedgerEvent]


# Every record the packet decides about: all but the forgotten (their bodies are gone).
_PACKET_WHERE = "scope_key = :s AND status <> 'deleted' AND erased_at IS NULL"


def _as_of(record: MemoryRecord, at: datetime) -> MemoryRecord:
    """An active record past its expiry reads as expired (closed at ``expires_at``) before the sweep runs."""
    if record.status != Status.ACTIVE or record.expires_at is None or record.expires_at > at:
        return record
    return replace(record, status=Status.EXPIRED, valid_to=record.expires_at)


def check_scope(scope_key: object) -> str:
    if not isinstance(scope_key, str) or not SCOPE_RE.match(scope_key):
        raise ScopeError(f"invalid scope key {scope_key!r}: expected 'kind:name', e.g. 'account:local'")
    return scope_key


class LedgerReads:
    engine: Engine
    clock: Clock
    scope_key: str

    def now(self, now: datetime | None = None, *, name: str = "now") -> datetime:
        return require_aware(self.clock() if now is None else now, name=name)

    def _require_row(self, conn: Connection, record_id: object) -> Mapping[str, Any]:
        if not isinstance(record_id, str) or not record_id or "\x00" in record_id:
            raise InvalidArgument("a record id must be a non-empty string without NUL characters")
        row = rowsmod.fetch_one(conn, record_id)
        if row is None:
            raise RecordNotFound(f"no memory record {record_id!r}", record_id=record_id)
        return row

    @contextmanager
    def _reading(self) -> Iterator[Connection]:
        """One read transaction: one snapshot on SQLite, REPEATABLE READ on PostgreSQL."""
        with translated(self.engine), engine_lock(self.engine), self.engine.connect() as conn:
            if conn.dialect.name != "sqlite":
                conn = conn.execution_options(isolation_level="REPEATABLE READ")
            with conn.begin():
                yield conn

    @contextmanager
    def reading(self) -> Iterator[Reader]:
        """One read transaction (one snapshot) for SQLAlchemy Core statements: ``r.execute(select(...))``."""
        with self._reading() as conn:
            yield Reader(conn)

    def _read_us(self, conn: Connection, scope_key: str, now: datetime | None) -> int:
        """A read's instant: ``now`` as given, else the clock, never before the scope's latest write.

        Writes are stamped after the scope's latest instant even when the clock lags it (a
        frozen test clock, another node's skewed clock), so a read that omits ``now`` sees
        every write that committed before it.
        """
        if now is not None:
            return to_micros(now, name="now")
        clock_us = to_micros(self.now(), name="clock")
        latest = query(conn, "SELECT latest_at FROM scope_settings WHERE scope_key = :s", {"s": scope_key})
        return max(clock_us, latest[0][0] or clock_us) if latest else clock_us

    def get(self, record_id: str, *, now: datetime | None = None) -> MemoryRecord:
        """One record in any status, as of ``now`` (default: the clock). Raises RecordNotFound."""
        if now is not None:
            require_aware(now, name="now")
        with self._reading() as conn:
            row = self._require_row(conn, record_id)
            at = from_micros(self._read_us(conn, row["scope_key"], now))
            return _as_of(rowsmod.to_record(row), at)

    def history(self, record_id: str, *, now: datetime | None = None) -> RecordList:
        """The whole revision chain of ``record_id`` (every source of every merge), oldest first, as of ``now``."""
        if now is not None:
            require_aware(now, name="now")
        with self._reading() as conn:
            row = self._require_row(conn, record_id)
            at = from_micros(self._read_us(conn, row["scope_key"], now))
            head = rowsmod.chain_head(conn, row)
            chain = [*rowsmod.ancestors(conn, head), head]
        chain.sort(key=lambda r: (r["valid_from"], r["created_at"], r["seq"]))
        return [_as_of(rowsmod.to_record(r), at) for r in chain]

    def list(self, scope_key: str, *, now: datetime | None = None) -> RecordList:
        """The active set of a scope as of ``now``: never a record past its ``expires_at``."""
        scope = check_scope(scope_key)
        if now is not None:
            require_aware(now, name="now")
        with self._reading() as conn:
            now_us = self._read_us(conn, scope, now)
            rows = rowsmod.fetch_where(
                conn,
                "scope_key = :s AND valid_to IS NULL AND valid_from <= :n AND (expires_at IS NULL OR expires_at > :n)",
                {"s": scope, "n": now_us},
            )
        return [rowsmod.to_record(r) for r in rows]

    def list_as_of(self, scope_key: str, as_of: datetime) -> RecordList:
        """Exactly the records whose half-open interval ``[valid_from, min(valid_to, expires_at))`` holds ``as_of``.

        A forgotten record (and every erased predecessor) still answers for the instants its
        interval held, with its body withheld (``body`` None, ``erased`` True): the scope did
        hold a pin then; history keeps the shape, never the words.
        """
        scope = check_scope(scope_key)
        t = to_micros(as_of, name="as_of")
        where = (
            "scope_key = :s AND valid_from <= :t AND (valid_to IS NULL OR valid_to > :t) "
            "AND (expires_at IS NULL OR expires_at > :t)"
        )
        with self._reading() as conn:
            rows = rowsmod.fetch_where(conn, where, {"s": scope, "t": t})
        return [rowsmod.to_record(r) for r in rows]

    def records(self, scope_key: str) -> RecordList:
        """Every record of a scope in any status, oldest first (erased bodies read as ``None``)."""
        scope = check_scope(scope_key)
        with self._reading() as conn:
            rows = rowsmod.fetch_where(conn, "scope_key = :s", {"s": scope}, order="created_at, seq")
        return [rowsmod.to_record(r) for r in rows]

    def proposals(self, scope_key: str, *, now: datetime | None = None) -> RecordList:
        """Proposals waiting for a decision (not past their expiry), oldest first."""
        scope = check_scope(scope_key)
        if now is not None:
            require_aware(now, name="now")
        with self._reading() as conn:
            now_us = self._read_us(conn, scope, now)
            rows = rowsmod.fetch_where(
                conn,
                "scope_key = :s AND status = 'proposed' AND (expires_at IS NULL OR expires_at > :n)",
                {"s": scope, "n": now_us},
            )
        return [rowsmod.to_record(r) for r in rows]

    def search(self, scope_key: str, query: str, *, limit: int = 20, now: datetime | None = None) -> RecordList:
        """Full-text search over active bodies, best match first. Any text is a valid query."""
        scope = check_scope(scope_key)
        if not isinstance(query, str):
            raise InvalidArgument("query must be a string")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 200:
            raise InvalidArgument("limit must be an integer from 1 to 200")
        if now is not None:
            require_aware(now, name="now")
        with self._reading() as conn:
            now_us = self._read_us(conn, scope, now)
            rows = search_active(conn, scope, query, limit=limit, now_us=now_us)
        return [rowsmod.to_record(r) for r in rows]

    def build_packet(
        self,
        scope_key: str,
        *,
        now: datetime | None = None,
        max_chars: int | None = None,
        session_id: str | None = None,
    ) -> Packet:
        """What a chat turn injects: see :mod:`ledger.packet` (order, citations, exclusion codes).

        With ``session_id`` the packet is built in a write transaction that also replaces
        that session's packet audit (so the audit is exactly what was built). With the
        scope's injection switch off the packet is empty and no audit is written.

        Raises:
            ScopeError, InvalidInstant, InvalidArgument (``max_chars`` not a non-negative
            integer, a malformed session id).
        """
        if max_chars is not None and (isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 0):
            raise InvalidArgument("max_chars must be a non-negative integer (or omitted for the default)")
        scope = check_scope(scope_key)
        if now is not None:
            require_aware(now, name="now")
        session = None if session_id is None else audit.check_session_id(session_id)
        if session is None:
            with self._reading() as conn:
                at = from_micros(self._read_us(conn, scope, now))
                if not audit.injection_enabled(conn, scope):
                    return empty_packet(now=at, max_chars=max_chars)
                rows = rowsmod.fetch_where(conn, _PACKET_WHERE, {"s": scope})
            return build_packet([rowsmod.to_record(r) for r in rows], now=at, max_chars=max_chars)

        def fn(tx: Transaction) -> Packet:
            if not audit.injection_enabled(tx.conn, scope):
                return empty_packet(now=tx.now, max_chars=max_chars, session_id=session)
            rows = rowsmod.fetch_where(tx.conn, _PACKET_WHERE, {"s": scope})
            packet = build_packet([rowsmod.to_record(r) for r in rows], now=tx.now, max_chars=max_chars)
            audit.write_audit(tx.conn, scope, session, packet)
            return replace(packet, session_id=session)

        result: Packet = self.run(scope, fn, now=now)  # type: ignore[attr-defined]
        return result

    def packet_audit(self, session_id: str, *, scope_key: str | None = None) -> audit.PacketAudit | None:
        """What the chat ``session_id`` received last (SPEC 3.7), or None when no packet was built for it."""
        scope = check_scope(scope_key or self.scope_key)
        session = audit.check_session_id(session_id)
        with self._reading() as conn:
            return audit.read_audit(conn, scope, session)

    def injection(self, scope_key: str) -> bool:
        """Whether the scope's packets carry pins (the injection switch; on by default)."""
        scope = check_scope(scope_key)
        with self._reading() as conn:
            return audit.injection_enabled(conn, scope)

    def events(self, scope_key: str | None = None, *, record_id: str | None = None) -> EventList:
        """The event log, oldest first, filtered by scope and/or record."""
        clauses, params = [], {}
        if scope_key is not None:
            clauses.append("scope_key = :s")
            params["s"] = scope_key
        if record_id is not None:
            clauses.append("record_id = :r")
            params["r"] = record_id
        where = " AND ".join(clauses) or "1 = 1"
        with self._reading() as conn:
            rows = conn.execute(text(f"SELECT * FROM ledger_events WHERE {where} ORDER BY seq"), params).mappings()
            return [
                LedgerEvent(
                    seq=r["seq"],
                    at=from_micros(r["at"]),
                    scope_key=r["scope_key"],
                    event=r["event"],
                    record_id=r["record_id"],
                    reason=r["reason"],
                    run_id=r["run_id"],
                    detail=json.loads(r["detail"]),
                )
                for r in rows
            ]
