"""The record protocol's method table (:data:`METHODS`): each method's params and the ledger call it makes.

Every method is confined to the bound account (docs/protocol.md): another account's scope is
refused and another account's record id reads exactly as an unknown one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ledger.core import Ledger
from ledger.errors import RecordNotFound, RpcError
from ledger.paging import Page
from ledger.params import (
    AsOfParams,
    AuditParams,
    IdParams,
    InjectionParams,
    NoParams,
    PacketParams,
    PageParams,
    Params,
    SaveParams,
    SearchParams,
    SlashParams,
)
from ledger.reads import SCOPE_RE
from ledger.wire import INVALID_PARAMS, MAX_ID_CHARS, quote

# Record ids are "mem_" + 24 hex digits; anything much longer cannot be one, so it is not looked up.


# ---------------------------------------------------------------------- account confinement
def not_found(record_id: str) -> RecordNotFound:
    """The one answer for an unknown id and for another account's id: nothing tells them apart."""
    return RecordNotFound(f"no memory record {quote(record_id)} in this account", record_id=record_id)


def _id(record_id: str, *, field: str = "id") -> str:
    """``record_id`` to look up; one longer than any record id is refused without a lookup.

    Raises:
        RpcError: ``invalid_params`` naming ``field``, the limit and the length that was sent.
    """
    if len(record_id) > MAX_ID_CHARS:
        raise RpcError(
            INVALID_PARAMS,
            f"invalid params: {field}: a record id has at most {MAX_ID_CHARS} characters (ids look like "
            f'"mem_" and 24 hex digits); this one has {len(record_id):,}',
            reason="invalid_params",
            field=field,
        )
    return record_id


def _own_scope(led: Ledger, scope_key: str | None) -> str:
    """The bound scope; a malformed key is ``invalid_params``, another account's is ``scope_error``.

    Left out (None), it is the caller's one scope: every caller has exactly one, its account's.
    """
    if scope_key is None:
        return led.scope_key
    if not SCOPE_RE.match(scope_key):
        raise RpcError(
            INVALID_PARAMS,
            f"invalid params: scopeKey: {quote(scope_key)} is not a scope key; expected kind:name, "
            f'here "{led.scope_key}"',
            reason="invalid_params",
            field="scopeKey",
        )
    if scope_key != led.scope_key:
        raise RpcError(
            INVALID_PARAMS,
            f"scope error: scopeKey {quote(scope_key)} is not this caller's scope; "
            f'this connection reads and writes "{led.scope_key}" only',
            reason="scope_error",
            field="scopeKey",
        )
    return scope_key


# ---------------------------------------------------------------------- methods
def _save(led: Ledger, p: SaveParams) -> Any:
    return led.save(
        p.body,
        kind=p.kind,
        supersedes=None if p.supersedes is None else _id(p.supersedes, field="supersedes"),
        expires_at=p.expires_at,
        conflict_group=p.conflict_group,
        source_session_id=p.source_session_id,
        request_id=p.request_id,
    )


def _page(scope: str, page: Page) -> dict[str, Any]:
    return {"scopeKey": scope, "records": page.records, "nextCursor": page.next_cursor}


def _page_args(p: PageParams) -> dict[str, Any]:
    return {
        "limit": p.limit,
        "cursor": p.cursor,
        "kind": p.kind,
        "provenance": p.provenance,
        "conflict_group": p.conflict_group,
    }


def _paging(p: PageParams) -> bool:
    return any(value is not None for value in _page_args(p).values())


def _list(led: Ledger, p: PageParams) -> Any:
    scope = _own_scope(led, p.scope_key)
    if not _paging(p):  # the whole list: the active set's own (faster) read
        return _page(scope, Page(led.list(scope), None))
    return _page(scope, led.list_page(scope, **_page_args(p)))


def _list_as_of(led: Ledger, p: AsOfParams) -> Any:
    scope = _own_scope(led, p.scope_key)
    return {"scopeKey": scope, "asOf": p.as_of, "records": led.list_as_of(scope, p.as_of)}


def _get(led: Ledger, p: IdParams) -> Any:
    return led.get(_id(p.id))  # the ledger confines reads by id to its account


def _history(led: Ledger, p: IdParams) -> Any:
    return {"id": p.id, "records": led.history(_id(p.id))}


def _search(led: Ledger, p: SearchParams) -> Any:
    scope = _own_scope(led, p.scope_key)
    records = led.search(scope, p.query, limit=p.limit)
    return {"scopeKey": scope, "query": p.query, "records": records}


def _proposals(led: Ledger, p: PageParams) -> Any:
    scope = _own_scope(led, p.scope_key)
    if not _paging(p):
        return _page(scope, Page(led.proposals(scope), None))
    return _page(scope, led.proposals_page(scope, **_page_args(p)))


def _packet(led: Ledger, p: PacketParams) -> Any:
    return led.build_packet(_own_scope(led, p.scope_key), max_chars=p.max_chars, session_id=p.session_id)


def _packet_audit(led: Ledger, p: AuditParams) -> Any:
    audit = led.packet_audit(p.session_id)
    return None if audit is None else audit.to_json()


def _injection(led: Ledger, enabled: bool) -> dict[str, Any]:
    return {"scopeKey": led.scope_key, "enabled": enabled}


@dataclass(frozen=True, slots=True)
class Method:
    """One entry of the method table: how to validate params, and what to run."""

    params: type[Params]
    run: Callable[[Ledger, Any], Any]


METHODS: Mapping[str, Method] = {
    "memory/save_memory_record": Method(SaveParams, _save),
    "memory/list_memory_records": Method(PageParams, _list),
    "memory/list_memory_records_as_of": Method(AsOfParams, _list_as_of),
    "memory/get_memory_record": Method(IdParams, _get),
    "memory/delete_memory_record": Method(IdParams, lambda led, p: led.delete(_id(p.id))),
    "memory/get_memory_record_history": Method(IdParams, _history),
    "memory/search_memory_records": Method(SearchParams, _search),
    "memory/list_proposed_memory_records": Method(PageParams, _proposals),
    "memory/accept_proposed_memory_record": Method(IdParams, lambda led, p: led.accept(_id(p.id))),
    "memory/reject_proposed_memory_record": Method(IdParams, lambda led, p: led.reject(_id(p.id))),
    "memory/handle_slash_command": Method(SlashParams, lambda led, p: led.handle_slash(p.text)),
    "memory/build_packet": Method(PacketParams, _packet),
    # The packet's audit, the injection switch and capabilities (docs/packet.md).
    "memory/get_packet_audit": Method(AuditParams, _packet_audit),
    "memory/get_memory_injection": Method(NoParams, lambda led, p: _injection(led, led.injection(led.scope_key))),
    "memory/set_memory_injection": Method(
        InjectionParams, lambda led, p: _injection(led, led.set_injection(led.scope_key, p.enabled))
    ),
    "memory/get_memory_capabilities": Method(NoParams, lambda led, p: led.capabilities()),
}
