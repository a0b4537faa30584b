"""Saves that may be sent again: a save with a ``request_id`` is applied at most once per scope.

A client that lost its answer (a dropped connection, :class:`ledger.errors.OutcomeUnknown`) sends
the same save again with the same ``request_id``. Inside the save's own transaction, once the
scope's lock is held, :func:`once` looks the id up in ``save_requests``: found, it returns the
record that save wrote (as it is now) and writes nothing; not found, it saves and remembers the
id with the record, in the same transaction, so both or neither are committed. The id is the
client's, compared within the scope only; the same id with other arguments is refused
(:class:`ledger.errors.RequestIdReused`). A save without a ``request_id`` runs none of this.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import datetime
from typing import NamedTuple

from sqlalchemy import insert, select

from ledger.errors import InvalidArgument, RequestIdReused
from ledger.instants import to_micros
from ledger.models import MemoryRecord
from ledger.options import SaveOptions
from ledger.schema import SAVE_REQUESTS
from ledger.store import Prepared, param
from ledger.tx import Transaction
from ledger.wire import quote, request_id_text

C = SAVE_REQUESTS.c
_FIND = Prepared(
    select(C.record_id, C.fingerprint).where(C.scope_key == param("s"), C.request_id == param("request_id"))
)
_REMEMBER = Prepared(
    insert(SAVE_REQUESTS), column_keys=("record_id", "scope_key", "request_id", "fingerprint", "created_at")
)


class SaveRequest(NamedTuple):
    """A save's ``request_id`` and the fingerprint of its arguments."""

    request_id: str
    fingerprint: str

    @classmethod
    def of(cls, request_id: object, body: object, options: SaveOptions) -> SaveRequest:
        """Check ``request_id`` and fingerprint the save's arguments.

        Raises:
            InvalidArgument: not one line of 1 to 200 characters (no control characters, no lone surrogates).
        """
        try:
            checked = request_id_text(request_id)
        except ValueError as exc:
            raise InvalidArgument(f"request_id: {exc}; got {quote(request_id)}") from None
        return cls(checked, _fingerprint(body, options))


def _fingerprint(body: object, options: SaveOptions) -> str:
    expires_at = options.get("expires_at")
    kind = options.get("kind")
    arguments = {
        "body": body,
        "kind": None if kind is None else str(getattr(kind, "value", kind)),
        "supersedes": options.get("supersedes"),
        "expires_at": to_micros(expires_at, name="expires_at") if isinstance(expires_at, datetime) else None,
        "conflict_group": options.get("conflict_group"),
        "source_session_id": options.get("source_session_id"),
    }
    encoded = json.dumps(arguments, sort_keys=True, default=str).encode("utf-8", "surrogatepass")
    return hashlib.sha256(encoded).hexdigest()


def once(tx: Transaction, request: SaveRequest, save: Callable[[], MemoryRecord]) -> MemoryRecord:
    """``save()`` unless ``request`` already saved in ``tx``'s scope: then the record it wrote, as it is now.

    Raises:
        RequestIdReused: the id saved other arguments (nothing is written); else what ``save`` raises.
    """
    found = tx.rows(_FIND, {"s": tx.scope_key, "request_id": request.request_id})
    if found:
        record_id, fingerprint = found[0]
        if fingerprint is not None and fingerprint != request.fingerprint:
            raise RequestIdReused(
                f"requestId {quote(request.request_id)} was already used in this account for a save with other "
                f"arguments (record {record_id}); nothing was written. Use a new requestId for a new save",
                request_id=request.request_id,
                record_id=record_id,
            )
        return tx.records([record_id])[record_id]
    record = save()
    tx.store.send(
        tx.conn,
        _REMEMBER,
        {
            "record_id": record.id,
            "scope_key": tx.scope_key,
            "request_id": request.request_id,
            "fingerprint": request.fingerprint,
            "created_at": tx.now_us,
        },
    )
    return record
