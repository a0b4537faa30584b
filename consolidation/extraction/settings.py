"""Per-scope extraction settings (docs/extraction.md): defaults, validation, storage.

``mode`` is ``off`` (the default) or ``propose``; ``harness`` + ``model`` as for
consolidation (the default is the cheapest priced model with an API key, else the
offline harness); ``debounce_s`` / ``max_wait_s`` per session; ``wall_clock_cap_s``
and ``max_output_tokens`` bound the call. The monthly spend budget is the scope's
one budget, shared with consolidation (``consolidation_settings``).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import bindparam, delete, insert, select

from consolidation import limits
from consolidation.pricing import PriceTable
from consolidation.setting_checks import FIELD_CHECKS, default_target, merged, mode_check
from consolidation.setting_checks import OFFLINE_MODEL as OFFLINE_MODEL  # re-exported: a public name here
from consolidation.tables import EXTRACTION_SETTINGS as TABLE
from ledger import Reader

DEFAULT_DEBOUNCE_S = 30.0
DEFAULT_MAX_WAIT_S = 300.0
DEFAULT_CAP_S = 60.0
DEFAULT_MAX_OUTPUT_TOKENS = 2048
FIELDS = (
    "mode",
    "harness",
    "model",
    "debounce_s",
    "max_wait_s",
    "wall_clock_cap_s",
    "max_output_tokens",
    "base_url",
    "price_in_usd_per_mtok",
    "price_out_usd_per_mtok",
)
_LOAD = select(*(TABLE.c[name] for name in FIELDS)).where(TABLE.c.scope_key == bindparam("scope"))


class ExtractionMode(StrEnum):
    OFF = "off"
    PROPOSE = "propose"


class ExtractionSettings(BaseModel):
    """A scope's extraction settings; each number in the range :mod:`consolidation.limits` states.

    Built by :func:`merge`, which checks a change field by field first (its messages say what to
    set); a row read back from the database is trusted as stored.
    """

    model_config = ConfigDict(frozen=True)

    scope_key: str
    mode: ExtractionMode = ExtractionMode.OFF
    harness: str
    model: str
    debounce_s: limits.DebounceS = DEFAULT_DEBOUNCE_S
    max_wait_s: limits.MaxWaitS | None = DEFAULT_MAX_WAIT_S
    wall_clock_cap_s: limits.WallClockCapS = DEFAULT_CAP_S
    max_output_tokens: limits.MaxOutputTokens = DEFAULT_MAX_OUTPUT_TOKENS
    base_url: str | None = None
    price_in_usd_per_mtok: limits.PriceUsdPerMtok | None = None
    price_out_usd_per_mtok: limits.PriceUsdPerMtok | None = None

    def to_json(self) -> dict[str, Any]:
        out = self.model_dump()
        out["mode"] = self.mode.value
        return out


def defaults(scope_key: str, *, api_key: str | None, prices: PriceTable) -> ExtractionSettings:
    """Mode off; the anthropic harness with the cheapest priced model when a key is configured, else offline."""
    return ExtractionSettings(scope_key=scope_key, **default_target(api_key, prices))


_mode = mode_check(ExtractionMode, "extraction mode")


CHECKS = {**{name: check for name, check in FIELD_CHECKS.items() if name in FIELDS}, "mode": _mode}


def merge(current: ExtractionSettings, changes: Mapping[str, Any], prices: PriceTable) -> ExtractionSettings:
    """Validate every change and return the new settings. Raises InvalidSettings; changes nothing."""
    unknown = f"; settings are: {', '.join(FIELDS)}"
    return merged(
        current,
        changes,
        prices,
        checks=CHECKS,
        unknown=lambda name: f"unknown extraction setting {str(name)[:40]!r}{unknown}",
    )


def load(db: Reader, scope_key: str) -> ExtractionSettings | None:
    """The scope's stored settings, or None (read on every turn)."""
    found = db.rows(_LOAD, {"scope": scope_key})
    if not found:
        return None
    mode, harness, model, debounce_s, max_wait_s, cap_s, max_tokens, url, price_in, price_out = found[0]
    return ExtractionSettings.model_construct(
        scope_key=scope_key,
        mode=ExtractionMode(mode),
        harness=harness,
        model=model,
        debounce_s=float(debounce_s),
        max_wait_s=None if max_wait_s is None else float(max_wait_s),
        wall_clock_cap_s=float(cap_s),
        max_output_tokens=int(max_tokens),
        base_url=url,
        price_in_usd_per_mtok=None if price_in is None else float(price_in),
        price_out_usd_per_mtok=None if price_out is None else float(price_out),
    )


def store(tx: Reader, settings: ExtractionSettings, now_us: int) -> None:
    """Replace the scope's row (inside the scope's write transaction, so delete + insert is atomic)."""
    created = tx.execute(select(TABLE.c.created_at).where(TABLE.c.scope_key == settings.scope_key)).scalar()
    tx.execute(delete(TABLE).where(TABLE.c.scope_key == settings.scope_key))
    values = settings.to_json()
    tx.execute(insert(TABLE).values(**values, created_at=created or now_us, updated_at=now_us))
