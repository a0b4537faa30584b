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
    -32006   outcome_unknown      OutcomeUnknown (the connection was lost after COMMIT; data.recordId when known)
    -32007   request_id_reused    RequestIdReused (data: requestId, recordId)
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from pydantic.alias_generators import to_camel

from ledger.core import Ledger
from ledger.errors import LedgerError, RecordNotFound, RpcError
from ledger.lines import escape_line_breaks
from ledger.methods import METHODS, Method, not_found
from ledger.params import Instant, Line, NoParams, Params, RecordId, Text
from ledger.wire import (
    BAD_ANYWHERE,
    BAD_IN_LINE,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    JSONRPC_VERSION,
    LEDGER_ERROR,
    MAX_ID_CHARS,
    MAX_QUOTE_CHARS,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    REASON_CODES,
    SURROGATE,
    WireError,
    parse_wire_instant,
    quote,
    record_to_json,
    scan,
    to_jsonable,
    wire_error,
)

# The protocol's names, wherever they are defined (the method table, the params, the wire's forms).
__all__ = [
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "JSONRPC_VERSION",
    "LEDGER_ERROR",
    "MAX_BATCH",
    "MAX_ID_CHARS",
    "MAX_QUOTE_CHARS",
    "METHODS",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "REASON_CODES",
    "ExtraMethod",
    "Instant",
    "Line",
    "Method",
    "NoParams",
    "Params",
    "RecordId",
    "RpcError",
    "Text",
    "WireError",
    "dumps",
    "error_response",
    "handle",
    "handle_line",
    "internal_error_response",
    "method_names",
    "not_found",
    "parse_wire_instant",
    "quote",
    "record_to_json",
    "to_jsonable",
    "wire_error",
]

log = logging.getLogger(__name__)

ExtraMethod = Callable[[Ledger, dict[str, Any]], Any]
MAX_BATCH = 100
MAX_REQUEST_ID_CHARS = 200
_REQUEST_KEYS = frozenset({"jsonrpc", "method", "params", "id"})


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
        return value if len(value) <= MAX_REQUEST_ID_CHARS and not BAD_IN_LINE.search(value) else None
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
    if BAD_ANYWHERE.search(method):
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


# The Python argument names an invalid_params message may quote; the wire shows them camelCase. The ledger's
# own, and those other packages add for the methods they serve here (:func:`add_python_names`).
_PYTHON_NAMES = {
    "expires_at", "as_of", "conflict_group", "source_session_id", "scope_key", "max_chars", "max_records", "record_id",
    "request_id",
}  # fmt: skip


def _pattern(names: set[str]) -> re.Pattern[str]:
    return re.compile(r"\b(?:" + "|".join(sorted(names)) + r")\b")


_python_names = _pattern(_PYTHON_NAMES)


def add_python_names(*names: str) -> None:
    """Show ``names`` (Python argument names, e.g. ``debounce_s``) camelCase (``debounceS``) wherever an
    ``invalid_params`` error quotes them: for the settings of a package whose methods this protocol serves."""
    global _python_names
    _PYTHON_NAMES.update(names)
    _python_names = _pattern(_PYTHON_NAMES)


def _ledger_error(exc: LedgerError) -> RpcError:
    """A LedgerError as the protocol sends it (:func:`ledger.wire.wire_error`), in the protocol's words."""
    wire = wire_error(exc)
    message = wire.message
    if isinstance(exc, RecordNotFound):  # the protocol's wording, naming only the id that was sent
        message = not_found(exc.record_id).message
    if exc.reason == "invalid_params":  # the ledger names its Python arguments; the client knows the wire's
        message = _python_names.sub(lambda m: to_camel(m.group()), message)
    return RpcError(wire.code, message, reason=wire.reason, **wire.data)


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
    scan(env.params, "params")
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
    if SURROGATE.search(text):
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
