"""Errors raised by consolidation.

::

    ledger.LedgerError
    └── ConsolidationError
        ├── InvalidSettings     reason invalid_params
        ├── InvalidExtractionInput  reason invalid_params
        └── RunNotFound         reason not_found

    Exception
    └── LostRace                another caller settled the run first (internal: rolls a batch back)

They subclass the ledger's root so the protocol maps them the same way; ``LostRace`` never
leaves the package.
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


class LostRace(Exception):
    """Another caller settled the run first; the transaction that tried to apply its batch rolls back."""
