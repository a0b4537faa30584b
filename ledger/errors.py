"""Errors raised by the ledger.

Every error a caller can cause is a :class:`LedgerError`; each carries a stable
``reason`` that the protocol maps to ``data.reason``::

    LedgerError                      reason
    ├── BodyRejected                 body_rejected
    ├── BudgetExceeded               budget_exceeded
    ├── RecordNotFound               not_found
    ├── InvalidTransition            invalid_transition
    ├── InvalidInstant               invalid_params
    ├── ScopeError                   invalid_params
    ├── InvalidArgument              invalid_params
    │   ├── AmbiguousId              ambiguous_id   (an ``/unpin`` prefix that matches several pins)
    │   └── RequestIdReused          request_id_reused   (a ``request_id`` already used for another save)
    ├── LedgerBusy                   busy   (the database stayed locked past every retry)
    └── OutcomeUnknown               outcome_unknown   (the connection was lost after ``COMMIT`` was sent)

The memory files (:mod:`ledger.files`) raise errors that never cross the protocol::

    ValueError
    ├── AuditUsageError              the audit was asked something it cannot do
    └── DateError                    a value is not an acceptable date (``check``: the sub-rule)
    Exception
    └── EntryUnreadable              a file could not be read at all

The protocol's own refusals, before any ledger call (a malformed request, unknown method or bad
params), are not ledger errors: they carry their JSON-RPC code themselves::

    Exception
    └── RpcError                     a JSON-RPC error answer: ``code``, ``message``, ``data.reason``

Messages say what the user can do next. Third-party errors (SQLAlchemy, sqlite3,
psycopg) are translated at the boundary and never reach a caller.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

# An error message quotes at most this many characters of an id.
MAX_SHOWN_ID_CHARS = 80


class LedgerError(Exception):
    """Root of every error the ledger raises on purpose."""

    reason = "ledger_error"

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(message)
        self.message = message
        self.context = context

    def __str__(self) -> str:
        return self.message


class BodyRejected(LedgerError):
    """A record body failed screening (empty, too long, credential-shaped).

    ``why`` is a short machine-readable cause: ``empty``, ``too_long`` or ``credential``.
    """

    reason = "body_rejected"

    def __init__(self, message: str, *, why: str, detail: str | None = None) -> None:
        super().__init__(message, why=why, detail=detail)
        self.why = why
        self.detail = detail


class BudgetExceeded(LedgerError):
    """A write would take a scope past its ``max_records``; nothing was changed."""

    reason = "budget_exceeded"

    def __init__(self, message: str, *, scope_key: str, budget: int, active: int, proposed: int) -> None:
        super().__init__(message, scope_key=scope_key, budget=budget, active=active, proposed=proposed)
        self.scope_key = scope_key
        self.budget = budget
        self.active = active
        self.proposed = proposed

    @property
    def held(self) -> int:
        return self.active + self.proposed

    @classmethod
    def refusal(
        cls, *, scope_key: str, budget: int, active: int, proposed: int, notes: tuple[str, ...] = ()
    ) -> BudgetExceeded:
        """The one refusal of a full scope, whole: what it holds, then what makes room.

        ``notes`` are what the budget hooks said (consolidation: "a run is scheduled …"); with none,
        turning consolidation on is one of the ways to make room. Its length is bounded (the scope key
        is), so no surface cuts it.
        """
        held = f"{scope_key} holds {active + proposed} of {budget} ({active} active, {proposed} proposed)"
        held += "; nothing was saved."
        ways = "forget a pin you no longer need, reject a waiting proposal, edit a pin instead of adding one"
        if notes:
            advice = f"{' '.join(notes)} To make room now: {ways}, or raise the budget."
        else:
            advice = f"To make room: {ways}, turn on consolidation to merge duplicates, or raise the budget."
        return cls(f"{held} {advice}", scope_key=scope_key, budget=budget, active=active, proposed=proposed)


class RecordNotFound(LedgerError):
    """No record of the bound account has this id (an unknown id and another account's alike)."""

    reason = "not_found"

    def __init__(self, message: str, *, record_id: str) -> None:
        super().__init__(message, record_id=record_id)
        self.record_id = record_id

    @classmethod
    def for_id(cls, record_id: object) -> RecordNotFound:
        """The one refusal for an id the bound account does not hold.

        It names only the id the caller sent (at most :data:`MAX_SHOWN_ID_CHARS` of it), so an
        unknown id and an id of another account get the same message and context.
        """
        text = record_id if isinstance(record_id, str) else str(record_id)
        shown = repr(text[:MAX_SHOWN_ID_CHARS])
        if len(text) > MAX_SHOWN_ID_CHARS:
            shown += f"… ({len(text):,} characters)"
        return cls(f"no memory record {shown} in this account", record_id=text)


class InvalidTransition(LedgerError):
    """The record's status does not allow the requested operation."""

    reason = "invalid_transition"


class InvalidInstant(LedgerError):
    """An instant was naive, of the wrong type, or out of range."""

    reason = "invalid_params"


class ScopeError(LedgerError):
    """A scope key was malformed, or an operation crossed scopes."""

    reason = "invalid_params"


class InvalidArgument(LedgerError):
    """Any other argument a caller got wrong (unknown kind, bad confidence, ...)."""

    reason = "invalid_params"


class LedgerBusy(LedgerError):
    """The database stayed locked or kept failing serialization past every retry."""

    reason = "busy"


class OutcomeUnknown(LedgerError):
    """The connection to the database was lost once ``COMMIT`` had been sent: the write may or may not have
    been applied. Never retried by the ledger; ``record_id``, when known, is the record the write would have
    written (read it to know), and a save retried with the same ``request_id`` is applied at most once."""

    reason = "outcome_unknown"

    def __init__(self, message: str, *, record_id: str | None = None) -> None:
        super().__init__(message, record_id=record_id)
        self.record_id = record_id

    @classmethod
    def lost(cls, record_id: str | None = None) -> OutcomeUnknown:
        """The one message, naming the record to read when the write was a save."""
        check = (
            f"read record {record_id} (memory/get_memory_record): it shows whether the write was applied"
            if record_id is not None
            else "read the records it touched before writing again"
        )
        return cls(
            "outcome unknown: the connection to the ledger database was lost after the write was sent to be "
            f"committed, so it may or may not have been applied; {check}. A save or edit retried with the same "
            "requestId is applied at most once",
            record_id=record_id,
        )

    def naming(self, record_id: str) -> OutcomeUnknown:
        """The same error, naming the record the write would have written."""
        return self if self.record_id is not None else OutcomeUnknown.lost(record_id)


class AmbiguousId(InvalidArgument):
    """An ``/unpin`` prefix that matches more than one active pin; nothing was forgotten."""

    reason = "ambiguous_id"


class RequestIdReused(InvalidArgument):
    """A save's ``request_id`` was already used in the scope for a save with other arguments; nothing was written."""

    reason = "request_id_reused"

    def __init__(self, message: str, *, request_id: str, record_id: str) -> None:
        super().__init__(message, request_id=request_id, record_id=record_id)
        self.request_id = request_id
        self.record_id = record_id


# --- the memory files (``ledger.files``): not LedgerErrors, they never cross the protocol


class AuditUsageError(ValueError):
    """The audit was asked something it cannot do (bad scope, not a directory)."""


class DateError(ValueError):
    """A value is not an acceptable date; ``check`` is the sub-rule id."""

    def __init__(self, check: str, message: str) -> None:
        super().__init__(message)
        self.check = check
        self.message = message


class EntryUnreadable(Exception):
    """The file could not be read at all (missing, a directory, no permission)."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: cannot read: {reason}")
        self.path = path
        self.reason = reason


class RpcError(Exception):
    """A protocol-level refusal with its JSON-RPC code and ``data.reason`` (exported by :mod:`ledger.protocol`)."""

    def __init__(self, code: int, message: str, *, reason: str, **data: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data: dict[str, Any] = {"reason": reason, **data}
