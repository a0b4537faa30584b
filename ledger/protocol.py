"""The record protocol: JSON-RPC 2.0 over the :class:`~ledger.core.Ledger`.

One entry point, :func:`handle` (a request object in, a response object out, or
``None`` for a notification), and :func:`handle_line` for line-oriented
transports (``memledger rpc`` reads one request per line and writes one response
per line). Batches (a JSON array) are not supported: they are answered with one
``-32600`` error, so a transport never has to split a response.

Methods (params are by name, camelCase; unknown or mistyped params are refused)::

    memory/save_memory_record            body, kind?, supersedes?, expiresAt?, conflictGroup?, sourceSessionId?
                                         -> record  (the scope is always the bound account: a scopeKey is refused)
    memory/list_memory_records           scopeKey                  -> {scopeKey, records}
    memory/list_memory_records_as_of     scopeKey, asOf            -> {scopeKey, asOf, records}
    memory/get_memory_record             id                        -> record
    memory/delete_memory_record          id                        -> record (deleted, body erased)
    memory/get_memory_record_history     id                        -> {id, records}  (oldest first)
    memory/search_memory_records         scopeKey, query, limit?   -> {scopeKey, query, records}
    memory/list_proposed_memory_records  scopeKey                  -> {scopeKey, records}
    memory/accept_proposed_memory_record id                        -> record
    memory/reject_proposed_memory_record id                        -> record
    memory/handle_slash_command          text                      -> {handled, reply, ok, reason?, records}
    memory/build_packet                  scopeKey, maxChars?       -> {text, records, omitted, maxChars}

``id`` may also be spelled ``recordId``. Every time-dependent operation runs at
the ledger's clock: a client cannot pass ``now``. Records carry the fields of
SPEC 3.1 in camelCase; instants are RFC 3339 with microseconds and ``Z``.

Errors carry ``data.reason`` (stable) and, for ledger errors, safe context
(ids, counts; never a body, a traceback or an exception's text)::

    code     reason               when
    -32700   parse_error          the line is not JSON
    -32600   invalid_request      not an object, jsonrpc != "2.0", bad id/method/params type, a batch
    -32601   method_not_found     unknown method
    -32602   invalid_params       missing, unknown or mistyped params; a scopeKey on save;
                                  InvalidInstant, ScopeError, InvalidArgument
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Annotated, Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, PlainValidator, StrictInt, StrictStr, ValidationError
from pydantic.alias_generators import to_camel

from ledger.core import Ledger, ScopeUsage
from ledger.errors import InvalidInstant, LedgerError
from ledger.instants import format_rfc3339, parse_rfc3339
from ledger.models import Kind, MemoryRecord
from ledger.packet import Packet
from ledger.packet_methods import PACKET_METHOD_SPECS
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
    "body_rejected": -32001,
    "budget_exceeded": -32002,
    "not_found": -32003,
    "invalid_transition": -32004,
    "busy": -32005,
}

ExtraMethod = Callable[[Ledger, dict[str, Any]], Any]
_REQUEST_KEYS = frozenset({"jsonrpc", "method", "params", "id"})
_MAX_ECHO_CHARS = 200


class RpcError(Exception):
    """A protocol-level refusal with its JSON-RPC code and ``data.reason``."""

    def __init__(self, code: int, message: str, *, reason: str, **data: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data: dict[str, Any] = {"reason": reason, **data}


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
    """The injected text, what it holds, and what was left out for size."""
    return {
        "text": packet.text,
        "records": [record_to_json(r) for r in packet.records],
        "omitted": [record_to_json(r) for r in packet.omitted],
        "maxChars": packet.max_chars,
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
def _instant(value: object) -> datetime:
    """An RFC 3339 string with ``Z`` or an offset; anything else is an invalid param."""
    if not isinstance(value, str):
        raise ValueError("must be an RFC 3339 string, e.g. 2026-01-01T00:00:00Z")
    try:
        return parse_rfc3339(value)
    except InvalidInstant as exc:
        raise ValueError(exc.message) from None


Instant = Annotated[datetime, PlainValidator(_instant)]
RecordId = Annotated[StrictStr, Field(validation_alias=AliasChoices("id", "recordId"))]


class Params(BaseModel):
    """Base of every method's params: camelCase names, unknown names refused, strict types.

    Extra methods can validate their own params with a subclass (``NoParams.model_validate(params)``);
    a :class:`pydantic.ValidationError` becomes an ``invalid_params`` error.
    """

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=False, frozen=True)


class NoParams(Params):
    """A method that takes no params."""


class SaveParams(Params):
    body: StrictStr
    kind: Kind | None = None
    supersedes: StrictStr | None = None
    expires_at: Instant | None = None
    conflict_group: StrictStr | None = None
    source_session_id: StrictStr | None = None


class ScopeParams(Params):
    scope_key: StrictStr


class AsOfParams(ScopeParams):
    as_of: Instant


class IdParams(Params):
    id: RecordId


class SearchParams(ScopeParams):
    query: StrictStr
    limit: StrictInt = 20


class SlashParams(Params):
    text: StrictStr


class PacketParams(ScopeParams):
    max_chars: Annotated[StrictInt, Field(ge=1, le=1_000_000)] | None = None


# ---------------------------------------------------------------------- methods
def _save(led: Ledger, p: SaveParams) -> Any:
    return led.save(
        p.body,
        kind=p.kind,
        supersedes=p.supersedes,
        expires_at=p.expires_at,
        conflict_group=p.conflict_group,
        source_session_id=p.source_session_id,
    )


def _list(led: Ledger, p: ScopeParams) -> Any:
    return {"scopeKey": p.scope_key, "records": led.list(p.scope_key)}


def _list_as_of(led: Ledger, p: AsOfParams) -> Any:
    return {"scopeKey": p.scope_key, "asOf": p.as_of, "records": led.list_as_of(p.scope_key, p.as_of)}


def _history(led: Ledger, p: IdParams) -> Any:
    return {"id": p.id, "records": led.history(p.id)}


def _search(led: Ledger, p: SearchParams) -> Any:
    return {"scopeKey": p.scope_key, "query": p.query, "records": led.search(p.scope_key, p.query, limit=p.limit)}


def _proposals(led: Ledger, p: ScopeParams) -> Any:
    return {"scopeKey": p.scope_key, "records": led.proposals(p.scope_key)}


@dataclass(frozen=True, slots=True)
class Method:
    """One entry of the method table: how to validate params, and what to run."""

    params: type[Params]
    run: Callable[[Ledger, Any], Any]


METHODS: Mapping[str, Method] = {
    "memory/save_memory_record": Method(SaveParams, _save),
    "memory/list_memory_records": Method(ScopeParams, _list),
    "memory/list_memory_records_as_of": Method(AsOfParams, _list_as_of),
    "memory/get_memory_record": Method(IdParams, lambda led, p: led.get(p.id)),
    "memory/delete_memory_record": Method(IdParams, lambda led, p: led.delete(p.id)),
    "memory/get_memory_record_history": Method(IdParams, _history),
    "memory/search_memory_records": Method(SearchParams, _search),
    "memory/list_proposed_memory_records": Method(ScopeParams, _proposals),
    "memory/accept_proposed_memory_record": Method(IdParams, lambda led, p: led.accept(p.id)),
    "memory/reject_proposed_memory_record": Method(IdParams, lambda led, p: led.reject(p.id)),
    "memory/handle_slash_command": Method(SlashParams, lambda led, p: led.handle_slash(p.text)),
    "memory/build_packet": Method(PacketParams, lambda led, p: led.build_packet(p.scope_key, max_chars=p.max_chars)),
    # The packet with its audit, the injection switch and capabilities (ledger/packet_methods.py).
    **{name: Method(params, run) for name, (params, run) in PACKET_METHOD_SPECS.items()},  # type: ignore[arg-type]
}


# ---------------------------------------------------------------------- dispatch
@dataclass(frozen=True, slots=True)
class _Envelope:
    method: str
    params: dict[str, Any]
    id: str | int | None
    notification: bool


def _request_id(request: Mapping[str, Any]) -> str | int | None:
    """The id to echo: a string, an integer or null; anything else is echoed as null."""
    value = request.get("id")
    if value is None or isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    return None


def _envelope(request: Any) -> _Envelope:
    """Check the request object itself (not its params). Raises :class:`RpcError` ``invalid_request``."""

    def invalid(message: str) -> RpcError:
        return RpcError(INVALID_REQUEST, f"invalid request: {message}", reason="invalid_request")

    if isinstance(request, list):
        raise invalid("batches are not supported; send one request object at a time (one per line on stdio)")
    if not isinstance(request, Mapping):
        raise invalid("a request must be a JSON object")
    if request.get("jsonrpc") != JSONRPC_VERSION:
        raise invalid('"jsonrpc" must be "2.0"')
    unknown = sorted(str(k) for k in request if k not in _REQUEST_KEYS)
    if unknown:
        raise invalid(f"unknown member(s) {', '.join(unknown)[:_MAX_ECHO_CHARS]}")
    if "id" in request and _request_id(request) != request["id"]:
        raise invalid('"id" must be a string, an integer or null')
    if not isinstance(request.get("method"), str):
        raise invalid('"method" must be a string')
    params = request.get("params", {})
    if isinstance(params, list):
        raise RpcError(INVALID_PARAMS, "invalid params: pass params by name (an object)", reason="invalid_params")
    if not isinstance(params, Mapping):
        raise invalid('"params" must be an object')
    return _Envelope(request["method"], dict(params), _request_id(request), "id" not in request)


def _validation_error(exc: ValidationError) -> RpcError:
    """Describe what was wrong with which param; never echo the values themselves."""
    problems = [
        {"field": ".".join(str(p) for p in err["loc"]) or "params", "type": err["type"], "message": err["msg"]}
        for err in exc.errors(include_url=False, include_input=False, include_context=False)
    ]
    summary = "; ".join(f"{p['field']}: {p['message']}" for p in problems[:5])
    return RpcError(INVALID_PARAMS, f"invalid params: {summary}", reason="invalid_params", errors=problems)


def _ledger_error(exc: LedgerError) -> RpcError:
    """Map a LedgerError to its code; ``data`` gets the reason and the scalar context (camelCase)."""
    code = REASON_CODES.get(exc.reason, LEDGER_ERROR)
    context = {
        to_camel(key): value
        for key, value in exc.context.items()
        if value is None or isinstance(value, str | int | float | bool)
    }
    held = getattr(exc, "held", None)
    if isinstance(held, int):
        context["held"] = held
    return RpcError(code, exc.message, reason=exc.reason, **context)


def _dispatch(led: Ledger, env: _Envelope, extra_methods: Mapping[str, ExtraMethod] | None) -> Any:
    method = METHODS.get(env.method)
    if method is not None:
        if env.method == "memory/save_memory_record" and "scopeKey" in env.params:
            raise RpcError(
                INVALID_PARAMS,
                f"invalid params: scopeKey cannot be set on save; records are always saved in {led.scope_key}",
                reason="invalid_params",
                field="scopeKey",
            )
        return to_jsonable(method.run(led, method.params.model_validate(env.params)))
    extra = (extra_methods or {}).get(env.method)
    if extra is not None:
        return to_jsonable(extra(led, env.params))
    raise RpcError(
        METHOD_NOT_FOUND,
        f"method not found: {env.method[:_MAX_ECHO_CHARS]}",
        reason="method_not_found",
        method=env.method[:_MAX_ECHO_CHARS],
    )


def error_response(request_id: str | int | None, err: RpcError) -> dict[str, Any]:
    """The JSON-RPC response object for ``err`` (transports use it for errors found before :func:`handle`)."""
    return {
        "jsonrpc": JSONRPC_VERSION,
        "id": request_id,
        "error": {"code": err.code, "message": err.message, "data": err.data},
    }


def dumps(response: Mapping[str, Any]) -> str:
    """One response as one line of compact JSON (newlines inside strings are escaped)."""
    return json.dumps(response, ensure_ascii=False, separators=(",", ":"))


def handle(
    led: Ledger, request: dict[str, Any] | Any, *, extra_methods: Mapping[str, ExtraMethod] | None = None
) -> dict[str, Any] | None:
    """Answer one JSON-RPC 2.0 request against ``led``.

    Returns the response object, or ``None`` for a notification (a valid request
    without an ``id``; its errors are not reported either). Never raises for
    anything a client sends: every failure becomes an error response (see the
    module docstring for codes), and an unexpected exception is logged here and
    answered ``-32603`` without any of its text. ``extra_methods`` adds methods
    (``name -> fn(led, params)``) outside the ``memory/`` table; built-ins win a clash.
    """
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
        log.exception("internal error answering %s (request id %r)", env.method[:_MAX_ECHO_CHARS], env.id)
        failure = RpcError(INTERNAL_ERROR, "internal error", reason="internal_error")
    else:
        return None if env.notification else {"jsonrpc": JSONRPC_VERSION, "id": env.id, "result": result}
    return None if env.notification else error_response(env.id, failure)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def handle_line(led: Ledger, line: str, *, extra_methods: Mapping[str, ExtraMethod] | None = None) -> str | None:
    """Answer one line holding one JSON request; ``None`` when there is nothing to write (a notification).

    A line that is not JSON (including ``NaN``/``Infinity``) is answered ``-32700``.
    The answer is one line of compact JSON (no newline inside).
    """
    try:
        request = json.loads(line, parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        err = RpcError(PARSE_ERROR, "parse error: the request is not valid JSON", reason="parse_error")
        response: dict[str, Any] | None = error_response(None, err)
    else:
        response = handle(led, request, extra_methods=extra_methods)
    return None if response is None else dumps(response)
