"""The record protocol: JSON-RPC 2.0 over the :class:`~ledger.core.Ledger`.

One entry point, :func:`handle` (a request object or a batch in, a response object, a list of
responses, or ``None`` when there is nothing to answer), and :func:`handle_line` for
line-oriented transports (``memledger rpc`` reads one request or batch per line and writes one
response line). Batches are answered as JSON-RPC 2.0 says: an array of responses in request
order, none for notifications, ``-32600`` for an empty array or a non-object member; at most
:data:`MAX_BATCH` requests a batch.

Methods (params are by name, camelCase; unknown or mistyped params are refused)::

    memory/save_memory_record            body, kind?, supersedes?, expiresAt?, conflictGroup?, sourceSessionId?
                                         -> record  (the scope is always the bound account: a scopeKey is refused)
    memory/list_memory_records           scopeKey?, limit?, cursor?, kind?, provenance?, conflictGroup?
                                         -> {scopeKey, records, nextCursor}
    memory/list_memory_records_as_of     scopeKey?, asOf           -> {scopeKey, asOf, records}
    memory/get_memory_record             id                        -> record
    memory/delete_memory_record          id                        -> record (deleted, body erased)
    memory/get_memory_record_history     id                        -> {id, records}  (oldest first)
    memory/search_memory_records         scopeKey?, query, limit?  -> {scopeKey, query, records}
    memory/list_proposed_memory_records  scopeKey?, limit?, cursor?, kind?, provenance?, conflictGroup?
                                         -> {scopeKey, records, nextCursor}
    memory/accept_proposed_memory_record id                        -> record
    memory/reject_proposed_memory_record id                        -> record
    memory/handle_slash_command          text                      -> {handled, reply, ok, reason?, records}
    memory/build_packet                  scopeKey?, maxChars?, sessionId?
                                         -> {text, records, selected, excluded, omitted, tokenEstimate, maxChars,
                                             builtAt, sessionId, injection}  (sessionId: also the session's audit)
    memory/get_packet_audit              sessionId                 -> the session's audit, or null
    memory/get_memory_injection          (none)                    -> {scopeKey, enabled}
    memory/set_memory_injection          enabled                   -> {scopeKey, enabled}
    memory/get_memory_capabilities       (none)                    -> {scopeKey, maxBodyChars, kinds, injection, ...}

``scopeKey`` may be left out: the caller has one scope (its account's), and it is the default.
The two lists page: ``limit`` (1 to 1000; left out, the whole list), ``cursor`` (the previous
page's ``nextCursor``; null on the last page), filtered by ``kind``, ``provenance`` and
``conflictGroup``; see docs/ledger.md, "Paging", for what a cursor guarantees while others write.
``id`` may also be spelled ``recordId``. Every time-dependent operation runs at
the ledger's clock: a client cannot pass ``now``. Records carry
the ledger's fields (docs/ledger.md) in camelCase; instants are RFC 3339 with microseconds and ``Z``.

**The bound account is the only account** (docs/protocol.md): a ``scopeKey`` other than the
ledger's own is refused (``scope_error``), and an id that belongs to another account is
answered exactly as an unknown id (``not_found``, same message, same data).

**Strict input** (every method, extra methods included): every string anywhere in a request
must be valid Unicode (a lone surrogate is ``invalid_params``, or ``invalid_request`` in
the envelope) and free of control characters (newline, carriage return and tab are allowed in
bodies and slash text only); instants are RFC 3339 with an offset and at most 6 fractional
digits; an error message quotes at most :data:`MAX_QUOTE_CHARS` characters of any input.

Errors carry ``data.reason`` (stable) and, for ledger errors, safe context
(ids, counts; never a body, a traceback or an exception's text)::

    code     reason               when
    -32700   parse_error          the line is not JSON
    -32600   invalid_request      not an object, jsonrpc != "2.0", bad id/method/params type, an empty or
                                  too large batch
    -32601   method_not_found     unknown method (the message lists the valid ones)
    -32602   invalid_params       missing, unknown or mistyped params; bad text or instants; a scopeKey on save;
                                  InvalidInstant, ScopeError, InvalidArgument
    -32602   scope_error          a scopeKey that is not the bound account's
    -32603   internal_error       anything unexpected (logged here, never described to the client)
    -32000   ledger_error         any other LedgerError (e.g. a schema behind the code)
    -32001   body_rejected        BodyRejected (data.why: empty | too_long | credential)
    -32002   budget_exceeded      BudgetExceeded (data: scopeKey, budget, active, proposed, held)
    -32003   not_found            RecordNotFound (data.recordId)
    -32004   invalid_transition   InvalidTransition
    -32005   busy                 LedgerBusy (retry later)
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Annotated, Any, ClassVar

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, PlainValidator, StrictBool, StrictInt, ValidationError
from pydantic.alias_generators import to_camel

from ledger.core import Ledger, ScopeUsage
from ledger.errors import LedgerError, RecordNotFound
from ledger.instants import format_rfc3339, require_aware
from ledger.lines import escape_line_breaks
from ledger.models import Kind, MemoryRecord, Provenance
from ledger.packet import Packet
from ledger.paging import MAX_LIMIT, Page
from ledger.reads import SCOPE_RE
from ledger.slash import SlashResult

log = logging.getLogger(__name__)

JSONRPC_VERSION = "2.0"
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

# data.reason -> JSON-RPC code for LedgerError subclasses; anything unlisted gets LEDGER_ERROR.
LEDGER_ERROR = -32000
REASON_CODES: dict[str, int] = {
    "invalid_params": INVALID_PARAMS,
    "scope_error": INVALID_PARAMS,
    "body_rejected": -32001,
    "budget_exceeded": -32002,
    "not_found": -32003,
    "invalid_transition": -32004,
    "busy": -32005,
}

ExtraMethod = Callable[[Ledger, dict[str, Any]], Any]
MAX_BATCH = 100
MAX_QUOTE_CHARS = 80
# Record ids are "mem_" + 24 hex digits; anything much longer cannot be one, so it is not looked up.
MAX_ID_CHARS = 100
MAX_REQUEST_ID_CHARS = 200
_REQUEST_KEYS = frozenset({"jsonrpc", "method", "params", "id"})
# Lone surrogates and C0/C1 control characters (tab, LF and CR are allowed where text may span lines).
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_BAD_ANYWHERE = re.compile(r"[\ud800-\udfff\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_BAD_IN_LINE = re.compile(r"[\ud800-\udfff\x00-\x1f\x7f-\x9f]")
_RFC3339 = re.compile(
    r"(?P<date>\d{4}-\d{2}-\d{2})[Tt ](?P<time>\d{2}:\d{2}:\d{2})(?:\.(?P<frac>\d+))?(?P<offset>[Zz]|[+-]\d{2}:\d{2})"
)
_INSTANT_HINT = 'an RFC 3339 instant with an offset, e.g. "2026-01-01T00:00:00Z" or "2026-01-01T09:30:00.25+02:00"'


class RpcError(Exception):
    """A protocol-level refusal with its JSON-RPC code and ``data.reason``."""

    def __init__(self, code: int, message: str, *, reason: str, **data: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data: dict[str, Any] = {"reason": reason, **data}


def quote(value: object, *, limit: int = MAX_QUOTE_CHARS) -> str:
    """``value`` as a JSON string of at most ``limit`` of its characters, safe to put in any message.

    Control characters, U+2028 / U+2029 and lone surrogates come out escaped; a longer value is cut and says how
    long it was, so an error never grows with its input.
    """
    text = value if isinstance(value, str) else type(value).__name__
    shown = json.dumps(text[:limit], ensure_ascii=False)
    shown = escape_line_breaks(_BAD_ANYWHERE.sub(lambda m: f"\\u{ord(m.group()):04x}", shown))
    return shown if len(text) <= limit else f'{shown[:-1]}…" ({len(text):,} characters)'


def _char_problem(found: str, where: str) -> str:
    code = f"U+{ord(found):04X}"
    if _SURROGATE.match(found):
        return f"{where} is not valid Unicode: it holds a lone surrogate ({code}); send UTF-8 text"
    return f"{where} holds the control character {code}, which is not allowed; send plain text"


def _scan(value: Any, path: str) -> None:
    """Refuse a lone surrogate or a control character (other than tab, LF, CR) in any string of ``value``."""
    if isinstance(value, str):
        found = _BAD_ANYWHERE.search(value)
        if found:
            raise RpcError(
                INVALID_PARAMS, f"invalid params: {_char_problem(found.group(), path)}", reason="invalid_params",
                field=path,
            )  # fmt: skip
    elif isinstance(value, Mapping):
        for key, item in value.items():
            name = key if isinstance(key, str) else str(key)
            if _BAD_ANYWHERE.search(name):
                shown = quote(name)
                raise RpcError(
                    INVALID_PARAMS, f"invalid params: the param name {shown} is not plain text",
                    reason="invalid_params", field=shown[1:-1],
                )  # fmt: skip
            _scan(item, name if path == "params" else f"{path}.{name}")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _scan(item, f"{path}[{index}]")


# ---------------------------------------------------------------------- serialization
def record_to_json(record: MemoryRecord) -> dict[str, Any]:
    """A record as the protocol (and ``memledger … --json``) shows it: camelCase, RFC 3339 instants."""
    return {
        "id": record.id,
        "scopeKey": record.scope_key,
        "kind": record.kind.value,
        "body": record.body,
        "provenance": record.provenance.value,
        "status": record.status.value,
        "sourceSessionId": record.source_session_id,
        "supersedes": list(record.supersedes),
        "supersededBy": record.superseded_by,
        "confidenceBps": record.confidence_bps,
        "rationale": record.rationale,
        "validFrom": format_rfc3339(record.valid_from),
        "validTo": format_rfc3339(record.valid_to),
        "expiresAt": format_rfc3339(record.expires_at),
        "conflictGroup": record.conflict_group,
        "createdAt": format_rfc3339(record.created_at),
        "updatedAt": format_rfc3339(record.updated_at),
        "erased": record.erased,
    }


def usage_to_json(usage: ScopeUsage) -> dict[str, Any]:
    """A scope's budget and what it holds."""
    return {
        "scopeKey": usage.scope_key,
        "maxRecords": usage.max_records,
        "active": usage.active,
        "proposed": usage.proposed,
        "held": usage.held,
    }


def slash_to_json(result: SlashResult) -> dict[str, Any]:
    """``{handled, reply, ok, reason?, records}``; ``reason`` only when the command was refused."""
    out: dict[str, Any] = {
        "handled": result.handled,
        "reply": result.reply,
        "ok": result.ok,
        "records": [record_to_json(r) for r in result.records],
    }
    if result.reason is not None:
        out["reason"] = result.reason
    return out


def packet_to_json(packet: Packet) -> dict[str, Any]:
    """The injected text, what it holds and how each was sent, what it left out and why (docs/packet.md)."""
    return {
        "text": packet.text,
        "records": [record_to_json(r) for r in packet.records],
        "selected": [{"id": e.id, "kind": e.kind, "reason": e.reason, "body": e.body} for e in packet.selected],
        "excluded": [{"id": e.id, "code": e.code} for e in packet.excluded],
        "omitted": [record_to_json(r) for r in packet.omitted],
        "tokenEstimate": packet.token_estimate,
        "maxChars": packet.max_chars,
        "builtAt": None if packet.built_at is None else format_rfc3339(packet.built_at),
        "sessionId": packet.session_id,
        "injection": packet.injection,
    }


def to_jsonable(value: Any) -> Any:
    """Turn ledger objects (records, usage, packets, slash results, instants, enums) into JSON values.

    Raises:
        TypeError: a value with no JSON form (a bug in the method that returned it).
    """
    if isinstance(value, Enum):
        return value.value
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, datetime):
        return format_rfc3339(value)
    for kind, convert in _CONVERTERS:
        if isinstance(value, kind):
            return convert(value)
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    raise TypeError(f"no JSON form for {type(value).__name__}")


_CONVERTERS: tuple[tuple[type[Any], Callable[[Any], Any]], ...] = (
    (MemoryRecord, record_to_json),
    (ScopeUsage, usage_to_json),
    (SlashResult, slash_to_json),
    (Packet, packet_to_json),
)


# ---------------------------------------------------------------------- params
def parse_wire_instant(value: object) -> datetime:
    """An RFC 3339 instant as the wire carries it: ``YYYY-MM-DDTHH:MM:SS[.ffffff](Z|±HH:MM)``.

    Basic format, week and ordinal dates, a missing offset and more than 6 fractional digits
    are refused (never cut). Raises ValueError with a message that says what a valid value is.
    """
    if not isinstance(value, str):
        raise ValueError(f"must be a string holding {_INSTANT_HINT}")
    m = _RFC3339.fullmatch(value)
    if m is None:
        raise ValueError(f"must be {_INSTANT_HINT}; got {quote(value)}")
    frac = m.group("frac") or ""
    if len(frac) > 6:
        raise ValueError(
            f"has {len(frac)} fractional digits and at most 6 (microseconds) are kept; "
            f"round it, e.g. {quote(value[: m.start('frac') + 6] + value[m.end('frac') :])}"
        )
    offset = m.group("offset").upper().replace("Z", "+00:00")
    iso = f"{m.group('date')}T{m.group('time')}{'.' + frac.ljust(6, '0') if frac else ''}{offset}"
    try:
        parsed = datetime.fromisoformat(iso)
        return require_aware(parsed)
    except (ValueError, LedgerError):
        raise ValueError(f"is not a real instant (check the month, day, hour and offset); got {quote(value)}") from None


def _line_text(value: object) -> str:
    """One line of text: a string with no control character at all (no newline either)."""
    if not isinstance(value, str):
        raise ValueError("must be a string")
    found = _BAD_IN_LINE.search(value)
    if found:
        raise ValueError(_char_problem(found.group(), "the text") + " on one line (no newline or tab)")
    return value


def _body_text(value: object) -> str:
    """Free text: a string; newline, carriage return and tab are allowed (the scan refused the rest)."""
    if not isinstance(value, str):
        raise ValueError("must be a string")
    found = _BAD_ANYWHERE.search(value)
    if found:
        raise ValueError(_char_problem(found.group(), "the text"))
    return value


Instant = Annotated[datetime, PlainValidator(parse_wire_instant)]
Line = Annotated[str, PlainValidator(_line_text)]
Text = Annotated[str, PlainValidator(_body_text)]
RecordId = Annotated[Line, Field(validation_alias=AliasChoices("id", "recordId"))]


class Params(BaseModel):
    """Base of every method's params: camelCase names, unknown names refused, strict types.

    Extra methods validate their own params with a subclass (``NoParams.model_validate(params)``);
    a :class:`pydantic.ValidationError` becomes an ``invalid_params`` error that names each wire
    field and, for an unknown one, lists the params the method takes. ``Line``, ``Text`` and
    ``Instant`` are the strict field types to use.
    """

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=False, frozen=True)
    registry: ClassVar[dict[str, type[Params]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        Params.registry[cls.__name__] = cls

    @classmethod
    def wire_names(cls) -> list[str]:
        """The params this model takes, as the wire spells them."""
        names = []
        for name, info in cls.model_fields.items():
            alias = info.validation_alias
            names.append(alias.choices[0] if isinstance(alias, AliasChoices) else info.alias or name)
        return [str(n) for n in names]


class NoParams(Params):
    """A method that takes no params."""


class SaveParams(Params):
    body: Text
    kind: Kind | None = None
    supersedes: Line | None = None
    expires_at: Instant | None = None
    conflict_group: Line | None = None
    source_session_id: Line | None = None


class ScopeParams(Params):
    scope_key: Line | None = None


class PageParams(ScopeParams):
    limit: Annotated[StrictInt, Field(ge=1, le=MAX_LIMIT)] | None = None
    cursor: Line | None = None
    kind: Kind | None = None
    provenance: Provenance | None = None
    conflict_group: Line | None = None


class AsOfParams(ScopeParams):
    as_of: Instant


class IdParams(Params):
    id: RecordId


class SearchParams(ScopeParams):
    query: Line
    limit: StrictInt = 20


class SlashParams(Params):
    text: Text


class PacketParams(ScopeParams):
    max_chars: Annotated[StrictInt, Field(ge=1, le=1_000_000)] | None = None
    session_id: Line | None = None


class AuditParams(Params):
    session_id: Line


class InjectionParams(Params):
    enabled: StrictBool


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


# ---------------------------------------------------------------------- dispatch
@dataclass(frozen=True, slots=True)
class _Envelope:
    method: str
    params: dict[str, Any]
    id: str | int | None
    notification: bool


def _request_id(request: Mapping[str, Any]) -> str | int | None:
    """The id to echo: a plain string, an integer or null; anything else is echoed as null."""
    value = request.get("id")
    if isinstance(value, str):
        return value if len(value) <= MAX_REQUEST_ID_CHARS and not _BAD_IN_LINE.search(value) else None
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    return None


def _invalid(message: str) -> RpcError:
    return RpcError(INVALID_REQUEST, f"invalid request: {message}", reason="invalid_request")


def _envelope(request: Any) -> _Envelope:
    """Check the request object itself (not its params). Raises :class:`RpcError` ``invalid_request``."""
    if not isinstance(request, Mapping):
        raise _invalid("a request must be a JSON object (or a batch: a non-empty array of them)")
    if request.get("jsonrpc") != JSONRPC_VERSION:
        raise _invalid('"jsonrpc" must be "2.0"')
    unknown = sorted(str(k) for k in request if k not in _REQUEST_KEYS)
    if unknown:
        raise _invalid(f"unknown member {quote(unknown[0])}; a request has only jsonrpc, id, method and params")
    if "id" in request and _request_id(request) != request["id"]:
        raise _invalid(f'"id" must be an integer, null or a string of plain text up to {MAX_REQUEST_ID_CHARS} chars')
    method = request.get("method")
    if not isinstance(method, str):
        raise _invalid('"method" must be a string')
    if _BAD_ANYWHERE.search(method):
        raise _invalid(f'"method" {quote(method)} is not plain text')
    params = request.get("params", {})
    if isinstance(params, list):
        raise RpcError(
            INVALID_PARAMS, "invalid params: pass params by name (a JSON object), not as an array",
            reason="invalid_params", field="params",
        )  # fmt: skip
    if params is None:  # an explicit null is the same as no params
        params = {}
    if not isinstance(params, Mapping):
        raise _invalid('"params" must be an object')
    return _Envelope(method, dict(params), _request_id(request), "id" not in request)


_MESSAGES = {
    "missing": "is required",
    "string_type": "must be a string",
    "int_type": "must be an integer (a JSON number without a fraction)",
    "enum": "must be one of {expected}",
}


def _field_name(loc: tuple[int | str, ...]) -> str:
    """The wire name of an error's location: the param, then list indices and nested keys (no pydantic tags)."""
    parts = [str(loc[0])] if loc else ["params"]
    for part in loc[1:]:
        if isinstance(part, int):
            parts.append(f"[{part}]")
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", part) and part not in ("function-plain", "str", "int"):
            parts.append(f".{part}")
    return "".join(parts)


def _problem(err: Mapping[str, Any], model: type[Params] | None) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        takes = model.wire_names() if model is not None else []
        return (
            f"is not a param of this method (it takes {', '.join(takes)})" if takes else "this method takes no params"
        )
    if kind == "enum":
        expected = str((err.get("ctx") or {}).get("expected", "")).replace("'", '"')
        return _MESSAGES["enum"].format(expected=expected)
    if kind in _MESSAGES:
        return _MESSAGES[kind]
    message = str(err["msg"]).removeprefix("Value error, ")
    return re.sub(r"^Input should be", "must be", message)


def _validation_error(exc: ValidationError) -> RpcError:
    """Describe what was wrong with which wire field; quote at most 80 characters of any value."""
    model = Params.registry.get(exc.title)
    problems = []
    for err in exc.errors(include_url=False, include_input=False):
        name = _field_name(tuple(err["loc"]))
        if err["type"] == "extra_forbidden":
            name = quote(name)[1:-1]
        problems.append({"field": name, "type": err["type"], "message": _problem(err, model)})
    summary = "; ".join(f"{p['field']}: {p['message']}" for p in problems[:5])
    return RpcError(INVALID_PARAMS, f"invalid params: {summary}", reason="invalid_params", errors=problems)


_PYTHON_NAMES = re.compile(
    r"\b(?:expires_at|as_of|conflict_group|source_session_id|scope_key|max_chars|max_records|record_id|debounce_s"
    r"|allow_removal|base_url|price_in_usd_per_mtok|price_out_usd_per_mtok)\b"
)


def _ledger_error(exc: LedgerError) -> RpcError:
    """Map a LedgerError to its code; ``data`` gets the reason and the scalar context (camelCase, capped)."""
    code = REASON_CODES.get(exc.reason, LEDGER_ERROR)
    context: dict[str, Any] = {}
    for key, value in exc.context.items():
        if isinstance(value, str):
            context[to_camel(key)] = value[:MAX_ID_CHARS]
        elif value is None or isinstance(value, int | float | bool):
            context[to_camel(key)] = value
    held = getattr(exc, "held", None)
    if isinstance(held, int):
        context["held"] = held
    message = exc.message
    if isinstance(exc, RecordNotFound):  # the protocol's wording, naming only the id that was sent
        message = not_found(exc.record_id).message
    elif len(message) > 400:  # a message that grew with its input: keep its head
        message = message[:400] + "…"
    if exc.reason == "invalid_params":  # the ledger names its Python arguments; the client knows the wire's
        message = _PYTHON_NAMES.sub(lambda m: to_camel(m.group()), message)
    return RpcError(code, message, reason=exc.reason, **context)


def method_names(extra_methods: Mapping[str, ExtraMethod] | None = None) -> list[str]:
    """Every method a client can call here, sorted."""
    return sorted({*METHODS, *(extra_methods or {})})


def _dispatch(led: Ledger, env: _Envelope, extra_methods: Mapping[str, ExtraMethod] | None) -> Any:
    method = METHODS.get(env.method)
    extra = None if method is not None else (extra_methods or {}).get(env.method)
    if method is None and extra is None:
        raise RpcError(
            METHOD_NOT_FOUND,
            f"method not found: {quote(env.method)}; the methods are {', '.join(method_names(extra_methods))} "
            "(docs/protocol.md describes each)",
            reason="method_not_found",
            method=env.method[:MAX_QUOTE_CHARS],
        )
    _scan(env.params, "params")
    if method is None:
        assert extra is not None
        return to_jsonable(extra(led, env.params))
    if env.method == "memory/save_memory_record" and "scopeKey" in env.params:
        raise RpcError(
            INVALID_PARAMS,
            f"invalid params: scopeKey cannot be set on save; records are always saved in {led.scope_key}",
            reason="invalid_params",
            field="scopeKey",
        )
    return to_jsonable(method.run(led, method.params.model_validate(env.params)))


def error_response(request_id: str | int | None, err: RpcError) -> dict[str, Any]:
    """The JSON-RPC response object for ``err`` (transports use it for errors found before :func:`handle`)."""
    return {
        "jsonrpc": JSONRPC_VERSION,
        "id": request_id,
        "error": {"code": err.code, "message": err.message, "data": err.data},
    }


def internal_error_response(request_id: str | int | None = None) -> dict[str, Any]:
    """``-32603`` without any detail: what a transport answers when something unexpected broke."""
    return error_response(request_id, RpcError(INTERNAL_ERROR, "internal error", reason="internal_error"))


def dumps(response: Mapping[str, Any] | list[dict[str, Any]]) -> str:
    """One response (or batch answer) as one line of compact JSON.

    Every character ``str.splitlines()`` breaks on is escaped inside strings (newlines by JSON
    itself, U+0085, U+2028 and U+2029 by :func:`~ledger.lines.escape_line_breaks`), so a client
    that splits its input with ``splitlines()`` reads one response per line.

    The line is always encodable as UTF-8: should a lone surrogate ever reach a response, the
    line falls back to ASCII escapes instead of failing.
    """
    text = json.dumps(response, ensure_ascii=False, separators=(",", ":"))
    if _SURROGATE.search(text):
        text = json.dumps(response, ensure_ascii=True, separators=(",", ":"))
    return escape_line_breaks(text)


def _handle_one(led: Ledger, request: Any, extra_methods: Mapping[str, ExtraMethod] | None) -> dict[str, Any] | None:
    try:
        env = _envelope(request)
    except RpcError as err:
        return error_response(_request_id(request) if isinstance(request, Mapping) else None, err)
    try:
        result = _dispatch(led, env, extra_methods)
    except RpcError as err:
        failure = err
    except ValidationError as exc:
        failure = _validation_error(exc)
    except LedgerError as exc:
        failure = _ledger_error(exc)
    except Exception:
        log.exception("internal error answering %s (request id %s)", quote(env.method), quote(str(env.id)))
        failure = RpcError(INTERNAL_ERROR, "internal error", reason="internal_error")
    else:
        return None if env.notification else {"jsonrpc": JSONRPC_VERSION, "id": env.id, "result": result}
    return None if env.notification else error_response(env.id, failure)


def handle(
    led: Ledger, request: dict[str, Any] | list[Any] | Any, *, extra_methods: Mapping[str, ExtraMethod] | None = None
) -> Any:
    """Answer one JSON-RPC 2.0 request, or a batch, against ``led``.

    A request object gets its response object, or ``None`` for a notification (a valid request
    without an ``id``; its errors are not reported either). A batch (a list) gets a list of
    responses in request order, or ``None`` when it held only notifications; an empty batch or
    one over :data:`MAX_BATCH` requests gets one ``-32600`` response object. Never raises for
    anything a client sends: an unexpected exception is logged here and answered ``-32603``
    without any of its text. ``extra_methods`` adds methods (``name -> fn(led, params)``)
    outside the ``memory/`` table (built-ins win a clash); the strict-text checks apply to
    their params too.
    """
    if not isinstance(request, list):
        return _handle_one(led, request, extra_methods)
    if not request:
        return error_response(None, _invalid("an empty batch; send at least one request"))
    if len(request) > MAX_BATCH:
        return error_response(None, _invalid(f"a batch holds at most {MAX_BATCH} requests, this one {len(request)}"))
    answers = [_handle_one(led, member, extra_methods) for member in request]
    responses = [a for a in answers if a is not None]
    return responses or None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def handle_line(led: Ledger, line: str, *, extra_methods: Mapping[str, ExtraMethod] | None = None) -> str | None:
    """Answer one line holding one JSON request or batch; ``None`` when there is nothing to write.

    A line that is not JSON (including ``NaN``/``Infinity``) is answered ``-32700``.
    The answer is one line of compact JSON (no newline inside).
    """
    try:
        request = json.loads(line, parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        err = RpcError(PARSE_ERROR, "parse error: the request is not valid JSON", reason="parse_error")
        response: Any = error_response(None, err)
    else:
        response = handle(led, request, extra_methods=extra_methods)
    return None if response is None else dumps(response)
