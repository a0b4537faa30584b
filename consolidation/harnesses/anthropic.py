"""The anthropic harness: one Messages API request through the official SDK.

The request is a hidden, one-turn, tool-less session: a system prompt, exactly one
user message carrying the records (:func:`consolidation.prompt.build_user_message`),
``max_tokens`` bounded, no ``tools``. When the model accepts it, the answer's JSON
schema is sent as structured output (``output_config.format``, type ``json_schema``)
so the reply is one JSON object; models known to predate structured output get the
same request without it and rely on the system prompt's instructions (no prefill:
the request keeps exactly one user message).

Retries, the wall-clock cap and what fails a run are :mod:`consolidation.harnesses.retry`'s
policy, shared with the openai harness: only 429, 529 and a connection that could not be
established are retried, all inside the cap, with the SDK's own retries off (``max_retries=0``).

There is no repair turn: a reply that does not parse is returned with ``answer=None``
and its usage and spend recorded.

The SDK's timeouts are per socket operation (connect, each read, each write); a
:class:`~consolidation.harnesses.calls.CallGuard` closes the call's connection when the cap
ends, so a server that trickles its answer cannot hold the call past it.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Sequence
from typing import Any, ClassVar, cast

import anthropic
from anthropic.types import Message, TextBlock

from consolidation.errors import HarnessError
from consolidation.harnesses.base import HarnessResult, PromptRecord, Turn
from consolidation.harnesses.calls import CallGuard
from consolidation.harnesses.one_turn import OneTurnHarness, check_bounds, checked_spend, price_for, read_reply
from consolidation.harnesses.retry import Backoff, SdkErrors, within_cap
from consolidation.models import Usage
from consolidation.pricing import ModelPrice, PriceTable
from consolidation.prompt import turn as consolidation_turn

log = logging.getLogger(__name__)

RETRYABLE_STATUSES = frozenset({429, 529})
ERRORS = SdkErrors(
    base=anthropic.AnthropicError,
    status=anthropic.APIStatusError,
    connection=anthropic.APIConnectionError,
    timeout=anthropic.APITimeoutError,
    service="the Anthropic API",
    retryable_statuses=RETRYABLE_STATUSES,
)
# Models released before structured output (output_config.format) was available.
_NO_STRUCTURED_OUTPUT = re.compile(r"^claude-(?:3|2|instant|sonnet-4(?:-0)?(?:-\d{8})?$|opus-4(?:-0)?(?:-\d{8})?$)")


def supports_structured_output(model: str) -> bool:
    """Whether ``model`` is expected to accept ``output_config.format`` (unknown models: yes)."""
    return _NO_STRUCTURED_OUTPUT.match(model) is None


def _usage(message: Message) -> Usage:
    usage = message.usage
    return Usage(
        input_tokens=usage.input_tokens or 0,
        output_tokens=usage.output_tokens or 0,
        cache_creation_input_tokens=usage.cache_creation_input_tokens or 0,
        cache_read_input_tokens=usage.cache_read_input_tokens or 0,
    )


class AnthropicHarness(OneTurnHarness):
    """Consolidation through the Anthropic Messages API (official SDK).

    ``api_key`` / ``base_url`` of ``None`` let the SDK read ``ANTHROPIC_API_KEY`` /
    ``ANTHROPIC_BASE_URL``. ``structured_output`` forces structured output on or off
    (default: on unless the model predates it). ``backoff_initial_s`` / ``backoff_max_s``
    shape the retry backoff. The harness keeps no connection between calls and is
    thread-safe.
    """

    name: ClassVar[str] = "anthropic"

    def __init__(
        self,
        *,
        api_key: str | None,
        base_url: str | None,
        prices: PriceTable,
        structured_output: bool | None = None,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 8.0,
    ) -> None:
        self._backoff = Backoff(initial_s=backoff_initial_s, max_s=backoff_max_s)
        self._api_key = api_key
        self._base_url = base_url
        self._prices = prices
        self._structured_output = structured_output

    def request_params(self, records: Sequence[PromptRecord], *, model: str, max_output_tokens: int) -> dict[str, Any]:
        """The keyword arguments of the one ``messages.create`` call (no ``tools``, one user message)."""
        return self.turn_params(consolidation_turn(records), model=model, max_output_tokens=max_output_tokens)

    def turn_params(self, turn: Turn, *, model: str, max_output_tokens: int) -> dict[str, Any]:
        """The ``messages.create`` arguments of ``turn``, asking for its schema where the model accepts it."""
        params: dict[str, Any] = {
            "model": model,
            "max_tokens": max_output_tokens,
            "system": turn.system,
            "messages": [{"role": "user", "content": turn.user_message}],
        }
        structured = self._structured_output
        if structured is None:
            structured = supports_structured_output(model)
        if structured:
            params["output_config"] = {"format": {"type": "json_schema", "schema": turn.schema}}
        return params

    def ask(self, turn: Turn, *, model: str, max_output_tokens: int, wall_clock_cap_s: float) -> HarnessResult:
        """Make the one Messages request for ``turn`` within ``wall_clock_cap_s``.

        Returns a result whenever a response arrived (``answer`` is ``None`` when its
        text did not parse). Usage and spend come from the response.

        Raises:
            HarnessError: no price for ``model`` (checked before any request), a timeout,
                an HTTP error other than a retried 429/529, a dropped connection, or the
                cap ran out while retrying (``retryable_exhausted``).
            ValueError: ``max_output_tokens`` < 1, or ``wall_clock_cap_s`` not a positive finite number.
        """
        check_bounds(max_output_tokens, wall_clock_cap_s)
        price = price_for(self._prices, model)
        params = self.turn_params(turn, model=model, max_output_tokens=max_output_tokens)
        message = self.send(params, cap_s=wall_clock_cap_s)
        return self._result(message, turn=turn, price=price, max_output_tokens=max_output_tokens)

    def send(self, params: dict[str, Any], *, cap_s: float) -> Message:
        """Make the ``messages.create`` request within ``cap_s`` under the shared retry policy.

        Raises:
            HarnessError: see :func:`consolidation.harnesses.retry.within_cap`; also no credential.
        """
        try:
            with (
                CallGuard(time.monotonic() + cap_s) as guard,
                anthropic.Anthropic(
                    api_key=self._api_key,
                    base_url=self._base_url,
                    max_retries=0,
                    timeout=cap_s,
                    http_client=anthropic.DefaultHttpxClient(event_hooks=guard.event_hooks()),
                ) as client,
            ):
                return within_cap(
                    lambda remaining: cast(Message, client.messages.create(**params, timeout=remaining)),
                    guard=guard,
                    cap_s=cap_s,
                    errors=ERRORS,
                    backoff=self._backoff,
                    model=params["model"],
                )
        except TypeError as exc:
            # The SDK raises TypeError when it cannot resolve any credential; anything else is a bug.
            if "authentication" not in str(exc):
                raise
            raise HarnessError(
                f"the Anthropic SDK could not make the request ({exc}); "
                "set ANTHROPIC_API_KEY or use the offline harness"
            ) from exc

    def _result(self, message: Message, *, turn: Turn, price: ModelPrice, max_output_tokens: int) -> HarnessResult:
        usage = _usage(message)
        spend = checked_spend(price, usage)
        text = "".join(block.text for block in message.content if isinstance(block, TextBlock))
        log.info(
            "anthropic call id=%s model=%s stop_reason=%s input_tokens=%d output_tokens=%d spend_micro_usd=%d",
            message.id,
            message.model,
            message.stop_reason,
            usage.input_tokens,
            usage.output_tokens,
            spend,
        )
        why = {
            "max_tokens": f" (the reply was cut off at max_tokens={max_output_tokens}: raise max_output_tokens)",
            "refusal": " (the model refused)",
        }.get(message.stop_reason or "")
        return read_reply(turn, text, prompt=turn.user_message, usage=usage, spend=spend, why=why)
