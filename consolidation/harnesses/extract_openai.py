"""The openai extraction harness: the extraction turn sent by :class:`~consolidation.harnesses.openai.OpenAIHarness`.

Its transport, ``response_format`` fallback, refusal and error handling are the consolidation
harness's; see :class:`~consolidation.harnesses.extract_base.OneTurnExtractor`.
"""

from __future__ import annotations

from typing import ClassVar

from consolidation.harnesses.extract_base import OneTurnExtractor


class OpenAIExtractor(OneTurnExtractor):
    """Extraction through Chat Completions (official ``openai`` SDK), given an ``OpenAIHarness``."""

    name: ClassVar[str] = "openai"
