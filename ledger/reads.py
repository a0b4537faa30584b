"""Reads of the ledger: get, history, list, as-of, records, proposals, search, the packet's records, events.

A mixin of :class:`ledger.core.Ledger`; it needs only an engine, a clock and the
bound scope. No read takes a lock or reads a clock of its own. Each read runs in
one read transaction (SQLite: one snapshot; PostgreSQL: REPEATABLE READ), so a read
of several statements (history) sees one snapshot even while writers commit.
The packet is built by :meth:`ledger.core.Ledger.build_packet`, beside the writes: with a
session id it writes the session's packet audit.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Unpack

from sqlalchemy import Connection, Engine, bindparam, or_, select

from ledger import audit
from ledger import record_rows as rowsmod
from ledger.errors import InvalidArgument, RecordNotFound, ScopeError
from ledger.instants import Clock, from_micros, require_aware, to_micros
from ledger.models import LedgerEvent, MemoryRecord, Status
from ledger.options import PageOptions
from ledger.paging import POSITION, Filters, Page, check_limit, decode_cursor, page_of, paged, position
from ledger.reader import Reader
from ledger.schema import EVENTS, RECORDS, SCOPES
from ledger.search import search_active
from ledger.statements import ACTIVE_AT, ACTIVE_NOW
from ledger.store import Prepared, Store, lit, param

SCOPE_RE = re.compile(r"^[a-z][a-z0-9_-]{0,31}:[A-Za-z0-9][A-Za-z0-9._@/+-]{0,199}$")

RecordList = list[MemoryRecord]  # aliases: inside the class, ``list`` names the method
EventList = list[LedgerEvent]


def _may_expire(record: MemoryRecord) -> bool:
    return record.status == Status.ACTIVE and record.expires_at is not None


M = RECORDS.c
_S = param("s")
_T = param("t")
_IN_ORDER = (M.valid_from, M.seq)
_LATEST = Prepared(select(SCOPES.c.latest_at).where(SCOPES.c.scope_key == _S))
# Exactly the records whose half-open interval [valid_from, min(valid_to, expires_at)) holds t.
_AS_OF = Prepared(
    rowsmod.SELECT_RECORDS.where(
        M.scope_key == _S,
        M.valid_from <= _T,
        or_(M.valid_to.is_(None), M.valid_to > _T),
        or_(M.expires_at.is_(None), M.expires_at > _T),
    ).order_by(*_IN_ORDER)
)
_ALL = Prepared(rowsmod.SELECT_RECORDS.where(M.scope_key == _S).order_by(M.created_at, M.seq))
# Proposals waiting at ``n``: not past their expiry.
_PROPOSED_AT = (
    M.scope_key == _S,
    M.valid_to == M.valid_from,  # true of every proposal: SQLite's index of them holds exactly such records
    M.status == lit(Status.PROPOSED.value),
    or_(M.expires_at.is_(None), M.expires_at > bindparam("n")),
)
_PROPOSALS = Prepared(rowsmod.SELECT_RECORDS.where(*_PROPOSED_AT).order_by(*_IN_ORDER))
# Every record the packet decides about: all but the forgotten (their bodies are gone).
_PACKET = Prepared(
    rowsmod.SELECT_RECORDS.where(
        M.scope_key == _S, M.status != lit(Status.DELETED.value), M.erased_at.is_(None)
    ).order_by(*_IN_ORDER)
)


def _as_of(record: MemoryRecord, at: datetime) -> MemoryRecord:
    """An active record past its expiry reads as expired (closed at ``expires_at``) before the sweep runs."""
    if record.status != Status.ACTIVE or record.expires_at is None or record.expires_at > at:
        return record
    return record.model_copy(update={"status": Status.EXPIRED, "valid_to": record.expires_at})


def packet_records(conn: Connection, scope_key: str) -> RecordList | None:
    """The records a packet of the scope is built from (:func:`ledger.packet.build_packet`), read on ``conn``;
    None when the scope's injection switch is off (its packet is empty)."""
    if not audit.injection_enabled(conn, scope_key):
        return None
    return rowsmod.fetch_records(conn, _PACKET, {"s": scope_key})


def check_scope(scope_key: object) -> str:
    if not isinstance(scope_key, str) or not SCOPE_RE.match(scope_key):
        raise ScopeError(f"invalid scope key {scope_key!r}: expected 'kind:name', e.g. 'account:local'")
    return scope_key


class LedgerReads:
    engine: Engine
    store: Store
    clock: Clock
    scope_key: str

    def now(self, now: datetime | None = None, *, name: str = "now") -> datetime:
        return require_aware(self.clock() if now is None else now, name=name)

    def _require_row(self, conn: Connection, record_id: object) -> Mapping[str, Any]:
        """The bound account's record ``record_id``; another account's id is not found, as an unknown one."""
        if not isinstance(record_id, str) or not record_id or "\x00" in record_id:
            raise InvalidArgument("a record id must be a non-empty string without NUL characters")
        row = rowsmod.fetch_one(conn, record_id)
        if row is None or row["scope_key"] != self.scope_key:
            raise RecordNotFound.for_id(record_id)
        return row

    @contextmanager
    def _reading(self) -> Iterator[Connection]:
        """One read transaction: one snapshot on SQLite, REPEATABLE READ on PostgreSQL."""
        with self.store.read() as conn:
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
        latest = self.store.rows(conn, _LATEST, {"s": scope_key})
        return max(clock_us, latest[0][0] or clock_us) if latest else clock_us

    def search_index_problem(self, *, thorough: bool = False) -> str | None:
        """What is wrong with the full-text index, or None when it is sound (see :func:`ledger.check_search_index`)."""
        return self.store.search_index_problem(thorough=thorough)

    def get(self, record_id: str, *, now: datetime | None = None) -> MemoryRecord:
        """One record of the bound account in any status, as of ``now`` (default: the clock).

        Raises:
            RecordNotFound: no such id in the bound account (another account's id reads as unknown).
        """
        if now is not None:
            require_aware(now, name="now")
        with self.store.single() as conn:  # one statement: its own snapshot
            record = rowsmod.to_record(self._require_row(conn, record_id))
        if not _may_expire(record):
            return record  # the instant cannot change how it reads: no need to read it
        with self._reading() as conn:  # the record and the instant it is read at, in one snapshot
            record = rowsmod.to_record(self._require_row(conn, record_id))
            return _as_of(record, from_micros(self._read_us(conn, record.scope_key, now)))

    def history(self, record_id: str, *, now: datetime | None = None) -> RecordList:
        """The whole revision chain of ``record_id`` (every source of every merge), oldest first, as of ``now``.

        Raises:
            RecordNotFound: no such id in the bound account. The refusal names only ``record_id``,
            never another record of the chain, so it says nothing of another account's edits.
        """
        if now is not None:
            require_aware(now, name="now")
        with self._reading() as conn:
            row = self._require_row(conn, record_id)
            head = rowsmod.chain_head(conn, row)
            chain = [*rowsmod.ancestors(conn, head), head]
            if any(r["scope_key"] != self.scope_key for r in chain):  # a chain never crosses scopes; if it did
                raise RecordNotFound.for_id(record_id)
            chain.sort(key=lambda r: (r["valid_from"], r["created_at"], r["seq"]))
            records = [rowsmod.to_record(r) for r in chain]
            if not any(_may_expire(r) for r in records):
                return records
            at = from_micros(self._read_us(conn, row["scope_key"], now))
        return [_as_of(r, at) for r in records]

    def list(self, scope_key: str | None = None, *, now: datetime | None = None) -> RecordList:
        """The active set of a scope (default: the bound one) as of ``now``: never a record past its ``expires_at``."""
        scope = check_scope(self.scope_key if scope_key is None else scope_key)
        if now is not None:
            require_aware(now, name="now")
        with self._reading() as conn:
            now_us = self._read_us(conn, scope, now)
            return rowsmod.fetch_active(conn, ACTIVE_NOW, scope, {"s": scope, "n": now_us})

    def list_page(self, scope_key: str | None = None, **options: Unpack[PageOptions]) -> Page:
        """One page of :meth:`list`, oldest first, filtered (:class:`ledger.options.PageOptions`); see
        :mod:`ledger.paging` for what a cursor guarantees while others write.

        Raises:
            ScopeError, InvalidArgument (a bad limit, filter or cursor, or a cursor of another scope).
        """
        return self._page("active", scope_key, options, ACTIVE_AT)

    def proposals_page(self, scope_key: str | None = None, **options: Unpack[PageOptions]) -> Page:
        """One page of :meth:`proposals`, oldest first, filtered; as :meth:`list_page`."""
        return self._page("proposed", scope_key, options, _PROPOSED_AT)

    def _page(self, listing: str, scope_key: str | None, options: PageOptions, where: tuple[Any, ...]) -> Page:
        filters = Filters.of(options.get("kind"), options.get("provenance"), options.get("conflict_group"))
        scope = check_scope(self.scope_key if scope_key is None else scope_key)
        size = check_limit(options.get("limit"))
        cursor = options.get("cursor")
        last_id = None if cursor is None else decode_cursor(cursor, listing, scope, filters)
        now = options.get("now")
        if now is not None:
            require_aware(now, name="now")
        with self._reading() as conn:
            now_us = self._read_us(conn, scope, now)
            after = None
            if last_id is not None:
                after = position(self.store.rows(conn, POSITION, {"cursor_id": last_id, "s": scope}))
            stmt = paged(rowsmod.SELECT_RECORDS.where(*where, *filters.where()), after, size)
            found = self.store.rows(conn, stmt, {"s": scope, "n": now_us})
        return page_of(found, listing, scope, filters, size)

    def list_as_of(self, scope_key: str, as_of: datetime) -> RecordList:
        """Exactly the records whose half-open interval ``[valid_from, min(valid_to, expires_at))`` holds ``as_of``.

        A forgotten record (and every erased predecessor) still answers for the instants its
        interval held, with its body withheld (``body`` None, ``erased`` True): the scope did
        hold a pin then; history keeps the shape, never the words.
        """
        scope = check_scope(scope_key)
        t = to_micros(as_of, name="as_of")
        with self._reading() as conn:
            return rowsmod.fetch_records(conn, _AS_OF, {"s": scope, "t": t})

    def records(self, scope_key: str) -> RecordList:
        """Every record of a scope in any status, oldest first (erased bodies read as ``None``)."""
        scope = check_scope(scope_key)
        with self._reading() as conn:
            return rowsmod.fetch_records(conn, _ALL, {"s": scope})

    def proposals(self, scope_key: str | None = None, *, now: datetime | None = None) -> RecordList:
        """Proposals waiting for a decision (not past their expiry), oldest first (default: the bound scope)."""
        scope = check_scope(self.scope_key if scope_key is None else scope_key)
        if now is not None:
            require_aware(now, name="now")
        with self._reading() as conn:
            now_us = self._read_us(conn, scope, now)
            return rowsmod.fetch_records(conn, _PROPOSALS, {"s": scope, "n": now_us})

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

    def packet_audit(self, session_id: str, *, scope_key: str | None = None) -> audit.PacketAudit | None:
        """What the chat ``session_id`` received last (docs/packet.md), or None when no packet was built for it."""
        scope = check_scope(self.scope_key if scope_key is None else scope_key)
        session = audit.check_session_id(session_id)
        with self._reading() as conn:
            return audit.read_audit(conn, scope, session)

    def injection(self, scope_key: str) -> bool:
        """Whether the scope's packets carry pins (the injection switch; on by default)."""
        scope = check_scope(scope_key)
        with self._reading() as conn:
            return audit.injection_enabled(conn, scope)

    def events(self, scope_key: str | None = None, *, record_id: str | None = None) -> EventList:
        """The event log, oldest first, filtered by scope and/or record (by record alone: the whole log is read)."""
        stmt = select(EVENTS).order_by(EVENTS.c.seq)
        if scope_key is not None:
            stmt = stmt.where(EVENTS.c.scope_key == scope_key)
        if record_id is not None:
            stmt = stmt.where(EVENTS.c.record_id == record_id)
        with self._reading() as conn:
            rows = conn.execute(stmt).mappings()
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
