"""Per-scope extraction settings (docs/extraction.md): defaults, validation, storage.

``mode`` is ``off`` (the default) or ``propose``; ``harness`` + ``model`` as for
consolidation (the default is the cheapest priced model with an API key, else the
offline harness); ``debounce_s`` / ``max_wait_s`` per session; ``wall_clock_cap_s``
and ``max_output_tokens`` bound the call. The monthly spend budget is the scope's
one budget, shared with consolidation (``consolidation_settings``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import bindparam, delete, insert, select

from consolidation.extraction.models import ExtractionMode, ExtractionSettings
from consolidation.pricing import PriceTable
from consolidation.setting_checks import FIELD_CHECKS, default_target, merged, mode_check
from consolidation.setting_checks import OFFLINE_MODEL as OFFLINE_MODEL  # re-exported: a public name here
from consolidation.tables import EXTRACTION_SETTINGS as TABLE
from ledger import Reader
from ledger.columns import construct

FIELDS = tuple(name for name in ExtractionSettings.model_fields if name != "scope_key")
"""The settings a scope sets (every field but the scope's key), in the order messages list them."""
_LOAD = select(*(TABLE.c[name] for name in FIELDS)).where(TABLE.c.scope_key == bindparam("scope"))
_SETTINGS_FIELDS = set(ExtractionSettings.model_fields)


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
    values: dict[str, Any] = {"scope_key": scope_key, **dict(zip(FIELDS, found[0], strict=True))}
    values["mode"] = ExtractionMode(values["mode"])
    for name in ("debounce_s", "max_wait_s", "wall_clock_cap_s", "price_in_usd_per_mtok", "price_out_usd_per_mtok"):
        values[name] = None if values[name] is None else float(values[name])
    values["max_output_tokens"] = int(values["max_output_tokens"])
    return construct(ExtractionSettings, values, _SETTINGS_FIELDS)


def store(tx: Reader, settings: ExtractionSettings, now_us: int) -> None:
    """Replace the scope's row (inside the scope's write transaction, so delete + insert is atomic)."""
    created = tx.execute(select(TABLE.c.created_at).where(TABLE.c.scope_key == settings.scope_key)).scalar()
    tx.execute(delete(TABLE).where(TABLE.c.scope_key == settings.scope_key))
    values = settings.to_json()
    tx.execute(insert(TABLE).values(**values, created_at=created or now_us, updated_at=now_us))
