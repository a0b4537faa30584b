"""The paying harnesses as the tests drive them: each with its loopback fake, a priced model and its settings.

A test that holds for every paying harness takes the ``vendor`` fixture (parametrized over
:data:`VENDORS`) and reads everything vendor-specific from it, so one test body checks both
SDKs. The openai vendor plays a local server: a model the price table does not know, priced
by the scope at the haiku-4-5 rates (1 / 5 USD per MTok) so that spends compare.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from consolidation.fake_anthropic import FakeAnthropic, FakeModelServer, user_message
from consolidation.fake_openai import FakeOpenAI
from consolidation.harnesses import Usage, get_harness
from consolidation.harnesses.base import Harness
from consolidation.pricing import DEFAULT_PRICES, PriceTable, scope_price

LOCAL_MODEL = "qwen2.5:7b-instruct"


@dataclass(frozen=True)
class Vendor:
    name: str
    model: str
    fake_class: type[FakeModelServer]
    scope_prices: tuple[float, float] | None = None  # the scope's own price of ``model``, if it sets one

    def __str__(self) -> str:
        return self.name

    @property
    def prices(self) -> PriceTable:
        if self.scope_prices is None:
            return DEFAULT_PRICES
        price_in, price_out = self.scope_prices
        return scope_price(DEFAULT_PRICES, self.model, input_usd_per_mtok=price_in, output_usd_per_mtok=price_out)

    def fake(self, **options: Any) -> FakeModelServer:
        return self.fake_class(**options)

    def url(self, port: int) -> str:
        """The base URL of a fake of this vendor on ``port`` (started or not)."""
        return f"http://127.0.0.1:{port}" + ("/v1" if self.fake_class is FakeOpenAI else "")

    def harness(self, base_url: str | None, **options: Any) -> Harness:
        cls = type(get_harness(self.name, prices=self.prices))
        return cls(api_key="test-key", base_url=base_url, prices=self.prices, **options)  # type: ignore[call-arg]

    def service_kwargs(self, base_url: str) -> dict[str, Any]:
        """How production wires a service for this vendor: a key and a server, read from the environment."""
        if self.name == "openai":
            return {"openai_api_key": "test-key", "openai_base_url": base_url}
        return {"api_key": "test-key", "base_url": base_url}

    def environment(self, base_url: str) -> dict[str, str]:
        """The environment that points a ``memledger`` process at this vendor's server (a key and its URL)."""
        prefix = "OPENAI" if self.name == "openai" else "ANTHROPIC"
        return {f"{prefix}_API_KEY": "test-key", f"{prefix}_BASE_URL": base_url}

    def settings(self) -> dict[str, Any]:
        """The settings that point a scope at this vendor's model."""
        target: dict[str, Any] = {"harness": self.name, "model": self.model}
        if self.scope_prices is not None:
            target["price_in_usd_per_mtok"], target["price_out_usd_per_mtok"] = self.scope_prices
        return target

    def reported(self, usage: Usage) -> Usage:
        """What the harness records when the fake is scripted with ``usage``: Chat Completions has no cache
        writes (they are input tokens there), and its cached tokens are cache reads."""
        if self.name != "openai":
            return usage
        return Usage(
            input_tokens=usage.input_tokens + usage.cache_creation_input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_input_tokens=usage.cache_read_input_tokens,
        )

    def spend(self, usage: Usage) -> int:
        """The spend of a call the fake was scripted to report ``usage`` for."""
        return self.prices.spend_micro_usd(self.model, self.reported(usage))


VENDORS = (
    Vendor("anthropic", "claude-haiku-4-5", FakeAnthropic),
    Vendor("openai", LOCAL_MODEL, FakeOpenAI, scope_prices=(1.0, 5.0)),
)


def content(request: dict[str, Any]) -> str:
    """The one user message of a request to either fake."""
    found = user_message(request)
    assert found is not None
    return found


def system_text(request: dict[str, Any]) -> str:
    """The system text of a request to either fake (Anthropic's ``system``, or Chat Completions' system message)."""
    if "system" in request:
        return str(request["system"])
    return next(str(m["content"]) for m in request["messages"] if m.get("role") == "system")


# The paying harness does not depend on the database: the anthropic vendor runs on both backends,
# the openai one on SQLite, which keeps the suite's time where it was plus a third.
STACKS = (("anthropic", "sqlite"), ("anthropic", "postgres"), ("openai", "sqlite"))


def stack_fixtures(
    stacks: tuple[tuple[str, str], ...] = STACKS, ids: Callable[[tuple[str, str]], str] = "-".join
) -> tuple[Any, Any, Any, Any]:
    """``stack``, ``vendor``, ``ledger_url`` and ``fake`` fixtures for a module whose tests run per vendor.

    Assign them at module level (``stack, vendor, ledger_url, fake = stack_fixtures()``): ``ledger_url``
    overrides the shared one so that each stack is one backend, and ``fake`` is the vendor's. A module
    that opens no ledger runs once per vendor: ``stack_fixtures(PER_VENDOR, ids=vendor_name)``.
    """
    import pytest

    by_name = {v.name: v for v in VENDORS}

    @pytest.fixture(params=stacks, ids=ids)
    def stack(request: pytest.FixtureRequest) -> tuple[str, str]:
        return request.param  # type: ignore[no-any-return]

    @pytest.fixture
    def vendor(stack: tuple[str, str]) -> Vendor:
        return by_name[stack[0]]

    @pytest.fixture
    def ledger_url(stack: tuple[str, str], request: pytest.FixtureRequest, tmp_path: Any) -> str:
        if stack[1] == "sqlite":
            return f"sqlite:///{tmp_path / 'ledger.db'}"
        return str(request.getfixturevalue("pg_migrated"))

    @pytest.fixture
    def fake(vendor: Vendor) -> Any:
        with vendor.fake() as server:
            yield server

    return stack, vendor, ledger_url, fake


# A module whose tests open no ledger: each vendor once (the backend is not used).
PER_VENDOR = tuple((vendor.name, "sqlite") for vendor in VENDORS)


def vendor_name(stack: tuple[str, str]) -> str:
    return stack[0]


def only(name: str) -> Any:
    """Run a test of a ``PER_VENDOR`` module for one vendor: it is about that API's wire."""
    import pytest

    return pytest.mark.parametrize("stack", [s for s in PER_VENDOR if s[0] == name], ids=vendor_name, indirect=True)


def backends_only() -> Any:
    """For a test of such a module that calls no model: run it once per backend, not once more per vendor."""
    import pytest

    return pytest.mark.parametrize("stack", STACKS[:2], ids=lambda s: s[1], indirect=True)
