"""Where a scope's model calls go, for both jobs: the harness's key and server, and the prices charged."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Protocol

from consolidation.harnesses import Connection
from consolidation.pricing import PriceTable
from consolidation.setting_checks import scope_prices


class Target(Protocol):
    """What a scope's settings of either job say of where its call goes."""

    @property
    def harness(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def base_url(self) -> str | None: ...
    @property
    def price_in_usd_per_mtok(self) -> float | None: ...
    @property
    def price_out_usd_per_mtok(self) -> float | None: ...


@dataclass(frozen=True, slots=True)
class Connections:
    """The process's keys and servers (never logged or stored) and its price table.

    :meth:`from_env` reads ``ANTHROPIC_API_KEY``/``ANTHROPIC_BASE_URL`` and
    ``OPENAI_API_KEY``/``OPENAI_BASE_URL`` once, for what is not given.
    """

    prices: PriceTable
    api_key: str | None = None
    base_url: str | None = None
    openai_api_key: str | None = None
    openai_base_url: str | None = None

    @classmethod
    def from_env(
        cls,
        prices: PriceTable,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        openai_api_key: str | None = None,
        openai_base_url: str | None = None,
    ) -> Connections:
        def pick(given: str | None, env: str) -> str | None:
            return given if given is not None else os.environ.get(env) or None

        return cls(
            prices=prices,
            api_key=pick(api_key, "ANTHROPIC_API_KEY"),
            base_url=pick(base_url, "ANTHROPIC_BASE_URL"),
            openai_api_key=pick(openai_api_key, "OPENAI_API_KEY") or None,
            openai_base_url=pick(openai_base_url, "OPENAI_BASE_URL") or None,
        )

    def connection(
        self, harness: str, model: str, base_url: str | None, price_in: float | None, price_out: float | None
    ) -> Connection:
        """Where a scope's call goes: the harness's key and server (the scope's ``base_url`` first), and the
        prices it is charged at (the scope's own price of ``model`` over the table). Harnesses keep no
        connection, so one is built per run."""
        if harness == "openai":
            api_key, url = self.openai_api_key, base_url or self.openai_base_url
        else:
            api_key, url = self.api_key, self.base_url
        prices = scope_prices(self.prices, model=model, price_in=price_in, price_out=price_out)
        return Connection(api_key=api_key, base_url=url, prices=prices)

    def of(self, target: Target) -> Connection:
        """:meth:`connection` for a scope's settings (consolidation's or extraction's)."""
        return self.connection(
            target.harness, target.model, target.base_url, target.price_in_usd_per_mtok, target.price_out_usd_per_mtok
        )
