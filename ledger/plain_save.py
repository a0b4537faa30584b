"""A plain save or edit in one statement where the store offers one (PostgreSQL), else nothing.

:meth:`ledger.Ledger.save` tries this first for a save without a conflict group or an explicit
instant (with ``supersedes``, an edit of one record). It screens the body and builds the rows
exactly as :meth:`ledger.tx.Transaction.save` would and hands them to
:meth:`ledger.store.base.Store.save_plain` (an edit: :meth:`~ledger.store.base.Store.edit_plain`);
whenever that declines (a store without the statement, a write that is not plain once the scope's
lock is held, a busy database) or a value would be refused, the caller runs the full transaction,
which screens again and gives every answer (a refused body included).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from ledger import validate
from ledger.errors import LedgerBusy, LedgerError
from ledger.instants import to_micros
from ledger.models import Kind, MemoryRecord, Provenance, Status
from ledger.options import SaveOptions
from ledger.policy import WritePolicy
from ledger.record_rows import NewRecord, new_row, record_of_new_row
from ledger.statements import record_detail, sorted_json
from ledger.store import Store


def save_plain(
    store: Store, scope: str, body: object, options: SaveOptions, *, clock_us: int, policy: WritePolicy
) -> MemoryRecord | None:
    """The saved record, or None: nothing was written, and the full transaction must run."""
    kind, expires_at, target = options.get("kind"), options.get("expires_at"), options.get("supersedes")
    try:
        new = NewRecord(
            validate.stored_body(body, max_chars=policy.max_body_chars),
            Kind.FACT if kind is None else validate.kind(kind),
            Provenance.USER_EXPLICIT,
            Status.ACTIVE,
            expires_at=None if expires_at is None else to_micros(expires_at, name="expires_at"),
            source_session_id=validate.source_session(options.get("source_session_id")),
        )
        if target is not None:
            target = validate.record_id(target)
    except LedgerError:
        return None  # the transaction refuses it, with its own words
    record_id = validate.new_record_id()
    params: dict[str, Any] = {
        "s": scope,
        "clock": clock_us,
        "id": record_id,
        "kind": None if kind is None and target is not None else new.kind.value,  # an edit keeps the target's
        "body": new.body,
        "session": new.source_session_id,
        "expires": new.expires_at,
    }
    if target is not None:
        return _edit(store, params, new, target)
    params["default_max"] = policy.default_max_records
    params["detail"] = record_detail((), new.provenance)
    try:
        now_us = store.save_plain(params)
    except LedgerBusy:
        return None  # the transaction retries
    if now_us is None:
        return None
    return record_of_new_row(new_row(record_id, scope, new, now_us, ()))


def _edit(store: Store, params: dict[str, Any], new: NewRecord, target: str) -> MemoryRecord | None:
    """The edit of ``target`` through :meth:`Store.edit_plain`: the new record, or None (nothing was written)."""
    record_id = params["id"]
    params["target"] = target
    params["supersedes"] = json.dumps([target])
    params["closed_detail"] = sorted_json({"superseded_by": record_id})
    params["detail"] = record_detail((target,), new.provenance)
    try:
        answered = store.edit_plain(params)
    except LedgerBusy:
        return None
    if answered is None:
        return None
    now_us, kind, group = answered  # the new record's kind and conflict group, as the target gave them
    written = replace(new, kind=Kind(kind), conflict_group=group)
    return record_of_new_row(new_row(record_id, params["s"], written, now_us, (target,)))
