"""Checks shared by the per-scope settings (consolidation's and extraction's): one rule, stated once."""

from __future__ import annotations

import math
from typing import Any

from consolidation.errors import InvalidSettings
from consolidation.pricing import PriceTable, UnknownModelPrice

OFFLINE_MODEL = "offline"


def default_model(harness: str, prices: PriceTable) -> str:
    """The model a harness gets when none is named: the cheapest priced one, or none for the offline harness."""
    return prices.cheapest() if harness == "anthropic" else OFFLINE_MODEL


def seconds(name: str, value: object, *, low: float, high: float) -> float:
    """``value`` as seconds from ``low`` to ``high``. Raises InvalidSettings (not a finite number, out of range)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidSettings(f"{name} must be a number of seconds from {low:g} to {high:g}")
    if not low <= float(value) <= high:
        raise InvalidSettings(f"{name} must be from {low:g} to {high:g} seconds, got {value}")
    return float(value)


def integer(name: str, value: object, *, low: int, high: int) -> int:
    """``value`` as an integer from ``low`` to ``high``. Raises InvalidSettings (not an integer, out of range)."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidSettings(f"{name} must be an integer from {low} to {high}")
    return value


def check_priced_and_timed(values: dict[str, Any], prices: PriceTable, *, pays: bool) -> None:
    """Refuse a model with no price (when the harness ``pays``), and a ``max_wait_s`` shorter than ``debounce_s``.

    Raises:
        InvalidSettings: either rule is broken.
    """
    if pays:
        try:
            prices.price_for(values["model"])
        except UnknownModelPrice as exc:
            raise InvalidSettings(str(exc)) from None
    if values["max_wait_s"] is not None and values["max_wait_s"] < values["debounce_s"]:
        raise InvalidSettings("max_wait_s must be at least debounce_s (or unset)")
