"""Harnesses: the one hidden model call of a consolidation run.

* :class:`~consolidation.harnesses.anthropic.AnthropicHarness` (``"anthropic"``) —
  the official SDK, one Messages request.
* :class:`~consolidation.harnesses.offline.OfflineHarness` (``"offline"``) —
  deterministic, no network.

Both implement :class:`~consolidation.harnesses.base.Harness`. The implementations are
imported on first use, so importing this package does not load the Anthropic SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from consolidation.harnesses.base import Harness, HarnessError, HarnessResult, PromptRecord, Usage

if TYPE_CHECKING:
    from consolidation.harnesses.anthropic import AnthropicHarness
    from consolidation.harnesses.offline import OfflineHarness
    from consolidation.pricing import PriceTable

HARNESS_NAMES = ("anthropic", "offline")

__all__ = [
    "HARNESS_NAMES",
    "AnthropicHarness",
    "Harness",
    "HarnessError",
    "HarnessResult",
    "OfflineHarness",
    "PromptRecord",
    "UnknownHarness",
    "Usage",
    "get_harness",
    "preload",
]


class UnknownHarness(ValueError):
    """A harness name that is not one of :data:`HARNESS_NAMES`."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"unknown harness {name!r}; choose one of: {', '.join(HARNESS_NAMES)}")


def get_harness(
    name: str,
    *,
    api_key: str | None = None,
    base_url: str | None = None,
    prices: PriceTable | None = None,
) -> Harness:
    """A harness by name.

    ``api_key`` and ``base_url`` go to the anthropic harness (``None`` lets the SDK read
    ``ANTHROPIC_API_KEY`` / ``ANTHROPIC_BASE_URL``); ``prices`` defaults to the built-in
    table. The offline harness ignores all three.

    Raises:
        UnknownHarness: ``name`` is not a known harness.
    """
    if name == "offline":
        from consolidation.harnesses.offline import OfflineHarness

        return OfflineHarness()
    if name == "anthropic":
        from consolidation.harnesses.anthropic import AnthropicHarness
        from consolidation.pricing import default_price_table

        return AnthropicHarness(
            api_key=api_key, base_url=base_url, prices=prices if prices is not None else default_price_table()
        )
    raise UnknownHarness(name)


def preload() -> None:
    """Import every harness implementation now (the Anthropic SDK among them).

    The SDK takes 1 s to import on a quiet 2-core machine and over 3 s beside busy worker
    threads. Imported on a run's first use, that time fell inside the run's wall-clock cap:
    a 1.5 s cap ran out before the request was sent. A worker calls this before it consumes.
    """
    import consolidation.harnesses.anthropic
    import consolidation.harnesses.extract_anthropic
    import consolidation.harnesses.extract_offline
    import consolidation.harnesses.offline  # noqa: F401


def __getattr__(name: str) -> Any:
    # Lazy exports: the Anthropic SDK takes about a second to import.
    if name == "AnthropicHarness":
        from consolidation.harnesses.anthropic import AnthropicHarness

        return AnthropicHarness
    if name == "OfflineHarness":
        from consolidation.harnesses.offline import OfflineHarness

        return OfflineHarness
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
