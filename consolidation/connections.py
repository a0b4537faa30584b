"""Where a scope's model calls go, for both jobs: the harness's key and server, and the prices charged."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

from consolidation.harnesses import CallOptions, Connection
from consolidation.models import CALL_FIELDS
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

    The worker reads them from its environment (``worker/config.py``) and passes them in; a key
    left ``None`` is the SDK's own default.
    """

    prices: PriceTable
    api_key: str | None = None
    base_url: str | None = None
    openai_api_key: str | None = None
    openai_base_url: str | None = None

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
        """:meth:`connection` for a scope's settings (consolidation's or extraction's), with the call's options
        where the settings have them (extraction's calls take the defaults)."""
        connection = self.connection(
            target.harness, target.model, target.base_url, target.price_in_usd_per_mtok, target.price_out_usd_per_mtok
        )
        given = {name: getattr(target, name) for name in CALL_FIELDS if hasattr(target, name)}
        if not given:
            return connection
        given["response_format"] = str(given.get("response_format", "auto"))
        return replace(connection, options=CallOptions(**given))
