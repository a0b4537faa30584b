"""Per-scope consolidation settings: defaults, validation, storage."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sqlalchemy import bindparam, insert, select, update

from consolidation.errors import InvalidSettings
from consolidation.models import (
    ALL_OPS,
    DEFAULT_SPEND_BUDGET_MICRO_USD,
    ConsolidationSettings,
    Mode,
    ResponseFormat,
)
from consolidation.pricing import PriceTable
from consolidation.runs import Executor
from consolidation.setting_checks import FIELD_CHECKS, default_target, merged, mode_check
from consolidation.setting_checks import OFFLINE_MODEL as OFFLINE_MODEL  # re-exported: a public name here
from consolidation.tables import CONSOLIDATION_SETTINGS as TABLE
from ledger import Transaction
from ledger.columns import construct

FIELDS = tuple(name for name in ConsolidationSettings.model_fields if name != "scope_key")
"""The settings a scope sets (every field but the scope's key), in the order messages list them."""


def defaults(scope_key: str, *, api_key: str | None, prices: PriceTable) -> ConsolidationSettings:
    """Mode off; the anthropic harness with the cheapest priced model when a key is configured, else offline."""
    return ConsolidationSettings(scope_key=scope_key, **default_target(api_key, prices))


_mode = mode_check(Mode, "mode")


def _allowed_ops(_: str, value: Any) -> list[str]:
    ops = [value] if isinstance(value, str) else value
    if not isinstance(ops, list | tuple) or not ops or any(op not in ALL_OPS for op in ops):
        raise InvalidSettings(f"allowed_ops must be a non-empty list drawn from {', '.join(ALL_OPS)}")
    return sorted(set(ops), key=ALL_OPS.index)


def _switch(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidSettings(f"{name} must be true or false")
    return value


CHECKS = {
    **{name: check for name, check in FIELD_CHECKS.items() if name in FIELDS},
    "mode": _mode,
    "allowed_ops": _allowed_ops,
    "allow_removal": _switch,
    "response_format": mode_check(ResponseFormat, "response_format"),
    "system_role": _switch,
    "stream": _switch,
}


def merge(current: ConsolidationSettings, changes: Mapping[Any, Any], prices: PriceTable) -> ConsolidationSettings:
    """Validate every changed field and return the new settings. Raises InvalidSettings; changes nothing."""
    unknown = f"; settings are: {', '.join(FIELDS)}"
    return merged(current, changes, prices, checks=CHECKS, unknown=lambda name: f"unknown setting {name!r}{unknown}")


_NAMES = tuple(column.name for column in TABLE.c)
# Read on every run (from_row converts what it reads).
_LOAD = select(TABLE).where(TABLE.c.scope_key == bindparam("scope"))


def load(db: Executor, scope_key: str) -> Mapping[str, Any] | None:
    found = db.rows(_LOAD, {"scope": scope_key})
    return dict(zip(_NAMES, found[0], strict=True)) if found else None


_SETTINGS_FIELDS = set(ConsolidationSettings.model_fields)


def from_row(row: Mapping[Any, Any]) -> ConsolidationSettings:
    """The settings a stored row holds (checked when stored, so not again: this is read on every run)."""
    values = {
        "scope_key": row["scope_key"],
        "mode": Mode(row["mode"]),
        "allowed_ops": list(json.loads(row["allowed_ops"])),
        "debounce_s": float(row["debounce_s"]),
        "max_wait_s": _opt_float(row["max_wait_s"]),
        "harness": row["harness"],
        "model": row["model"],
        "wall_clock_cap_s": float(row["wall_clock_cap_s"]),
        "max_output_tokens": int(row["max_output_tokens"]),
        "spend_budget_micro_usd": int(row["spend_budget_micro_usd"]),
        "allow_removal": bool(row["allow_removal"]),
        "max_prompt_chars": int(row["max_prompt_chars"]),
        "base_url": row["base_url"],
        "price_in_usd_per_mtok": _opt_float(row["price_in_usd_per_mtok"]),
        "price_out_usd_per_mtok": _opt_float(row["price_out_usd_per_mtok"]),
        "response_format": ResponseFormat(row["response_format"]),
        "temperature": float(row["temperature"]),
        "context_window_tokens": None if row["context_window_tokens"] is None else int(row["context_window_tokens"]),
        "system_role": bool(row["system_role"]),
        "stream": bool(row["stream"]),
    }
    return construct(ConsolidationSettings, values, _SETTINGS_FIELDS)


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def store(tx: Transaction, settings: ConsolidationSettings) -> None:
    """Insert or update the scope's settings at ``tx.now``."""
    values = settings.to_json()
    values["allowed_ops"] = json.dumps(values["allowed_ops"])
    changed = {name: values[name] for name in FIELDS}
    where = TABLE.c.scope_key == settings.scope_key
    if tx.execute(update(TABLE).where(where).values(**changed, updated_at=tx.now_us)).rowcount == 0:
        tx.execute(insert(TABLE).values(**values, created_at=tx.now_us, updated_at=tx.now_us))


_BUDGET = select(TABLE.c.spend_budget_micro_usd).where(TABLE.c.scope_key == bindparam("scope"))


def spend_budget(db: Executor, scope_key: str) -> int:
    """The scope's one monthly spend budget, shared by both jobs (the default when never set)."""
    found = db.rows(_BUDGET, {"scope": scope_key})
    return DEFAULT_SPEND_BUDGET_MICRO_USD if not found or found[0][0] is None else int(found[0][0])


def load_cursor(db: Executor, scope_key: str) -> str | None:
    """The id the candidate rotation reached last run (None: the start of the ring)."""
    found: str | None = db.execute(select(TABLE.c.rotation_cursor).where(TABLE.c.scope_key == scope_key)).scalar()
    return found


def store_cursor(tx: Transaction, cursor: str | None) -> None:
    """Remember where the rotation stopped (a scope with a run always has a settings row)."""
    tx.execute(update(TABLE).where(TABLE.c.scope_key == tx.scope_key).values(rotation_cursor=cursor))
