"""The account's own switches on the record protocol: its consolidation settings.

``memory/get_consolidation_settings`` (no params) and ``memory/update_consolidation_settings``
(``mode``, ``allowRemoval``, ``debounceS``, ``maxRecords``, the model target ``harness``,
``model``, ``baseUrl``, ``priceInUsdPerMtok``, ``priceOutUsdPerMtok``, and how the call is made:
``responseFormat``, ``temperature``, ``contextWindowTokens``, ``systemRole``, ``stream``; each
optional) act on the bound account's scope only.

**The model target is the operator's.** Who may change it depends on how the server is reached:

* one account, no tokens (``memledger serve`` on loopback without ``MEMLEDGER_AUTH=tokens``,
  and ``memledger rpc`` over stdio): the caller is the operator, so the update takes the five
  target params, validated by :meth:`ConsolidationService.update_settings` exactly as
  ``memledger consolidation set`` is (same rules, same messages);
* many accounts (``MEMLEDGER_AUTH=tokens``): a caller is one tenant among many, so the five
  params, and the five of the call (they shape what the operator's server is asked), are refused
  with ``-32602`` and nothing changes, whatever their values (the refusal does not even validate
  them): a tenant that could set a price of 0 on a paid model would spend the operator's money,
  and one that could set ``baseUrl`` would make the worker call any address it can reach. The
  operator sets them with ``memledger consolidation set``.

With tokens, ``maxRecords`` goes up to the operator's ``MEMLEDGER_TENANT_MAX_RECORDS`` (1,000 by default) or
the budget the account has now, whichever is larger; past that it is refused and nothing changes.

Spend budgets, caps and the other operator settings stay on the command line in both cases.
See docs/consolidation.md ("Choices made").

Result of both: ``{scopeKey, mode, allowRemoval, debounceS, maxRecords, harness, model, baseUrl,
priceInUsdPerMtok, priceOutUsdPerMtok, responseFormat, temperature, contextWindowTokens, systemRole,
stream}``; ``maxRecords`` is the scope's record budget (the ceiling consolidation works under);
``baseUrl``, the prices and ``contextWindowTokens`` are ``null`` when unset. No key is ever part of
the settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

from pydantic import Field, StrictBool, StrictFloat, StrictInt, StrictStr
from pydantic.alias_generators import to_camel

from consolidation import (
    CALL_FIELDS,
    PRICE_FIELDS,
    TARGET_FIELDS,
    ConsolidationService,
    ContextWindowTokens,
    DebounceS,
    Temperature,
)
from ledger import Ledger
from ledger.protocol import INVALID_PARAMS, ExtraMethod, NoParams, Params, RpcError

if TYPE_CHECKING:
    from worker.runtime import Runtime

GET_CONSOLIDATION_SETTINGS = "memory/get_consolidation_settings"
UPDATE_CONSOLIDATION_SETTINGS = "memory/update_consolidation_settings"
# The model target's params: wire name -> the service's name (harness, model, baseUrl, the two prices).
TARGET_PARAMS = {to_camel(name): name for name in TARGET_FIELDS}
_NULLABLE_TARGET = ("base_url", *PRICE_FIELDS)  # null unsets these
# How consolidation's call is made: the operator's too (it shapes what the operator's server is asked).
CALL_PARAMS = {to_camel(name): name for name in CALL_FIELDS}

Price = StrictFloat | StrictInt
U = TypeVar("U", bound="TargetParams")


class TargetParams(Params):
    """The model target, as an update takes it: each optional; ``null`` unsets ``baseUrl`` or the prices.

    Types only: what a value may be (a known harness, a priced model, an http(s) URL, a price
    range) is the service's check, the same as the command line's.
    """

    harness: StrictStr | None = None
    model: StrictStr | None = None
    base_url: StrictStr | None = None
    price_in_usd_per_mtok: Price | None = None
    price_out_usd_per_mtok: Price | None = None

    def changes(self, *switches: str) -> dict[str, Any]:
        """The params that were sent, as keyword arguments of a settings update: the model target's, then each
        of ``switches`` that is not ``None`` (``debounce_s`` as seconds, a float)."""
        changes: dict[str, Any] = {}
        for name in TARGET_FIELDS:
            value = getattr(self, name)
            if value is not None or (name in _NULLABLE_TARGET and name in self.model_fields_set):
                changes[name] = value
        for name in switches:
            value = getattr(self, name)
            if value is not None:
                changes[name] = float(value) if name == "debounce_s" else value
        return changes


class CallParams(Params):
    """How consolidation's model call is made (``null`` unsets ``contextWindowTokens``); ranges as the settings'."""

    response_format: Literal["auto", "json_schema", "json_object", "plain"] | None = None
    temperature: Temperature | None = None
    context_window_tokens: ContextWindowTokens | None = None
    system_role: StrictBool | None = None
    stream: StrictBool | None = None

    def call_changes(self) -> dict[str, Any]:
        """The call params that were sent, as keyword arguments of a settings update."""
        changes: dict[str, Any] = {}
        for name in CALL_FIELDS:
            value = getattr(self, name)
            if value is not None or (name == "context_window_tokens" and name in self.model_fields_set):
                changes[name] = float(value) if name == "temperature" and value is not None else value
        return changes


class ConsolidationSwitches(Params):
    mode: Literal["off", "propose", "apply"] | None = None
    allow_removal: StrictBool | None = None
    debounce_s: DebounceS | None = None  # the range consolidation's settings check
    max_records: Annotated[StrictInt, Field(ge=0, le=1_000_000)] | None = None


class UpdateConsolidationParams(TargetParams, CallParams, ConsolidationSwitches):
    """The update's params: the switches, the call, then the model target (pydantic lists the last base's fields
    first)."""


def refuse_target_params(params: Mapping[str, Any], *, command: str, also: Mapping[str, str] | None = None) -> None:
    """Refuse the model target's params from a caller that is not the operator (a server with tokens on).

    Looks only at which params were sent, never at their values, so the refusal is the same for a
    valid value, an invalid one and ``null``, and tells a tenant nothing about the operator's checks.

    Raises:
        RpcError: ``-32602 invalid_params`` naming each target param sent and ``command``.
    """
    sent = [name for name in (*TARGET_PARAMS, *(also or {})) if name in params]
    if not sent:
        return
    why = (
        "the model target is the operator's on this server, which serves many accounts (MEMLEDGER_AUTH=tokens): "
        f"the operator sets it with `{command}`; an account cannot change its model, server or prices"
    )
    raise RpcError(
        INVALID_PARAMS,
        f"invalid params: {', '.join(sent)}: {why}",
        reason="invalid_params",
        errors=[{"field": name, "type": "operator_setting", "message": why} for name in sent],
    )


def check_tenant_budget(led: Ledger, max_records: int, *, ceiling: int) -> None:
    """Refuse a record budget a tenant may not set itself: above the operator's ceiling
    (``MEMLEDGER_TENANT_MAX_RECORDS``) and above the budget it has now (lowering, or restoring up to the
    ceiling, is the tenant's; raising past it is the operator's, with ``memledger budget``).

    Raises:
        RpcError: ``-32602 invalid_params`` naming ``maxRecords`` and the ceiling; nothing is changed.
    """
    if max_records <= max(ceiling, led.budget(led.scope_key).max_records):
        return
    why = (
        f"an account may set its record budget up to {ceiling:,} on this server; "
        "the operator sets a larger one with `memledger budget SCOPE --set N`"
    )
    raise RpcError(
        INVALID_PARAMS,
        f"invalid params: maxRecords: {why}",
        reason="invalid_params",
        errors=[{"field": "maxRecords", "type": "operator_setting", "message": why}],
    )


def validated_update(
    model: type[U], params: dict[str, Any], *, operator: bool, command: str, also: Mapping[str, str] | None = None
) -> U:
    """A settings update's params, validated; the model target's refused first unless the caller is the operator.

    Raises:
        RpcError: ``-32602 invalid_params`` (see :func:`refuse_target_params`).
        ValidationError: a param is unknown or mistyped (the protocol answers ``invalid_params``).
    """
    if not operator:
        refuse_target_params(params, command=command, also=also)
    return model.model_validate(params)


def target_json(settings: Any) -> dict[str, Any]:
    """The model target of a scope's settings (consolidation's or extraction's), as the protocol shows it."""
    return {wire: getattr(settings, name) for wire, name in TARGET_PARAMS.items()}


def _settings_json(service: ConsolidationService, led: Ledger) -> dict[str, Any]:
    settings = service.settings(led.scope_key)
    return {
        "scopeKey": led.scope_key,
        "mode": settings.mode.value,
        "allowRemoval": settings.allow_removal,
        "debounceS": settings.debounce_s,
        "maxRecords": led.budget(led.scope_key).max_records,
        **target_json(settings),
        **{wire: getattr(settings, name) for wire, name in CALL_PARAMS.items()},
    }


def get_consolidation_settings(runtime: Runtime, *, operator: bool) -> ExtraMethod:
    """``memory/get_consolidation_settings``: no params; the bound account's settings."""
    service = runtime.service

    def method(led: Ledger, params: dict[str, Any]) -> dict[str, Any]:
        NoParams.model_validate(params)
        return _settings_json(service, led)

    return method


def update_consolidation_settings(runtime: Runtime, *, operator: bool) -> ExtraMethod:
    """``memory/update_consolidation_settings``; ``operator``: the caller is the operator (one account, no
    tokens), so the update takes the model target; else those params are refused (see the module docstring)."""
    service = runtime.service
    ceiling = runtime.config.tenant_max_records

    def method(led: Ledger, params: dict[str, Any]) -> dict[str, Any]:
        command = "memledger consolidation set"
        p = validated_update(UpdateConsolidationParams, params, operator=operator, command=command, also=CALL_PARAMS)
        if p.max_records is not None and not operator:
            check_tenant_budget(led, p.max_records, ceiling=ceiling)
        changes = p.changes("mode", "debounce_s", "allow_removal") | p.call_changes()
        if changes:
            service.update_settings(led.scope_key, **changes)
        if p.max_records is not None:
            led.set_budget(led.scope_key, p.max_records)
        return _settings_json(service, led)

    return method
