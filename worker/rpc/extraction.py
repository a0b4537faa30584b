"""The account's extraction switches on the record protocol (see docs/extraction.md).

::

    memory/get_extraction_settings     (none)  -> {scopeKey, mode, debounceS, harness, model, baseUrl,
                                                   priceInUsdPerMtok, priceOutUsdPerMtok}
    memory/update_extraction_settings  mode?, debounceS?, harness?, model?, baseUrl?, priceInUsdPerMtok?,
                                       priceOutUsdPerMtok?  -> the same

The model target (``harness``, ``model``, ``baseUrl``, the two prices) follows the rule of
:mod:`worker.rpc.account`: the operator's caller (one account without tokens: loopback
``serve`` and ``memledger rpc``) sets it here, validated by the service exactly as
``memledger extraction set`` is; on a server with many accounts (``MEMLEDGER_AUTH=tokens``) the
five params are refused with ``-32602`` and nothing changes, since a tenant could otherwise spend
the operator's money (a price of 0 on a paid model) or aim the worker at any address it can reach.
``baseUrl`` and the prices are ``null`` when unset; no key is ever shown. The session's turns
(``memory/notify_turn``) are :mod:`worker.rpc.turns`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from consolidation import DebounceS
from ledger import Ledger
from ledger.protocol import ExtraMethod, NoParams, Params
from worker.rpc.account import TargetParams, target_json, validated_update

if TYPE_CHECKING:
    from worker.runtime import Runtime

GET_EXTRACTION_SETTINGS = "memory/get_extraction_settings"
UPDATE_EXTRACTION_SETTINGS = "memory/update_extraction_settings"


class ExtractionSwitches(Params):
    mode: Literal["off", "propose"] | None = None
    debounce_s: DebounceS | None = None  # the range extraction's settings check


class UpdateExtractionParams(TargetParams, ExtractionSwitches):
    """The update's params: the switches, then the model target (pydantic lists the last base's fields first)."""


def _settings_json(runtime: Runtime, led: Ledger) -> dict[str, Any]:
    settings = runtime.service.extraction_settings(led.scope_key)
    return {
        "scopeKey": led.scope_key,
        "mode": settings.mode.value,
        "debounceS": settings.debounce_s,
        **target_json(settings),
    }


def get_extraction_settings(runtime: Runtime, *, operator: bool) -> ExtraMethod:
    """``memory/get_extraction_settings``: no params; the bound account's extraction settings."""

    def method(led: Ledger, params: dict[str, Any]) -> dict[str, Any]:
        NoParams.model_validate(params)
        return _settings_json(runtime, led)

    return method


def update_extraction_settings(runtime: Runtime, *, operator: bool) -> ExtraMethod:
    """``memory/update_extraction_settings``; the model target only from the operator (see the module docstring)."""

    def method(led: Ledger, params: dict[str, Any]) -> dict[str, Any]:
        command = "memledger extraction set"
        p = validated_update(UpdateExtractionParams, params, operator=operator, command=command)
        changes = p.changes("mode", "debounce_s")
        if changes:
            runtime.service.update_extraction_settings(led.scope_key, **changes)
        return _settings_json(runtime, led)

    return method
