"""The worker's extraction methods on the record protocol (see docs/extraction.md).

::

    memory/notify_turn                 sessionId, messages [{id?, role: user|assistant, text}]
                                       -> {scopeKey, sessionId, consolidation: {scheduled, runId?, turns?, dueAt?},
                                           extraction: {scheduled, runId?, turns?, dueAt?}}
    memory/get_extraction_settings     (none)  -> {scopeKey, mode, debounceS, harness, model, baseUrl,
                                                   priceInUsdPerMtok, priceOutUsdPerMtok}
    memory/update_extraction_settings  mode?, debounceS?, harness?, model?, baseUrl?, priceInUsdPerMtok?,
                                       priceOutUsdPerMtok?  -> the same

The turn is written to the database (digest, debounced runs) before the queue is
touched, and a queue failure never fails the call: the janitor wakes a run whose
message was lost.

The model target (``harness``, ``model``, ``baseUrl``, the two prices) follows the rule of
:mod:`worker.rpc.account`: the operator's caller (one account without tokens: loopback
``serve`` and ``memledger rpc``) sets it here, validated by the service exactly as
``memledger extraction set`` is; on a server with many accounts (``MEMLEDGER_AUTH=tokens``) the
five params are refused with ``-32602`` and nothing changes, since a tenant could otherwise spend
the operator's money (a price of 0 on a paid model) or aim the worker at any address it can reach.
``baseUrl`` and the prices are ``null`` when unset; no key is ever shown.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, StrictStr

from consolidation import ConsolidationRun
from consolidation.limits import DebounceS
from ledger import Ledger
from ledger.instants import format_rfc3339
from ledger.protocol import ExtraMethod, NoParams, Params
from worker.rpc.account import TargetParams, refuse_target_params, target_json

if TYPE_CHECKING:
    from worker.runtime import Runtime

NOTIFY_TURN = "memory/notify_turn"
GET_SETTINGS = "memory/get_extraction_settings"
UPDATE_SETTINGS = "memory/update_extraction_settings"


class NotifyTurnParams(Params):
    session_id: StrictStr
    messages: Annotated[list[dict[str, Any]], Field(min_length=1, max_length=100)]


class ExtractionSwitches(Params):
    mode: Literal["off", "propose"] | None = None
    debounce_s: DebounceS | None = None  # the range extraction's settings check


class UpdateExtractionParams(TargetParams, ExtractionSwitches):
    """The update's params: the switches, then the model target (pydantic lists the last base's fields first)."""


def _scheduled(run: ConsolidationRun | None) -> dict[str, Any]:
    if run is None:
        return {"scheduled": False}
    return {"scheduled": True, "runId": run.id, "turns": run.turns, "dueAt": format_rfc3339(run.due_at)}


def extraction_methods(runtime: Runtime, *, operator: bool) -> dict[str, ExtraMethod]:
    """The three methods, for ``extra_methods`` of :func:`ledger.protocol.handle`.

    ``operator``: the caller is the operator (one account, no tokens), so the settings update
    takes the model target; else those params are refused (see the module docstring).
    """
    service = runtime.service

    def notify_turn(led: Ledger, params: dict[str, Any]) -> dict[str, Any]:
        p = NotifyTurnParams.model_validate(params)
        consolidation, extraction = runtime.notify_turn_runs(
            led.scope_key, session_id=p.session_id, messages=p.messages
        )
        return {
            "scopeKey": led.scope_key,
            "sessionId": p.session_id,
            "consolidation": _scheduled(consolidation),
            "extraction": _scheduled(extraction),
        }

    def settings_json(led: Ledger) -> dict[str, Any]:
        settings = service.extraction_settings(led.scope_key)
        return {
            "scopeKey": led.scope_key,
            "mode": settings.mode.value,
            "debounceS": settings.debounce_s,
            **target_json(settings),
        }

    def get_settings(led: Ledger, params: dict[str, Any]) -> dict[str, Any]:
        NoParams.model_validate(params)
        return settings_json(led)

    def update_settings(led: Ledger, params: dict[str, Any]) -> dict[str, Any]:
        if not operator:
            refuse_target_params(params, command="memledger extraction set")
        p = UpdateExtractionParams.model_validate(params)
        changes = p.target_changes()
        if p.mode is not None:
            changes["mode"] = p.mode
        if p.debounce_s is not None:
            changes["debounce_s"] = float(p.debounce_s)
        if changes:
            service.update_extraction_settings(led.scope_key, **changes)
        return settings_json(led)

    return {NOTIFY_TURN: notify_turn, GET_SETTINGS: get_settings, UPDATE_SETTINGS: update_settings}
