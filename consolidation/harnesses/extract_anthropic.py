"""The anthropic extraction harness: one Messages request through the official SDK.

The same request discipline as consolidation's :class:`AnthropicHarness` (whose retry
and error handling it reuses): a hidden, one-turn, tool-less session — the extraction
system prompt, exactly one user message (:func:`consolidation.extraction.prompt.build_user_message`),
``max_tokens`` bounded, structured output where the model accepts it, retries only
where nothing was processed, all inside the wall-clock cap, no repair turn.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, ClassVar

from anthropic.types import TextBlock

from consolidation.extraction.digest import DigestMessage
from consolidation.extraction.prompt import (
    ANSWER_SCHEMA,
    SYSTEM_PROMPT,
    ProposalsParseError,
    build_user_message,
    parse_answer,
)
from consolidation.harnesses.anthropic import AnthropicHarness, _usage
from consolidation.harnesses.base import HarnessResult
from consolidation.harnesses.extract_base import Extractor
from consolidation.pricing import PriceTable

log = logging.getLogger(__name__)


class AnthropicExtractor(Extractor):
    """Extraction through the Anthropic Messages API (official SDK); see the module docstring."""

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
        self._transport = AnthropicHarness(
            api_key=api_key,
            base_url=base_url,
            prices=prices,
            structured_output=structured_output,
            backoff_initial_s=backoff_initial_s,
            backoff_max_s=backoff_max_s,
        )

    def request_params(
        self, digest: Sequence[DigestMessage], pinned: Sequence[str], *, model: str, max_output_tokens: int
    ) -> dict[str, Any]:
        """The keyword arguments of the one ``messages.create`` call (no ``tools``, one user message)."""
        return self._transport.one_turn_params(
            system=SYSTEM_PROMPT,
            user_message=build_user_message(digest, pinned),
            schema=ANSWER_SCHEMA,
            model=model,
            max_output_tokens=max_output_tokens,
        )

    def extract(
        self,
        digest: Sequence[DigestMessage],
        pinned: Sequence[str],
        *,
        model: str,
        max_output_tokens: int,
        wall_clock_cap_s: float,
    ) -> HarnessResult:
        """Make the one request; a response always returns a result (``answer`` None if it did not parse).

        Raises:
            HarnessError: no price for ``model`` (before any request), a timeout, an HTTP
                error other than a retried 429/529, a dropped connection, the cap ran out.
        """
        if max_output_tokens < 1 or not wall_clock_cap_s > 0:
            raise ValueError("max_output_tokens must be >= 1 and wall_clock_cap_s > 0")
        price = self._transport.price_for(model)
        params = self.request_params(digest, pinned, model=model, max_output_tokens=max_output_tokens)
        prompt: str = params["messages"][0]["content"]
        message = self._transport.send(params, cap_s=wall_clock_cap_s)
        usage = _usage(message)
        spend = price.spend_micro_usd(usage)
        raw = "".join(block.text for block in message.content if isinstance(block, TextBlock))
        log.info(
            "anthropic extraction call id=%s model=%s input_tokens=%d output_tokens=%d spend_micro_usd=%d",
            message.id,
            message.model,
            usage.input_tokens,
            usage.output_tokens,
            spend,
        )
        try:
            answer: dict[str, Any] | None = parse_answer(raw)
            error = None
        except ProposalsParseError as exc:
            answer, error = None, f"unparseable answer: {exc}"
            if message.stop_reason == "max_tokens":
                error += f" (the reply was cut off at max_tokens={max_output_tokens})"
        return HarnessResult(
            answer=answer, raw_text=raw, prompt=prompt, usage=usage, spend_micro_usd=spend, error=error
        )
