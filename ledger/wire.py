"""The wire's forms of the record protocol (:mod:`ledger.protocol`): the JSON-RPC error codes and
:class:`RpcError`, ledger objects as JSON, strict text and RFC 3339 instants as the wire carries
them, and quoting any input safely in a message."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any

from ledger.errors import InvalidArgument, LedgerError, RpcError
from ledger.instants import format_rfc3339, require_aware
from ledger.lines import escape_line_breaks
from ledger.models import MemoryRecord, ScopeUsage
from ledger.packet import Packet
from ledger.slash import SlashResult

JSONRPC_VERSION = "2.0"
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

# The error-to-wire table: data.reason -> JSON-RPC code for LedgerError subclasses; anything unlisted gets
# LEDGER_ERROR. :func:`wire_error` reads it for the record protocol and for MCP alike.
LEDGER_ERROR = -32000
REASON_CODES: dict[str, int] = {
    "invalid_params": INVALID_PARAMS,
    "scope_error": INVALID_PARAMS,
    "body_rejected": -32001,
    "budget_exceeded": -32002,
    "not_found": -32003,
    "invalid_transition": -32004,
    "busy": -32005,
    "outcome_unknown": -32006,
    "request_id_reused": -32007,
}
MAX_QUOTE_CHARS = 80
MAX_ID_CHARS = 100  # a record id's longest; also where a text of an error's context is cut
MAX_MESSAGE_CHARS = 400  # an error message that grew with its input keeps its head
# Lone surrogates and C0/C1 control characters (tab, LF and CR are allowed where text may span lines).
SURROGATE = re.compile(r"[\ud800-\udfff]")
BAD_ANYWHERE = re.compile(r"[\ud800-\udfff\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
BAD_IN_LINE = re.compile(r"[\ud800-\udfff\x00-\x1f\x7f-\x9f]")
_RFC3339 = re.compile(
    r"(?P<date>\d{4}-\d{2}-\d{2})[Tt ](?P<time>\d{2}:\d{2}:\d{2})(?:\.(?P<frac>\d+))?(?P<offset>[Zz]|[+-]\d{2}:\d{2})"
)
_INSTANT_HINT = 'an RFC 3339 instant with an offset, e.g. "2026-01-01T00:00:00Z" or "2026-01-01T09:30:00.25+02:00"'


def quote(value: object, *, limit: int = MAX_QUOTE_CHARS) -> str:
    """``value`` as a JSON string of at most ``limit`` of its characters, safe to put in any message.

    Control characters, U+2028 / U+2029 and lone surrogates come out escaped; a longer value is cut and says how
    long it was, so an error never grows with its input.
    """
    text = value if isinstance(value, str) else type(value).__name__
    shown = json.dumps(text[:limit], ensure_ascii=False)
    shown = escape_line_breaks(BAD_ANYWHERE.sub(lambda m: f"\\u{ord(m.group()):04x}", shown))
    return shown if len(text) <= limit else f'{shown[:-1]}…" ({len(text):,} characters)'


def char_problem(found: str, where: str) -> str:
    code = f"U+{ord(found):04X}"
    if SURROGATE.match(found):
        return f"{where} is not valid Unicode: it holds a lone surrogate ({code}); send UTF-8 text"
    return f"{where} holds the control character {code}, which is not allowed; send plain text"


MAX_PARAM_DEPTH = 32  # no param nests deeper (a turn's messages: 3 levels); nothing walks a value past it


def scan(value: Any, path: str) -> None:
    """Refuse a lone surrogate or a control character (other than tab, LF, CR) in any string of ``value``, and
    a value nested more than :data:`MAX_PARAM_DEPTH` levels deep.

    Iterative, so a value nested as deep as the JSON reader allows is refused, never a ``RecursionError``. The
    field an error names is quoted (:func:`quote`), so a long param name never makes a long error.
    """
    pending: list[tuple[Any, str, int]] = [(value, path, 0)]
    while pending:
        item, where, depth = pending.pop()
        if isinstance(item, str):
            found = BAD_ANYWHERE.search(item)
            if found:
                field = quote(where)[1:-1]
                raise RpcError(
                    INVALID_PARAMS, f"invalid params: {char_problem(found.group(), field)}", reason="invalid_params",
                    field=field,
                )  # fmt: skip
            continue
        if not isinstance(item, Mapping | list | tuple):
            continue
        if depth >= MAX_PARAM_DEPTH:
            field = quote(where)[1:-1]
            raise RpcError(
                INVALID_PARAMS, f"invalid params: {field} is nested more than {MAX_PARAM_DEPTH} levels deep; "
                "no param nests that deep", reason="invalid_params", field=field,
            )  # fmt: skip
        children: list[tuple[Any, str, int]] = []
        if isinstance(item, Mapping):
            for key, child in item.items():
                name = key if isinstance(key, str) else str(key)
                if BAD_ANYWHERE.search(name):
                    shown = quote(name)
                    raise RpcError(
                        INVALID_PARAMS, f"invalid params: the param name {shown} is not plain text",
                        reason="invalid_params", field=shown[1:-1],
                    )  # fmt: skip
                children.append((child, name if where == "params" else f"{where}.{name}", depth + 1))
        else:
            children = [(child, f"{where}[{index}]", depth + 1) for index, child in enumerate(item)]
        pending.extend(reversed(children))  # in document order: the first bad string is the one named


# ---------------------------------------------------------------------- errors
@dataclass(frozen=True)
class WireError:
    """A ledger error as a client receives it, over JSON-RPC (``error.code``, ``error.message``, ``error.data``)
    or MCP (an ``isError`` result's text and its error meta)."""

    code: int  # the JSON-RPC code (REASON_CODES)
    reason: str
    message: str
    data: dict[str, Any]  # the error's scalar context, camelCase keys (``recordId``), no reason


def wire_error(exc: LedgerError) -> WireError:
    """The one translation of a ledger error for the wire, shared by the record protocol and MCP.

    The code is the reason's in :data:`REASON_CODES`; the context keeps its scalars (a text cut at
    :data:`MAX_ID_CHARS`) and a refusal's ``held``; a message over :data:`MAX_MESSAGE_CHARS` keeps its head,
    unless it is a budget refusal (which lists the scope's usage).
    """
    data: dict[str, Any] = {}
    for key, value in exc.context.items():
        if isinstance(value, str):
            data[_camel(key)] = value[:MAX_ID_CHARS]
        elif value is None or isinstance(value, int | float | bool):
            data[_camel(key)] = value
    held = getattr(exc, "held", None)
    if isinstance(held, int):
        data["held"] = held
    message = exc.message
    if len(message) > MAX_MESSAGE_CHARS and exc.reason != "budget_exceeded":
        message = message[:MAX_MESSAGE_CHARS] + "…"
    return WireError(REASON_CODES.get(exc.reason, LEDGER_ERROR), exc.reason, message, data)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


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


# ---------------------------------------------------------------------- text and instants
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


def line_text(value: object) -> str:
    """One line of text: a string with no control character at all (no newline either)."""
    if not isinstance(value, str):
        raise ValueError("must be a string")
    found = BAD_IN_LINE.search(value)
    if found:
        raise ValueError(char_problem(found.group(), "the text") + " on one line (no newline or tab)")
    return value


def check_line(value: str, name: str) -> str:
    """``value`` when it is one line of text as the protocol takes a one-line param (a search's query, say).

    Raises:
        InvalidArgument: a lone surrogate (``os.fsdecode``'s stand-in for a byte that is not UTF-8) or a control
            character, tab and newline too; the message names ``name`` as the protocol's refusal does.
    """
    found = BAD_IN_LINE.search(value)
    if found:
        raise InvalidArgument(f"{char_problem(found.group(), name)} on one line (no newline or tab)")
    return value


MAX_REQUEST_ID_CHARS = 200


def request_id_text(value: object) -> str:
    """A save's ``requestId``: one line of 1 to :data:`MAX_REQUEST_ID_CHARS` characters."""
    text = line_text(value)
    if not 0 < len(text) <= MAX_REQUEST_ID_CHARS:
        raise ValueError(
            f"a request id has 1 to {MAX_REQUEST_ID_CHARS} characters (a new one for each new save, e.g. a UUID); "
            f"this one has {len(text):,}"
        )
    return text


def body_text(value: object) -> str:
    """Free text: a string; newline, carriage return and tab are allowed (the scan refused the rest)."""
    if not isinstance(value, str):
        raise ValueError("must be a string")
    found = BAD_ANYWHERE.search(value)
    if found:
        raise ValueError(char_problem(found.group(), "the text"))
    return value
