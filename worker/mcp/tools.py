"""The MCP tools over one bound :class:`~ledger.core.Ledger`: schemas, descriptions, calls, errors.

This module knows nothing of transports: :func:`call_tool` takes a ledger, a tool
name and the client's arguments and returns a :class:`mcp_types.CallToolResult`;
:mod:`worker.mcp.server` wires it to the SDK over stdio and streamable HTTP.

Tools (docs/mcp.md), all on the bound account's scope only::

    list_pins(limit=None, cursor=None)      read   -> {scopeKey, nextCursor, count, pins}
    search_pins(query, limit=10)            read   -> {scopeKey, query, count, pins}
    pins_as_of(instant)                     read   -> {scopeKey, asOf, count, pins}
    pin_history(id)                         read   -> {id, records}          (oldest first)
    get_packet(session_id=None)             writes only the packet audit -> {scopeKey, sessionId, text, records, ...}
    propose_pin(body, kind="fact", rationale=None) writes a *proposal*   -> {proposal, awaitingUser, message}

No tool forgets, accepts, rejects, edits or changes settings: a model's write is a
proposal the user decides on. Pins carry the record protocol's names and values
(camelCase, RFC 3339), compacted for a model's context (:func:`pin_json`); the text
block is a readable rendering, the JSON is ``structuredContent``.

Errors are tool results with ``isError: true`` and no ``structuredContent`` (strict
clients, the TypeScript SDK among them, validate ``structuredContent`` against the tool's
output schema on every result, errors included); the text reads ``<reason>: <message>``
and ``_meta["memledger/error"]`` is ``{"reason", "message", …safe context}`` with the
ledger's reasons (``body_rejected``, ``budget_exceeded``, ``not_found``,
``invalid_params``, ``invalid_transition``, ``busy``, ``ledger_error``) or
``internal_error`` (logged here, never described). No traceback, no body and at
most 80 characters of any input ever reach the client.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

from mcp_types import CallToolResult, TextContent, Tool, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError, field_validator

from ledger import Kind, Ledger, LedgerError, MemoryRecord, Page, Provenance, RecordNotFound, parse_rfc3339
from ledger.protocol import quote, record_to_json, to_jsonable, wire_error
from worker.errors import ToolFailure
from worker.mcp import NONCHARACTER

log = logging.getLogger(__name__)

MAX_ECHO_CHARS = 80
MAX_SEARCH_LIMIT = 200
MAX_LIST_LIMIT = 1000
DEFAULT_SEARCH_LIMIT = 10
# RFC 3339 date-time with a zone; at most 6 fractional digits (more would be cut, so it is refused).
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,6})?([Zz]|[+-]\d{2}:\d{2})")
# C0 and C1 controls and DEL; bodies and rationales may still hold tab and newline.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_IN_PROSE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def echo(text: str) -> str:
    """At most :data:`MAX_ECHO_CHARS` characters of a caller's input, for a message."""
    return text if len(text) <= MAX_ECHO_CHARS else text[:MAX_ECHO_CHARS] + "…"


def logged_name(name: str) -> str:
    """A client's tool name as a log line shows it: quoted as the record protocol quotes input (JSON-escaped, at
    most :data:`MAX_ECHO_CHARS` characters and its length), so it can neither forge a line nor drive a terminal."""
    return quote(name, limit=MAX_ECHO_CHARS)


def _plain_text(value: str, *, prose: bool = False) -> str:
    """Refuse lone surrogates and control characters (prose keeps tab and newline).

    U+FFFF (a noncharacter) counts as a lone surrogate: the stdio transport puts it where
    the client's JSON carried one (see :func:`worker.mcp.server.mark_lone_surrogates`).
    """
    if NONCHARACTER in value:
        raise ValueError("must be valid Unicode text (it holds a lone surrogate or a noncharacter)")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode text (it holds a lone surrogate)") from None
    if (_CONTROL_IN_PROSE if prose else _CONTROL).search(value):
        allowed = "; tab and newline are fine" if prose else ""
        raise ValueError(f"must not hold control characters{allowed}")
    return value


# ---------------------------------------------------------------------- inputs
# The kinds inline (a Literal, not the Kind enum's $ref), so every client reads the choices in place.
KindName = Literal["preference", "fact", "decision", "constraint"]


class Arguments(BaseModel):
    """Base of every tool's arguments: unknown names refused, strict types, plain text only."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class NoArguments(Arguments):
    pass


class ListArguments(Arguments):
    limit: Annotated[
        StrictInt | None,
        Field(ge=1, le=MAX_LIST_LIMIT, description="At most this many pins (left out: every pin)."),
    ] = None
    cursor: Annotated[
        StrictStr | None,
        Field(max_length=2000, description="nextCursor of the previous answer, to get the pins after it."),
    ] = None

    @field_validator("cursor")
    @classmethod
    def _plain(cls, value: str | None) -> str | None:
        return None if value is None else _plain_text(value)


class SearchArguments(Arguments):
    query: Annotated[
        StrictStr,
        Field(
            min_length=1,
            max_length=1000,
            description="Words to look for in the user's pins, e.g. 'deploy region'. Any text is a valid query.",
        ),
    ]
    limit: Annotated[
        StrictInt,
        Field(ge=1, le=MAX_SEARCH_LIMIT, description=f"At most this many pins, best first (1-{MAX_SEARCH_LIMIT})."),
    ] = DEFAULT_SEARCH_LIMIT

    @field_validator("query")
    @classmethod
    def _text(cls, value: str) -> str:
        return _plain_text(value)


class AsOfArguments(Arguments):
    instant: Annotated[
        StrictStr,
        Field(
            description="An RFC 3339 instant with a zone, e.g. 2026-01-01T09:00:00Z or 2026-01-01T10:00:00+01:00.",
            json_schema_extra={"format": "date-time"},
        ),
    ]

    @field_validator("instant")
    @classmethod
    def _rfc3339(cls, value: str) -> str:
        if not _RFC3339.fullmatch(value):
            raise ValueError(
                "must be an RFC 3339 instant with a zone and at most 6 fractional digits, e.g. 2026-01-01T09:00:00Z"
            )
        return value


class IdArguments(Arguments):
    id: Annotated[
        StrictStr,
        Field(min_length=1, max_length=200, description="A pin id as the other tools show it, e.g. mem_01J…"),
    ]

    @field_validator("id")
    @classmethod
    def _text(cls, value: str) -> str:
        return _plain_text(value)


class PacketArguments(Arguments):
    session_id: Annotated[
        StrictStr | None,
        Field(
            min_length=1,
            max_length=200,
            description=(
                "The chat session this packet is for. When given, the ledger records what this session was sent "
                "(the packet audit), so the user can later see what the chat received."
            ),
        ),
    ] = None

    @field_validator("session_id")
    @classmethod
    def _text(cls, value: str | None) -> str | None:
        return None if value is None else _plain_text(value)


class ProposeArguments(Arguments):
    body: Annotated[
        StrictStr,
        Field(
            min_length=1,
            description=(
                "One fact about the user, in their words or close to them, e.g. 'Prefers metric units'. "
                "Never a password, key, token or other secret: those are refused."
            ),
        ),
    ]
    kind: Annotated[
        KindName,
        Field(
            description=(
                "preference (how the user likes things), fact (something true about them), "
                "decision (something they decided), constraint (a rule they must keep). Default: fact."
            )
        ),
    ] = "fact"
    rationale: Annotated[
        StrictStr | None,
        Field(
            min_length=1,
            max_length=2000,
            description="Why you think this is worth remembering (shown to the user beside the proposal).",
        ),
    ] = None

    @field_validator("body", "rationale")
    @classmethod
    def _text(cls, value: str | None) -> str | None:
        return None if value is None else _plain_text(value, prose=True)


# ---------------------------------------------------------------------- outputs
# A pin as MCP shows it: the record protocol's fields (camelCase, RFC 3339), compacted for a reader
# whose every byte is context. Always present: id, kind, body (null once forgotten), provenance, status,
# validFrom. Present only when set: validTo, expiresAt, conflictGroup, supersedes, supersededBy,
# confidenceBps, rationale, sourceSessionId, erased (true). Left out: scopeKey (the envelope names it)
# and the bookkeeping instants createdAt/updatedAt (the record protocol has the full form).
# The item schema requires the fields always present and documents the rest without a subschema per
# field: MCP clients validate every result against the output schema, and per-field subschemas for a
# few hundred records cost the Python SDK's client 20-50 ms a call (docs/mcp.md). Tests check each
# field's type.
PIN_ALWAYS = ("id", "kind", "body", "provenance", "status", "validFrom")
PIN_OPTIONAL = (
    "validTo",
    "expiresAt",
    "conflictGroup",
    "supersedes",
    "supersededBy",
    "confidenceBps",
    "rationale",
    "sourceSessionId",
    "erased",
)
_PIN_LEFT_OUT = frozenset({"scopeKey", "createdAt", "updatedAt"})
PIN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": list(PIN_ALWAYS),
    "description": (
        "A pin: id (mem_…), kind (preference | fact | decision | constraint), body (null once the user forgot "
        "it: the words are erased), provenance (user_explicit | model_proposal | model_consolidation), status "
        "(active | proposed | rejected | superseded | expired | deleted), validFrom (RFC 3339 UTC); and only when "
        "set: validTo, expiresAt (RFC 3339 UTC), conflictGroup, supersedes (ids it replaced), supersededBy, "
        "confidenceBps (0-10000), rationale, sourceSessionId, erased (true)."
    ),
}


def pin_json(record: MemoryRecord) -> dict[str, Any]:
    """A record in the compact form above (the record protocol's names and values, unset fields left out)."""
    return {
        key: value
        for key, value in record_to_json(record).items()
        if key not in _PIN_LEFT_OUT and (key == "body" or not (value is None or value is False or value == []))
    }


_STRING = {"type": "string"}
_OPT_STRING = {"type": ["string", "null"]}
_COUNT = {"type": "integer", "minimum": 0}


def _envelope(properties: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "type": "object",
        "description": description,
        "properties": properties,
        "required": list(properties),
    }


def _pins_schema(description: str, **extra: Any) -> dict[str, Any]:
    pins = {"type": "array", "items": PIN_SCHEMA}
    return _envelope({"scopeKey": _STRING, **extra, "count": _COUNT, "pins": pins}, description)


LIST_SCHEMA = _pins_schema(
    "The account's active pins, oldest first; nextCursor (null on the last page) asks for the ones after them.",
    nextCursor=_OPT_STRING,
)
SEARCH_SCHEMA = _pins_schema("Active pins matching the query, best first.", query=_STRING)
AS_OF_SCHEMA = _pins_schema("The pins whose validity interval held the instant.", asOf=_STRING)
HISTORY_SCHEMA = _envelope(
    {"id": _STRING, "records": {"type": "array", "items": PIN_SCHEMA}}, "The revision chain, oldest first."
)
PACKET_SCHEMA = {
    **_envelope(
        {
            "scopeKey": _STRING,
            "sessionId": _OPT_STRING,
            "text": _STRING,
            "records": {"type": "array", "items": PIN_SCHEMA},
        },
        "The packet: its text (what a chat turn injects) and the records it carries; the ledger's account of "
        "it follows (selected with reasons, excluded with codes, omitted for size, tokenEstimate, builtAt, "
        "injection), as memory/build_packet reports it.",
    ),
}
PROPOSE_SCHEMA = _envelope(
    {"proposal": PIN_SCHEMA, "awaitingUser": {"const": True}, "message": _STRING},
    "The stored proposal (status proposed, provenance model_proposal); it waits for the user's decision.",
)


# ---------------------------------------------------------------------- calls
@dataclass(frozen=True, slots=True)
class Answer:
    """A tool's answer: structured data (the output schema's shape) and the text a model reads."""

    data: dict[str, Any]
    text: str


def _one_line(text: str | None) -> str:
    """A body on one line, so no body can forge another line of a listing."""
    return "(forgotten: its text is erased)" if text is None else " ".join(text.split())


def _pin_line(pin: dict[str, Any], *, status: bool = False) -> str:
    state = f" ({pin['status']})" if status else ""
    return f"- {pin['id']} {pin['kind']}{state}: {_one_line(pin['body'])}"


def _listing(head: str, pins: list[dict[str, Any]], *, status: bool = False) -> str:
    return "\n".join([head, *(_pin_line(p, status=status) for p in pins)])


def _pins(records: list[MemoryRecord]) -> list[dict[str, Any]]:
    return [pin_json(r) for r in records]


def _not_found(record_id: str) -> ToolFailure:
    """One answer for an unknown id and another account's id, so the reply never reveals which."""
    shown = echo(record_id)
    return ToolFailure(
        "not_found",
        f"no pin {shown!r} in this account: use list_pins or search_pins to find the id",
        recordId=shown,
    )


def list_pins(led: Ledger, args: ListArguments) -> Answer:
    if args.limit is None and args.cursor is None:
        page = Page(led.list(led.scope_key), None)
    else:
        page = led.list_page(led.scope_key, limit=args.limit, cursor=args.cursor)  # a bad cursor: call_tool refuses
    pins = _pins(page.records)
    head = f"{len(pins)} pin(s) apply to the user now:" if pins else "The user has no pins."
    if page.next_cursor is not None:
        head = f"{len(pins)} pin(s) apply to the user now (more follow: call again with cursor {page.next_cursor}):"
    data = {"scopeKey": led.scope_key, "nextCursor": page.next_cursor, "count": len(pins), "pins": pins}
    return Answer(data, _listing(head, pins))


def search_pins(led: Ledger, args: SearchArguments) -> Answer:
    pins = _pins(led.search(led.scope_key, args.query, limit=args.limit))
    head = f"{len(pins)} pin(s) match {echo(args.query)!r}:" if pins else f"No pin matches {echo(args.query)!r}."
    data = {"scopeKey": led.scope_key, "query": args.query, "count": len(pins), "pins": pins}
    return Answer(data, _listing(head, pins))


def pins_as_of(led: Ledger, args: AsOfArguments) -> Answer:
    instant: datetime = parse_rfc3339(args.instant, name="instant")
    pins = _pins(led.list_as_of(led.scope_key, instant))
    as_of = to_jsonable(instant)
    head = f"{len(pins)} pin(s) applied at {as_of} (status is today's):" if pins else f"No pin applied at {as_of}."
    data = {"scopeKey": led.scope_key, "asOf": as_of, "count": len(pins), "pins": pins}
    return Answer(data, _listing(head, pins, status=True))


def pin_history(led: Ledger, args: IdArguments) -> Answer:
    try:
        chain = led.history(args.id)
    except RecordNotFound:
        raise _not_found(args.id) from None
    if not chain or any(r.scope_key != led.scope_key for r in chain):
        raise _not_found(args.id)  # another account's record answers exactly as an unknown id
    records = _pins(chain)
    lines = [f"{len(records)} revision(s) of {args.id}, oldest first:"]
    lines += [f"{_pin_line(r, status=True)} [from {r['validFrom']} to {r.get('validTo') or 'now'}]" for r in records]
    return Answer({"id": args.id, "records": records}, "\n".join(lines))


def get_packet(led: Ledger, args: PacketArguments) -> Answer:
    packet = led.build_packet(led.scope_key, session_id=args.session_id)  # with a session: writes its audit
    data: dict[str, Any] = {"scopeKey": led.scope_key, "sessionId": args.session_id}
    data.update(to_jsonable(packet))
    for key in ("records", "omitted"):  # the packet's record lists, in the same compact form as every tool
        held = getattr(packet, key, None)
        if isinstance(held, list) and all(isinstance(r, MemoryRecord) for r in held):
            data[key] = _pins(held)
    return Answer(data, data["text"] or "The packet is empty: no pin would be injected into a chat now.")


def propose_pin(led: Ledger, args: ProposeArguments) -> Answer:
    kind = Kind(args.kind)
    record = led.propose(args.body, kind=kind, rationale=args.rationale, provenance=Provenance.MODEL_PROPOSAL)
    message = (
        f"Proposed as {record.id}; it is not a pin yet. It waits for the user to accept or reject it, "
        "and it reaches no chat until they accept it."
    )
    return Answer({"proposal": pin_json(record), "awaitingUser": True, "message": message}, message)


# ---------------------------------------------------------------------- the table
READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One tool: its name, what a model reads about it, its argument model, result schema and call."""

    name: str
    title: str
    description: str
    arguments: type[Arguments]
    result_schema: dict[str, Any]
    run: Callable[[Ledger, Any], Answer]
    annotations: ToolAnnotations

    def describe(self) -> Tool:
        """The MCP ``Tool`` listing: JSON Schemas for the arguments and the structured result."""
        return Tool(
            name=self.name,
            title=self.title,
            description=self.description,
            input_schema=self.arguments.model_json_schema(),
            output_schema=self.result_schema,
            annotations=self.annotations,
        )


_ABOUT_PINS = (
    "Pins are facts the user asked to be remembered about them (preferences, facts, decisions, constraints); "
    "they belong to the user, and only the user can add, change or forget one."
)

TOOLS: Mapping[str, ToolSpec] = {
    spec.name: spec
    for spec in (
        ToolSpec(
            "list_pins",
            "List the user's pins",
            f"List the pins that apply to the user right now, oldest first; limit and cursor page through "
            f"many. {_ABOUT_PINS}",
            ListArguments,
            LIST_SCHEMA,
            list_pins,
            READ_ONLY,
        ),
        ToolSpec(
            "search_pins",
            "Search the user's pins",
            f"Full-text search over the user's current pins, best match first. {_ABOUT_PINS}",
            SearchArguments,
            SEARCH_SCHEMA,
            search_pins,
            READ_ONLY,
        ),
        ToolSpec(
            "pins_as_of",
            "The user's pins at an instant",
            "The pins that applied at a past (or present) instant. A pin the user later forgot still shows "
            "that it existed then, with its text withheld (body null, erased true).",
            AsOfArguments,
            AS_OF_SCHEMA,
            pins_as_of,
            READ_ONLY,
        ),
        ToolSpec(
            "pin_history",
            "A pin's history",
            "The whole revision chain of one pin, oldest first: earlier wordings it replaced, merges, expiry, "
            "and whether it was forgotten (its text is then withheld).",
            IdArguments,
            HISTORY_SCHEMA,
            pin_history,
            READ_ONLY,
        ),
        ToolSpec(
            "get_packet",
            "The memory packet for a chat",
            "Exactly the text a chat turn injects from the user's pins (bounded in size, one line per pin, "
            "each citing its id). Give session_id to record what that chat session was sent (the packet audit).",
            PacketArguments,
            PACKET_SCHEMA,
            get_packet,
            ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False),
        ),
        ToolSpec(
            "propose_pin",
            "Propose a pin (the user decides)",
            "Suggest a fact worth remembering about the user. This does NOT pin it: it is stored as a proposal "
            "that waits for the user to accept or reject it, and it reaches no chat until they accept. "
            "Propose only what the user said or clearly implied; never secrets (passwords, keys, tokens are "
            "refused). A proposal counts toward the user's memory budget and is refused when it is full.",
            ProposeArguments,
            PROPOSE_SCHEMA,
            propose_pin,
            ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False),
        ),
    )
}


def _invalid(exc: ValidationError) -> ToolFailure:
    """Name each bad argument and what is wrong; never echo the values.

    An unknown argument's name is the client's text: it is quoted as the record protocol quotes it
    (JSON-escaped, at most 80 characters and its length), never sent back whole.
    """
    problems = [
        {"field": _field_name(err), "message": _plain_message(err["msg"])}
        for err in exc.errors(include_url=False, include_input=False, include_context=False)
    ]
    summary = "; ".join(f"{p['field']}: {p['message']}" for p in problems[:5])
    return ToolFailure("invalid_params", f"invalid arguments: {summary}", errors=problems)


def _field_name(err: Mapping[str, Any]) -> str:
    name = ".".join(str(part) for part in err["loc"]) or "arguments"
    return quote(name, limit=MAX_ECHO_CHARS)[1:-1] if err["type"] == "extra_forbidden" else name


def _plain_message(message: str) -> str:
    """Pydantic's message without its ``Value error, `` prefix (the reason already says so)."""
    return message.removeprefix("Value error, ")


def _ledger_failure(exc: LedgerError) -> ToolFailure:
    """A ledger error as MCP sends it: the record protocol's translation (:func:`ledger.protocol.wire_error`)."""
    wire = wire_error(exc)
    return ToolFailure(wire.reason, wire.message, **wire.data)


ERROR_META_KEY = "memledger/error"


def error_result(failure: ToolFailure) -> CallToolResult:
    """An ``isError`` result: ``<reason>: <message>`` for the model, the reason and context for programs.

    The context goes in ``_meta`` under :data:`ERROR_META_KEY`, never in ``structuredContent``: a
    client that validates ``structuredContent`` against the tool's output schema on every result
    (the TypeScript SDK, hence the MCP Inspector and Claude's apps) would otherwise show a schema
    mismatch instead of the refusal.
    """
    data = {"reason": failure.reason, "message": failure.message, **failure.context}
    return CallToolResult(
        content=[TextContent(type="text", text=f"{failure.reason}: {failure.message}")],
        meta={ERROR_META_KEY: data},
        is_error=True,
    )


def call_tool(led: Ledger, name: str, arguments: Mapping[str, Any] | None) -> CallToolResult:
    """Run tool ``name`` on ``led`` (the bound account); every failure becomes an ``isError`` result.

    Blocking (database I/O): transports run it in a worker thread. Never raises for
    anything a client sends; an unexpected exception is logged here and answered
    ``internal_error`` without any of its text.
    """
    spec = TOOLS.get(name)
    if spec is None:
        known = ", ".join(TOOLS)
        return error_result(ToolFailure("invalid_params", f"unknown tool {echo(name)!r}: the tools are {known}"))
    try:
        answer = spec.run(led, spec.arguments.model_validate(dict(arguments or {})))
    except ToolFailure as failure:
        return error_result(failure)
    except ValidationError as exc:
        return error_result(_invalid(exc))
    except LedgerError as exc:
        return error_result(_ledger_failure(exc))
    except Exception:
        log.exception("internal error in MCP tool %s (account scope %s)", name, led.scope_key)
        return error_result(ToolFailure("internal_error", "internal error: the server logged it; try again later"))
    return CallToolResult(content=[TextContent(type="text", text=answer.text)], structured_content=answer.data)
