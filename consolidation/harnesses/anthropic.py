"""The anthropic harness: one Messages API request through the official SDK.

The request is a hidden, one-turn, tool-less session: a system prompt, exactly one
user message carrying the records (:func:`consolidation.prompt.build_user_message`),
``max_tokens`` bounded, no ``tools``. When the model accepts it, the answer's JSON
schema is sent as structured output (``output_config.format``, type ``json_schema``)
so the reply is one JSON object; models known to predate structured output get the
same request without it and rely on the system prompt's instructions (no prefill:
the request keeps exactly one user message).

Retries happen only where the response proves nothing was processed: HTTP 429, HTTP
529 and a connection that could not be established (refused, unreachable). They use
tenacity with ``stop_before_delay(cap)`` and exponential backoff with jitter (at least
any ``retry-after`` the API sent), and every attempt's timeout is what is left of the
wall-clock cap, so the whole call stays inside it. The SDK's own retries are off
(``max_retries=0``). A timeout, any other HTTP status, or a connection dropped after
the request was sent raises :class:`HarnessError`: the request may have been
processed, and a second paid call is worse than a failed run.

There is no repair turn: a reply that does not parse is returned with ``answer=None``
and its usage and spend recorded.

Timeouts are per socket operation (connect, each read, each write), so a server that
trickles bytes could hold an attempt past the cap; the run service's janitor covers
that case.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Sequence
from typing import Any, ClassVar, cast

import anthropic
import httpx2
from anthropic.types import Message, TextBlock
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_before_delay, wait_exponential_jitter
from tenacity.stop import stop_base

from consolidation.harnesses.base import Harness, HarnessError, HarnessResult, PromptRecord, Usage
from consolidation.pricing import ModelPrice, PriceTable, UnknownModelPrice
from consolidation.prompt import ANSWER_SCHEMA, SYSTEM_PROMPT, AnswerParseError, build_user_message, parse_answer

log = logging.getLogger(__name__)

RETRYABLE_STATUSES = frozenset({429, 529})
# Models released before structured output (output_config.format) was available.
_NO_STRUCTURED_OUTPUT = re.compile(r"^claude-(?:3|2|instant|sonnet-4(?:-0)?(?:-\d{8})?$|opus-4(?:-0)?(?:-\d{8})?$)")
_MAX_RETRY_AFTER_S = 60.0
# A retry is not started unless at least this much of the cap is left for it.
_MIN_ATTEMPT_S = 0.05


def supports_structured_output(model: str) -> bool:
    """Whether ``model`` is expected to accept ``output_config.format`` (unknown models: yes)."""
    return _NO_STRUCTURED_OUTPUT.match(model) is None


def _connect_failed(exc: BaseException) -> bool:
    """The connection was never established, so the request cannot have been processed."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, (httpx2.ConnectError, ConnectionRefusedError)):
            return True
        current = current.__cause__ or current.__context__
    return False


def is_retryable(exc: BaseException) -> bool:
    """429, 529, or a connection that could not be established; never a timeout."""
    if isinstance(exc, anthropic.APIStatusError):
        return exc.status_code in RETRYABLE_STATUSES
    if isinstance(exc, anthropic.APITimeoutError):
        return False
    if isinstance(exc, anthropic.APIConnectionError):
        return _connect_failed(exc)
    return False


def _retry_after_s(exc: BaseException | None) -> float | None:
    if not isinstance(exc, anthropic.APIStatusError):
        return None
    headers = exc.response.headers
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            continue  # an HTTP date: fall back to our own backoff
        if seconds >= 0:
            return min(seconds, _MAX_RETRY_AFTER_S)
    return None


class _StopAtDeadline(stop_base):
    """Stop when the next attempt could not start with ``_MIN_ATTEMPT_S`` of the cap left."""

    def __init__(self, deadline: float) -> None:
        self._deadline = deadline

    def __call__(self, retry_state: RetryCallState) -> bool:
        return time.monotonic() + retry_state.upcoming_sleep + _MIN_ATTEMPT_S >= self._deadline


class _Backoff:
    """Exponential backoff with jitter, never shorter than the API's ``retry-after``."""

    def __init__(self, *, initial_s: float, max_s: float) -> None:
        self._exponential = wait_exponential_jitter(multiplier=initial_s, max=max_s, jitter=initial_s)

    def __call__(self, retry_state: RetryCallState) -> float:
        delay = self._exponential(retry_state)
        outcome = retry_state.outcome
        retry_after = _retry_after_s(outcome.exception() if outcome is not None else None)
        return delay if retry_after is None else max(delay, retry_after)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, anthropic.APIStatusError):
        detail = exc.api_message or exc.type or "no detail"
        return f"HTTP {exc.status_code} ({detail})"
    if isinstance(exc, anthropic.APIConnectionError) and _connect_failed(exc):
        return "connection refused or unreachable"
    return type(exc).__name__


def _log_retry(state: RetryCallState) -> None:
    exc = state.outcome.exception() if state.outcome is not None else None
    log.info(
        "anthropic call attempt=%d failed retryably (%s); retrying in %.2f s",
        state.attempt_number,
        _describe(exc) if exc is not None else "?",
        state.upcoming_sleep,
    )


def _usage(message: Message) -> Usage:
    usage = message.usage
    return Usage(
        input_tokens=usage.input_tokens or 0,
        output_tokens=usage.output_tokens or 0,
        cache_creation_input_tokens=usage.cache_creation_input_tokens or 0,
        cache_read_input_tokens=usage.cache_read_input_tokens or 0,
    )


class AnthropicHarness(Harness):
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
        if backoff_initial_s <= 0 or backoff_max_s < backoff_initial_s:
            raise ValueError("backoff_initial_s must be > 0 and backoff_max_s >= backoff_initial_s")
        self._api_key = api_key
        self._base_url = base_url
        self._prices = prices
        self._structured_output = structured_output
        self._backoff_initial_s = backoff_initial_s
        self._backoff_max_s = backoff_max_s

    def request_params(self, records: Sequence[PromptRecord], *, model: str, max_output_tokens: int) -> dict[str, Any]:
        """The keyword arguments of the one ``messages.create`` call (no ``tools``, one user message)."""
        return self.one_turn_params(
            system=SYSTEM_PROMPT,
            user_message=build_user_message(records),
            schema=ANSWER_SCHEMA,
            model=model,
            max_output_tokens=max_output_tokens,
        )

    def one_turn_params(
        self, *, system: str, user_message: str, schema: dict[str, Any], model: str, max_output_tokens: int
    ) -> dict[str, Any]:
        """The ``messages.create`` arguments of one tool-less turn, asking for ``schema`` where the model accepts it."""
        params: dict[str, Any] = {
            "model": model,
            "max_tokens": max_output_tokens,
            "system": system,
            "messages": [{"role": "user", "content": user_message}],
        }
        structured = self._structured_output
        if structured is None:
            structured = supports_structured_output(model)
        if structured:
            params["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
        return params

    def price_for(self, model: str) -> ModelPrice:
        """The price of ``model``.

        Raises:
            HarnessError: no price for ``model``.
        """
        try:
            return self._prices.price_for(model)
        except UnknownModelPrice as exc:
            # Refuse before paying: a call whose spend cannot be accounted is never made.
            raise HarnessError(str(exc)) from exc

    def call(
        self,
        records: Sequence[PromptRecord],
        *,
        model: str,
        max_output_tokens: int,
        wall_clock_cap_s: float,
    ) -> HarnessResult:
        """Make the one Messages request for ``records`` within ``wall_clock_cap_s``.

        Returns a result whenever a response arrived (``answer`` is ``None`` when its
        text did not parse). Usage and spend come from the response.

        Raises:
            HarnessError: no price for ``model`` (checked before any request), a timeout,
                an HTTP error other than a retried 429/529, a dropped connection, or the
                cap ran out while retrying (``retryable_exhausted``).
            ValueError: ``max_output_tokens`` < 1, or ``wall_clock_cap_s`` not a positive finite number.
        """
        if max_output_tokens < 1:
            raise ValueError(f"max_output_tokens must be at least 1, got {max_output_tokens}")
        if not (wall_clock_cap_s > 0 and math.isfinite(wall_clock_cap_s)):
            raise ValueError(f"wall_clock_cap_s must be a positive number of seconds, got {wall_clock_cap_s}")
        price = self.price_for(model)
        params = self.request_params(records, model=model, max_output_tokens=max_output_tokens)
        prompt: str = params["messages"][0]["content"]
        message = self._create(params, cap_s=wall_clock_cap_s)
        return self._result(message, prompt=prompt, price=price, max_output_tokens=max_output_tokens)

    def _create(self, params: dict[str, Any], *, cap_s: float) -> Message:
        deadline = time.monotonic() + cap_s
        attempts = 0
        retrying = Retrying(
            # stop_before_delay is the budget measured from the first attempt; _StopAtDeadline also
            # counts the client's set-up and keeps a usable slice of the cap for the next attempt.
            stop=stop_before_delay(cap_s) | _StopAtDeadline(deadline),
            wait=_Backoff(initial_s=self._backoff_initial_s, max_s=self._backoff_max_s),
            retry=retry_if_exception(is_retryable),
            reraise=True,
            before_sleep=_log_retry,
        )
        try:
            with anthropic.Anthropic(
                api_key=self._api_key, base_url=self._base_url, max_retries=0, timeout=cap_s
            ) as client:
                for attempt in retrying:
                    with attempt:
                        attempts += 1
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            raise HarnessError(
                                f"the {cap_s:g} s wall-clock cap ran out before attempt {attempts} could start",
                                retryable_exhausted=attempts > 1,
                            )
                        return cast(Message, client.messages.create(**params, timeout=remaining))
        except HarnessError:
            raise
        except anthropic.APITimeoutError as exc:
            raise HarnessError(
                f"the model call timed out: no response within the {cap_s:g} s wall-clock cap "
                f"(model {params['model']}, attempt {attempts}); raise wall_clock_cap_s if this repeats"
            ) from exc
        except anthropic.AnthropicError as exc:
            if is_retryable(exc):
                raise HarnessError(
                    f"the Anthropic API was still unavailable ({_describe(exc)}) when the {cap_s:g} s wall-clock cap "
                    f"ran out after {attempts} attempt(s); the run can be retried later",
                    retryable_exhausted=True,
                ) from exc
            if isinstance(exc, anthropic.APIStatusError):
                message = f"the Anthropic API answered {_describe(exc)}; not retried"
            elif isinstance(exc, anthropic.APIConnectionError):
                cause = type(exc.__cause__).__name__ if exc.__cause__ is not None else "connection error"
                message = (
                    f"the connection to the Anthropic API broke after it was established ({cause}); not retried, "
                    "because the request may have been processed"
                )
            else:
                message = f"the Anthropic SDK failed: {exc}"
            raise HarnessError(message) from exc
        except TypeError as exc:
            # The SDK raises TypeError when it cannot resolve any credential; anything else is a bug.
            if "authentication" not in str(exc):
                raise
            raise HarnessError(
                f"the Anthropic SDK could not make the request ({exc}); "
                "set ANTHROPIC_API_KEY or use the offline harness"
            ) from exc
        raise AssertionError("unreachable: tenacity either returns or raises")  # pragma: no cover

    def _result(self, message: Message, *, prompt: str, price: ModelPrice, max_output_tokens: int) -> HarnessResult:
        usage = _usage(message)
        spend = price.spend_micro_usd(usage)
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
        try:
            answer: dict[str, Any] | None = parse_answer(text)
            error = None
        except AnswerParseError as exc:
            answer = None
            error = f"unparseable answer: {exc}"
            if message.stop_reason == "max_tokens":
                error += f" (the reply was cut off at max_tokens={max_output_tokens})"
            elif message.stop_reason == "refusal":
                error += " (the model refused)"
        return HarnessResult(
            answer=answer, raw_text=text, prompt=prompt, usage=usage, spend_micro_usd=spend, error=error
        )
