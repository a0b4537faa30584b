"""Errors raised by consolidation.

::

    ledger.LedgerError
    └── ConsolidationError
        ├── InvalidSettings     reason invalid_params
        ├── InvalidExtractionInput  reason invalid_params
        ├── RunNotFound         reason not_found
        ├── NotRetryable        reason invalid_transition: a run that cannot be retried (and why)
        └── ReplayStopped       reason replay_stopped: the replay's harness kept failing runs

    Exception
    ├── HarnessError            the model call failed; the run settles ``failed`` (usage and spend kept)
    ├── FormatRefused           a server refused the openai harness's ``response_format`` (internal: tried again
    │                           without it)
    ├── ResponseTooLarge        a model server's answer passed the size bound (internal: becomes a HarnessError)
    └── LostRace                another caller settled the run first (internal: rolls a batch back)

    ValueError
    ├── AnswerParseError        the model's text is not ``{"operations": [...]}`` (the run keeps the text)
    ├── ProposalsParseError     the model's text is not ``{"proposals": [...]}`` (the run keeps the text)
    └── UnknownHarness          a harness name that is not in the registry

    LookupError
    └── UnknownModelPrice       a model without a price, so its spend cannot be accounted

The first subclass the ledger's root so the protocol maps them the same way; ``FormatRefused`` and
``LostRace`` never leave the package, and the harness's and the parsers' errors become a run's outcome
(``failed``, or an answer of ``None``), or an :class:`InvalidSettings` where a setting names them.
"""

from __future__ import annotations

from collections.abc import Iterable

from consolidation.models import Usage
from ledger.errors import LedgerError


class ConsolidationError(LedgerError):
    reason = "consolidation_error"


class InvalidSettings(ConsolidationError):
    """A settings field failed validation; nothing was changed."""

    reason = "invalid_params"


class RunNotFound(ConsolidationError):
    reason = "not_found"


class NotRetryable(ConsolidationError):
    """:meth:`ConsolidationService.retry` of a run that is not a failed or abandoned consolidation run, or whose
    scope has consolidation off; nothing was queued."""

    reason = "invalid_transition"


class ReplayStopped(ConsolidationError):
    """The replay's harness failed run after run for a cause other than the designed one; the replay stopped."""

    reason = "replay_stopped"


class InvalidExtractionInput(ConsolidationError):
    """A turn's messages (or a session id) failed validation; nothing was stored."""

    reason = "invalid_params"


class ResponseTooLarge(Exception):
    """Raised inside the HTTP client when a model server's response passes the call's size bound
    (:attr:`consolidation.harnesses.calls.CallGuard.max_response_bytes`); the harness reports it as a
    :class:`HarnessError`."""


class LostRace(Exception):
    """Another caller settled the run first; the transaction that tried to apply its batch rolls back."""


class HarnessError(Exception):
    """The model call failed; the run settles ``failed``.

    ``usage`` and ``spend_micro_usd`` carry whatever was observed before the failure
    (usually nothing: a failed HTTP call reports no usage). ``retryable_exhausted`` is
    true when every attempt met a retryable condition (429, 529, connection refused) and
    the wall-clock cap ran out before one succeeded.
    """

    def __init__(
        self,
        message: str,
        *,
        usage: Usage | None = None,
        spend_micro_usd: int = 0,
        retryable_exhausted: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.usage = usage if usage is not None else Usage()
        self.spend_micro_usd = spend_micro_usd
        self.retryable_exhausted = retryable_exhausted

    def __str__(self) -> str:
        return self.message


class FormatRefused(Exception):
    """Raised out of one attempt when the server refused the ``response_format`` form (not retried)."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


class AnswerParseError(ValueError):
    """The model's text is not one JSON object with an ``operations`` list."""


class ProposalsParseError(ValueError):
    """The model's text is not one JSON object with a ``proposals`` list."""


class UnknownHarness(ValueError):
    """A harness name that is not one of :data:`consolidation.harnesses.HARNESS_NAMES`."""

    def __init__(self, name: str, *, known: Iterable[str]) -> None:
        self.name = name
        super().__init__(f"unknown harness {str(name)[:40]!r}; choose one of: {', '.join(known)}")


class UnknownModelPrice(LookupError):
    """A model has no price in the table; it cannot be chosen until one is configured."""

    def __init__(self, model: str, *, known: Iterable[str]) -> None:
        self.model = model
        self.known = tuple(sorted(known))
        self.message = (
            f"no price is known for model {model!r}, so its spend cannot be accounted. "
            f"Known models: {', '.join(self.known)}. Choose one of them, or configure a price for {model!r} "
            "(input, output, cache write and cache read in USD per million tokens, e.g. "
            "MEMLEDGER_MODEL_PRICES or the [model_prices] table of the configuration file)."
        )
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.message
