"""Write ``docs/protocol.md``, the protocol reference, from the protocol's method table.

    python -m worker.protocol_doc            # rewrite docs/protocol.md
    python -m worker.protocol_doc --check    # exit 1 when docs/protocol.md is stale

Params (names, JSON types, required or default) come from each method's params model in
:data:`ledger.protocol.METHODS`; the methods the worker adds (``consolidation/notify_turn`` and any
other extra method) are found through :func:`worker.cli_worker.rpc_extra_methods`, the same table
``memledger rpc`` serves. What a table cannot say — a summary, what a param means, the result's
fields, which errors a method gives and a working example — is written once in :data:`DOCS` below;
:func:`check_coverage` fails when a served method has no entry (or an entry serves no method).
Every example's answer is produced by running it (:mod:`worker.protocol_examples`), never written
by hand; the same run fills the ``<!-- answer: METHOD -->`` regions of the other pages under
``docs/`` (``docs/packet.md`` shows the capabilities this way), and ``--check`` covers them too.
``tests/worker/test_protocol_doc.py`` checks each result has exactly the documented fields, and runs
every ``curl`` in the reference and the README against a running serve, comparing its answers with
the documented ones (ids and instants aside).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from consolidation.limits import MAX_DEBOUNCE_S
from ledger.protocol import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    LEDGER_ERROR,
    METHOD_NOT_FOUND,
    METHODS,
    PARSE_ERROR,
    REASON_CODES,
    NoParams,
)
from worker.account_methods import UpdateConsolidationParams
from worker.extraction_methods import NotifyTurnParams, UpdateExtractionParams
from worker.protocol_examples import answer_block, example_answers, fill_answers, pages_with_answers

DOCS_DIR = Path(__file__).resolve().parents[1] / "docs"
DEFAULT_OUTPUT = DOCS_DIR / "protocol.md"
RPC_URL = "http://127.0.0.1:8080/rpc"


@dataclass(frozen=True)
class Field_:
    name: str
    type: str
    description: str
    optional: bool = False


@dataclass(frozen=True)
class MethodDoc:
    """What the method table cannot say about one method."""

    summary: str
    result: str  # a key of RESULTS
    example: dict[str, Any] = field(default_factory=dict)  # params; "$ID" etc. are shell variables
    params: Mapping[str, str] = field(default_factory=dict)  # name -> description
    types: Mapping[str, str] = field(default_factory=dict)  # name -> JSON type, where the schema is vague
    errors: tuple[str, ...] = ()  # data.reason values beyond the ones every method can give
    note: str = ""
    params_model: Any = None  # an extra method's params model (the table's own methods carry theirs)


RECORD_FIELDS = (
    Field_("id", "string", "the record's id (`mem_…`)"),
    Field_("scopeKey", "string", "the scope it belongs to (`account:<name>`)"),
    Field_("kind", "string", "`preference`, `fact`, `decision` or `constraint`"),
    Field_("body", "string \\| null", "the text; `null` once forgotten (erased)"),
    Field_("provenance", "string", "`user_explicit`, `model_proposal` or `model_consolidation`"),
    Field_("status", "string", "`active`, `proposed`, `superseded`, `expired`, `rejected` or `deleted` (forgotten)"),
    Field_("sourceSessionId", "string \\| null", "the chat session it came from, if given"),
    Field_("supersedes", "array of string", "the records this one replaced (an edit: one; a merge: several)"),
    Field_("supersededBy", "string \\| null", "the record that replaced this one"),
    Field_("confidenceBps", "integer \\| null", "a model's confidence in basis points (consolidation only)"),
    Field_("rationale", "string \\| null", "a model's reason (consolidation only)"),
    Field_("validFrom", "string (RFC 3339)", "when it took effect"),
    Field_("validTo", "string (RFC 3339) \\| null", "when it stopped applying (`null` while it applies)"),
    Field_("expiresAt", "string (RFC 3339) \\| null", "when it stops applying on its own"),
    Field_("conflictGroup", "string \\| null", "its conflict group: at most one member is active"),
    Field_("createdAt", "string (RFC 3339)", "when the row was written"),
    Field_("updatedAt", "string (RFC 3339)", "when the row last changed"),
    Field_("erased", "boolean", "true once its body was erased by a forget"),
)

RECORDS = Field_("records", "array of record", "the records, each as described under *Records*")
# The model target a job's settings show (never a key: keys live in the server's environment).
TARGET_RESULT = (
    Field_("harness", "string", "`anthropic`, `openai` or `offline`: what runs the job's model calls"),
    Field_("model", "string", "the model, as its server knows it (`offline` for the offline harness)"),
    Field_("baseUrl", "string \\| null", "the openai harness's server; `null`: `OPENAI_BASE_URL`, else OpenAI's"),
    Field_(
        "priceInUsdPerMtok", "number \\| null", "the scope's input price, USD per million tokens; `null`: the table's"
    ),
    Field_(
        "priceOutUsdPerMtok", "number \\| null", "the scope's output price, USD per million tokens; `null`: the table's"
    ),
)

RESULTS: dict[str, tuple[Field_, ...]] = {
    "record": (Field_("…", "record", "one record (see *Records* above)"),),
    "list": (
        Field_("scopeKey", "string", "the scope read"),
        RECORDS,
        Field_("nextCursor", "string \\| null", "pass it as `cursor` for the next page; null on the last page"),
    ),
    "as_of": (
        Field_("scopeKey", "string", "the scope read"),
        Field_("asOf", "string (RFC 3339)", "the instant asked for"),
        RECORDS,
    ),
    "history": (Field_("id", "string", "the id asked for"), RECORDS),
    "search": (Field_("scopeKey", "string", "the scope searched"), Field_("query", "string", "the query"), RECORDS),
    "slash": (
        Field_("handled", "boolean", "false when the text is not a slash command (pass it to the model as usual)"),
        Field_("reply", "string", "what to show the user"),
        Field_("ok", "boolean", "false when the command was refused"),
        Field_("reason", "string", "why it was refused (only when `ok` is false)", optional=True),
        RECORDS,
    ),
    "packet": (
        Field_("text", "string", "the text to inject into the model's context (empty when injection is off)"),
        RECORDS,
        Field_("selected", "array of object", "each record sent: `id`, `kind`, `reason` (why it was chosen), `body`"),
        Field_("excluded", "array of object", "each active record left out: `id`, `code` (why)"),
        Field_("omitted", "array of record", "active records left out for size"),
        Field_("tokenEstimate", "integer", "an estimate of the text's tokens"),
        Field_("maxChars", "integer", "the size limit applied"),
        Field_("builtAt", "string (RFC 3339) \\| null", "when it was built"),
        Field_("sessionId", "string \\| null", "the chat session it was built for (its audit is kept)"),
        Field_("injection", "boolean", "false when the account switched injection off"),
    ),
    "audit": (
        Field_("scopeKey", "string", "the scope"),
        Field_("sessionId", "string", "the session"),
        Field_("builtAt", "string (RFC 3339)", "when its last packet was built"),
        Field_("maxChars", "integer", "the size limit applied"),
        Field_("tokenEstimate", "integer", "an estimate of the text's tokens"),
        Field_("text", "string", "exactly what was injected"),
        Field_(
            "selected",
            "array of object",
            "each record sent: `id`, `kind`, `reason`, `body` (null once erased), `erased`",
        ),
        Field_("excluded", "array of object", "each record left out and why"),
    ),
    "injection": (
        Field_("scopeKey", "string", "the bound account's scope"),
        Field_("enabled", "boolean", "whether packets carry the account's memory"),
    ),
    "capabilities": (
        Field_("scopeKey", "string", "the bound account's scope"),
        Field_("maxBodyChars", "integer", "the longest body a save accepts"),
        Field_("kinds", "array of string", "the record kinds"),
        Field_("slashCommands", "array of string", "the slash commands `memory/handle_slash_command` handles"),
        Field_("injection", "boolean", "whether packets carry the account's memory"),
        Field_("consolidation", "object", "`available`, `mode`, `operations`, `allowedOperations`"),
        Field_("extraction", "object", "`available`, `mode`, `enabled`"),
    ),
    "memory_turn": (
        Field_("scopeKey", "string", "the bound account's scope"),
        Field_("sessionId", "string", "the session"),
        Field_("consolidation", "object", "`scheduled`, and when scheduled `runId`, `turns`, `dueAt`"),
        Field_("extraction", "object", "`scheduled`, and when scheduled `runId`, `turns`, `dueAt`"),
    ),
    "extraction_settings": (
        Field_("scopeKey", "string", "the bound account's scope"),
        Field_("mode", "string", "`off` or `propose` (proposals from the conversation, for the user to accept)"),
        Field_("debounceS", "number", "seconds of quiet in a session before its run"),
        *TARGET_RESULT,
    ),
    "settings": (
        Field_("scopeKey", "string", "the bound account's scope"),
        Field_("mode", "string", "`off`, `propose` (a model's operations become proposals) or `apply`"),
        Field_("allowRemoval", "boolean", "whether consolidation may retire records"),
        Field_("debounceS", "number", "seconds of quiet after a turn before a run"),
        Field_("maxRecords", "integer", "the scope's record budget"),
        *TARGET_RESULT,
    ),
    "notify_turn": (
        Field_("scheduled", "boolean", "false when the scope's consolidation is off"),
        Field_("scopeKey", "string", "the bound account's scope"),
        Field_("runId", "string", "the pending run (only when scheduled)", optional=True),
        Field_("turns", "integer", "turns this run has gathered (only when scheduled)", optional=True),
        Field_("dueAt", "string (RFC 3339)", "when it runs unless another turn pushes it back", optional=True),
    ),
}

SCOPE = "account:local"

# The model target's params, the same on both jobs' updates (checked as the command line checks them).
TARGET_PARAMS_DOC = {
    "harness": "`anthropic`, `openai` or `offline` (`memledger models` lists them); alone, it takes its "
    "default model and drops `baseUrl` and the prices",
    "model": "the model as its server knows it, e.g. `qwen2.5:7b-instruct`; one the price table does not "
    "know needs both prices",
    "baseUrl": "the openai harness's server, an http(s) URL without credentials, e.g. "
    "`http://127.0.0.1:11434/v1`; `null` unsets it",
    "priceInUsdPerMtok": "input price, USD per million tokens (0: a free local model); with "
    "`priceOutUsdPerMtok` or not at all; `null` unsets both",
    "priceOutUsdPerMtok": "output price, USD per million tokens; with `priceInUsdPerMtok`",
}
TARGET_TYPES = {
    "baseUrl": "string \\| null",
    "priceInUsdPerMtok": "number \\| null",
    "priceOutUsdPerMtok": "number \\| null",
}
TARGET_NOTE = (
    "The model target (`harness`, `model`, `baseUrl`, `priceInUsdPerMtok`, `priceOutUsdPerMtok`) is the "
    "operator's. A server that serves its one account without tokens (loopback `memledger serve`, "
    "`memledger rpc`) takes it here, with the same checks and messages as `{command}`. With "
    "`MEMLEDGER_AUTH=tokens` (many accounts) each of the five is refused, `-32602 invalid_params` "
    "(`data.errors[].type`: `operator_setting`), whatever its value, and nothing changes: an account could "
    "otherwise spend the operator's money (a price of 0 on a paid model) or make the worker call any address "
    "it can reach. The operator sets it with `{command}`."
)

DOCS: dict[str, MethodDoc] = {
    "memory/save_memory_record": MethodDoc(
        "Pin a fact in the bound account's scope, or edit one (`supersedes`).",
        "record",
        {"body": "I prefer metric units"},
        params={
            "body": "the text to remember (screened: no credentials, not empty, bounded length)",
            "kind": "`preference`, `fact`, `decision` or `constraint` (default: `fact`; an edit keeps the kind)",
            "supersedes": "edit: the id of the active record this replaces (it closes at the same instant)",
            "expiresAt": "when it stops applying, RFC 3339 with an offset, in the future",
            "conflictGroup": "records making competing claims share a group; saving one closes the active member",
            "sourceSessionId": "the chat session it came from",
        },
        types={"expiresAt": "string (RFC 3339)"},
        errors=("body_rejected", "budget_exceeded", "not_found", "invalid_transition"),
        note="The scope is always the bound account's: a `scopeKey` param is refused.",
    ),
    "memory/list_memory_records": MethodDoc(
        "The active records of a scope, now, oldest first; in pages when `limit` is given.",
        "list",
        {"scopeKey": SCOPE},
        params={
            "scopeKey": "the scope to read (left out: the caller's one scope)",
            "limit": "at most this many records, 1 … 1000 (left out: the whole list)",
            "cursor": "the previous page's `nextCursor`, unchanged (see *Paging* above)",
            "kind": "only records of this kind",
            "provenance": "only records of this provenance",
            "conflictGroup": "only records of this conflict group",
        },
        errors=("scope_error",),
    ),
    "memory/list_memory_records_as_of": MethodDoc(
        "The records that applied at an instant; one forgotten since still answers, its body withheld.",
        "as_of",
        {"scopeKey": SCOPE, "asOf": "2026-01-01T00:00:00Z"},
        params={
            "scopeKey": "the scope to read (left out: the caller's one scope)",
            "asOf": "the instant, RFC 3339 with `Z` or an offset",
        },
        types={"asOf": "string (RFC 3339)"},
        errors=("scope_error",),
        note="A record forgotten since still answers for the instants its interval held, with its body "
        "withheld (`body: null`, `erased: true`): the scope did hold a pin then; the words are gone.",
    ),
    "memory/get_memory_record": MethodDoc(
        "One record in any status.",
        "record",
        {"id": "$ID"},
        params={"id": "a record id (also accepted as `recordId`)"},
        errors=("not_found",),
    ),
    "memory/get_memory_record_history": MethodDoc(
        "A record's whole revision chain, oldest first (every source of every merge).",
        "history",
        {"id": "$ID"},
        params={"id": "any record of the chain (also accepted as `recordId`)"},
        errors=("not_found",),
    ),
    "memory/search_memory_records": MethodDoc(
        "Full-text search over the active records of a scope, best match first.",
        "search",
        {"scopeKey": SCOPE, "query": "metric"},
        params={
            "scopeKey": "the scope to search (left out: the caller's one scope)",
            "query": "words to look for (any text)",
            "limit": "at most this many",
        },
        errors=("scope_error",),
    ),
    "memory/list_proposed_memory_records": MethodDoc(
        "Proposals waiting for the user's accept or reject (from a model: consolidation in propose mode), "
        "oldest first; in pages when `limit` is given.",
        "list",
        {"scopeKey": SCOPE},
        params={
            "scopeKey": "the scope to read (left out: the caller's one scope)",
            "limit": "at most this many records, 1 … 1000 (left out: the whole list)",
            "cursor": "the previous page's `nextCursor`, unchanged (see *Paging* above)",
            "kind": "only records of this kind",
            "provenance": "only records of this provenance",
            "conflictGroup": "only records of this conflict group",
        },
        errors=("scope_error",),
    ),
    "memory/accept_proposed_memory_record": MethodDoc(
        "Accept a waiting proposal: it becomes active now, closing what it supersedes.",
        "record",
        {"id": "$PROPOSAL_ID"},
        params={"id": "the proposal's id (also accepted as `recordId`)"},
        errors=("not_found", "invalid_transition", "budget_exceeded"),
    ),
    "memory/reject_proposed_memory_record": MethodDoc(
        "Reject a waiting proposal; it never applies.",
        "record",
        {"id": "$OTHER_PROPOSAL_ID"},
        params={"id": "the proposal's id (also accepted as `recordId`)"},
        errors=("not_found", "invalid_transition"),
    ),
    "memory/handle_slash_command": MethodDoc(
        "Handle `/pin <text>`, `/pins` and `/unpin <id>` typed in a chat; anything else is `handled: false`.",
        "slash",
        {"text": "/pins"},
        params={"text": "the user's message as typed"},
    ),
    "memory/build_packet": MethodDoc(
        "The text to inject into the model's context: the scope's active records, within a size limit.",
        "packet",
        {"scopeKey": SCOPE, "maxChars": 2000, "sessionId": "chat-1"},
        params={
            "scopeKey": "the scope (left out: the caller's one scope)",
            "maxChars": "size limit of `text` (1 … 1,000,000)",
            "sessionId": "the chat session: its audit (what was injected and why) is kept",
        },
        errors=("scope_error",),
    ),
    "memory/delete_memory_record": MethodDoc(
        "Forget a record: a tombstone now, and its body and its earlier revisions' bodies are erased.",
        "record",
        {"id": "$ID"},
        params={"id": "the head of the chain (also accepted as `recordId`)"},
        errors=("not_found", "invalid_transition"),
        note="Forgetting a superseded record is refused (`invalid_transition`): forget its successor instead.",
    ),
    "consolidation/notify_turn": MethodDoc(
        "Report one chat turn of the bound account (debounced); when consolidation is on, a run is scheduled.",
        "notify_turn",
        {},
        note="Takes no params: the scope is always the bound account's.",
    ),
    "memory/get_packet_audit": MethodDoc(
        "What the last packet built for a session held, and why each record was in or out (`null` if none).",
        "audit",
        {"sessionId": "chat-1"},
        params={"sessionId": "the session given to `memory/build_packet`"},
        note="Forgotten records show with `body: null` and `erased: true`: the audit never brings a body back.",
    ),
    "memory/get_memory_injection": MethodDoc(
        "Whether packets carry the account's memory (the account's own switch).",
        "injection",
        {},
    ),
    "memory/set_memory_injection": MethodDoc(
        "Switch memory injection on or off for the account; off, packets are empty and nothing is lost.",
        "injection",
        {"enabled": True},
        params={"enabled": "true to inject memory into packets, false to stop"},
    ),
    "memory/get_memory_capabilities": MethodDoc(
        "What this server offers the account: limits, kinds, slash commands, consolidation and extraction.",
        "capabilities",
        {},
    ),
    "memory/notify_turn": MethodDoc(
        "Report a chat turn with its messages: schedules consolidation and, when on, extraction for the session.",
        "memory_turn",
        {"sessionId": "chat-1", "messages": [{"role": "user", "text": "I moved to Lisbon last month"}]},
        params_model=NotifyTurnParams,
        params={
            "sessionId": "the chat session",
            "messages": "1 … 100 messages, each `{role: user|assistant, text, id?}`",
        },
        types={"messages": "array of object"},
    ),
    "memory/get_extraction_settings": MethodDoc(
        "The bound account's extraction settings: its switches and the model target extraction runs on.",
        "extraction_settings",
        {},
        params_model=NoParams,
    ),
    "memory/update_extraction_settings": MethodDoc(
        "Change the bound account's extraction settings; each param is optional.",
        "extraction_settings",
        {"mode": "off", "debounceS": 30},
        params_model=UpdateExtractionParams,
        params={
            "mode": "`off` or `propose`",
            "debounceS": "seconds of quiet in a session before its run",
            **TARGET_PARAMS_DOC,
        },
        types={"mode": "string: `off`, `propose`", **TARGET_TYPES},
        note=TARGET_NOTE.format(command="memledger extraction set"),
    ),
    "memory/get_consolidation_settings": MethodDoc(
        "The bound account's consolidation settings: its switches and the model target runs use.",
        "settings",
        {},
        params_model=NoParams,
        note="Spend budgets, caps and the allowed operations are the operator's, on the command line "
        "(`memledger consolidation set`).",
    ),
    "memory/update_consolidation_settings": MethodDoc(
        "Change the bound account's consolidation settings; each param is optional.",
        "settings",
        {"mode": "propose", "debounceS": 30},
        params_model=UpdateConsolidationParams,
        params={
            "mode": "`off`, `propose` or `apply` (`off` cancels a pending run)",
            "allowRemoval": "let consolidation retire records",
            "debounceS": f"seconds of quiet after a turn before a run (0 … {MAX_DEBOUNCE_S:,.0f})",
            "maxRecords": "the scope's record budget (0 … 1,000,000; never evicts)",
            **TARGET_PARAMS_DOC,
        },
        types={"mode": "string: `off`, `propose`, `apply`", **TARGET_TYPES},
        note=TARGET_NOTE.format(command="memledger consolidation set"),
    ),
}

# Every method can give these; the per-method list adds its own.
COMMON_ERRORS = ("parse_error", "invalid_request", "method_not_found", "invalid_params", "busy", "internal_error")
REASONS: dict[str, tuple[int, str]] = {
    "parse_error": (PARSE_ERROR, "the body is not JSON"),
    "invalid_request": (INVALID_REQUEST, "not a JSON-RPC 2.0 request object"),
    "method_not_found": (METHOD_NOT_FOUND, "no such method (the answer names this reference)"),
    "invalid_params": (INVALID_PARAMS, "a param is missing, unknown or mistyped; `data.errors` names each field"),
    "busy": (REASON_CODES.get("busy", LEDGER_ERROR), "the database stayed busy: retry in a moment"),
    "internal_error": (INTERNAL_ERROR, "a bug; nothing about it is sent, the server logs it"),
    "body_rejected": (
        REASON_CODES.get("body_rejected", LEDGER_ERROR),
        "the body is empty, too long or holds a credential (`data.why`)",
    ),
    "budget_exceeded": (
        REASON_CODES.get("budget_exceeded", LEDGER_ERROR),
        "the scope is full (`data`: budget, active, proposed, held); nothing is evicted",
    ),
    "not_found": (
        REASON_CODES.get("not_found", LEDGER_ERROR),
        "no such record for this account (`data.recordId`); another account's id answers exactly the same",
    ),
    "scope_error": (REASON_CODES.get("scope_error", INVALID_PARAMS), "a scope that is not the caller's account"),
    "ledger_error": (LEDGER_ERROR, "any other ledger error (e.g. a schema behind the code)"),
    "invalid_transition": (
        REASON_CODES.get("invalid_transition", LEDGER_ERROR),
        "the record's status does not allow it (e.g. accepting an active record)",
    ),
}


def served_methods() -> dict[str, Any]:
    """Every method a serve answers: the ledger's table plus the worker's extra methods (name -> entry)."""
    from ledger import open_ledger
    from worker.cli_worker import rpc_extra_methods

    led = open_ledger("sqlite:///:memory:")
    try:
        extra = dict(rpc_extra_methods(led))
    finally:
        led.close()
    return {**extra, **METHODS}


def check_coverage(names: Iterable[str]) -> None:
    """Raise ``LookupError`` naming every served method without a doc entry and every entry without a method."""
    served, documented = set(names), set(DOCS)
    problems = [f"{name}: served but not documented in worker/protocol_doc.py DOCS" for name in served - documented]
    problems += [f"{name}: documented but not served" for name in documented - served]
    if problems:
        raise LookupError("; ".join(sorted(problems)))


def _json_type(prop: Mapping[str, Any], defs: Mapping[str, Any]) -> tuple[str, bool]:
    """A property's JSON type for people, and whether ``null`` is allowed."""
    options: list[Mapping[str, Any]] = []
    for option in prop.get("anyOf", [prop]):
        options.extend(option.get("anyOf", [option]))  # a nested union (e.g. number or integer)
    nullable = any(option.get("type") == "null" for option in options)
    names = []
    for option in options:
        if option.get("type") == "null":
            continue
        if "$ref" in option:
            enum = defs[option["$ref"].rsplit("/", 1)[-1]].get("enum", [])
            names.append("string: " + ", ".join(f"`{value}`" for value in enum))
        elif "type" in option:
            bounds = [f"{sign} {option[key]}" for key, sign in (("minimum", "≥"), ("maximum", "≤")) if key in option]
            names.append(" ".join([option["type"], *bounds]))
        else:
            names.append("string")
    if "number" in names and "integer" in names:
        names.remove("integer")
    return " \\| ".join(dict.fromkeys(names)) or "any", nullable


def _params_table(name: str, entry: Any, doc: MethodDoc) -> list[str]:
    params_model = doc.params_model or getattr(entry, "params", None)
    if params_model is None:
        rows = [(p, doc.types.get(p, "any"), "yes", doc.params.get(p, "")) for p in doc.params]
    else:
        schema = params_model.model_json_schema(by_alias=True)
        required = set(schema.get("required", []))
        rows = []
        for prop_name, prop in schema.get("properties", {}).items():
            json_type, _ = _json_type(prop, schema.get("$defs", {}))
            json_type = doc.types.get(prop_name, json_type)
            if prop_name in required:
                need = "yes"
            else:
                default = prop.get("default")
                need = "no" if default is None else f"no (default `{json.dumps(default)}`)"
            rows.append((prop_name, json_type, need, doc.params.get(prop_name, "")))
    if not rows:
        return ["No params (send `{}` or leave `params` out)."]
    lines = ["| Param | Type | Required | Meaning |", "| --- | --- | --- | --- |"]
    lines += [f"| `{p}` | {t} | {r} | {m} |" for p, t, r, m in rows]
    return lines


def _result_table(doc: MethodDoc) -> list[str]:
    fields = RESULTS[doc.result]
    if doc.result == "record":
        return ["A record (see *Records* above)."]
    lines = ["| Field | Type | Meaning |", "| --- | --- | --- |"]
    lines += [f"| `{f.name}` | {f.type} | {f.description}{' (may be absent)' if f.optional else ''} |" for f in fields]
    return lines


def _errors_table(doc: MethodDoc) -> list[str]:
    reasons = list(dict.fromkeys([*doc.errors, *COMMON_ERRORS]))
    lines = ["| Code | `data.reason` | When |", "| --- | --- | --- |"]
    lines += [f"| {REASONS[r][0]} | `{r}` | {REASONS[r][1]} |" for r in reasons]
    return lines


def request_json(name: str, doc: MethodDoc) -> str:
    """The example request as compact JSON (shell variables still as ``$NAME``)."""
    request: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": name}
    if doc.example:
        request["params"] = doc.example
    return json.dumps(request, separators=(",", ":"))


def curl_example(name: str, doc: MethodDoc) -> str:
    """A one-line curl for the example; ``"$ID"`` placeholders become shell expansions."""
    body = request_json(name, doc)
    for var in VARIABLES:
        body = body.replace(f'"{var}"', f'"\'"{var}"\'"')
    return f"curl -s {RPC_URL} -H 'Content-Type: application/json' -d '{body}'"


VARIABLES = ("$OTHER_PROPOSAL_ID", "$PROPOSAL_ID", "$ID")
_SAVE = (
    '{"jsonrpc":"2.0","id":1,"method":"memory/save_memory_record","params":{"body":"my deploy region is eu-west-1"}}'
)
_PROPOSED = json.dumps(
    {"jsonrpc": "2.0", "id": 1, "method": "memory/list_proposed_memory_records", "params": {"scopeKey": SCOPE}},
    separators=(",", ":"),
)
_NTH = "import json,sys; r=json.load(sys.stdin)['result']['records']; print(r[%d]['id'] if len(r) > %d else '')"
SETUP = f"""```sh
# The variables the examples use: a record id, and the ids of two waiting proposals (empty when none waits).
ID=$(curl -s {RPC_URL} -H 'Content-Type: application/json' -d '{_SAVE}' \\
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["result"]["id"])')
PROPOSED=$(curl -s {RPC_URL} -H 'Content-Type: application/json' -d '{_PROPOSED}')
PROPOSAL_ID=$(echo "$PROPOSED" | python3 -c "{_NTH % (0, 0)}")
OTHER_PROPOSAL_ID=$(echo "$PROPOSED" | python3 -c "{_NTH % (1, 1)}")
```"""

INTRO = """# The record protocol

<!-- Generated by `python -m worker.protocol_doc` from the protocol's method table: do not edit by hand.
     A test fails when this file is stale; another runs every curl below against a running serve. -->

JSON-RPC 2.0 over HTTP (`POST /rpc` on `memledger serve`, `Content-Type: application/json`), over
stdio (`memledger rpc`: one request per line, one response per line) and in-process
(`ledger.protocol.handle(led, request)`). Params are passed by name, in camelCase; unknown params are
refused. Instants are RFC 3339 strings with `Z` or an offset (`2026-01-01T09:00:00Z`); answers use
microseconds and `Z`. Every method acts on the bound account's scope only (`account:<name>`, see
`MEMLEDGER_ACCOUNT`); a client never passes `now`: time-dependent operations run at the server's clock.

An error answer is `{"jsonrpc":"2.0","id":…,"error":{"code":…,"message":…,"data":{"reason":…}}}`:
`data.reason` is stable (match on it, not on the message), and the message says what to do next.
A request without an `id` is a notification: it is carried out and answered with nothing
(HTTP 204).

The examples assume `make run` (the embedded default on `127.0.0.1:8080`); they run in order in one
shell, and the ones that need an id take it from these variables. Each example's **Answer** was
produced by running it, in this order, against the same methods on a ledger holding two waiting
proposals, at 2026-01-05T09:00:00Z; ids are random, so stable stand-ins replace them. A test runs
every curl against a serve and compares its answers with these.
"""


# How every method behaves, whatever its params: written once, here, beside the method table.
GUIDE = """\
## One account per caller

Every method acts on the bound account's scope (`account:<name>`) alone:

* a `scopeKey` that is well formed but not the caller's is refused: code `-32602`,
  `data: {"reason": "scope_error", "field": "scopeKey"}`; a malformed one is `invalid_params`;
* an id that belongs to another account is answered exactly as an unknown id: code `-32003`,
  `data: {"reason": "not_found", "recordId": …}`, message `no memory record "<id>" in this
  account` — same code, data and message (with the id swapped) for both, on every id method and
  on `supersedes` and `/unpin`; the refusal names only the id sent (never, say, the record an
  edited one replaced);
* an id longer than 100 characters cannot be one (ids are `mem_` and 24 hex digits): it is refused
  before any lookup, `invalid_params` naming the field, the limit and how long it was
  (`id: a record id has at most 100 characters …; this one has 900,000`);
* `save` takes no `scopeKey` (refused, naming the bound scope);
* every other method that takes a `scopeKey` lets it be left out: a caller has exactly one
  scope, its account's, and that is the default.

On stdio and in-process the bound account is the ledger's (`MEMLEDGER_ACCOUNT`, default
`local`). Over HTTP with `MEMLEDGER_AUTH=tokens` it is the token's account and nothing in the
payload can change it. Workspace scopes (`workspace:…`) are not on the protocol yet: every
scope but the caller's account scope is a `scope_error`.

## Paging

`memory/list_memory_records` and `memory/list_proposed_memory_records` return the whole list
unless `limit` is given; then at most `limit` records and a `nextCursor` (null on the last
page). Pass it back as `cursor`, with the same method and filters, for the records after them.
Lists are ordered by when each record took effect, and a page continues after the last record
of the one before, so writes between pages neither repeat nor skip anything: every record in
the list when the first page is read, and still in it when a later page is read, comes exactly
once; a record saved later comes after those (on a later page); one that leaves the list
meanwhile (forgotten, superseded, expired, accepted or rejected) is not returned again. A
cursor is opaque (do not build or edit one); a cut, edited or unknown cursor, one made for
another scope or account, or for the other list or other filters, is `invalid_params` (`-32602`).

## Strict input

Applied to every method, the worker's extra methods included (their params are scanned
before they run; their own param models use `ledger.protocol.Params` with the `Line`, `Text`
and `Instant` field types):

* **Unicode.** Every string anywhere in a request (values, param names, the method, the id)
  must be valid Unicode: a lone surrogate (`"\\ud800"`) is `-32602 invalid_params` naming the
  field (`-32600` in the envelope; an id that is not plain text is answered with `id: null`).
* **Control characters** (C0, DEL, C1) are refused in every string; newline, carriage return
  and tab are allowed in bodies and slash text only (not in groups, session ids, queries, ids,
  scope keys).
* **Instants** are `YYYY-MM-DDTHH:MM:SS[.f{1,6}](Z|±HH:MM)` (`T`/space, `Z`/`z` accepted):
  basic format (`20300101T000000Z`), week and ordinal dates, a missing offset, `+0100`, and more
  than 6 fractional digits are refused — never cut. The message names the wire field and shows
  a valid value, e.g. `invalid params: asOf: has 7 fractional digits and at most 6 (microseconds)
  are kept; round it, e.g. "2026-01-01T00:00:00.123456Z"`.
* **Messages** quote at most 80 characters of any input (`quote()`: JSON-escaped, cut, with the
  full length), so a 900 KB id gives a short error. `data.errors` lists each problem as
  `{field, type, message}`; an unknown param's message lists the params the method takes.
* **Unknown methods** (`-32601`) list every method of the table, extra methods included.

## Batches

As JSON-RPC 2.0 section 6 says, on every transport: an array of requests is answered with an
array of responses in request order, with nothing for notifications, and with nothing at all
(HTTP 204, no stdio line, `None` in-process) when every member was a notification. An empty
array and an array of more than 100 requests get one `-32600` response object; a member that is
not a request object gets its own `-32600` (`id: null`). Over HTTP the whole batch counts
against the body limit. `tests/ledger/test_protocol.py::test_the_specifications_batch_examples`
replays the specification's examples (with params by name, which this protocol requires).
"""

SERVING = """\
## Serving safely (HTTP)

`memledger serve` checks, in this order, before the body is read: `Host` (421 unless a
loopback name or in `MEMLEDGER_ALLOWED_HOSTS`; not checked with tokens on and no allowed hosts
configured), `Origin` (403 when present and not in `MEMLEDGER_ALLOWED_ORIGINS`),
`Content-Type: application/json` (else 415), the Bearer token with `MEMLEDGER_AUTH=tokens`
(401), `Content-Length` over `MEMLEDGER_MAX_REQUEST_BYTES` (default 1,000,000; 413, connection
closed). The body is then read as a stream and cut off at the limit (413) or after
`MEMLEDGER_BODY_TIMEOUT_S` (default 30; 408); request headers must arrive within
`MEMLEDGER_HEADER_TIMEOUT_S` (default 10) or the connection is closed. Before all of these, a
request past `MEMLEDGER_MAX_REQUESTS_IN_FLIGHT` requests being answered at once (default 1000;
idle connections never count) gets 503 with `Retry-After: 1` and `-32005 busy`. Refusals are
JSON-RPC error objects too (`data.reason`: `misdirected_request`, `forbidden_origin`,
`unsupported_media_type`, `unauthorized`, `request_too_large`, `request_timeout`, `busy`). Everything
else is status 200 (204 for notifications only) — an unexpected failure is a `-32603` response,
never a 500 that would drop the next pipelined request. CORS headers are sent only to
configured origins. How to issue and rotate tokens: [operations](operations.md#api-tokens).
"""


def example_requests() -> dict[str, dict[str, Any]]:
    """Every documented method's example request, in the reference's order (ids still as ``$NAME``)."""
    return {name: json.loads(request_json(name, doc)) for name, doc in DOCS.items()}


def render(methods: Mapping[str, Any] | None = None, answers: Mapping[str, dict[str, Any]] | None = None) -> str:
    """The whole reference as Markdown (deterministic: the same table gives the same text).

    ``answers`` are the examples' answers (:func:`worker.protocol_examples.example_answers`); run
    here when not given.
    """
    served = served_methods() if methods is None else dict(methods)
    check_coverage(served)
    if answers is None:
        answers = example_answers(example_requests())
    order = list(DOCS)  # the order a newcomer meets them: pin, read, change, forget last
    lines = [INTRO, SETUP, "", "## Methods", ""]
    lines += [f"* [`{name}`](#{name.replace('/', '')}) — {DOCS[name].summary}" for name in order]
    lines += ["", "## Records", "", "Every method that answers records uses this object:", ""]
    lines += ["| Field | Type | Meaning |", "| --- | --- | --- |"]
    lines += [f"| `{f.name}` | {f.type} | {f.description} |" for f in RECORD_FIELDS]
    lines += ["", GUIDE.rstrip("\n"), "", "## Errors", ""]
    lines += ["| Code | `data.reason` | When |", "| --- | --- | --- |"]
    lines += [f"| {code} | `{reason}` | {when} |" for reason, (code, when) in REASONS.items()]
    lines += ["", SERVING.rstrip("\n")]
    for name in order:
        doc = DOCS[name]
        lines += ["", f"## {name}", "", doc.summary]
        if doc.note:
            lines += ["", doc.note]
        lines += ["", "**Params**", "", *_params_table(name, served[name], doc)]
        lines += ["", "**Result**", "", *_result_table(doc)]
        lines += ["", "**Errors**", "", *_errors_table(doc)]
        lines += ["", "**Example**", "", "```sh", curl_example(name, doc), "```"]
        lines += ["", "**Answer**", "", answer_block(answers[name])]
    return "\n".join(lines) + "\n"


def generated_pages(output: Path, docs_dir: Path) -> dict[Path, str]:
    """What each generated page should hold: the reference at ``output``, and every page of ``docs_dir``
    that shows an example's answer, with its answers filled in (one run of the examples for all)."""
    answers = example_answers(example_requests())
    pages = {output: render(answers=answers)}
    for page in pages_with_answers(docs_dir):
        if page.resolve() != output.resolve():
            pages[page] = fill_answers(page.read_text(encoding="utf-8"), answers)
    return pages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m worker.protocol_doc", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a page is stale; write nothing")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="where the reference goes")
    parser.add_argument("--docs-dir", type=Path, default=DOCS_DIR, help="pages whose example answers to fill in")
    args = parser.parse_args(argv)
    pages = generated_pages(args.output, args.docs_dir)
    if args.check:
        stale = [p for p, text in pages.items() if (p.read_text(encoding="utf-8") if p.exists() else "") != text]
        for page in stale:
            print(f"{page} is stale: run python -m worker.protocol_doc", file=sys.stderr)
        return 1 if stale else 0
    for page, text in pages.items():
        page.write_text(text, encoding="utf-8")
        print(f"wrote {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
