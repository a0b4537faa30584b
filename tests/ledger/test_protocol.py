"""The record protocol (JSON-RPC 2.0): every method, camelCase and RFC 3339, every error path.

Runs on both backends through the ``led`` fixture. Every refusal is checked to
leave the ledger exactly as it was.
"""

from __future__ import annotations

import json
import logging
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ledger import Ledger, LedgerBusy, LedgerError
from ledger.protocol import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    METHODS,
    PARSE_ERROR,
    REASON_CODES,
    NoParams,
    handle,
    handle_line,
)
from tests.conftest import T0, Clock

RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")
RECORD_KEYS = {
    "id", "scopeKey", "kind", "body", "provenance", "status", "sourceSessionId", "supersedes", "supersededBy",
    "confidenceBps", "rationale", "validFrom", "validTo", "expiresAt", "conflictGroup", "createdAt", "updatedAt",
    "erased",
}  # fmt: skip
INSTANT_KEYS = ("validFrom", "validTo", "expiresAt", "createdAt", "updatedAt")
SCOPE = "account:local"
SECRET_KEY = "sk-ant-api03-" + "Zq7vX2mK9pL4nR8sT1wY6bC3dF5gH0jA" * 3


def call(led: Ledger, method: str, params: Any = None, *, request_id: Any = 1, **kw: Any) -> dict[str, Any]:
    request: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        request["params"] = params
    response = handle(led, request, **kw)
    assert response is not None
    assert response["jsonrpc"] == "2.0"
    return response


def ok(led: Ledger, method: str, params: Any = None, **kw: Any) -> Any:
    response = call(led, method, params, **kw)
    assert "error" not in response, response
    json.dumps(response)  # the result is plain JSON
    return response["result"]


def err(led: Ledger, method: str, params: Any = None, **kw: Any) -> dict[str, Any]:
    response = call(led, method, params, **kw)
    assert "result" not in response, response
    error: dict[str, Any] = response["error"]
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["data"]["reason"], str)
    return error


def check_record(record: dict[str, Any]) -> None:
    assert set(record) == RECORD_KEYS
    for key in INSTANT_KEYS:
        assert record[key] is None or RFC3339.match(record[key]), (key, record[key])


def save(led: Ledger, body: str, **params: Any) -> dict[str, Any]:
    record: dict[str, Any] = ok(led, "memory/save_memory_record", {"body": body, **params})
    check_record(record)
    return record


def state(led: Ledger) -> list[Any]:
    """Everything a refused call must leave untouched: every record of every scope touched here, and budgets."""
    return [led.records(SCOPE), led.records("account:other"), led.budget(SCOPE)]


def rfc(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# ---------------------------------------------------------------------- methods
def test_save_returns_a_camel_case_record_with_rfc3339_instants(led: Ledger) -> None:
    record = save(led, "I prefer metric units")
    assert record["scopeKey"] == SCOPE
    assert record["id"].startswith("mem_")
    assert (record["kind"], record["provenance"], record["status"]) == ("fact", "user_explicit", "active")
    assert record["validFrom"] == record["createdAt"] == rfc(T0)
    assert record["validTo"] is None and record["expiresAt"] is None and record["erased"] is False


def test_save_with_every_optional_param(led: Ledger) -> None:
    record = save(
        led,
        "deploy region is eu-west-1",
        kind="decision",
        expiresAt="2026-06-01T12:00:00.5+02:00",
        conflictGroup="region",
        sourceSessionId="sess-1",
    )
    assert record["kind"] == "decision"
    assert record["expiresAt"] == "2026-06-01T10:00:00.500000Z"
    assert record["conflictGroup"] == "region"
    assert record["sourceSessionId"] == "sess-1"


def test_save_accepts_null_for_optional_params(led: Ledger) -> None:
    record = save(led, "plain", kind=None, expiresAt=None, conflictGroup=None, supersedes=None)
    assert record["kind"] == "fact"


def test_save_with_supersedes_edits(led: Ledger, clock: Clock) -> None:
    first = save(led, "I prefer metric units", kind="preference")
    clock.advance(seconds=5)
    second = save(led, "I prefer metric units, always", supersedes=first["id"])
    assert second["supersedes"] == [first["id"]]
    assert second["kind"] == "preference"
    old = ok(led, "memory/get_memory_record", {"id": first["id"]})
    assert old["status"] == "superseded"
    assert old["supersededBy"] == second["id"]
    assert old["validTo"] == second["validFrom"] == rfc(T0 + timedelta(seconds=5))


def test_list_returns_scope_and_active_records(led: Ledger, clock: Clock) -> None:
    a = save(led, "alpha fact")
    clock.advance(seconds=1)
    b = save(led, "beta fact")
    result = ok(led, "memory/list_memory_records", {"scopeKey": SCOPE})
    assert result["scopeKey"] == SCOPE
    assert [r["id"] for r in result["records"]] == [a["id"], b["id"]]
    for record in result["records"]:
        check_record(record)
    assert ok(led, "memory/list_memory_records", {"scopeKey": "account:other"})["records"] == []


def test_list_as_of_reads_the_past(led: Ledger, clock: Clock) -> None:
    first = save(led, "office in Berlin")
    clock.advance(hours=1)
    second = save(led, "office in Paris", supersedes=first["id"])
    past = ok(led, "memory/list_memory_records_as_of", {"scopeKey": SCOPE, "asOf": "2026-01-01T00:30:00Z"})
    assert past["asOf"] == "2026-01-01T00:30:00.000000Z"
    assert [r["id"] for r in past["records"]] == [first["id"]]
    boundary = ok(led, "memory/list_memory_records_as_of", {"scopeKey": SCOPE, "asOf": second["validFrom"]})
    assert [r["id"] for r in boundary["records"]] == [second["id"]]
    before = ok(led, "memory/list_memory_records_as_of", {"scopeKey": SCOPE, "asOf": "2025-12-31T23:59:59Z"})
    assert before["records"] == []


def test_get_accepts_id_or_record_id(led: Ledger) -> None:
    record = save(led, "gamma")
    assert ok(led, "memory/get_memory_record", {"id": record["id"]}) == record
    assert ok(led, "memory/get_memory_record", {"recordId": record["id"]}) == record


def test_delete_erases_and_reports_the_tombstone(led: Ledger, clock: Clock) -> None:
    record = save(led, "forget this zebra")
    clock.advance(seconds=3)
    gone = ok(led, "memory/delete_memory_record", {"id": record["id"]})
    check_record(gone)
    assert gone["status"] == "deleted" and gone["body"] is None and gone["erased"] is True
    assert gone["validTo"] == rfc(T0 + timedelta(seconds=3))
    assert ok(led, "memory/get_memory_record", {"id": record["id"]})["body"] is None
    assert ok(led, "memory/search_memory_records", {"scopeKey": SCOPE, "query": "zebra"})["records"] == []


def test_history_is_the_chain_oldest_first(led: Ledger, clock: Clock) -> None:
    a = save(led, "v1")
    clock.advance(seconds=1)
    b = save(led, "v2", supersedes=a["id"])
    clock.advance(seconds=1)
    c = save(led, "v3", supersedes=b["id"])
    result = ok(led, "memory/get_memory_record_history", {"id": b["id"]})
    assert result["id"] == b["id"]
    assert [r["id"] for r in result["records"]] == [a["id"], b["id"], c["id"]]
    assert [r["status"] for r in result["records"]] == ["superseded", "superseded", "active"]


def test_search_ranks_and_limits(led: Ledger, clock: Clock) -> None:
    save(led, "deploy region is eu-west-1")
    clock.advance(seconds=1)
    save(led, "deploy with blue green")
    clock.advance(seconds=1)
    save(led, "I like tea")
    result = ok(led, "memory/search_memory_records", {"scopeKey": SCOPE, "query": "deploy region"})
    assert result["query"] == "deploy region"
    assert result["records"][0]["body"] == "deploy region is eu-west-1"
    assert len(result["records"]) == 2
    limited = ok(led, "memory/search_memory_records", {"scopeKey": SCOPE, "query": "deploy", "limit": 1})
    assert len(limited["records"]) == 1
    for query in ('"(*', "AND OR NOT", "", "   "):
        assert isinstance(ok(led, "memory/search_memory_records", {"scopeKey": SCOPE, "query": query})["records"], list)


def test_proposals_accept_and_reject(led: Ledger, clock: Clock) -> None:
    target = save(led, "I drink coffee")
    clock.advance(seconds=1)
    merge = led.propose("I drink coffee, black", kind="preference", confidence_bps=9000, rationale="clearer",
                        supersedes=[target["id"]])  # fmt: skip
    other = led.propose("I like jazz", kind="preference")
    listed = ok(led, "memory/list_proposed_memory_records", {"scopeKey": SCOPE})
    assert listed["scopeKey"] == SCOPE
    assert [r["id"] for r in listed["records"]] == [merge.id, other.id]
    assert listed["records"][0]["confidenceBps"] == 9000 and listed["records"][0]["rationale"] == "clearer"
    assert listed["records"][0]["provenance"] == "model_proposal"
    clock.advance(seconds=1)
    accepted = ok(led, "memory/accept_proposed_memory_record", {"id": merge.id})
    assert accepted["status"] == "active" and accepted["validFrom"] == rfc(T0 + timedelta(seconds=2))
    assert ok(led, "memory/get_memory_record", {"id": target["id"]})["supersededBy"] == merge.id
    rejected = ok(led, "memory/reject_proposed_memory_record", {"recordId": other.id})
    assert rejected["status"] == "rejected"
    assert ok(led, "memory/list_proposed_memory_records", {"scopeKey": SCOPE})["records"] == []


def test_slash_commands(led: Ledger) -> None:
    pinned = ok(led, "memory/handle_slash_command", {"text": "/pin I use vim"})
    assert pinned["handled"] is True and pinned["ok"] is True and "reason" not in pinned
    assert [r["body"] for r in pinned["records"]] == ["I use vim"]
    listed = ok(led, "memory/handle_slash_command", {"text": "/pins"})
    assert pinned["records"][0]["id"] in listed["reply"]
    assert ok(led, "memory/handle_slash_command", {"text": "/memory"}) == {
        "handled": False, "reply": "", "ok": True, "records": [],
    }  # fmt: skip
    missing = ok(led, "memory/handle_slash_command", {"text": "/unpin mem_nope"})
    assert missing["handled"] is True and missing["ok"] is False and missing["reason"] == "not_found"
    forgot = ok(led, "memory/handle_slash_command", {"text": f"/unpin {pinned['records'][0]['id']}"})
    assert forgot["ok"] is True and forgot["records"][0]["status"] == "deleted"


def test_build_packet(led: Ledger) -> None:
    save(led, "always answer in English")
    packet = ok(led, "memory/build_packet", {"scopeKey": SCOPE})
    assert "always answer in English" in packet["text"]
    assert len(packet["records"]) == 1 and packet["omitted"] == [] and packet["maxChars"] == 4000
    tiny = ok(led, "memory/build_packet", {"scopeKey": SCOPE, "maxChars": 10})
    assert tiny["records"] == [] and len(tiny["omitted"]) == 1


def test_operations_use_the_ledger_clock(led: Ledger, clock: Clock) -> None:
    clock.advance(days=3)
    assert save(led, "clocked")["validFrom"] == rfc(T0 + timedelta(days=3))
    error = err(led, "memory/save_memory_record", {"body": "x", "now": "2030-01-01T00:00:00Z"})
    assert error["code"] == INVALID_PARAMS


def test_every_advertised_method_is_in_the_table() -> None:
    assert set(METHODS) == {
        "memory/save_memory_record", "memory/list_memory_records", "memory/list_memory_records_as_of",
        "memory/get_memory_record", "memory/delete_memory_record", "memory/get_memory_record_history",
        "memory/search_memory_records", "memory/list_proposed_memory_records",
        "memory/accept_proposed_memory_record", "memory/reject_proposed_memory_record",
        "memory/handle_slash_command", "memory/build_packet",
        "memory/get_packet_audit", "memory/get_memory_injection", "memory/set_memory_injection",
        "memory/get_memory_capabilities",
    }  # fmt: skip


# ---------------------------------------------------------------------- requests and transports
def test_handle_line_answers_one_compact_line(led: Ledger) -> None:
    line = handle_line(led, json.dumps({"jsonrpc": "2.0", "id": "a", "method": "memory/save_memory_record",
                                        "params": {"body": "line one\nline two"}}))  # fmt: skip
    assert line is not None and "\n" not in line
    response = json.loads(line)
    assert response["id"] == "a" and response["result"]["body"] == "line one\nline two"


@pytest.mark.parametrize(
    "line", ["garbage", "{", '{"jsonrpc": "2.0", "id": 1,', "NaN", '{"x": Infinity}', "", "[" * 100_000]
)
def test_malformed_json_is_a_parse_error(led: Ledger, line: str) -> None:
    before = state(led)
    reply = handle_line(led, line)
    assert reply is not None
    response = json.loads(reply)
    assert response["id"] is None
    assert response["error"]["code"] == PARSE_ERROR
    assert response["error"]["data"] == {"reason": "parse_error"}
    assert state(led) == before


@pytest.mark.parametrize(
    "request_",
    [
        "a string",
        5,
        None,
        [],
        [{"jsonrpc": "2.0", "id": 1, "method": "memory/list_memory_records", "params": {"scopeKey": SCOPE}}],
        {"id": 1, "method": "memory/list_memory_records"},
        {"jsonrpc": "1.0", "id": 1, "method": "memory/list_memory_records"},
        {"jsonrpc": 2.0, "id": 1, "method": "memory/list_memory_records"},
        {"jsonrpc": "2.0", "id": 1},
        {"jsonrpc": "2.0", "id": 1, "method": 5},
        {"jsonrpc": "2.0", "id": 1, "method": "memory/list_memory_records", "params": "account:local"},
        {"jsonrpc": "2.0", "id": 1, "method": "memory/list_memory_records", "extra": True},
    ],
)
def test_invalid_requests(led: Ledger, request_: Any) -> None:
    response = handle(led, request_)
    assert response is not None
    assert response["error"]["code"] == INVALID_REQUEST
    assert response["error"]["data"]["reason"] == "invalid_request"
    assert response["id"] in (None, 1)


@pytest.mark.parametrize("bad_id", [True, 1.5, 2.0, [1], {"a": 1}])
def test_bad_id_types_are_invalid_requests_answered_with_null_id(led: Ledger, bad_id: Any) -> None:
    before = state(led)
    response = handle(led, {"jsonrpc": "2.0", "id": bad_id, "method": "memory/save_memory_record",
                            "params": {"body": "never saved"}})  # fmt: skip
    assert response is not None
    assert response["id"] is None and response["error"]["code"] == INVALID_REQUEST
    assert state(led) == before


@pytest.mark.parametrize("request_id", ["abc", 0, 42, None])
def test_ids_are_echoed(led: Ledger, request_id: Any) -> None:
    response = call(led, "memory/list_memory_records", {"scopeKey": SCOPE}, request_id=request_id)
    assert response["id"] == request_id and "result" in response


def test_notifications_get_no_response_but_run(led: Ledger) -> None:
    note = {"jsonrpc": "2.0", "method": "memory/save_memory_record", "params": {"body": "from a notification"}}
    assert handle(led, note) is None
    assert handle_line(led, json.dumps(note)) is None
    assert [r.body for r in led.list(SCOPE)] == ["from a notification", "from a notification"]
    assert handle(led, {"jsonrpc": "2.0", "method": "memory/nope"}) is None
    assert handle(led, {"jsonrpc": "2.0", "method": "memory/save_memory_record", "params": {"body": ""}}) is None


def test_unknown_method(led: Ledger) -> None:
    error = err(led, "memory/drop_everything", {})
    assert error["code"] == METHOD_NOT_FOUND
    assert error["data"] == {"reason": "method_not_found", "method": "memory/drop_everything"}


# ---------------------------------------------------------------------- params
INVALID_PARAM_CASES: list[tuple[str, Any, str]] = [
    ("memory/save_memory_record", {"body": "x", "scopeKey": SCOPE}, "scopeKey"),
    ("memory/save_memory_record", {"body": "x", "scopeKey": "account:other"}, "scopeKey"),
    ("memory/save_memory_record", {}, "body"),
    ("memory/save_memory_record", None, "body"),
    ("memory/save_memory_record", {"body": 5}, "body"),
    ("memory/save_memory_record", {"body": ["x"]}, "body"),
    ("memory/save_memory_record", {"body": "x", "kind": "opinion"}, "kind"),
    ("memory/save_memory_record", {"body": "x", "kind": 1}, "kind"),
    ("memory/save_memory_record", {"body": "x", "supersedes": ["mem_a"]}, "supersedes"),
    ("memory/save_memory_record", {"body": "x", "expiresAt": "tomorrow"}, "expiresAt"),
    ("memory/save_memory_record", {"body": "x", "expiresAt": "2027-01-01T00:00:00"}, "expiresAt"),
    ("memory/save_memory_record", {"body": "x", "expiresAt": 1767225600}, "expiresAt"),
    ("memory/save_memory_record", {"body": "x", "conflictGroup": 3}, "conflictGroup"),
    ("memory/save_memory_record", {"body": "x", "expires_at": "2027-01-01T00:00:00Z"}, "expires_at"),
    ("memory/save_memory_record", {"body": "x", "provenance": "model_proposal"}, "provenance"),
    ("memory/save_memory_record", ["x"], "params"),
    ("memory/list_memory_records", {}, "scopeKey"),
    ("memory/list_memory_records", None, "scopeKey"),
    ("memory/list_memory_records", {"scopeKey": None}, "scopeKey"),
    ("memory/list_memory_records", {"scopeKey": 7}, "scopeKey"),
    ("memory/list_memory_records", {"scope_key": SCOPE}, "scope_key"),
    ("memory/list_memory_records", {"scopeKey": SCOPE, "status": "proposed"}, "status"),
    ("memory/list_memory_records_as_of", {"scopeKey": SCOPE}, "asOf"),
    ("memory/list_memory_records_as_of", {"scopeKey": SCOPE, "asOf": "2026-13-01T00:00:00Z"}, "asOf"),
    ("memory/get_memory_record", {}, "id"),
    ("memory/get_memory_record", {"id": 12}, "id"),
    ("memory/get_memory_record", {"id": "mem_a", "recordId": "mem_b"}, "recordId"),
    ("memory/delete_memory_record", {"id": None}, "id"),
    ("memory/get_memory_record_history", {"ids": ["x"]}, "ids"),
    ("memory/search_memory_records", {"scopeKey": SCOPE}, "query"),
    ("memory/search_memory_records", {"scopeKey": SCOPE, "query": "x", "limit": "5"}, "limit"),
    ("memory/search_memory_records", {"scopeKey": SCOPE, "query": "x", "limit": True}, "limit"),
    ("memory/search_memory_records", {"scopeKey": SCOPE, "query": "x", "limit": 2.5}, "limit"),
    ("memory/list_proposed_memory_records", {"scopeKey": SCOPE, "limit": 1}, "limit"),
    ("memory/accept_proposed_memory_record", {"id": "x", "now": "2026-01-01T00:00:00Z"}, "now"),
    ("memory/reject_proposed_memory_record", {}, "id"),
    ("memory/handle_slash_command", {"text": None}, "text"),
    ("memory/build_packet", {"scopeKey": SCOPE, "maxChars": 0}, "maxChars"),
]


@pytest.mark.parametrize(("method", "params", "field"), INVALID_PARAM_CASES)
def test_invalid_params_are_refused_and_change_nothing(led: Ledger, method: str, params: Any, field: str) -> None:
    save(led, "existing record")
    before = state(led)
    error = err(led, method, params)
    assert error["code"] == INVALID_PARAMS
    assert error["data"]["reason"] == "invalid_params"
    fields = [e["field"] for e in error["data"].get("errors", [])] + [error["data"].get("field")]
    assert field in fields or field in error["message"]
    assert state(led) == before


def test_scope_key_on_save_names_the_bound_scope(led: Ledger) -> None:
    error = err(led, "memory/save_memory_record", {"body": "x", "scopeKey": "account:other"})
    assert error["data"] == {"reason": "invalid_params", "field": "scopeKey"}
    assert SCOPE in error["message"]
    assert led.records("account:other") == [] and led.records(SCOPE) == []


def test_invalid_params_never_echo_values(led: Ledger) -> None:
    error = err(led, "memory/save_memory_record", {"body": "x", "unexpected": SECRET_KEY})
    assert SECRET_KEY not in json.dumps(error)


# ---------------------------------------------------------------------- ledger errors
def test_body_rejected(led: Ledger) -> None:
    before = state(led)
    for body, why in (("", "empty"), ("   \n\t", "empty"), ("x" * 100_000, "too_long"), (SECRET_KEY, "credential")):
        error = err(led, "memory/save_memory_record", {"body": body})
        assert error["code"] == REASON_CODES["body_rejected"] == -32001
        assert error["data"]["reason"] == "body_rejected" and error["data"]["why"] == why
        assert SECRET_KEY not in json.dumps(error)
    assert state(led) == before


def test_budget_exceeded_changes_nothing(led: Ledger) -> None:
    led.set_budget(SCOPE, 1)
    kept = save(led, "the only one")
    before = state(led)
    error = err(led, "memory/save_memory_record", {"body": "one too many"})
    assert error["code"] == -32002
    assert error["data"] == {
        "reason": "budget_exceeded", "scopeKey": SCOPE, "budget": 1, "active": 1, "proposed": 0, "held": 1,
    }  # fmt: skip
    assert "1 of 1" in error["message"]
    assert state(led) == before
    # An edit at the ceiling is a replacement, not growth.
    assert save(led, "the only one, edited", supersedes=kept["id"])["supersedes"] == [kept["id"]]


@pytest.mark.parametrize(
    "method",
    [
        "memory/get_memory_record",
        "memory/delete_memory_record",
        "memory/get_memory_record_history",
        "memory/accept_proposed_memory_record",
        "memory/reject_proposed_memory_record",
    ],
)
def test_not_found(led: Ledger, method: str) -> None:
    before = state(led)
    error = err(led, method, {"id": "mem_missing"})
    assert error["code"] == -32003
    assert error["data"] == {"reason": "not_found", "recordId": "mem_missing"}
    assert state(led) == before


def test_edit_of_a_missing_record_is_not_found(led: Ledger) -> None:
    error = err(led, "memory/save_memory_record", {"body": "x", "supersedes": "mem_missing"})
    assert error["data"]["reason"] == "not_found"
    assert led.records(SCOPE) == []


def test_invalid_transitions_change_nothing(led: Ledger, clock: Clock) -> None:
    first = save(led, "v1")
    clock.advance(seconds=1)
    second = save(led, "v2", supersedes=first["id"])
    before = state(led)
    for method, params in (
        ("memory/delete_memory_record", {"id": first["id"]}),
        ("memory/save_memory_record", {"body": "v3", "supersedes": first["id"]}),
        ("memory/accept_proposed_memory_record", {"id": second["id"]}),
        ("memory/reject_proposed_memory_record", {"id": second["id"]}),
    ):
        error = err(led, method, params)
        assert error["code"] == -32004
        assert error["data"] == {"reason": "invalid_transition"}
    assert state(led) == before
    deleted = err(led, "memory/delete_memory_record", {"id": first["id"]})
    assert second["id"] in deleted["message"]


def test_ledger_invalid_params_map_to_32602(led: Ledger) -> None:
    before = state(led)
    assert err(led, "memory/list_memory_records", {"scopeKey": "no-colon"})["code"] == INVALID_PARAMS
    assert err(led, "memory/search_memory_records", {"scopeKey": SCOPE, "query": "x", "limit": 0})["code"] == (
        INVALID_PARAMS
    )
    past = err(led, "memory/save_memory_record", {"body": "x", "expiresAt": "2020-01-01T00:00:00Z"})
    assert past["code"] == INVALID_PARAMS and past["data"]["reason"] == "invalid_params"
    assert state(led) == before


def test_busy_and_other_ledger_errors(led: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    def busy(*_a: Any, **_k: Any) -> Any:
        raise LedgerBusy("the ledger database stayed busy; try again in a moment")

    def behind(*_a: Any, **_k: Any) -> Any:
        raise LedgerError("the database schema is not up to date")

    monkeypatch.setattr(led, "list", busy)
    error = err(led, "memory/list_memory_records", {"scopeKey": SCOPE})
    assert (error["code"], error["data"]) == (-32005, {"reason": "busy"})
    monkeypatch.setattr(led, "list", behind)
    error = err(led, "memory/list_memory_records", {"scopeKey": SCOPE})
    assert (error["code"], error["data"]["reason"]) == (-32000, "ledger_error")


def test_unexpected_exceptions_are_internal_errors_without_detail(
    led: Ledger, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def boom(*_a: Any, **_k: Any) -> Any:
        raise RuntimeError("secret-internal-detail at /srv/db.py line 9")

    monkeypatch.setattr(led, "list", boom)
    with caplog.at_level(logging.ERROR, logger="ledger.protocol"):
        response = call(led, "memory/list_memory_records", {"scopeKey": SCOPE}, request_id=9)
    assert response["id"] == 9
    assert response["error"] == {
        "code": INTERNAL_ERROR,
        "message": "internal error",
        "data": {"reason": "internal_error"},
    }
    assert "secret-internal-detail" not in json.dumps(response)
    assert "secret-internal-detail" in caplog.text  # logged server-side


# ---------------------------------------------------------------------- extra methods
def test_extra_methods_extend_the_table(led: Ledger) -> None:
    seen: list[Any] = []

    def notify_turn(ledger: Ledger, params: dict[str, Any]) -> Any:
        NoParams.model_validate(params)
        seen.append(ledger.scope_key)
        return {"scopeKey": ledger.scope_key, "at": datetime(2026, 1, 2, tzinfo=UTC), "records": ledger.list(SCOPE)}

    def clash(_ledger: Ledger, _params: dict[str, Any]) -> Any:
        raise AssertionError("a built-in method must win")

    extra = {"consolidation/notify_turn": notify_turn, "memory/list_memory_records": clash}
    result = ok(led, "consolidation/notify_turn", {}, extra_methods=extra)
    assert result == {"scopeKey": SCOPE, "at": "2026-01-02T00:00:00.000000Z", "records": []}
    assert ok(led, "consolidation/notify_turn", None, extra_methods=extra)["scopeKey"] == SCOPE
    assert seen == [SCOPE, SCOPE]
    assert ok(led, "memory/list_memory_records", {"scopeKey": SCOPE}, extra_methods=extra)["records"] == []
    refused = err(led, "consolidation/notify_turn", {"scopeKey": SCOPE}, extra_methods=extra)
    assert refused["code"] == INVALID_PARAMS
    assert err(led, "consolidation/notify_turn", {})["code"] == METHOD_NOT_FOUND


def test_extra_method_returning_a_non_json_value_is_an_internal_error(led: Ledger) -> None:
    error = err(led, "x/odd", {}, extra_methods={"x/odd": lambda _l, _p: object()})
    assert error["code"] == INTERNAL_ERROR
