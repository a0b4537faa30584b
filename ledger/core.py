"""The :class:`Ledger`: every lifecycle operation over one database (docs/ledger.md).

Every write runs in one :class:`ledger.tx.Transaction`: the scope's lock is taken
(``BEGIN IMMEDIATE`` on SQLite, the scope's ``scope_settings`` row on PostgreSQL)
and *then* the instant is read, so instants strictly increase in commit order within
a scope and a write that omits ``now`` is never refused for time. Every
write first expires, within its scope, what is due at its instant.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar, Unpack

from sqlalchemy import Connection, Engine
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, stop_before_delay, wait_random_exponential

from ledger.audit import check_session_id, store_injection, write_audit
from ledger.capabilities import CapabilityProvider, base_capabilities, merge_capabilities
from ledger.errors import BodyRejected, BudgetExceeded, InvalidArgument, LedgerBusy, LedgerError, OutcomeUnknown
from ledger.instants import Clock, from_micros, require_aware, system_clock, to_micros
from ledger.models import EventKind, MemoryRecord, ScopeUsage, SweepStatus
from ledger.options import ProposeOptions, SaveOptions
from ledger.packet import Packet, build_packet, empty_packet
from ledger.paging import Page
from ledger.plain_save import save_plain
from ledger.policy import BudgetHook, EraseHook, WritePolicy
from ledger.reader import Reader
from ledger.reads import LedgerReads, RecordList, check_scope, packet_records
from ledger.request_ids import SaveRequest, once
from ledger.screening import MAX_BODY_CHARS
from ledger.statements import USAGE, stamp_and_usage
from ledger.store import enter_scope, store_for
from ledger.sweep import SWEEP_BATCH, expire_due, last_sweep, record_sweep
from ledger.tx import Transaction
from ledger.validate import new_record_id

log = logging.getLogger(__name__)

T = TypeVar("T")
DEFAULT_MAX_RECORDS = 200
WRITE_RETRY_BUDGET_S = 30.0
WRITE_ATTEMPTS = 50

__all__ = ["DEFAULT_MAX_RECORDS", "EraseHook", "Ledger", "ScopeUsage", "ScopeView", "new_record_id"]


class Ledger(LedgerReads):
    """An account memory ledger bound to one account scope.

    Use :func:`ledger.open_ledger` to get one. Safe to share across threads (one per
    process): file SQLite and PostgreSQL use a connection per thread; in-memory SQLite
    (one shared connection) serializes every use.
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
        self.policy = WritePolicy(max_body_chars=max_body_chars, default_max_records=default_max_records)
        self.store = store_for(engine)
        self._capability_providers: list[CapabilityProvider] = []

    @property
    def max_body_chars(self) -> int:
        """The longest body a save or proposal stores (characters, after stripping)."""
        return self.policy.max_body_chars

    @property
    def default_max_records(self) -> int:
        """A scope's budget until one is set."""
        return self.policy.default_max_records

    # ------------------------------------------------------------------ plumbing
    def close(self) -> None:
        self.store.dispose()

    def for_account(self, account: str) -> Ledger:
        """This ledger bound to ``account:<account>`` instead: same engine, clock, limits and erase hooks.

        For a server that serves many accounts (the account comes from the caller's token).
        Raises ScopeError when the account cannot form a scope key.
        """
        twin = copy.copy(self)
        twin.scope_key = check_scope(f"account:{account}")
        return twin

    def add_erase_hook(self, hook: EraseHook) -> None:
        """Call ``hook(conn, scope_key, erased_ids, erased_bodies)`` inside every delete transaction."""
        self.policy.erase_hooks.append(hook)

    def add_capability_provider(self, provider: CapabilityProvider) -> None:
        """Let another package (consolidation) add what it offers to :meth:`capabilities`."""
        self._capability_providers.append(provider)

    def capabilities(self) -> dict[str, Any]:
        """What this ledger offers for its bound scope (docs/packet.md): scope, ``maxBodyChars``, kinds,
        the consolidation operations, whether injection and extraction are on."""
        out = base_capabilities(
            scope_key=self.scope_key, max_body_chars=self.max_body_chars, injection=self.injection(self.scope_key)
        )
        for provider in self._capability_providers:
            out = merge_capabilities(out, provider(self.scope_key))
        return out

    def set_budget_hook(self, name: str, hook: BudgetHook | None) -> None:
        """Register (or with None remove) the budget hook called ``name`` (see :data:`BudgetHook`)."""
        if hook is None:
            self.policy.budget_hooks.pop(name, None)
        else:
            self.policy.budget_hooks[name] = hook

    def _refused_for_budget(self, exc: BudgetExceeded) -> BudgetExceeded:
        """``exc`` with what the budget hooks say, run in a transaction of their own (the refusal wrote nothing)."""
        if not self.policy.budget_hooks:
            return exc
        try:
            notes = self.run(exc.scope_key, self.policy.budget_reached)
        except LedgerError as failed:  # the refusal is what the caller must see
            log.warning("budget hooks failed for %s: %s", exc.scope_key, failed)
            return exc
        if not notes:
            return exc
        return BudgetExceeded.refusal(
            scope_key=exc.scope_key, budget=exc.budget, active=exc.active, proposed=exc.proposed, notes=tuple(notes)
        )

    @contextmanager
    def transaction(self, scope_key: str | None = None, *, now: datetime | None = None) -> Iterator[Transaction]:
        """One write transaction on ``scope_key`` (default: the bound scope), at one instant.

        The scope's lock is held before the instant is read. Without ``now`` the instant is
        the clock's reading, or the scope's latest instant + 1 µs when the clock is not past
        it. An explicit ``now`` is used as given; a write in it that must follow a later
        instant (the record it supersedes or forgets) raises :class:`InvalidInstant`.
        Commits when the block ends, rolls back when it raises; database errors come out
        as :class:`LedgerError` (busy: :class:`LedgerBusy`).
        """
        with self._transaction(scope_key, now, create=True) as tx:
            yield tx

    @contextmanager
    def _transaction(self, scope_key: str | None, now: datetime | None, *, create: bool) -> Iterator[Transaction]:
        """:meth:`transaction`; ``create=False`` leaves a scope without a settings row without one."""
        scope = check_scope(scope_key or self.scope_key)
        explicit = None if now is None else to_micros(now, name="now")
        with self.store.write() as conn:
            tx = self._enter(conn, scope, explicit, create=create)
            yield tx
        tx.committed()

    def _enter(
        self, conn: Connection, scope: str, explicit: int | None, *, create: bool, reading: bool = False
    ) -> Transaction:
        """The transaction on ``conn``, once the scope's lock is held and its instant read. ``reading``: the
        transaction's first statement is :meth:`Transaction.save`'s or :meth:`Transaction.propose`'s read of the
        budget, the counts and what is due, which then comes back with the instant where the store can do so."""
        now_us, read = enter_scope(
            self.store,
            conn,
            scope,
            explicit_us=explicit,
            clock_us=lambda: to_micros(self.now(), name="clock"),
            default_max=self.policy.default_max_records,
            create=create,
            reading=stamp_and_usage if reading else None,
        )
        return Transaction(conn, scope, now_us, policy=self.policy, store=self.store, read_ahead=read)

    def run(self, scope_key: str | None, fn: Callable[[Transaction], T], *, now: datetime | None = None) -> T:
        """``fn(tx)`` in :meth:`transaction`, run again (a new transaction, a new instant) while the
        database is busy. Raises LedgerBusy past the retry budget, or what ``fn`` raised."""
        return self._run(scope_key, fn, now, create=True)

    def _run(
        self,
        scope_key: str | None,
        fn: Callable[[Transaction], T],
        now: datetime | None,
        *,
        create: bool,
        reading: bool = False,
    ) -> T:
        """:meth:`run` (``create``, ``reading``: as :meth:`_enter`'s)."""
        started = time.monotonic()
        scope = check_scope(scope_key or self.scope_key)
        explicit = None if now is None else to_micros(now, name="now")
        try:
            return self._attempt(scope, explicit, fn, create, reading)  # the uncontended write: no retry machinery
        except LedgerBusy:
            pass
        for attempt in _busy_retries(started):
            with attempt:
                return self._attempt(scope, explicit, fn, create, reading)
        raise LedgerBusy("the ledger database stayed busy; try again in a moment")  # pragma: no cover

    def _attempt(
        self, scope: str, explicit: int | None, fn: Callable[[Transaction], T], create: bool, reading: bool
    ) -> T:
        """One attempt of :meth:`_run`: :meth:`transaction` without its generator frame (every save runs one)."""
        result: T | None = None
        try:
            with self.store.write() as conn:
                tx = self._enter(conn, scope, explicit, create=create, reading=reading)
                result = fn(tx)
        except OutcomeUnknown as exc:
            if isinstance(result, MemoryRecord):  # the record the write would have written: reading it tells
                raise exc.naming(result.id) from exc.__cause__
            raise
        tx.committed()
        return result

    @contextmanager
    def writing(self) -> Iterator[Reader]:
        """One write transaction outside any scope (no scope lock, no instant), for a table no scope owns
        (the worker's API tokens): through the store's write queue, committed when the block ends, rolled
        back when it raises; database errors come out as :class:`LedgerError` (busy: :class:`LedgerBusy`)."""
        with self.store.write() as conn:
            yield Reader(conn)

    def write(self, fn: Callable[[Reader], T]) -> T:
        """``fn(w)`` in :meth:`writing`, run again while the database is busy (as :meth:`run`)."""
        started = time.monotonic()
        for attempt in _busy_retries(started, first=True):
            with attempt, self.writing() as w:
                return fn(w)
        raise LedgerBusy("the ledger database stayed busy; try again in a moment")  # pragma: no cover

    def _refusal(self, event: EventKind, scope_key: str, now: datetime | None, exc: LedgerError, **detail: Any) -> None:
        """Record a refusal in its own transaction (the refused write changed nothing)."""
        info = {k: v for k, v in exc.context.items() if k in ("why", "budget", "active", "proposed", "detail")}
        info.update(detail)
        try:
            self._run(scope_key, lambda tx: tx.event(event, reason=exc.reason, detail=info), now, create=False)
        except LedgerError as failed:  # the refusal is what the caller must see
            log.warning("could not record a %s event: %s", event, failed)

    def _scope_of(self, record_id: object) -> str:
        """The bound scope, when ``record_id`` is one of its records; another account's id is not found."""
        with self._reading() as conn:
            self._require_row(conn, record_id)
        return self.scope_key

    # ------------------------------------------------------------------ the packet
    def build_packet(
        self,
        scope_key: str,
        *,
        now: datetime | None = None,
        max_chars: int | None = None,
        session_id: str | None = None,
    ) -> Packet:
        """What a chat turn injects: see :mod:`ledger.packet` (order, citations, exclusion codes).

        Without ``session_id`` it is a read. With one the packet is built in a write transaction that also
        replaces that session's packet audit (so the audit is exactly what was built). With the scope's
        injection switch off the packet is empty and no audit is written.

        Raises:
            ScopeError, InvalidInstant, InvalidArgument (``max_chars`` not a non-negative
            integer, a malformed session id).
        """
        if max_chars is not None and (isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 0):
            raise InvalidArgument("max_chars must be a non-negative integer (or omitted for the default)")
        scope = check_scope(scope_key)
        if now is not None:
            require_aware(now, name="now")
        session = None if session_id is None else check_session_id(session_id)
        if session is None:
            with self._reading() as conn:
                at = from_micros(self._read_us(conn, scope, now))
                records = packet_records(conn, scope)
            if records is None:
                return empty_packet(now=at, max_chars=max_chars)
            return build_packet(records, now=at, max_chars=max_chars)

        def fn(tx: Transaction) -> Packet:
            records = packet_records(tx.conn, scope)
            if records is None:
                return empty_packet(now=tx.now, max_chars=max_chars, session_id=session)
            packet = build_packet(records, now=tx.now, max_chars=max_chars)
            write_audit(tx.conn, scope, session, packet)
            return replace(packet, session_id=session)

        return self.run(scope, fn, now=now)

    def scope(self, scope_key: str | None = None) -> ScopeView:
        """This ledger's reads of one scope (default: the bound one), without naming it again:
        ``led.scope().search("deploy")``, ``led.scope().list_page(limit=50)``. Raises ScopeError."""
        return ScopeView(self, check_scope(self.scope_key if scope_key is None else scope_key))

    # ------------------------------------------------------------------ writes
    def save(self, body: str, *, now: datetime | None = None, **options: Unpack[SaveOptions]) -> MemoryRecord:
        """Pin ``body`` in the bound account scope; ``supersedes=id`` edits an active record.

        See :meth:`ledger.tx.Transaction.save` (the options are :class:`ledger.options.SaveOptions`).
        A refusal of the body or of the budget is recorded as ``save_refused``. With ``request_id``
        the save is applied at most once in the scope: sent again, it returns the record it wrote
        (:mod:`ledger.request_ids`).

        Raises:
            BodyRejected, BudgetExceeded, RecordNotFound, InvalidTransition,
            InvalidInstant, InvalidArgument, RequestIdReused, LedgerBusy,
            OutcomeUnknown (the connection was lost after ``COMMIT`` was sent: read ``record_id`` to know).
        """
        request_id = options.pop("request_id", None)
        if request_id is not None:  # looked up and remembered in the save's transaction (ledger.request_ids)
            request = SaveRequest.of(request_id, body, options)
            return self._grow(
                EventKind.SAVE_REFUSED, None, now, {}, lambda tx: once(tx, request, lambda: tx.save(body, **options))
            )
        # A save or an edit of one record, without a conflict group: one statement where the store has it.
        if self.store.saves_plain and now is None and options.get("conflict_group") is None:
            saved = save_plain(
                self.store,
                self.scope_key,
                body,
                options,
                clock_us=to_micros(self.now(), name="clock"),
                policy=self.policy,
            )
            if saved is not None:
                return saved
        return self._grow(EventKind.SAVE_REFUSED, None, now, {}, lambda tx: tx.save(body, **options))

    def propose(
        self,
        body: str,
        *,
        now: datetime | None = None,
        scope_key: str | None = None,
        **options: Unpack[ProposeOptions],
    ) -> MemoryRecord:
        """Store a proposal (status ``proposed``, empty interval) that waits for accept/reject.

        See :meth:`ledger.tx.Transaction.propose` (the options are :class:`ledger.options.ProposeOptions`).
        A proposal is growth: over the budget it is refused before it is stored, and
        the refusal is recorded as ``proposal_refused`` (so is a refused body).

        Raises:
            BodyRejected, BudgetExceeded, InvalidArgument, InvalidInstant, LedgerBusy.
        """
        supersedes = options.get("supersedes", ())
        if not isinstance(supersedes, str):
            options["supersedes"] = list(supersedes)  # read once: a retry reads it again
        detail = {"run_id": options.get("run_id")}
        return self._grow(EventKind.PROPOSAL_REFUSED, scope_key, now, detail, lambda tx: tx.propose(body, **options))

    def _grow(
        self,
        refused: EventKind,
        scope_key: str | None,
        now: datetime | None,
        detail: dict[str, Any],
        write: Callable[[Transaction], MemoryRecord],
    ) -> MemoryRecord:
        """``write`` (a save or a proposal) in :meth:`run`; a refused body or budget is recorded as ``refused``,
        and a budget refusal carries what the budget hooks say."""
        if now is not None:
            require_aware(now, name="now")
        scope = check_scope(scope_key or self.scope_key)
        try:
            return self._run(scope, write, now, create=True, reading=True)
        except (BodyRejected, BudgetExceeded) as exc:
            self._refusal(refused, scope, now, exc, **detail)
            if isinstance(exc, BudgetExceeded):
                raise self._refused_for_budget(exc) from None
            raise

    def accept(self, record_id: str, *, now: datetime | None = None, run_id: str | None = None) -> MemoryRecord:
        """Activate a proposal, closing what it supersedes and its group's active member.

        Raises:
            RecordNotFound, InvalidTransition (not proposed, or a target is no longer active).
        """
        scope = self._scope_of(record_id)
        return self.run(scope, lambda tx: tx.accept(record_id, run_id=run_id), now=now)

    def reject(self, record_id: str, *, now: datetime | None = None) -> MemoryRecord:
        """Turn a proposal down; its interval stays empty. Raises RecordNotFound, InvalidTransition."""
        scope = self._scope_of(record_id)
        return self.run(scope, lambda tx: tx.reject(record_id), now=now)

    def delete(self, record_id: str, *, now: datetime | None = None) -> MemoryRecord:
        """Forget a record: a tombstone that erases its body and its whole revision chain.

        The body is gone from the rows and the FTS index at commit; from free pages and
        the WAL by a checkpoint after the commit (see docs/ledger.md, "Erasure").

        Raises:
            RecordNotFound; InvalidTransition on a superseded record (naming its
            successor) or one already forgotten.
        """
        scope = self._scope_of(record_id)
        return self.run(scope, lambda tx: tx.delete(record_id), now=now)

    def set_budget(self, scope_key: str, max_records: int, *, now: datetime | None = None) -> ScopeUsage:
        """Set a scope's ``max_records``. Never evicts: a budget below what is held refuses growth only.

        Raises:
            ScopeError, InvalidArgument (not an integer from 0 to 1,000,000).
        """
        scope = check_scope(scope_key)
        from ledger.errors import InvalidArgument

        if isinstance(max_records, bool) or not isinstance(max_records, int) or not 0 <= max_records <= 1_000_000:
            raise InvalidArgument("max_records must be an integer from 0 to 1000000")
        return self.run(scope, lambda tx: tx.set_budget(max_records), now=now)

    def set_injection(self, scope_key: str, enabled: bool, *, now: datetime | None = None) -> bool:
        """Switch whether the scope's packets carry pins (docs/packet.md). Off: empty packets, no audits.

        Raises:
            ScopeError, InvalidArgument (``enabled`` not a boolean).
        """
        from ledger.errors import InvalidArgument

        scope = check_scope(scope_key)
        if not isinstance(enabled, bool):
            raise InvalidArgument("enabled must be true or false")

        def fn(tx: Transaction) -> bool:
            store_injection(tx.conn, scope, enabled, tx.now_us)
            return enabled

        return self.run(scope, fn, now=now)

    def budget(self, scope_key: str) -> ScopeUsage:
        scope = check_scope(scope_key)
        with self._reading() as conn:
            ((budget, active, proposed),) = self.store.rows(conn, USAGE, {"s": scope})
        return ScopeUsage(
            scope_key=scope,
            max_records=self.policy.default_max_records if budget is None else int(budget),
            active=int(active),
            proposed=int(proposed),
        )

    def sweep_expired(
        self, now: datetime, *, batch_size: int = SWEEP_BATCH, progress: Callable[[int], None] | None = None
    ) -> int:
        """Expire every active or proposed record with ``expires_at <= now``; idempotent.

        Active records close at ``expires_at`` (not at ``now``); proposals keep their
        empty interval. Runs one set-based statement per batch. Returns how many expired.

        Raises:
            InvalidInstant, InvalidArgument (``batch_size`` not a positive integer).
        """
        from ledger.errors import InvalidArgument

        now_us = to_micros(require_aware(now, name="now"))
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            # 0 would loop for ever; a negative LIMIT means "no limit" on SQLite and an error on PostgreSQL
            raise InvalidArgument("batch_size must be a positive integer")
        started_us = to_micros(self.now())
        total = 0
        while True:
            with self.store.write() as conn:
                done = expire_due(conn, now_us, limit=batch_size)
            total += done
            if progress is not None and done:
                progress(done)
            if done < batch_size:
                break
        finished_us = max(started_us, to_micros(self.now()))
        # The run is recorded in the database (not only in a process's metrics), so every serving
        # process can export when the sweep last ran and a stopped cron can be alerted on.
        with self.store.write() as conn:
            record_sweep(conn, started_us=started_us, finished_us=finished_us, now_us=now_us, expired=total)
        return total

    def last_sweep(self) -> SweepStatus | None:
        """The expiry sweep's last recorded run (any process, any host), or None if none has finished yet."""
        with self._reading() as conn:
            return last_sweep(conn)

    def handle_slash(self, text_: str, *, now: datetime | None = None) -> Any:
        """Handle exactly ``/pin <text>``, ``/pins`` and ``/unpin <id>``; see :mod:`ledger.slash`."""
        from ledger.slash import handle_slash

        return handle_slash(self, text_, now=now)


class ScopeView:
    """A ledger's reads of one scope, the scope given once: ``led.scope().search("deploy")``.

    Get one from :meth:`Ledger.scope`. It holds no connection or state of its own.
    """

    __slots__ = ("ledger", "scope_key")

    def __init__(self, ledger: Ledger, scope_key: str) -> None:
        self.ledger = ledger
        self.scope_key = scope_key

    def __repr__(self) -> str:
        return f"ScopeView({self.scope_key!r})"

    def list(self, *, now: datetime | None = None) -> RecordList:
        return self.ledger.list(self.scope_key, now=now)

    def list_page(self, **kwargs: Any) -> Page:
        """See :meth:`LedgerReads.list_page` (``limit``, ``cursor``, ``kind``, ``provenance``, ``conflict_group``)."""
        return self.ledger.list_page(self.scope_key, **kwargs)

    def proposals(self, *, now: datetime | None = None) -> RecordList:
        return self.ledger.proposals(self.scope_key, now=now)

    def proposals_page(self, **kwargs: Any) -> Page:
        return self.ledger.proposals_page(self.scope_key, **kwargs)

    def list_as_of(self, as_of: datetime) -> RecordList:
        return self.ledger.list_as_of(self.scope_key, as_of)

    def records(self) -> RecordList:
        return self.ledger.records(self.scope_key)

    def search(self, query: str, *, limit: int = 20, now: datetime | None = None) -> RecordList:
        return self.ledger.search(self.scope_key, query, limit=limit, now=now)

    def build_packet(self, **kwargs: Any) -> Packet:
        """See :meth:`Ledger.build_packet` (``now``, ``max_chars``, ``session_id``)."""
        return self.ledger.build_packet(self.scope_key, **kwargs)

    def injection(self) -> bool:
        return self.ledger.injection(self.scope_key)


def _busy_retries(started: float, *, first: bool = False) -> Retrying:
    """The attempts of a write while the database is busy, within the write budget from ``started``
    (``first``: this includes the first attempt; :meth:`Ledger.run` makes that one itself)."""
    budget_s = max(0.0, WRITE_RETRY_BUDGET_S - (time.monotonic() - started))
    return Retrying(
        retry=retry_if_exception_type(LedgerBusy),
        stop=stop_before_delay(budget_s) | stop_after_attempt(WRITE_ATTEMPTS - (0 if first else 1)),
        wait=wait_random_exponential(multiplier=0.005, max=0.5),
        reraise=True,
    )
