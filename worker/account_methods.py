"""The account's own switches on the record protocol (SPEC 3.6): its consolidation settings.

``memory/get_consolidation_settings`` (no params) and ``memory/update_consolidation_settings``
(``mode``, ``allowRemoval``, ``debounceS``, ``maxRecords``; each optional) act on the bound
account's scope only. Operator settings (harness, model, prices, spend budgets, caps) are not
here: they stay on the command line (``memledger consolidation set``).

Result of both: ``{scopeKey, mode, allowRemoval, debounceS, maxRecords}``; ``maxRecords`` is the
scope's record budget (the ceiling consolidation works under).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StrictBool, StrictInt

from consolidation import ConsolidationService
from consolidation.limits import DebounceS
from ledger import Ledger
from ledger.protocol import ExtraMethod, NoParams, Params

GET_SETTINGS = "memory/get_consolidation_settings"
UPDATE_SETTINGS = "memory/update_consolidation_settings"


class UpdateConsolidationParams(Params):
    mode: Literal["off", "propose", "apply"] | None = None
    allow_removal: StrictBool | None = None
    debounce_s: DebounceS | None = None  # the range consolidation's settings check
    max_records: Annotated[StrictInt, Field(ge=0, le=1_000_000)] | None = None


def _settings_json(service: ConsolidationService, led: Ledger) -> dict[str, Any]:
    settings = service.settings(led.scope_key)
    return {
        "scopeKey": led.scope_key,
        "mode": settings.mode.value,
        "allowRemoval": settings.allow_removal,
        "debounceS": settings.debounce_s,
        "maxRecords": led.budget(led.scope_key).max_records,
    }


def account_methods(service: ConsolidationService) -> dict[str, ExtraMethod]:
    """The two settings methods, for ``extra_methods`` of :func:`ledger.protocol.handle`."""

    def get_settings(led: Ledger, params: dict[str, Any]) -> dict[str, Any]:
        NoParams.model_validate(params)
        return _settings_json(service, led)

    def update_settings(led: Ledger, params: dict[str, Any]) -> dict[str, Any]:
        p = UpdateConsolidationParams.model_validate(params)
        changes: dict[str, Any] = {}
        if p.mode is not None:
            changes["mode"] = p.mode
        if p.debounce_s is not None:
            changes["debounce_s"] = float(p.debounce_s)
        if p.allow_removal is not None:
            changes["allow_removal"] = p.allow_removal
        if changes:
            service.update_settings(led.scope_key, **changes)
        if p.max_records is not None:
            led.set_budget(led.scope_key, p.max_records)
        return _settings_json(service, led)

    return {GET_SETTINGS: get_settings, UPDATE_SETTINGS: update_settings}
