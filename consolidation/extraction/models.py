"""A scope's extraction settings as the API hands them out (docs/extraction.md), each field stated once.

:class:`ExtractionSettingsFields` states the fields; :class:`ExtractionSettings` hands them out and
``extraction_settings`` (:class:`consolidation.tables.ExtractionSettingsRow`) stores them. Checked and
stored by :mod:`consolidation.extraction.settings`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from sqlmodel import SQLModel

from consolidation import limits
from ledger.columns import FROZEN, float_field, int_field, text_field

DEFAULT_DEBOUNCE_S = 30.0
DEFAULT_MAX_WAIT_S = 300.0
DEFAULT_CAP_S = 60.0
DEFAULT_MAX_OUTPUT_TOKENS = 2048


class ExtractionMode(StrEnum):
    OFF = "off"
    PROPOSE = "propose"


class ExtractionSettingsFields(SQLModel):
    """A scope's extraction settings, each stated once (the API's types; the table stores them)."""

    model_config = FROZEN

    scope_key: str = text_field(primary_key=True)
    mode: ExtractionMode = text_field(value=ExtractionMode.OFF)
    harness: str = text_field()
    model: str = text_field()
    debounce_s: limits.DebounceS = float_field(value=DEFAULT_DEBOUNCE_S)
    max_wait_s: limits.MaxWaitS | None = float_field(value=DEFAULT_MAX_WAIT_S)
    wall_clock_cap_s: limits.WallClockCapS = float_field(value=DEFAULT_CAP_S)
    max_output_tokens: limits.MaxOutputTokens = int_field(value=DEFAULT_MAX_OUTPUT_TOKENS)
    # The model target beyond harness + model: a server of the scope's own, and its own price of the model.
    base_url: str | None = text_field(value=None)
    price_in_usd_per_mtok: limits.PriceUsdPerMtok | None = float_field(value=None)
    price_out_usd_per_mtok: limits.PriceUsdPerMtok | None = float_field(value=None)


class ExtractionSettings(ExtractionSettingsFields):
    """A scope's extraction settings; each number in the range :mod:`consolidation.limits` states.

    Built by :func:`consolidation.extraction.settings.merge`, which checks a change field by field first
    (its messages say what to set); a row read back from the database is trusted as stored.
    """

    def to_json(self) -> dict[str, Any]:
        out = self.model_dump()
        out["mode"] = self.mode.value
        return out
