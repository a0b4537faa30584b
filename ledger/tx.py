"""The typed write transaction: every ledger write runs in one, and callers may run their own.

>>> with led.transaction("account:local") as tx:
...     rec = tx.save("I prefer metric units")
...     tx.execute(update(RUNS).where(...).values(...))

The transaction holds the scope's write lock (SQLite ``BEGIN IMMEDIATE``, PostgreSQL
the scope's ``scope_settings`` row) *before* its instant is read, so instants within a
scope strictly increase in commit order (docs/ledger.md). ``tx.now`` is that instant; every
write made through ``tx`` happens at it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from functools import cached_property
from typing import Any, Unpack

from sqlalchemy import Connection, Table

from ledger import derived_text, statements, validate
from ledger import record_rows as rows
from ledger.erasure import erase_chain
from ledger.errors import BudgetExceeded, InvalidArgument, InvalidInstant, InvalidTransition, RecordNotFound
from ledger.instants import from_micros, to_micros
from ledger.models import EventKind, Kind, MemoryRecord, Provenance, ScopeUsage, Status
from ledger.options import ProposeOptions, SaveOptions
from ledger.policy import WritePolicy
from ledger.reader import Reader
from ledger.record_rows import NewRecord
from ledger.store import Pending, Store, run
from ledger.store import query as store_query
from ledger.store import rows as store_rows
from ledger.sweep import SWEEP_BATCH, expire_due

Row = Mapping[str, Any]

FORGET = "forget"  # memory_records.proposed_action of a proposal that forgets its target when accepted


class Transaction(Reader):
    """One write transaction on one scope, at one instant. Get one from :meth:`ledger.Ledger.transaction`.

    Attributes:
        scope_key: the scope whose lock is held.
        now: the transaction's instant (aware UTC); ``now_us`` the same in microseconds.
    """

    def __init__(
        self,
        conn: Connection,
        scope_key: str,
        now_us: int,
        *,
        policy: WritePolicy,
        store: Store,
        read_ahead: Sequence[Any] | None = None,
    ) -> None:
        super().__init__(conn)
        self.policy = policy
        self.store = store
        self.scope_key = scope_key
        self.now_us = now_us
        self._after_commit: list[Callable[[], object]] = []
        self._read_ahead = read_ahead  # what the statement that took the lock read for _prepare_usage
        self._expired = False  # whether _prepare_usage expired records (what was read before it may be stale)

    @cached_property
    def now(self) -> datetime:
        """The transaction's instant, aware UTC (made when first read: a save never reads it)."""
        return from_micros(self.now_us)

    # ------------------------------------------------------------------ plumbing
    def after_commit(self, fn: Callable[[], object]) -> None:
        """Call ``fn()`` once the transaction has committed (never if it rolls back)."""
        self._after_commit.append(fn)

    def committed(self) -> None:
        """What the ledger calls once the transaction has committed: the :meth:`after_commit` functions."""
        for fn in self._after_commit:
            fn()

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """A nested transaction: an exception inside rolls back only what ran inside, then propagates."""
        nested = self.conn.begin_nested()
        try:
            yield
            self.store.flush(self.conn)  # a statement sent inside fails inside (PostgreSQL's pipeline)
        except BaseException:
            nested.rollback()
            raise
        nested.commit()

    def register_derived(
        self,
        owner: Table | str,
        key: str,
        *,
        record_ids: Iterable[str],
        columns: Sequence[str],
        key_column: str = "id",
    ) -> None:
        """Register text derived from ``record_ids``, stored in ``owner``'s row ``key_column == key``.

        Forgetting any of those records (or a record of their chains) sets ``columns`` of
        that row to NULL in the delete's own transaction; if one is already forgotten, they
        are cleared now. ``owner`` is a table from :mod:`ledger.schema` or a table name.

        Raises:
            InvalidArgument: a name is not a plain SQL identifier, or not a column of ``owner``.
        """
        derived_text.register(
            self.conn,
            scope_key=self.scope_key,
            owner=owner,
            key=key,
            record_ids=record_ids,
            columns=columns,
            key_column=key_column,
            now_us=self.now_us,
        )

    def event(
        self,
        event: EventKind | str,
        *,
        record_id: str | None = None,
        reason: str | None = None,
        run_id: str | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        """Append one row to ``ledger_events`` at ``tx.now`` (never a body)."""
        self._event(str(event), record_id, reason, run_id, statements.sorted_json(dict(detail or {})))

    def _event(self, event: str, record_id: str | None, reason: str | None, run_id: str | None, detail: str) -> None:
        """:meth:`event` with its detail already encoded."""
        params = {
            "at": self.now_us,
            "scope_key": self.scope_key,
            "event": event,
            "record_id": record_id,
            "reason": reason,
            "run_id": run_id,
            "detail": detail,
        }
        self.store.send(self.conn, statements.INSERT_EVENT, params)

    def prepare(self) -> None:
        """Expire what is due in the scope at ``tx.now``, so no write acts on an expired record."""
        while expire_due(self.conn, self.now_us, scope_key=self.scope_key) >= SWEEP_BATCH:
            pass

    def _prepare_usage(self) -> ScopeUsage:
        """:meth:`prepare`, then :meth:`usage`: one statement when nothing is due (a save's common case), none
        when the statement that took the scope's lock read them (the transaction's first, nothing written since)."""
        found, self._read_ahead = self._read_ahead, None
        if found is None:
            stmt = self.store.built(statements.usage_and_due, driver_values=True)  # ``due`` is tested for truth
            (found,) = self.store.rows(self.conn, stmt, {"s": self.scope_key, "n": self.now_us})
        budget, active, proposed, due = found
        if due:
            self.prepare()
            self._expired = True
            return self.usage()
        return self._usage(budget, active, proposed)

    def usage(self) -> ScopeUsage:
        ((budget, active, proposed),) = store_rows(self.conn, statements.USAGE, {"s": self.scope_key})
        return self._usage(budget, active, proposed)

    def _usage(self, budget: int | None, active: int, proposed: int) -> ScopeUsage:
        return ScopeUsage(
            scope_key=self.scope_key,
            max_records=self.policy.default_max_records if budget is None else int(budget),
            active=int(active),
            proposed=int(proposed),
        )

    def check_growth(self, *, notify: bool = False, usage: ScopeUsage | None = None) -> None:
        """Raise :class:`BudgetExceeded` unless one more record fits in the scope.

        With ``notify``, a write that takes the last slot calls the ledger's budget hooks in
        this transaction (:meth:`ledger.Ledger.set_budget_hook`). ``usage``: the scope's usage
        as this transaction last read it, when nothing was written since.
        """
        use = self.usage() if usage is None else usage
        if use.held + 1 <= use.max_records:
            if notify and use.held + 1 == use.max_records:
                self.policy.budget_reached(self)
            return
        raise BudgetExceeded.refusal(
            scope_key=self.scope_key, budget=use.max_records, active=use.active, proposed=use.proposed
        )

    def active(self) -> list[MemoryRecord]:
        """The scope's active set at ``tx.now``."""
        return rows.fetch_active(
            self.conn, statements.ACTIVE_NOW, self.scope_key, {"s": self.scope_key, "n": self.now_us}
        )

    def active_later(self) -> Pending[list[MemoryRecord]]:
        """:meth:`prepare`, then :meth:`active`: sent now, read with ``.result()`` (see :meth:`query`).

        The active set at ``tx.now`` leaves out what is past its expiry whether or not it was
        expired first, so both questions go out together and the expiry runs only when needed.
        """
        params = {"s": self.scope_key, "n": self.now_us}
        due = store_query(self.conn, self.store.built(statements.due_now, driver_values=True), params)
        found = store_query(self.conn, statements.ACTIVE_NOW, params)

        def result() -> list[MemoryRecord]:
            if due.result()[0][0]:
                self.prepare()
            return [rows.active_record_from_tuple(self.scope_key, row) for row in found.result()]

        return Pending(result)

    def _row(self, record_id: object) -> Row:
        return self._in_scope(record_id, store_rows(self.conn, rows.BY_ID, {"id": validate.record_id(record_id)}))

    def _in_scope(self, record_id: object, found: Sequence[Sequence[Any]]) -> Row:
        """The record read as ``found`` (its row, or none); another account's id reads as an unknown one."""
        row = dict(zip(rows.NAMES, found[0], strict=True)) if found else None
        if row is None or row["scope_key"] != self.scope_key:
            raise RecordNotFound.for_id(record_id)
        return row

    def _expiry(self, expires_at: datetime | None) -> int | None:
        if expires_at is None:
            return None
        exp_us = to_micros(expires_at, name="expires_at")
        if exp_us <= self.now_us:
            raise InvalidInstant("expires_at must be after now: a record that is already expired cannot be written")
        return exp_us

    # ------------------------------------------------------------------ record writes
    def save(self, body: str, **options: Unpack[SaveOptions]) -> MemoryRecord:
        """Pin ``body`` (provenance ``user_explicit``); ``supersedes=id`` edits an active record.

        An edit, or a save into a conflict group whose member is active, replaces rather
        than grows, so it works at the budget ceiling; either keeps the replaced record's
        kind (and an edit its conflict group) unless new ones are given. The options are
        :class:`ledger.options.SaveOptions`.

        Raises:
            BodyRejected, BudgetExceeded, RecordNotFound, InvalidTransition, InvalidInstant, InvalidArgument.
        """
        clean = validate.stored_body(body, max_chars=self.policy.max_body_chars)
        group = validate.group(options.get("conflict_group"))
        session = validate.source_session(options.get("source_session_id"))
        supersedes = options.get("supersedes")
        if supersedes is not None and not isinstance(supersedes, str):
            raise InvalidArgument("supersedes must be one record id (a string)")
        kind = options.get("kind")
        expires_at = options.get("expires_at")
        new_kind = None if kind is None else validate.kind(kind)
        exp_us = self._expiry(expires_at)
        # An edit's target is asked for with the usage (one round trip on PostgreSQL); read again if an expiry ran.
        ahead = (
            None if supersedes is None else store_query(self.conn, rows.BY_ID, {"id": validate.record_id(supersedes)})
        )
        use = self._prepare_usage()
        replaced: list[Row] = []
        if supersedes is not None:
            target = self._edit_target(supersedes, None if ahead is None or self._expired else ahead.result())
            replaced.append(target)
            new_kind = new_kind or Kind(target["kind"])
            group = group if group is not None else target["conflict_group"]
        member = self._active_in_group(group)
        if member is not None and all(member["id"] != r["id"] for r in replaced):
            replaced.append(member)
            new_kind = new_kind or Kind(member["kind"])
        if not replaced:
            self.check_growth(notify=True, usage=use)  # nothing was written since the usage was read
        new = NewRecord(
            clean,
            new_kind or Kind.FACT,
            Provenance.USER_EXPLICIT,
            Status.ACTIVE,
            expires_at=exp_us,
            conflict_group=group,
            source_session_id=session,
        )
        return self._write_record(new, replaced=replaced)

    def _edit_target(self, record_id: str, ahead: Sequence[Sequence[Any]] | None = None) -> Row:
        """The active record an edit replaces (``ahead``: its row, read after the lock, nothing written since)."""
        target = self._row(record_id) if ahead is None else self._in_scope(record_id, ahead)
        if target["status"] != Status.ACTIVE:
            raise InvalidTransition(
                f"record {record_id} is {target['status']}, not active: only an active record can be edited"
                + (f" (its successor is {target['superseded_by']})" if target["superseded_by"] else "")
            )
        return target

    def propose(self, body: str, **options: Unpack[ProposeOptions]) -> MemoryRecord:
        """Store a proposal (status ``proposed``, empty interval); growth, so the budget applies.

        The options are :class:`ledger.options.ProposeOptions`.

        Raises:
            BodyRejected, BudgetExceeded, InvalidArgument, InvalidInstant.
        """
        new = self._proposal(
            body,
            kind=options.get("kind", Kind.FACT),
            provenance=options.get("provenance", Provenance.MODEL_PROPOSAL),
            confidence_bps=options.get("confidence_bps"),
            rationale=options.get("rationale"),
            session=options.get("source_session_id"),
            group=options.get("conflict_group"),
            run_id=options.get("run_id"),
        )
        targets = validate.record_ids(options.get("supersedes", ()))
        new = new.with_expiry(self._expiry(options.get("expires_at")))
        self.check_growth(notify=True, usage=self._prepare_usage())
        return self._write_record(new, supersedes=targets)

    def _proposal(
        self,
        body: object,
        *,
        kind: object,
        provenance: object,
        confidence_bps: object = None,
        rationale: object = None,
        session: object = None,
        group: object = None,
        run_id: str | None = None,
    ) -> NewRecord:
        """A proposal's record, screened (first) and validated."""
        clean = validate.stored_body(body, max_chars=self.policy.max_body_chars)
        try:
            prov = Provenance(str(provenance))
        except ValueError:
            raise InvalidArgument(f"unknown provenance {provenance!r}") from None
        if prov == Provenance.USER_EXPLICIT:
            raise InvalidArgument("a proposal comes from a model: provenance cannot be user_explicit")
        return NewRecord(
            clean,
            validate.kind(kind),
            prov,
            Status.PROPOSED,
            conflict_group=validate.group(group),
            source_session_id=validate.source_session(session),
            confidence_bps=validate.confidence(confidence_bps),
            rationale=validate.opt_text(rationale, "rationale", limit=self.policy.max_body_chars),
            run_id=run_id,
        )

    def supersede(
        self,
        target_ids: Sequence[str],
        body: str,
        *,
        kind: Kind | str,
        provenance: Provenance | str = Provenance.MODEL_CONSOLIDATION,
        propose: bool = False,
        expires_at: datetime | None = None,
        conflict_group: str | None = None,
        confidence_bps: int | None = None,
        rationale: str | None = None,
        run_id: str | None = None,
    ) -> MemoryRecord:
        """One new record that supersedes ``target_ids`` (each active in the scope), at ``tx.now``.

        ``propose=False``: the targets close now and the record is active — a replacement,
        not growth, so no budget check. ``propose=True``: a proposal naming the targets it
        will close when accepted — growth, so the budget applies. An ``expires_at`` at or
        before ``tx.now`` is dropped (the model's expiry has passed while it thought).

        Raises:
            InvalidTransition (a target is no longer active), BodyRejected, BudgetExceeded, InvalidArgument.
        """
        why = None if rationale is None else str(rationale)[: self.policy.max_body_chars]
        new = self._proposal(
            body,
            kind=kind,
            provenance=provenance,
            confidence_bps=confidence_bps,
            rationale=why,
            run_id=run_id,
        )
        exp_us = None if expires_at is None else to_micros(expires_at, name="expires_at")
        new = new.with_expiry(exp_us if exp_us is None or exp_us > self.now_us else None)
        targets = validate.record_ids(target_ids)
        found = {r["id"]: r for r in rows.fetch_many(self.conn, targets)}
        for tid in targets:
            row = found.get(tid)
            if row is None or row["scope_key"] != self.scope_key or row["status"] != Status.ACTIVE:
                raise InvalidTransition(f"record {tid} is no longer active in {self.scope_key}")
        new = new.with_group(validate.carried_group(conflict_group, [found[t]["conflict_group"] for t in targets]))
        if propose:
            self.check_growth()
            return self._write_record(new, supersedes=targets)
        replaced = [found[t] for t in targets]
        member = self._active_in_group(new.conflict_group)
        if member is not None and member["id"] not in found:
            replaced.append(member)
        return self._write_record(new.with_status(Status.ACTIVE), replaced=replaced)

    def accept(self, record_id: str, *, run_id: str | None = None) -> MemoryRecord:
        """Activate a proposal at ``tx.now``, closing what it supersedes and its group's active member.

        Raises:
            RecordNotFound, InvalidTransition (not proposed, or a target is no longer active).
        """
        self.prepare()
        row = self._row(record_id)
        validate.transition(row, Status.ACTIVE, "accept")
        if _proposed_action(self.conn, record_id) == FORGET:
            return self._accept_forget(row, run_id)
        wanted = json.loads(row["supersedes"])
        targets = rows.fetch_many(self.conn, wanted)
        found = {t["id"] for t in targets}
        missing = [t for t in wanted if t not in found]
        stale = [t["id"] for t in targets if t["status"] != Status.ACTIVE or t["scope_key"] != self.scope_key]
        if missing or stale:
            raise InvalidTransition(
                f"cannot accept {record_id}: {', '.join(missing + stale)} no longer active; reject it instead"
            )
        replaced = list(targets)
        member = self._active_in_group(row["conflict_group"])
        if member is not None and member["id"] not in found:
            replaced.append(member)
        for target in replaced:
            self._close(target, record_id)
        run(
            self.conn,
            statements.ACCEPT,
            {"n": self.now_us, "rid": record_id, "sup": json.dumps([t["id"] for t in replaced])},
        )
        self.event(EventKind.ACCEPTED, record_id=record_id, run_id=run_id)
        return self._fresh(record_id)

    def reject(self, record_id: str) -> MemoryRecord:
        """Turn a proposal down; its interval stays empty. Raises RecordNotFound, InvalidTransition."""
        self.prepare()
        row = self._row(record_id)
        validate.transition(row, Status.REJECTED, "reject")
        run(self.conn, statements.REJECT, {"n": self.now_us, "rid": record_id})
        self.event(EventKind.REJECTED, record_id=record_id)
        return self._fresh(record_id)

    def delete(self, record_id: str) -> MemoryRecord:
        """Forget a record: a tombstone at ``tx.now`` that erases its body and its whole revision chain.

        The files are scrubbed after the commit (see docs/ledger.md, "Erasure").

        Raises:
            RecordNotFound; InvalidTransition on a superseded record (naming its successor) or one
            already forgotten; InvalidInstant when an explicit ``now`` is before the record took effect.
        """
        self.prepare()
        row = self._row(record_id)
        if row["status"] == Status.SUPERSEDED:
            raise InvalidTransition(
                f"{record_id} was superseded by {row['superseded_by']}; forget {row['superseded_by']} instead "
                "(forgetting the head erases the whole chain)"
            )
        validate.transition(row, Status.DELETED, "forget")
        end_us = row["valid_to"]
        if row["status"] == Status.ACTIVE:
            if row["valid_from"] > self.now_us:
                raise InvalidInstant("cannot forget a record at an instant before it took effect")
            end_us = self.now_us
        run(self.conn, statements.DELETE, {"end": end_us, "n": self.now_us, "rid": record_id})
        self.event(EventKind.DELETED, record_id=record_id)
        erased_ids, bodies = erase_chain(self.conn, row, self.now_us)
        for erased in erased_ids:
            self.event(EventKind.ERASED, record_id=erased)
        self.policy.erased(self.conn, self.scope_key, erased_ids, bodies)
        self.after_commit(self.store.scrub_files)
        return self._fresh(record_id)

    def set_expiry(self, record_id: str, expires_at: datetime) -> MemoryRecord:
        """Give an active record an expiry after ``tx.now``; an existing earlier expiry is kept (the earlier wins).

        The record stays active until then and the sweep expires it as any other. The past
        reads as it did: the expiry is in the future, so no interval already read changes.

        Raises:
            InvalidTransition: the record is not active in the scope; InvalidInstant: not after ``tx.now``.
        """
        exp_us = to_micros(expires_at, name="expires_at")
        if exp_us <= self.now_us:
            raise InvalidInstant("an expiry must be after the instant it is set")
        row = rows.fetch_one(self.conn, record_id)
        if row is None or row["scope_key"] != self.scope_key or row["status"] != Status.ACTIVE:
            raise InvalidTransition(f"record {record_id} is no longer active in {self.scope_key}")
        if row["expires_at"] is None or row["expires_at"] > exp_us:
            run(self.conn, statements.SET_EXPIRY, {"e": exp_us, "n": self.now_us, "rid": record_id})
        return self._fresh(record_id)

    def propose_forget(
        self,
        target_id: str,
        *,
        provenance: Provenance | str = Provenance.MODEL_CONSOLIDATION,
        rationale: str | None = None,
        run_id: str | None = None,
    ) -> MemoryRecord:
        """A pending forget of ``target_id``: a proposal that, when accepted, forgets the target as the user would.

        Its body names the target and never copies the target's words (accepting erases
        them). Growth, so the budget applies. Rejecting it forgets nothing.

        Raises:
            InvalidTransition: the target is not active in the scope; BudgetExceeded.
        """
        target = rows.fetch_one(self.conn, target_id)
        if target is None or target["scope_key"] != self.scope_key or target["status"] != Status.ACTIVE:
            raise InvalidTransition(f"record {target_id} is no longer active in {self.scope_key}")
        why = None if rationale is None else str(rationale)[: self.policy.max_body_chars]
        new = self._proposal(
            # The id as /pins shows it: a whole id is long and random enough to look like a secret to screening.
            f"Forget the pin {target_id[:8]} (it names the pin in supersedes)",
            kind=target["kind"],
            provenance=provenance,
            rationale=why,
            run_id=run_id,
        )
        self.check_growth()
        record = self._write_record(new, supersedes=[target_id])
        run(self.conn, statements.SET_ACTION, {"a": FORGET, "rid": record.id})
        return record

    def _accept_forget(self, row: Row, run_id: str | None) -> MemoryRecord:
        """Accepting a pending forget: the target is forgotten, and the proposal (an instruction, not a pin) too."""
        (target_id,) = json.loads(row["supersedes"])
        target = rows.fetch_one(self.conn, target_id)
        if target is None or target["status"] != Status.ACTIVE:
            raise InvalidTransition(f"cannot accept {row['id']}: {target_id} is no longer active; reject it instead")
        self.delete(target_id)
        self.event(EventKind.ACCEPTED, record_id=row["id"], run_id=run_id)
        proposal = self._fresh(row["id"])
        if proposal.status == Status.PROPOSED:  # erasing the target may already have closed it
            return self.delete(row["id"])
        return proposal

    def set_budget(self, max_records: int) -> ScopeUsage:
        """Set the scope's ``max_records``. Never evicts. Raises InvalidArgument (not 0 to 1,000,000)."""
        if isinstance(max_records, bool) or not isinstance(max_records, int) or not 0 <= max_records <= 1_000_000:
            raise InvalidArgument("max_records must be an integer from 0 to 1000000")
        run(self.conn, statements.SET_BUDGET, {"m": max_records, "n": self.now_us, "s": self.scope_key})
        self.event(EventKind.BUDGET_SET, detail={"max_records": max_records})
        return self.usage()

    # ------------------------------------------------------------------ internals
    def _fresh(self, record_id: str) -> MemoryRecord:
        fresh = rows.fetch_one(self.conn, record_id)
        assert fresh is not None
        return rows.to_record(fresh)

    def _active_in_group(self, group: str | None) -> Row | None:
        if group is None:
            return None
        found = rows.fetch_rows(self.conn, statements.GROUP_MEMBER, {"s": self.scope_key, "g": group})
        return found[0] if found else None

    def _close(self, row: Row, successor: str) -> None:
        """Supersede ``row`` exactly at ``tx.now``."""
        if row["valid_from"] > self.now_us:
            raise InvalidInstant(
                f"cannot supersede {row['id']} at an instant before it took effect "
                f"({from_micros(row['valid_from']).isoformat()})"
            )
        done = run(self.conn, statements.CLOSE, {"n": self.now_us, "succ": successor, "rid": row["id"]})
        if done != 1:
            raise InvalidTransition(f"record {row['id']} is no longer active")
        self.event(EventKind.SUPERSEDED, record_id=row["id"], detail={"superseded_by": successor})

    def _write_record(
        self, new: NewRecord, *, replaced: Sequence[Row] = (), supersedes: Sequence[str] | None = None
    ) -> MemoryRecord:
        """Close ``replaced`` at ``tx.now``, insert the new record, log the event. Every write path ends here.

        ``supersedes`` defaults to the replaced ids; a proposal names targets it does not close yet.
        """
        new_id = validate.new_record_id()
        for row in replaced:
            self._close(row, new_id)
        names = [r["id"] for r in replaced] if supersedes is None else list(supersedes)
        values = rows.new_row(new_id, self.scope_key, new, self.now_us, names)
        self.store.send(self.conn, statements.INSERT_RECORD, values)
        event = EventKind.SAVED if new.status == Status.ACTIVE else EventKind.PROPOSED
        self._event(event.value, new_id, None, new.run_id, statements.record_detail(names, new.provenance))
        return rows.record_of_new_row(values)


def _proposed_action(conn: Connection, record_id: str) -> str | None:
    found = store_rows(conn, statements.PROPOSED_ACTION, {"rid": record_id})
    return None if not found else found[0][0]


__all__ = ["Reader", "ScopeUsage", "Transaction"]
