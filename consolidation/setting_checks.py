"""Checks shared by the per-scope settings (consolidation's and extraction's): one rule, stated once.

:data:`FIELD_CHECKS` checks a field by name (the ranges are :mod:`consolidation.limits`'s); each
job's settings module checks its own fields through it.

The model target of a scope is ``harness`` + ``model``, with ``base_url`` (a harness that
takes one: ``openai``) and ``price_in_usd_per_mtok`` / ``price_out_usd_per_mtok`` (the
scope's own price of its model, in USD per million tokens). :func:`check_model_target`
states how they go together.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Any, TypedDict, TypeVar
from urllib.parse import unquote, urlsplit

from pydantic import BaseModel, ValidationError

from consolidation import limits
from consolidation.errors import InvalidSettings, UnknownModelPrice
from consolidation.harnesses import HARNESS_NAMES, HARNESSES
from consolidation.pricing import PriceTable, scope_price
from ledger import find_credential, protocol

OFFLINE_MODEL = "offline"
PRICE_FIELDS = ("price_in_usd_per_mtok", "price_out_usd_per_mtok")
TARGET_FIELDS = ("harness", "model", "base_url", *PRICE_FIELDS)
# The settings' names these checks' messages quote, shown camelCase on the record protocol's wire.
protocol.add_python_names("debounce_s", "allow_removal", "base_url", *PRICE_FIELDS)
MAX_BASE_URL_CHARS = 2_000
MAX_MODEL_CHARS = 200
_CONTROL = re.compile(r"[\x00-\x20\x7f]")
_ALNUM_RUN = re.compile(r"[A-Za-z0-9]{24,}")
SettingsT = TypeVar("SettingsT", bound=BaseModel)
M = TypeVar("M", bound=StrEnum)


def default_model(harness: str, prices: PriceTable) -> str:
    """The model a harness gets when none is named: the cheapest of its priced ones, or none for the offline harness.

    Raises:
        InvalidSettings: the harness has no models of its own in the table (``openai``: name one).
    """
    spec = HARNESSES[harness]
    if not spec.pays:
        return OFFLINE_MODEL
    if not spec.names_default or spec.model_prefix is None:
        raise InvalidSettings(
            f"the {harness} harness needs a model: name the one your server serves "
            "(e.g. --model qwen2.5:7b-instruct for Ollama, or --model gpt-4.1-mini for OpenAI)"
        )
    return prices.cheapest(prefix=spec.model_prefix)


class DefaultTarget(TypedDict):
    """A scope's model target as its settings start: the harness and its model."""

    harness: str
    model: str


def default_target(api_key: str | None, prices: PriceTable) -> DefaultTarget:
    """The harness and model a scope starts with: anthropic with the cheapest priced model when a key is
    configured, else offline."""
    harness = "anthropic" if api_key else "offline"
    return {"harness": harness, "model": default_model(harness, prices)}


def mode_check(enum: type[M], what: str) -> Callable[[str, Any], M]:
    """The check of a job's ``mode``: the member of ``enum``, or InvalidSettings naming ``what`` and the choices."""

    def check(_: str, value: Any) -> M:
        try:
            return enum(value)
        except ValueError:
            choices = ", ".join(member.value for member in enum)
            raise InvalidSettings(f"{what} must be one of {choices}; got {str(value)[:40]!r}") from None

    return check


def seconds(name: str, value: object, kind: Any) -> float:
    """``value`` as seconds in the range ``kind`` states. Raises InvalidSettings (not a finite number, out of range)."""
    low, high = limits.bounds(kind)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidSettings(f"{name} must be a number of seconds from {low:g} to {high:g}")
    if not low <= float(value) <= high:
        raise InvalidSettings(f"{name} must be from {low:g} to {high:g} seconds, got {value}")
    return float(value)


def number(name: str, value: object, kind: Any) -> float:
    """``value`` as a number in the range ``kind`` states. Raises InvalidSettings (not finite, out of range)."""
    low, high = limits.bounds(kind)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidSettings(f"{name} must be a number from {low:g} to {high:g}")
    if not low <= float(value) <= high:
        raise InvalidSettings(f"{name} must be from {low:g} to {high:g}, got {value}")
    return float(value)


def integer(name: str, value: object, kind: Any) -> int:
    """``value`` as an integer in the range ``kind`` states. Raises InvalidSettings (not an integer, out of range)."""
    low, high = limits.bounds(kind)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidSettings(f"{name} must be an integer from {low} to {high}")
    return value


def harness_name(value: object) -> str:
    """``value`` as a harness name. Raises InvalidSettings (not one of the registry's)."""
    if not isinstance(value, str) or value not in HARNESSES:
        raise InvalidSettings(f"harness must be one of {', '.join(HARNESS_NAMES)}; got {str(value)[:40]!r}")
    return value


def model_name(value: object) -> str:
    """``value`` as a model name (any string the server accepts). Raises InvalidSettings."""
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_MODEL_CHARS or _CONTROL.search(value):
        raise InvalidSettings(
            f"model must be a model name of at most {MAX_MODEL_CHARS} characters without spaces, "
            "such as claude-haiku-4-5 or qwen2.5:7b-instruct"
        )
    return value.strip()


def base_url(value: object) -> str | None:
    """``value`` as a server's base URL (http or https, a host, no credentials), or None to unset it.

    Raises:
        InvalidSettings: anything else; the message quotes at most 80 characters of it.
    """
    if value is None:
        return None
    shown = repr(str(value)[:80])
    if not isinstance(value, str) or not value or len(value) > MAX_BASE_URL_CHARS or _CONTROL.search(value):
        raise InvalidSettings(f"base_url must be an http(s) URL such as http://127.0.0.1:11434/v1; got {shown}")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 (raises ValueError on a bad port)
    except ValueError:
        raise InvalidSettings(f"base_url is not a valid URL: {shown}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidSettings(f"base_url must be an http(s) URL such as http://127.0.0.1:11434/v1; got {shown}")
    # A key in the URL would be stored and shown with the settings to every account: keys go in the environment.
    if parts.username is not None or parts.password is not None:
        raise InvalidSettings("base_url must not carry credentials; put the key in OPENAI_API_KEY")
    if parts.query or ";" in parts.path or value.rstrip("/").endswith("?"):
        raise InvalidSettings(
            "base_url must not have a ?query or ;parameters (a key there would be shown with the settings); "
            "put the key in OPENAI_API_KEY"
        )
    if _key_in_path(parts.path):
        raise InvalidSettings(
            "base_url must not carry a key in its path (it would be shown with the settings); "
            "put the key in OPENAI_API_KEY and give the server's address only"
        )
    if parts.fragment:
        raise InvalidSettings(f"base_url must not have a #fragment; got {shown}")
    return value.rstrip("/")


def _key_in_path(path: str) -> bool:
    """Whether a segment of ``path`` is a key: a format screening knows (``sk-…``, ``key=…``), or random key
    material (24 or more letters and digits in one run, mixing upper case, lower case and digits)."""
    for segment in unquote(path).split("/"):
        if find_credential(segment) is not None:
            return True
        for run in _ALNUM_RUN.findall(segment):
            if not (run.isdigit() or run.isalpha() or run.islower() or run.isupper()):
                return True
    return False


def price(name: str, value: object) -> float | None:
    """``value`` as a price in USD per million tokens (0 allowed: a free local model), or None to unset it.

    Raises:
        InvalidSettings: not a finite number from 0 to 10,000.
    """
    if value is None:
        return None
    low, high = limits.bounds(limits.PriceUsdPerMtok)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidSettings(f"{name} must be a number of USD per million tokens from {low:g} to {high:g}")
    if not low <= value <= high:
        raise InvalidSettings(f"{name} must be from {low:g} to {high:g} USD per million tokens, got {value}")
    return float(value)


FIELD_CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "debounce_s": lambda name, value: seconds(name, value, limits.DebounceS),
    "max_wait_s": lambda name, value: None if value is None else seconds(name, value, limits.MaxWaitS),
    "wall_clock_cap_s": lambda name, value: seconds(name, value, limits.WallClockCapS),
    "max_output_tokens": lambda name, value: integer(name, value, limits.MaxOutputTokens),
    "spend_budget_micro_usd": lambda name, value: integer(name, value, limits.SpendBudgetMicroUsd),
    "max_prompt_chars": lambda name, value: integer(name, value, limits.MaxPromptChars),
    "harness": lambda _, value: harness_name(value),
    "model": lambda _, value: model_name(value),
    "base_url": lambda _, value: base_url(value),
    "price_in_usd_per_mtok": price,
    "price_out_usd_per_mtok": price,
    "temperature": lambda name, value: number(name, value, limits.Temperature),
    "context_window_tokens": lambda name, value: (
        None if value is None else integer(name, value, limits.ContextWindowTokens)
    ),
}
"""How a field of either job's settings is checked, by name; each raises InvalidSettings."""


def check_model_target(values: dict[str, Any], changes: Mapping[str, Any], prices: PriceTable) -> None:
    """Complete and check a scope's model target in ``values`` (already validated field by field).

    A new harness without a model gets its default model and loses the old base URL; a new
    model or harness loses each old price not given with it (a price is for the model it was
    set with, so giving one price alone is refused below).
    Then: the offline harness takes no model, base URL or price; a base URL
    only where the harness takes one; both prices or neither; and a paying harness needs a
    price for its model, from the scope or from the table.

    Raises:
        InvalidSettings: a rule is broken; the message says what to set.
    """
    harness = values["harness"]
    spec = HARNESSES[harness]
    if "harness" in changes:
        if "model" not in changes:
            values["model"] = default_model(harness, prices)
        if "base_url" not in changes:
            values["base_url"] = None
    _drop_the_old_models(values, changes)
    if not spec.pays:
        given = [name for name in ("base_url", *PRICE_FIELDS) if values.get(name) is not None]
        if values["model"] != OFFLINE_MODEL or given:
            # The offline harness calls no model: a model given with it would be recorded on runs that never used it.
            what = f"model {str(values['model'])[:80]!r}" if values["model"] != OFFLINE_MODEL else ", ".join(given)
            raise InvalidSettings(
                f"the offline harness calls no model, so it takes none (got {what}); "
                "omit --model, or choose --harness anthropic or openai with a priced model"
            )
        return
    if values.get("base_url") is not None and not spec.takes_base_url:
        raise InvalidSettings(
            f"the {harness} harness takes no base_url (it reads {spec.base_url_env}); base_url is for --harness openai"
        )
    price_in, price_out = (values.get(name) for name in PRICE_FIELDS)
    if (price_in is None) != (price_out is None):
        raise InvalidSettings("set both price_in_usd_per_mtok and price_out_usd_per_mtok, or neither")
    if price_in is not None:
        return
    try:
        prices.price_for(values["model"])
    except UnknownModelPrice as exc:
        raise InvalidSettings(
            f"no price is known for model {str(values['model'])[:80]!r}, so its spend cannot be accounted: set "
            "price_in_usd_per_mtok and price_out_usd_per_mtok (USD per million tokens; 0 and 0 for a free local "
            f"model), e.g. --price-in-usd-per-mtok 0 --price-out-usd-per-mtok 0. Priced models: {', '.join(exc.known)}"
        ) from None


def _drop_the_old_models(values: dict[str, Any], changes: Mapping[str, Any]) -> None:
    """A new model (or harness) drops what was set for the old one and not given again: its prices, its window."""
    if "harness" not in changes and "model" not in changes:
        return
    # A price not given again is never carried to the new model.
    values.update({name: None for name in PRICE_FIELDS if name not in changes})
    if "context_window_tokens" in values and "context_window_tokens" not in changes:
        values["context_window_tokens"] = None


def merged(
    current: SettingsT,
    changes: Mapping[Any, Any],
    prices: PriceTable,
    *,
    checks: Mapping[str, Callable[[str, Any], Any]],
    unknown: Callable[[Any], str],
) -> SettingsT:
    """A job's settings ``current`` with ``changes`` made: each checked by its entry of ``checks``
    (FIELD_CHECKS and the job's own fields), the model target completed and checked, the timing checked.

    Raises:
        InvalidSettings: a change is invalid, or names no field of ``checks`` (``unknown(name)`` says so);
            nothing is changed.
    """
    values = current.model_dump()
    for name, value in changes.items():
        check = checks.get(name) if isinstance(name, str) else None
        if check is None:
            raise InvalidSettings(unknown(name))
        values[name] = check(name, value)
    check_model_target(values, changes, prices)
    check_timed(values)
    try:
        return current.model_validate(values)
    except ValidationError as exc:  # a stored field outside today's range: every change was checked above
        error = exc.errors()[0]
        raise InvalidSettings(f"{'.'.join(map(str, error['loc']))} {error['msg'].lower()}: set it again") from None


def check_timed(values: Mapping[str, Any]) -> None:
    """Refuse a ``max_wait_s`` shorter than ``debounce_s``. Raises InvalidSettings."""
    if values["max_wait_s"] is not None and values["max_wait_s"] < values["debounce_s"]:
        raise InvalidSettings("max_wait_s must be at least debounce_s (or unset)")


def scope_prices(prices: PriceTable, *, model: str, price_in: float | None, price_out: float | None) -> PriceTable:
    """The table a scope's calls are priced by: ``prices`` with the scope's own price of ``model``, if it set one."""
    if price_in is None or price_out is None:
        return prices
    return scope_price(prices, model, input_usd_per_mtok=price_in, output_usd_per_mtok=price_out)
