"""What the protocol reference says about each method that its tables cannot: :data:`DOCS`.

A summary, what a param means, the result's fields (:data:`RESULTS`, :data:`RECORD_FIELDS`),
which errors a method gives (:data:`REASONS`) and a working example, written once per method;
:func:`tools.protocol_doc.render.check_coverage` fails when a served method has no entry here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from consolidation import MAX_DEBOUNCE_S
from ledger.protocol import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    LEDGER_ERROR,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    REASON_CODES,
    NoParams,
)
from worker.rpc.account import UpdateConsolidationParams
from worker.rpc.extraction import UpdateExtractionParams
from worker.rpc.turns import NotifyTurnParams


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
        Field_("responseFormat", "string", "how the openai harness asks for the answer's JSON (`auto` falls back)"),
        Field_("temperature", "number", "the model call's sampling temperature"),
        Field_(
            "contextWindowTokens", "integer \\| null", "the model's context window; `null`: what the server reports"
        ),
        Field_("systemRole", "boolean", "false: the instructions open the user message (no system role)"),
        Field_("stream", "boolean", "the answer is streamed, so a call given up stops the server"),
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
            "sourceSessionId": "the chat session it came from, 1 … 200 characters on one line like every session "
            "id (leave it out when there is none: an empty one is refused)",
            "requestId": "your key for this save, 1 … 200 characters (e.g. a UUID): sent again with the same key and "
            "params, the record it wrote comes back and nothing is written twice (see *Lost connections*)",
        },
        types={"expiresAt": "string (RFC 3339)"},
        errors=("body_rejected", "budget_exceeded", "not_found", "invalid_transition", "request_id_reused"),
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
            "maxRecords": "the scope's record budget (0 … 1,000,000; never evicts; with tokens at most "
            "`MEMLEDGER_TENANT_MAX_RECORDS`, 1,000 by default, or the budget the account has now)",
            **TARGET_PARAMS_DOC,
            "responseFormat": "openai harness: `auto` (the strongest form the server takes, falling back on a "
            "refusal), `json_schema`, `json_object` (the schema in llama.cpp's form) or `plain`",
            "temperature": "openai harness: sampling temperature, 0 … 2 (default 0)",
            "contextWindowTokens": "openai harness: the model's context window in its tokens, 512 … 2,000,000; "
            "the prompt and the answer fit in it; `null`: what the server reports",
            "systemRole": "openai harness: false puts the instructions at the head of the user message, for chat "
            "templates without a system role (Gemma's)",
            "stream": "openai harness: stream the answer (default), so a call given up stops the server generating",
        },
        types={"mode": "string: `off`, `propose`, `apply`", "contextWindowTokens": "integer \\| null", **TARGET_TYPES},
        note=TARGET_NOTE.format(command="memledger consolidation set")
        + " The five params of the call (`responseFormat` … `stream`) are the operator's the same way.",
    ),
}

# Every method can give these; the per-method list adds its own.
COMMON_ERRORS = (
    "parse_error",
    "invalid_request",
    "method_not_found",
    "invalid_params",
    "busy",
    "outcome_unknown",
    "internal_error",
)
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
    "outcome_unknown": (
        REASON_CODES.get("outcome_unknown", LEDGER_ERROR),
        "a write lost its database connection after it was sent to be committed: it may have been applied "
        "(`data.recordId`: the record to read, when known); see *Lost connections*",
    ),
    "request_id_reused": (
        REASON_CODES.get("request_id_reused", LEDGER_ERROR),
        "the `requestId` was used for a save with other params (`data.recordId`: that save's record); nothing written",
    ),
}
