"""The protocol reference as Markdown: :func:`render` (docs/protocol.md) and :func:`generated_pages`
(it and every page under ``docs/`` that shows an example's answer)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ledger.protocol import METHODS
from tools.protocol_doc.examples import answer_block, example_answers, fill_answers, pages_with_answers
from tools.protocol_doc.methods import COMMON_ERRORS, DOCS, REASONS, RECORD_FIELDS, RESULTS, SCOPE, MethodDoc

RPC_URL = "http://127.0.0.1:8080/rpc"


def served_methods() -> dict[str, Any]:
    """Every method a serve answers: the ledger's table plus the worker's extra methods (name -> entry)."""
    from ledger import open_ledger
    from worker.cli.rpc import rpc_extra_methods

    led = open_ledger("sqlite:///:memory:")
    try:
        extra = dict(rpc_extra_methods(led))
    finally:
        led.close()
    return {**extra, **METHODS}


def check_coverage(names: Iterable[str]) -> None:
    """Raise ``LookupError`` naming every served method without a doc entry and every entry without a method."""
    served, documented = set(names), set(DOCS)
    problems = [f"{name}: served but not documented in tools/protocol_doc DOCS" for name in served - documented]
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

<!-- Generated by `python -m tools.protocol_doc` from the protocol's method table: do not edit by hand.
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

`memory/list_memory_records` and `memory/list_proposed_memory_records` return the whole list unless
`limit` is given. Then they return at most `limit` records and a `nextCursor` (null on the last page).
Pass it back as `cursor`, with the same method and filters, for the records after them.

Lists are ordered by when each record took effect, and a page continues after the last record of the
one before. So writes between pages neither repeat nor skip anything:

* every record in the list when the first page is read, and still in it when a later page is read,
  comes exactly once;
* a record saved later comes after those, on a later page;
* a record that leaves the list meanwhile (forgotten, superseded, expired, accepted or rejected) is
  not returned again.

A cursor is opaque: do not build or edit one. It names the last record of the page in its scope, so it
says nothing of what other accounts wrote. A cut, edited or unknown cursor, one naming a record the
scope does not hold, or one made for another scope, account, list or filters is `invalid_params`
(`-32602`).

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
* **Nesting**: a param nested more than 32 levels deep (no param nests beyond 3) is `invalid_params`
  naming it, and a request nested deeper than the JSON reader takes is a `-32700` parse error.
* **Unknown methods** (`-32601`) list every method of the table, extra methods included.

## Lost connections

With PostgreSQL, a write whose database connection is lost after it was sent to be committed may or
may not have been applied. It is answered `-32006 outcome_unknown`, never as refused. The message says
how to find out: for a save, `data.recordId` is the record it would have written
(`memory/get_memory_record` finds it only if it was applied); otherwise read the records it touched.
A write that lost its connection before it was sent to be committed changed nothing, and the server
runs it again at once.

A save or an edit that carries a `requestId` (your key, 1 … 200 characters, e.g. a UUID) is applied at
most once in your account. Sent again with the same `requestId` and params, it answers the record it
wrote (as it is now) and writes nothing. The same `requestId` with other params is refused with
`-32007 request_id_reused`. So retry an unknown outcome, or any answer lost on the way, with the same
`requestId`. A key is remembered as long as the record's history is kept.

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

`memledger serve` checks, in this order, before the body is read:

1. `Host`: 421 unless a loopback name or in `MEMLEDGER_ALLOWED_HOSTS` (not checked with tokens on and
   no allowed hosts configured);
2. `Origin`: 403 when present and not in `MEMLEDGER_ALLOWED_ORIGINS`;
3. `Content-Type: application/json`, else 415;
4. the Bearer token with `MEMLEDGER_AUTH=tokens`: 401;
5. `Content-Length` over `MEMLEDGER_MAX_REQUEST_BYTES` (default 1,000,000): 413, connection closed.

With tokens on, an account that already has `MEMLEDGER_MAX_REQUESTS_PER_ACCOUNT` requests open
(default 100, waiting for their body or being answered) gets 429 for the next, before its body is read.
The body is then read as a stream, and cut off at the limit (413) or after `MEMLEDGER_BODY_TIMEOUT_S`
(default 30; 408). Request headers must arrive within `MEMLEDGER_HEADER_TIMEOUT_S` (default 10), or the
connection is closed. Once the body is in, a request past `MEMLEDGER_MAX_REQUESTS_IN_FLIGHT` requests
being answered at once (default 1000; idle connections and bodies still arriving never count) gets
503. The 429 and 503 carry `Retry-After: 1` and `-32005 busy`.

Refusals are JSON-RPC error objects too (`data.reason`: `misdirected_request`, `forbidden_origin`,
`unsupported_media_type`, `unauthorized`, `request_too_large`, `request_timeout`, `busy`). Everything
else is status 200 (204 for notifications only): an unexpected failure is a `-32603` response, never a
500 that would drop the next pipelined request. CORS headers are sent only to configured origins. How
to issue and rotate tokens: [operations](operations.md#api-tokens).
"""


def example_requests() -> dict[str, dict[str, Any]]:
    """Every documented method's example request, in the reference's order (ids still as ``$NAME``)."""
    return {name: json.loads(request_json(name, doc)) for name, doc in DOCS.items()}


def render(methods: Mapping[str, Any] | None = None, answers: Mapping[str, dict[str, Any]] | None = None) -> str:
    """The whole reference as Markdown (deterministic: the same table gives the same text).

    ``answers`` are the examples' answers (:func:`tools.protocol_doc.examples.example_answers`); run
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
