"""Errors raised by consolidation.

::

    ledger.LedgerError
    └── ConsolidationError
        ├── InvalidSettings     reason invalid_params
        ├── InvalidExtractionInput  reason invalid_params
        └── RunNotFound         reason not_found

They subclass the ledger's root so the protocol maps them the same way.
"""

from __future__ import annotations

from ledger.errors import LedgerError


class ConsolidationError(LedgerError):
    reason = "consolidation_error"


class InvalidSettings(ConsolidationError):
    """A settings field failed validation; nothing was changed."""

    reason = "invalid_params"


class RunNotFound(ConsolidationError):
    reason = "not_found"


class InvalidExtractionInput(ConsolidationError):
    """A turn's messages (or a session id) failed validation; nothing was stored."""

    reason = "invalid_params"
