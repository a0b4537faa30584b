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

from ledger import audit as A
from ledger import rows as R
from ledger.errors import InvalidArgument, RecordNotFound, ScopeError
from ledger.instants import Clock, from_micros, require_aware, to_micros
from ledger.models import LedgerEvent, MemoryRecord, Status
from ledger.packet import Packet, build_packet, empty_packet
from ledger.search import search_active

SCOPE_RE = re.compile(r"^[a-z][a-z0-9_-]{0,31}:[A-Za-z0-9][A-Za-z0-9._@/+-]{0,199}$")

# Every record the packet decides about: all but the forgotten (their bodies are gone).
_PACKET_WHERE = "scope_key = :s AND status <> 'deleted' AND erased_at IS NULL"

RecordList = list[MemoryRecord]  # aliases: inside the class, ``list`` names the method
EventList = list[LedgerEvent]


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
        row = R.fetch_one(conn, record_id)
        if row is None:
            raise RecordNotFound(f"no memory record {record_id!r}", record_id=record_id)
        return row

    @contextmanager
    def _reading(self) -> Iterator[Connection]:
        """One read transaction: one snapshot on SQLite, REPEATABLE READ on PostgreSQL."""
        with self.engine.connect() as conn:
            if conn.dialect.name != "sqlite":
                conn = conn.execution_options(isolation_level="REPEATABLE READ")
            with conn.begin():
                yield conn

    def get(self, record_id: str) -> MemoryRecord:
        """One record in any status. Raises RecordNotFound."""
        with self._reading() as conn:
            return self._as_of_now(R.to_record(self._require_row(conn, record_id)))

    def _as_of_now(self, record: MemoryRecord) -> MemoryRecord:
        """An active record past its expiry reads as expired (closed at ``expires_at``) before the sweep runs."""
        if record.status != Status.ACTIVE or record.expires_at is None or record.expires_at > self.now():
            return record
        return replace(record, status=Status.EXPIRED, valid_to=record.expires_at)

    def history(self, record_id: str) -> RecordList:
        """The whole revision chain of ``record_id`` (every source of every merge), oldest first."""
        with self._reading() as conn:
            row = self._require_row(conn, record_id)
            head = R.chain_head(conn, row)
            chain = [*R.ancestors(conn, head), head]
        chain.sort(key=lambda r: (r["valid_from"], r["created_at"], r["seq"]))
        return [self._as_of_now(R.to_record(r)) for r in chain]

    def list(self, scope_key: str, *, now: datetime | None = None) -> RecordList:
        """The active set of a scope as of ``now``: never a record past its ``expires_at``."""
        scope = check_scope(scope_key)
        now_us = to_micros(self.now(now))
        with self._reading() as conn:
            rows = R.fetch_where(
                conn,
                "scope_key = :s AND valid_to IS NULL AND valid_from <= :n AND (expires_at IS NULL OR expires_at > :n)",
                {"s": scope, "n": now_us},
            )
        return [R.to_record(r) for r in rows]

    def list_as_of(self, scope_key: str, as_of: datetime) -> RecordList:
        """Exactly the records whose half-open interval ``[valid_from, min(valid_to, expires_at))`` holds ``as_of``.

        Forgotten records are left out: a past view must not bring back what the user erased.
        """
        scope = check_scope(scope_key)
        t = to_micros(as_of, name="as_of")
        where = (
            "scope_key = :s AND valid_from <= :t AND (valid_to IS NULL OR valid_to > :t) "
            "AND (expires_at IS NULL OR expires_at > :t) AND erased_at IS NULL AND status <> 'deleted'"
        )
        with self._reading() as conn:
            rows = R.fetch_where(conn, where, {"s": scope, "t": t})
        return [R.to_record(r) for r in rows]

    def records(self, scope_key: str) -> RecordList:
        """Every record of a scope in any status, oldest first (erased bodies read as ``None``)."""
        scope = check_scope(scope_key)
        with self._reading() as conn:
            rows = R.fetch_where(conn, "scope_key = :s", {"s": scope}, order="created_at, seq")
        return [R.to_record(r) for r in rows]

    def proposals(self, scope_key: str, *, now: datetime | None = None) -> RecordList:
        """Proposals waiting for a decision (not past their expiry), oldest first."""
        scope = check_scope(scope_key)
        now_us = to_micros(self.now(now))
        with self._reading() as conn:
            rows = R.fetch_where(
                conn,
                "scope_key = :s AND status = 'proposed' AND (expires_at IS NULL OR expires_at > :n)",
                {"s": scope, "n": now_us},
            )
        return [R.to_record(r) for r in rows]

    def search(self, scope_key: str, query: str, *, limit: int = 20, now: datetime | None = None) -> RecordList:
        """Full-text search over active bodies, best match first. Any text is a valid query."""
        scope = check_scope(scope_key)
        if not isinstance(query, str):
            raise InvalidArgument("query must be a string")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 200:
            raise InvalidArgument("limit must be an integer from 1 to 200")
        now_us = to_micros(self.now(now))
        with self._reading() as conn:
            rows = search_active(conn, scope, query, limit=limit, now_us=now_us)
        return [R.to_record(r) for r in rows]

    def build_packet(
        self,
        scope_key: str,
        *,
        now: datetime | None = None,
        max_chars: int | None = None,
        session_id: str | None = None,
    ) -> Packet:
        """What a chat turn injects: see :mod:`ledger.packet` (order, citations, exclusion codes).

        With ``session_id`` the packet audit of that session is replaced in the same
        transaction that read the records. With the scope's injection switch off the
        packet is empty and no audit is written.

        Raises:
            ScopeError, InvalidInstant, InvalidArgument (``max_chars`` not a non-negative
            integer, a malformed session id).
        """
        scope = check_scope(scope_key)
        if max_chars is not None and (isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 0):
            raise InvalidArgument("max_chars must be a non-negative integer (or omitted for the default)")
        session = None if session_id is None else A.check_session_id(session_id)
        at = self.now(now)
        if session is None:
            if not self.injection(scope):
                return empty_packet(now=at, max_chars=max_chars)
            return build_packet(self.packet_candidates(scope), now=at, max_chars=max_chars)

        def fn(conn: Connection) -> Packet:
            if not A.injection_enabled(conn, scope):
                return empty_packet(now=at, max_chars=max_chars, session_id=session)
            rows = R.fetch_where(conn, _PACKET_WHERE, {"s": scope})
            packet = build_packet([R.to_record(r) for r in rows], now=at, max_chars=max_chars)
            A.write_audit(conn, scope, session, packet)
            return replace(packet, session_id=session)

        result: Packet = self.write(scope, fn)  # type: ignore[attr-defined]
        return result

    def packet_audit(self, session_id: str, *, scope_key: str | None = None) -> A.PacketAudit | None:
        """What the chat ``session_id`` received last (SPEC 3.7), or None when no packet was built for it."""
        scope = check_scope(scope_key or self.scope_key)
        session = A.check_session_id(session_id)
        with self._reading() as conn:
            return A.read_audit(conn, scope, session)

    def injection(self, scope_key: str) -> bool:
        """Whether the scope's packets carry pins (the injection switch; on by default)."""
        scope = check_scope(scope_key)
        with self._reading() as conn:
            return A.injection_enabled(conn, scope)

    def packet_candidates(self, scope_key: str) -> RecordList:
        """Every record of a scope the packet decides about: all but the forgotten (their bodies are gone)."""
        scope = check_scope(scope_key)
        with self._reading() as conn:
            rows = R.fetch_where(conn, _PACKET_WHERE, {"s": scope})
        return [R.to_record(r) for r in rows]

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
