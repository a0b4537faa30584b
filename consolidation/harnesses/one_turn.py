"""The paying harnesses' common shape: each job's call is one :class:`~consolidation.harnesses.base.Turn`.

A vendor's harness implements :meth:`OneTurnHarness.ask` (its request, retries, reading
of the reply); consolidation's call sends :func:`consolidation.prompt.turn` through it, and
:class:`~consolidation.harnesses.extract_base.OneTurnExtractor` sends extraction's turn
through the same method.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Sequence
from typing import Any

from consolidation.errors import HarnessError, UnknownModelPrice
from consolidation.harnesses.base import Harness, HarnessResult, PromptRecord, Turn
from consolidation.models import Usage, usage_problem
from consolidation.pricing import ModelPrice, PriceTable
from consolidation.prompt import turn as consolidation_turn


class OneTurnHarness(Harness):
    """A harness whose call is one :class:`Turn` to a priced model; the vendor's module supplies :meth:`ask`.

    The extraction harnesses send their turn through the same :meth:`ask`
    (:class:`~consolidation.harnesses.extract_base.OneTurnExtractor`).
    """

    def call(
        self, records: Sequence[PromptRecord], *, model: str, max_output_tokens: int, wall_clock_cap_s: float
    ) -> HarnessResult:
        """Send the consolidation turn for ``records``; see :meth:`ask`."""
        return self.ask(
            consolidation_turn(records),
            model=model,
            max_output_tokens=max_output_tokens,
            wall_clock_cap_s=wall_clock_cap_s,
        )

    @abstractmethod
    def ask(self, turn: Turn, *, model: str, max_output_tokens: int, wall_clock_cap_s: float) -> HarnessResult:
        """Make the one request for ``turn`` within ``wall_clock_cap_s``.

        Returns a result whenever a response arrived (``answer`` is ``None`` when its text
        did not parse). Usage and spend come from the response.

        Raises:
            HarnessError: no price for ``model`` (checked before any request), or the request failed.
            ValueError: ``max_output_tokens`` < 1, or ``wall_clock_cap_s`` not a positive finite number.
        """


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


def checked_spend(price: ModelPrice, usage: Usage) -> int:
    """The spend of a reply's ``usage`` at ``price``, once the usage is known to be possible.

    Raises:
        HarnessError: the server reported impossible usage (:func:`consolidation.models.usage_problem`).
    """
    problem = usage_problem(usage)
    if problem is not None:
        raise HarnessError(f"{problem}; the answer was not used")
    return price.spend_micro_usd(usage)


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
