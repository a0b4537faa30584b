"""Harnesses: the one hidden model call of a run, for both jobs (consolidation and extraction).

One table, :data:`HARNESSES`, maps a harness name to its :class:`HarnessSpec`: what it is,
whether it pays, and a factory per job. Everything that picks a harness by name (the
settings, the run services, ``memledger models``, the replay benchmark) reads it.

* ``anthropic`` — the official Anthropic SDK, one Messages request.
* ``openai`` — the official ``openai`` SDK, one Chat Completions request, for OpenAI and
  every OpenAI-compatible server (Ollama, vLLM, llama.cpp's server, LM Studio).
* ``offline`` — deterministic rules, no network, no spend.

Consolidation harnesses implement :class:`~consolidation.harnesses.base.Harness`,
extraction ones :class:`~consolidation.harnesses.extract_base.Extractor`. The
implementations are imported on first use, so importing this package loads no SDK.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from consolidation.errors import UnknownHarness
from consolidation.harnesses.base import Harness, HarnessResult, PromptRecord
from consolidation.models import Usage

if TYPE_CHECKING:
    from consolidation.harnesses.anthropic import AnthropicHarness
    from consolidation.harnesses.extract_base import Extractor
    from consolidation.harnesses.offline import OfflineHarness
    from consolidation.harnesses.openai import OpenAIHarness
    from consolidation.pricing import PriceTable

__all__ = [
    "HARNESSES",
    "HARNESS_NAMES",
    "AnthropicHarness",
    "Connection",
    "Harness",
    "HarnessResult",
    "HarnessSpec",
    "OfflineHarness",
    "PromptRecord",
    "Usage",
    "get_extractor",
    "get_harness",
    "preload",
]


@dataclass(frozen=True, slots=True)
class Connection:
    """Where a harness sends its call: a key (``None``: none set), a base URL (``None``: the vendor's), prices."""

    api_key: str | None
    base_url: str | None
    prices: PriceTable


@dataclass(frozen=True, slots=True)
class HarnessSpec:
    """One row of the registry.

    ``pays``: it calls a priced model (so its model needs a price); ``takes_base_url``: a
    scope may point it at a server of its own; ``key_env`` / ``base_url_env``: the
    environment variables the service reads at start for it; ``model_prefix``: the ids of
    its vendor's models in the price table; ``names_default``: a scope that picks it without
    a model gets the cheapest of them (false: the model must be named, since a server of the
    scope's own may serve anything).
    """

    name: str
    summary: str
    pays: bool
    takes_base_url: bool
    key_env: str | None
    base_url_env: str | None
    model_prefix: str | None
    names_default: bool
    consolidation: Callable[[Connection], Harness]
    extraction: Callable[[Connection], Extractor]


def _offline(connection: Connection) -> Harness:
    from consolidation.harnesses.offline import OfflineHarness

    return OfflineHarness()


def _offline_extractor(connection: Connection) -> Extractor:
    from consolidation.harnesses.extract_offline import OfflineExtractor

    return OfflineExtractor()


def _anthropic(connection: Connection) -> AnthropicHarness:
    from consolidation.harnesses.anthropic import AnthropicHarness

    return AnthropicHarness(api_key=connection.api_key, base_url=connection.base_url, prices=connection.prices)


def _anthropic_extractor(connection: Connection) -> Extractor:
    from consolidation.harnesses.extract_anthropic import AnthropicExtractor

    return AnthropicExtractor(_anthropic(connection))


def _openai(connection: Connection) -> OpenAIHarness:
    from consolidation.harnesses.openai import OpenAIHarness

    return OpenAIHarness(api_key=connection.api_key, base_url=connection.base_url, prices=connection.prices)


def _openai_extractor(connection: Connection) -> Extractor:
    from consolidation.harnesses.extract_openai import OpenAIExtractor

    return OpenAIExtractor(_openai(connection))


HARNESSES: dict[str, HarnessSpec] = {
    spec.name: spec
    for spec in (
        HarnessSpec(
            name="anthropic",
            summary="Anthropic Messages API (official SDK); ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL",
            pays=True,
            takes_base_url=False,
            key_env="ANTHROPIC_API_KEY",
            base_url_env="ANTHROPIC_BASE_URL",
            model_prefix="claude-",
            names_default=True,
            consolidation=_anthropic,
            extraction=_anthropic_extractor,
        ),
        HarnessSpec(
            name="openai",
            summary="Chat Completions (official openai SDK): OpenAI, Ollama, vLLM, llama.cpp, LM Studio; "
            "OPENAI_API_KEY, base_url or OPENAI_BASE_URL",
            pays=True,
            takes_base_url=True,
            key_env="OPENAI_API_KEY",
            base_url_env="OPENAI_BASE_URL",
            model_prefix="gpt-",
            names_default=False,
            consolidation=_openai,
            extraction=_openai_extractor,
        ),
        HarnessSpec(
            name="offline",
            summary="deterministic rules, no network, no spend",
            pays=False,
            takes_base_url=False,
            key_env=None,
            base_url_env=None,
            model_prefix=None,
            names_default=False,
            consolidation=_offline,
            extraction=_offline_extractor,
        ),
    )
}
"""Every harness by name: the one registry for both jobs."""

HARNESS_NAMES = tuple(HARNESSES)


def spec(name: str) -> HarnessSpec:
    """The registry row of ``name``.

    Raises:
        UnknownHarness: ``name`` is not a known harness.
    """
    found = HARNESSES.get(name) if isinstance(name, str) else None
    if found is None:
        raise UnknownHarness(name, known=HARNESS_NAMES)
    return found


def _connection(api_key: str | None, base_url: str | None, prices: PriceTable | None) -> Connection:
    from consolidation.pricing import default_price_table

    return Connection(
        api_key=api_key, base_url=base_url, prices=prices if prices is not None else default_price_table()
    )


def get_harness(
    name: str,
    *,
    api_key: str | None = None,
    base_url: str | None = None,
    prices: PriceTable | None = None,
) -> Harness:
    """A consolidation harness by name.

    ``api_key`` and ``base_url`` go to a paying harness (``None``: the anthropic harness lets
    its SDK read the environment; the openai one sends a placeholder key and uses OpenAI's
    URL); ``prices`` defaults to the built-in table. The offline harness ignores all three.

    Raises:
        UnknownHarness: ``name`` is not a known harness.
    """
    return spec(name).consolidation(_connection(api_key, base_url, prices))


def get_extractor(
    name: str, *, api_key: str | None = None, base_url: str | None = None, prices: PriceTable | None = None
) -> Extractor:
    """An extraction harness by name (arguments as :func:`get_harness`).

    Raises:
        UnknownHarness: ``name`` is not a known harness.
    """
    return spec(name).extraction(_connection(api_key, base_url, prices))


def preload() -> None:
    """Import every harness implementation now (the model SDKs among them).

    The Anthropic SDK takes 1 s to import on a quiet 2-core machine and over 3 s beside busy
    worker threads (the openai SDK about as long). Imported on a run's first use, that time
    fell inside the run's wall-clock cap: a 1.5 s cap ran out before the request was sent.
    A worker calls this before it consumes.
    """
    import consolidation.harnesses.anthropic
    import consolidation.harnesses.extract_anthropic
    import consolidation.harnesses.extract_offline
    import consolidation.harnesses.extract_openai
    import consolidation.harnesses.offline
    import consolidation.harnesses.openai  # noqa: F401


def __getattr__(name: str) -> Any:
    # Lazy exports: the SDKs take about a second each to import.
    if name == "AnthropicHarness":
        from consolidation.harnesses.anthropic import AnthropicHarness

        return AnthropicHarness
    if name == "OfflineHarness":
        from consolidation.harnesses.offline import OfflineHarness

        return OfflineHarness
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
