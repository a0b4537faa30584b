"""A plain save in one statement where the store offers one (PostgreSQL), else nothing.

:meth:`ledger.Ledger.save` tries this first for a save without an edit, a conflict group or an
explicit instant. It screens the body and builds the row exactly as :meth:`ledger.tx.Transaction.save`
would and hands it to :meth:`ledger.store.base.Store.save_plain`; whenever that declines (a store
without the statement, a save that is not plain once the scope's lock is held, a busy database) or
a value would be refused, the caller runs the full transaction, which screens again and gives every
answer (a refused body included).
"""

from __future__ import annotations

from ledger import validate
from ledger.errors import LedgerBusy, LedgerError
from ledger.instants import to_micros
from ledger.models import Kind, MemoryRecord, Provenance, Status
from ledger.options import SaveOptions
from ledger.policy import WritePolicy
from ledger.record_rows import NewRecord, new_row, record_of_new_row
from ledger.statements import sorted_json
from ledger.store import Store


def save_plain(
    store: Store, scope: str, body: object, options: SaveOptions, *, clock_us: int, policy: WritePolicy
) -> MemoryRecord | None:
    """The saved record, or None: nothing was written, and the full transaction must run."""
    kind, expires_at = options.get("kind"), options.get("expires_at")
    try:
        new = NewRecord(
            validate.stored_body(body, max_chars=policy.max_body_chars),
            Kind.FACT if kind is None else validate.kind(kind),
            Provenance.USER_EXPLICIT,
            Status.ACTIVE,
            expires_at=None if expires_at is None else to_micros(expires_at, name="expires_at"),
            source_session_id=validate.opt_text(options.get("source_session_id"), "source_session_id"),
        )
    except LedgerError:
        return None  # the transaction refuses it, with its own words
    record_id = validate.new_record_id()
    params = {
        "s": scope,
        "clock": clock_us,
        "default_max": policy.default_max_records,
        "id": record_id,
        "kind": new.kind.value,
        "body": new.body,
        "session": new.source_session_id,
        "expires": new.expires_at,
        "detail": sorted_json({"supersedes": [], "provenance": new.provenance.value}),
    }
    try:
        now_us = store.save_plain(params)
    except LedgerBusy:
        return None  # the transaction retries
    if now_us is None:
        return None
    return record_of_new_row(new_row(record_id, scope, new, now_us, ()))
