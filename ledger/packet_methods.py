"""Protocol methods of the packet, its audit, the injection switch and capabilities (SPEC 3.6, 3.7, 3.3).

::

    memory/build_packet              scopeKey?, sessionId?, maxChars?
                                     -> {text, records, selected, excluded, omitted, tokenEstimate,
                                         maxChars, builtAt, sessionId, injection}
    memory/get_packet_audit          sessionId  -> the audit ({sessionId, builtAt, text, selected,
                                                   excluded, tokenEstimate, maxChars}) or null
    memory/get_memory_injection      (none)     -> {scopeKey, enabled}
    memory/set_memory_injection      enabled    -> {scopeKey, enabled}
    memory/get_memory_capabilities   (none)     -> {scopeKey, maxBodyChars, kinds, injection,
                                                   consolidation {...}, extraction {...}, ...}

Every method acts on the bound account's scope; a ``scopeKey`` naming another scope is
refused (``invalid_params``, the ledger's ScopeError). ``ledger.protocol`` adds these
entries to its method table (they replace its older ``memory/build_packet``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr
from pydantic.alias_generators import to_camel

from ledger.errors import ScopeError
from ledger.instants import format_rfc3339
from ledger.packet import Packet

if TYPE_CHECKING:
    from ledger.core import Ledger


class _Params(BaseModel):
    # The same discipline as ledger.protocol.Params: camelCase, unknown names refused, strict types.
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=False, frozen=True)


class NoParams(_Params):
    pass


class BuildPacketParams(_Params):
    scope_key: StrictStr | None = None
    session_id: StrictStr | None = None
    max_chars: Annotated[StrictInt, Field(ge=1, le=1_000_000)] | None = None


class AuditParams(_Params):
    session_id: StrictStr


class InjectionParams(_Params):
    enabled: StrictBool


def _own(led: Ledger, scope_key: str | None) -> str:
    if scope_key is not None and scope_key != led.scope_key:
        raise ScopeError(f"scopeKey must be this account's scope, {led.scope_key}")
    return led.scope_key


def packet_json(packet: Packet, record_json: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
    return {
        "text": packet.text,
        "records": [record_json(r) for r in packet.records],
        "selected": [{"id": s.id, "kind": s.kind, "reason": s.reason, "body": s.body} for s in packet.selected],
        "excluded": [{"id": e.id, "code": e.code} for e in packet.excluded],
        "omitted": [record_json(r) for r in packet.omitted],
        "tokenEstimate": packet.token_estimate,
        "maxChars": packet.max_chars,
        "builtAt": format_rfc3339(packet.built_at) if packet.built_at is not None else None,
        "sessionId": packet.session_id,
        "injection": packet.injection,
    }


def _build(led: Ledger, p: BuildPacketParams) -> Any:
    from ledger.protocol import record_to_json

    packet = led.build_packet(_own(led, p.scope_key), max_chars=p.max_chars, session_id=p.session_id)
    return packet_json(packet, record_to_json)


def _audit(led: Ledger, p: AuditParams) -> Any:
    audit = led.packet_audit(p.session_id)
    return None if audit is None else audit.to_json()


def _injection(led: Ledger, _p: NoParams) -> Any:
    return {"scopeKey": led.scope_key, "enabled": led.injection(led.scope_key)}


def _set_injection(led: Ledger, p: InjectionParams) -> Any:
    return {"scopeKey": led.scope_key, "enabled": led.set_injection(led.scope_key, p.enabled)}


def _capabilities(led: Ledger, _p: NoParams) -> Any:
    return led.capabilities()


# name -> (params model, fn(led, params)); ledger.protocol wraps each in its Method.
PACKET_METHOD_SPECS: dict[str, tuple[type[BaseModel], Callable[[Any, Any], Any]]] = {
    "memory/build_packet": (BuildPacketParams, _build),
    "memory/get_packet_audit": (AuditParams, _audit),
    "memory/get_memory_injection": (NoParams, _injection),
    "memory/set_memory_injection": (InjectionParams, _set_injection),
    "memory/get_memory_capabilities": (NoParams, _capabilities),
}
