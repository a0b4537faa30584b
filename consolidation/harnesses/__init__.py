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

import importlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from consolidation.errors import UnknownHarness
from consolidation.harnesses.base import CallOptions, Harness, HarnessResult, PromptRecord
from consolidation.harnesses.calls import give_up_calls
from consolidation.models import Usage

if TYPE_CHECKING:
    from consolidation.harnesses.anthropic import AnthropicHarness
    from consolidation.harnesses.extract_base import Extractor
    from consolidation.harnesses.offline import OfflineHarness
    from consolidation.pricing import PriceTable

__all__ = [
    "HARNESSES",
    "HARNESS_NAMES",
    "AnthropicHarness",
    "CallOptions",
    "Connection",
    "Harness",
    "HarnessResult",
    "HarnessSpec",
    "OfflineHarness",
    "PromptRecord",
    "Usage",
    "get_extractor",
    "get_harness",
    "give_up_calls",
    "preload",
]


DEFAULT_OPTIONS = CallOptions()


@dataclass(frozen=True, slots=True)
class Connection:
    """Where a harness sends its call: a key (``None``: none set), a base URL (``None``: the vendor's), prices,
    and how the call is made (``options``)."""

    api_key: str | None
    base_url: str | None
    prices: PriceTable
    options: CallOptions = DEFAULT_OPTIONS


@dataclass(frozen=True, slots=True)
class HarnessSpec:
    """One row of the registry.

    ``harness``: where its consolidation harness is (``module:Class``, imported on first use);
    ``extractor``: where its extraction harness is, or None for a paying harness, whose
    extraction turn goes through its consolidation harness
    (:class:`~consolidation.harnesses.extract_base.OneTurnExtractor`).
    ``pays``: it calls a priced model (so its model needs a price, and its harness takes the
    :class:`Connection`); ``takes_base_url``: a scope may point it at a server of its own;
    ``takes_call_options``: its harness takes the scope's :class:`CallOptions`;
    ``key_env`` / ``base_url_env``: the environment variables the service reads at start for
    it; ``model_prefix``: the ids of its vendor's models in the price table; ``names_default``:
    a scope that picks it without a model gets the cheapest of them (false: the model must be
    named, since a server of the scope's own may serve anything).
    """

    name: str
    summary: str
    harness: str
    extractor: str | None = None
    pays: bool = True
    takes_base_url: bool = False
    takes_call_options: bool = False
    key_env: str | None = None
    base_url_env: str | None = None
    model_prefix: str | None = None
    names_default: bool = False

    def consolidation(self, connection: Connection) -> Harness:
        """The consolidation harness, sending its calls through ``connection`` (ignored when it does not pay)."""
        implementation = _load(self.harness)
        harness: Harness = (
            implementation(
                api_key=connection.api_key,
                base_url=connection.base_url,
                prices=connection.prices,
                **({"options": connection.options} if self.takes_call_options else {}),
            )
            if self.pays
            else implementation()
        )
        return harness

    def extraction(self, connection: Connection) -> Extractor:
        """The extraction harness (``connection`` as for :meth:`consolidation`)."""
        if self.extractor is not None:
            extractor: Extractor = _load(self.extractor)()
            return extractor
        from consolidation.harnesses.extract_base import OneTurnExtractor
        from consolidation.harnesses.one_turn import OneTurnHarness

        transport = self.consolidation(connection)
        assert isinstance(transport, OneTurnHarness), f"{self.name}: a paying harness sends one turn"
        return OneTurnExtractor(transport)


def _load(where: str) -> Any:
    module, _, name = where.partition(":")
    return getattr(importlib.import_module(module), name)


HARNESSES: dict[str, HarnessSpec] = {
    spec.name: spec
    for spec in (
        HarnessSpec(
            name="anthropic",
            summary="Anthropic Messages API (official SDK); ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL",
            harness="consolidation.harnesses.anthropic:AnthropicHarness",
            key_env="ANTHROPIC_API_KEY",
            base_url_env="ANTHROPIC_BASE_URL",
            model_prefix="claude-",
            names_default=True,
        ),
        HarnessSpec(
            name="openai",
            summary="Chat Completions (official openai SDK): OpenAI, Ollama, vLLM, llama.cpp, LM Studio; "
            "OPENAI_API_KEY, base_url or OPENAI_BASE_URL",
            harness="consolidation.harnesses.openai:OpenAIHarness",
            takes_base_url=True,
            takes_call_options=True,
            key_env="OPENAI_API_KEY",
            base_url_env="OPENAI_BASE_URL",
            model_prefix="gpt-",
        ),
        HarnessSpec(
            name="offline",
            summary="deterministic rules, no network, no spend",
            harness="consolidation.harnesses.offline:OfflineHarness",
            extractor="consolidation.harnesses.extract_offline:OfflineExtractor",
            pays=False,
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


def preload(names: Iterable[str] | None = None) -> None:
    """Import the implementations of the harnesses ``names`` (None: every harness) now, the model SDKs among them.

    The Anthropic SDK takes 1 s of CPU to import on a quiet 2-core machine and over 3 s beside
    busy worker threads (the openai SDK about half as long). A worker preloads the harnesses its
    scopes have on, so its first run does not wait on the import; one a scope turns on later is
    imported by its first run, before the wall-clock cap starts (the cap's deadline is taken when
    the request is sent). Unknown names are skipped: a stored setting names a harness that exists.
    """
    for name in HARNESSES if names is None else names:
        row = HARNESSES.get(name)
        if row is None:
            continue
        for where in (row.harness, row.extractor):
            if where is not None:
                _load(where)
        if row.extractor is None:
            import consolidation.harnesses.extract_base  # noqa: F401


def __getattr__(name: str) -> Any:
    # Lazy exports: the SDKs take about a second each to import.
    if name in ("AnthropicHarness", "OfflineHarness"):
        return _load(HARNESSES[name.removesuffix("Harness").lower()].harness)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
