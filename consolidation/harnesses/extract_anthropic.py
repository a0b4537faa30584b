"""The anthropic extraction harness: the extraction turn sent by
:class:`~consolidation.harnesses.anthropic.AnthropicHarness`.

Its transport, structured output, retry and error handling are the consolidation harness's;
see :class:`~consolidation.harnesses.extract_base.OneTurnExtractor`.
"""

from __future__ import annotations

from typing import ClassVar

from consolidation.harnesses.extract_base import OneTurnExtractor


class AnthropicExtractor(OneTurnExtractor):
    """Extraction through the Anthropic Messages API (official SDK), given an ``AnthropicHarness``."""

    name: ClassVar[str] = "anthropic"
