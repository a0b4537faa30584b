"""Per-scope consolidation settings: defaults, validation, storage."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, text

from consolidation.candidates import DEFAULT_MAX_PROMPT_CHARS, MAX_MAX_PROMPT_CHARS, MIN_MAX_PROMPT_CHARS
from consolidation.errors import InvalidSettings
from consolidation.harnesses import HARNESS_NAMES
from consolidation.models import ALL_OPS, ConsolidationSettings, Mode
from consolidation.pricing import PriceTable, UnknownModelPrice
from ledger.db import query

DEFAULT_DEBOUNCE_S = 30.0
DEFAULT_MAX_WAIT_S = 600.0
DEFAULT_CAP_S = 60.0
DEFAULT_MAX_OUTPUT_TOKENS = 4096
DEFAULT_SPEND_BUDGET_MICRO_USD = 5_000_000  # 5 USD per scope per calendar month
OFFLINE_MODEL = "offline"
FIELDS = (
    "mode",
    "allowed_ops",
    "debounce_s",
    "max_wait_s",
    "harness",
    "model",
    "wall_clock_cap_s",
    "max_output_tokens",
    "spend_budget_micro_usd",
    "allow_removal",
    "max_prompt_chars",
)


def defaults(scope_key: str, *, api_key: str | None, prices: PriceTable) -> ConsolidationSettings:
    """Mode off; the anthropic harness with the cheapest priced model when a key is configured, else offline."""
    harness = "anthropic" if api_key else "offline"
    return ConsolidationSettings(
        scope_key=scope_key,
        mode=Mode.OFF,
        allowed_ops=list(ALL_OPS),
        debounce_s=DEFAULT_DEBOUNCE_S,
        max_wait_s=DEFAULT_MAX_WAIT_S,
        harness=harness,
        model=prices.cheapest() if harness == "anthropic" else OFFLINE_MODEL,
        wall_clock_cap_s=DEFAULT_CAP_S,
        max_output_tokens=DEFAULT_MAX_OUTPUT_TOKENS,
        spend_budget_micro_usd=DEFAULT_SPEND_BUDGET_MICRO_USD,
        allow_removal=False,
        max_prompt_chars=DEFAULT_MAX_PROMPT_CHARS,
    )


def _number(name: str, value: object, *, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidSettings(f"{name} must be a number of seconds from {low:g} to {high:g}")
    if not low <= float(value) <= high:
        raise InvalidSettings(f"{name} must be from {low:g} to {high:g} seconds, got {value}")
    return float(value)


def _integer(name: str, value: object, *, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidSettings(f"{name} must be an integer from {low} to {high}")
    return value


def _validate_field(name: str, value: Any, prices: PriceTable) -> Any:
    if name == "mode":
        try:
            return Mode(value)
        except ValueError:
            raise InvalidSettings(f"mode must be one of off, propose, apply; got {value!r}") from None
    if name == "allowed_ops":
        ops = [value] if isinstance(value, str) else value
        if not isinstance(ops, list | tuple) or not ops or any(op not in ALL_OPS for op in ops):
            raise InvalidSettings(f"allowed_ops must be a non-empty list drawn from {', '.join(ALL_OPS)}")
        return sorted(set(ops), key=ALL_OPS.index)
    if name == "debounce_s":
        return _number(name, value, low=0, high=86_400)
    if name == "max_wait_s":
        return None if value is None else _number(name, value, low=0, high=7 * 86_400)
    if name == "wall_clock_cap_s":
        return _number(name, value, low=0.1, high=900)
    if name == "max_output_tokens":
        return _integer(name, value, low=16, high=64_000)
    if name == "spend_budget_micro_usd":
        return _integer(name, value, low=0, high=10**12)
    if name == "allow_removal":
        if not isinstance(value, bool):
            raise InvalidSettings("allow_removal must be true or false")
        return value
    if name == "max_prompt_chars":
        return _integer(name, value, low=MIN_MAX_PROMPT_CHARS, high=MAX_MAX_PROMPT_CHARS)
    if name == "harness":
        if value not in HARNESS_NAMES:
            raise InvalidSettings(f"harness must be one of {', '.join(HARNESS_NAMES)}; got {value!r}")
        return value
    if name == "model":
        if not isinstance(value, str) or not value.strip():
            raise InvalidSettings("model must be a model name such as claude-haiku-4-5")
        return value.strip()
    raise InvalidSettings(f"unknown setting {name!r}; settings are: {', '.join(FIELDS)}")


def merge(current: ConsolidationSettings, changes: Mapping[Any, Any], prices: PriceTable) -> ConsolidationSettings:
    """Validate every changed field and return the new settings. Raises InvalidSettings; changes nothing."""
    values = current.to_json()
    for name, value in changes.items():
        values[name] = _validate_field(name, value, prices)
    if "harness" in changes and "model" not in changes:
        values["model"] = prices.cheapest() if values["harness"] == "anthropic" else OFFLINE_MODEL
    if values["harness"] == "offline" and values["model"] != OFFLINE_MODEL:
        # The offline harness calls no model: a model given with it would be recorded on runs that never used it.
        raise InvalidSettings(
            f"the offline harness calls no model, so it takes none (got {str(values['model'])[:80]!r}); "
            "omit --model, or choose --harness anthropic with a priced model"
        )
    if values["harness"] != "offline":  # every harness that pays needs a price for its model
        try:
            prices.price_for(values["model"])
        except UnknownModelPrice as exc:
            raise InvalidSettings(str(exc)) from None
    if values["max_wait_s"] is not None and values["max_wait_s"] < values["debounce_s"]:
        raise InvalidSettings("max_wait_s must be at least debounce_s (or unset)")
    values["mode"] = Mode(values["mode"])
    return ConsolidationSettings(**values)


def load(conn: Connection, scope_key: str) -> Mapping[str, Any] | None:
    columns = ("scope_key", *FIELDS)
    rows = query(
        conn, f"SELECT {', '.join(columns)} FROM consolidation_settings WHERE scope_key = :s", {"s": scope_key}
    )
    return dict(zip(columns, rows[0], strict=True)) if rows else None


def from_row(row: Mapping[Any, Any]) -> ConsolidationSettings:
    return ConsolidationSettings(
        scope_key=row["scope_key"],
        mode=Mode(row["mode"]),
        allowed_ops=list(json.loads(row["allowed_ops"])),
        debounce_s=float(row["debounce_s"]),
        max_wait_s=None if row["max_wait_s"] is None else float(row["max_wait_s"]),
        harness=row["harness"],
        model=row["model"],
        wall_clock_cap_s=float(row["wall_clock_cap_s"]),
        max_output_tokens=int(row["max_output_tokens"]),
        spend_budget_micro_usd=int(row["spend_budget_micro_usd"]),
        allow_removal=bool(row["allow_removal"]),
        max_prompt_chars=int(row["max_prompt_chars"]),
    )


def store(conn: Connection, settings: ConsolidationSettings, now_us: int) -> None:
    values = settings.to_json()
    values["allow_removal"] = bool(values["allow_removal"])
    values["allowed_ops"] = json.dumps(values["allowed_ops"])
    values["now"] = now_us
    cols = ", ".join(FIELDS)
    marks = ", ".join(f":{f}" for f in FIELDS)
    updates = ", ".join(f"{f} = excluded.{f}" for f in FIELDS)
    conn.execute(
        text(
            f"INSERT INTO consolidation_settings (scope_key, {cols}, created_at, updated_at) "
            f"VALUES (:scope_key, {marks}, :now, :now) "
            f"ON CONFLICT (scope_key) DO UPDATE SET {updates}, updated_at = excluded.updated_at"
        ),
        values,
    )


def load_cursor(conn: Connection, scope_key: str) -> str | None:
    """The id the candidate rotation reached last run (None: the start of the ring)."""
    rows = query(conn, "SELECT rotation_cursor FROM consolidation_settings WHERE scope_key = :s", {"s": scope_key})
    return None if not rows else rows[0][0]


def store_cursor(conn: Connection, scope_key: str, cursor: str | None) -> None:
    """Remember where the rotation stopped (a scope with a run always has a settings row)."""
    conn.execute(
        text("UPDATE consolidation_settings SET rotation_cursor = :c WHERE scope_key = :s"),
        {"c": cursor, "s": scope_key},
    )
