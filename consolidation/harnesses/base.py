"""What every harness takes and gives back.

A harness makes the one hidden model call of a consolidation run: it receives the
scope's active records and returns the model's answer with the tokens and spend the
call observed. It never touches the ledger and never validates the answer's
semantics; the gate does that.

Two outcomes, and only two:

* :class:`HarnessResult` — a response arrived. ``answer`` is the parsed
  ``{"operations": [...]}`` or ``None`` when the text did not parse (``error`` says
  why); usage and spend are recorded either way, because the call was paid for.
* :class:`HarnessError` — the call failed (timeout, HTTP error, connection, retries
  exhausted inside the wall-clock cap). The run settles ``failed``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from consolidation.pricing import ModelPrice, PriceTable, UnknownModelPrice


@dataclass(frozen=True, slots=True)
class PromptRecord:
    """One active record as the model sees it: nothing but id, kind, body and conflict group."""

    id: str
    kind: str
    body: str
    conflict_group: str | None


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts reported by the API for one call (all zero for the offline harness)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    @property
    def prompt_tokens(self) -> int:
        """Every input token of the request: uncached, cache writes and cache reads."""
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens


@dataclass(frozen=True, slots=True)
class HarnessResult:
    """A response arrived.

    ``prompt`` is the exact user message that was sent; the run stores it (and scrubs it
    when a record is erased). ``answer`` is ``None`` when ``raw_text`` did not parse, and
    then ``error`` starts with ``"unparseable answer: "``.
    """

    answer: dict[str, Any] | None
    raw_text: str
    prompt: str
    usage: Usage
    spend_micro_usd: int
    error: str | None = None


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


class Harness(ABC):
    """One way to make the consolidation call. Implementations are thread-safe."""

    name: ClassVar[str]

    @abstractmethod
    def call(
        self,
        records: Sequence[PromptRecord],
        *,
        model: str,
        max_output_tokens: int,
        wall_clock_cap_s: float,
    ) -> HarnessResult:
        """Ask for consolidation operations over ``records`` and return the answer.

        At most one paid model response per call; the whole call, retries included,
        stays inside ``wall_clock_cap_s``.

        Raises:
            HarnessError: the call failed; nothing usable arrived.
        """


@dataclass(frozen=True, slots=True)
class Turn:
    """One hidden, tool-less turn of either job: what is sent, and how the reply's text is read.

    ``parse`` turns the text into the answer or raises ``parse_error``; ``schema_name``
    names ``schema`` where the API wants a name for it.
    """

    system: str
    user_message: str
    schema: dict[str, Any]
    schema_name: str
    parse: Callable[[str], dict[str, Any]]
    parse_error: type[ValueError]


def check_bounds(max_output_tokens: int, wall_clock_cap_s: float) -> None:
    """Refuse a call that could not be bounded. Raises ValueError (a caller's bug: settings check these)."""
    if max_output_tokens < 1:
        raise ValueError(f"max_output_tokens must be at least 1, got {max_output_tokens}")
    if not (wall_clock_cap_s > 0 and math.isfinite(wall_clock_cap_s)):
        raise ValueError(f"wall_clock_cap_s must be a positive number of seconds, got {wall_clock_cap_s}")


def price_for(prices: PriceTable, model: str) -> ModelPrice:
    """The price of ``model``.

    Raises:
        HarnessError: no price for ``model`` (a call whose spend cannot be accounted is never made).
    """
    try:
        return prices.price_for(model)
    except UnknownModelPrice as exc:
        raise HarnessError(str(exc)) from exc


def read_reply(turn: Turn, text: str, *, prompt: str, usage: Usage, spend: int, why: str | None) -> HarnessResult:
    """The result of a reply whose text is ``text``: parsed by ``turn``, or ``answer`` None and ``error`` saying why.

    ``why`` is the vendor's reading of how the reply stopped (" (the reply was cut off …)"),
    added to the error when the text did not parse.
    """
    try:
        answer: dict[str, Any] | None = turn.parse(text)
        error = None
    except turn.parse_error as exc:
        answer = None
        error = f"unparseable answer: {exc}{why or ''}"
    return HarnessResult(answer=answer, raw_text=text, prompt=prompt, usage=usage, spend_micro_usd=spend, error=error)
