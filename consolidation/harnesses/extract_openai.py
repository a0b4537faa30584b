"""The openai extraction harness: one Chat Completions request through the official ``openai`` SDK.

The same request discipline as consolidation's :class:`~consolidation.harnesses.openai.OpenAIHarness`
(whose transport, ``response_format`` fallback and error handling it reuses): a hidden,
one-turn, tool-less session — the extraction system text and exactly one user message
(:func:`consolidation.extraction.prompt.build_user_message`), the output bounded, retries
only where nothing was processed, all inside the wall-clock cap, no repair turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from consolidation.extraction.digest import DigestMessage
from consolidation.extraction.prompt import (
    ANSWER_SCHEMA,
    SYSTEM_PROMPT,
    ProposalsParseError,
    build_user_message,
    parse_answer,
)
from consolidation.harnesses.base import HarnessResult
from consolidation.harnesses.extract_base import Extractor
from consolidation.harnesses.openai import FORMATS, OpenAIHarness
from consolidation.pricing import PriceTable


class OpenAIExtractor(Extractor):
    """Extraction through Chat Completions (official ``openai`` SDK); see the module docstring."""

    name: ClassVar[str] = "openai"

    def __init__(
        self,
        *,
        api_key: str | None,
        base_url: str | None,
        prices: PriceTable,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 8.0,
    ) -> None:
        self._transport = OpenAIHarness(
            api_key=api_key,
            base_url=base_url,
            prices=prices,
            backoff_initial_s=backoff_initial_s,
            backoff_max_s=backoff_max_s,
        )

    def request_params(
        self,
        digest: Sequence[DigestMessage],
        pinned: Sequence[str],
        *,
        model: str,
        max_output_tokens: int,
        form: str = FORMATS[0],
    ) -> dict[str, Any]:
        """The keyword arguments of the one ``chat.completions.create`` call (no ``tools``)."""
        return self._transport.one_turn_params(
            system=SYSTEM_PROMPT,
            user_message=build_user_message(digest, pinned),
            schema=ANSWER_SCHEMA,
            schema_name="memledger_proposals",
            model=model,
            max_output_tokens=max_output_tokens,
            form=form,
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
            HarnessError: no price for ``model`` (before any request), a timeout, an HTTP error
                other than a retried 429, a dropped connection, the cap ran out, the model refused.
        """
        return self._transport.ask(
            lambda form: self.request_params(
                digest, pinned, model=model, max_output_tokens=max_output_tokens, form=form
            ),
            parse=parse_answer,
            parse_error=ProposalsParseError,
            model=model,
            max_output_tokens=max_output_tokens,
            wall_clock_cap_s=wall_clock_cap_s,
        )
