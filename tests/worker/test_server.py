"""The HTTP server: POST /rpc (the record protocol + consolidation/notify_turn), /healthz, /metrics."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import make_url
from starlette.testclient import TestClient

from consolidation import RunState
from ledger import rebuild_search_index
from tests.ledger.test_search_index import break_structure
from tests.worker.conftest import TWO_DUPLICATES, wait_until
from worker.http.server import MAX_REQUEST_BYTES, create_app
from worker.runtime import Runtime

LOCAL = "http://127.0.0.1:8080"
JSON = {"content-type": "application/json"}


def call(client: TestClient, method: str, params: dict[str, Any] | None = None, rid: int = 1) -> dict[str, Any]:
    request: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        request["params"] = params
    response = client.post("/rpc", json=request)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    body: dict[str, Any] = response.json()
    return body


def test_pins_and_turns_over_http_end_in_a_merged_record(app_with_worker: tuple[TestClient, Runtime]) -> None:
    client, runtime = app_with_worker
    for body in TWO_DUPLICATES:
        assert call(client, "memory/save_memory_record", {"body": body})["result"]["status"] == "active"
    # Off by default: the turn is acknowledged, nothing is scheduled
    assert call(client, "consolidation/notify_turn")["result"] == {"scheduled": False, "scopeKey": "account:local"}
    runtime.service.update_settings("account:local", mode="apply", harness="offline", debounce_s=0.2)
    result = call(client, "consolidation/notify_turn", {})["result"]
    assert result["scheduled"] is True and result["turns"] == 1 and result["runId"].startswith("run_")
    assert result["dueAt"].endswith("Z")
    wait_until(lambda: runtime.service.get_run(result["runId"]).state == RunState.SETTLED, timeout_s=5)
    records = call(client, "memory/list_memory_records", {"scopeKey": "account:local"})["result"]["records"]
    assert [r["provenance"] for r in records] == ["model_consolidation"]
    metrics = client.get("/metrics").text
    assert 'memledger_runs_settled_total{outcome="applied"}' in metrics
    assert "memledger_queue_delay_seconds_bucket" in metrics and "dramatiq_messages_total" in metrics


def test_notify_turn_takes_no_params(app_with_worker: tuple[TestClient, Runtime]) -> None:
    client, _ = app_with_worker
    error = call(client, "consolidation/notify_turn", {"scopeKey": "account:other"})["error"]
    assert error["code"] == -32602 and error["data"]["reason"] == "invalid_params"


def test_protocol_errors_and_notifications(app_with_worker: tuple[TestClient, Runtime]) -> None:
    client, _ = app_with_worker
    parse = client.post("/rpc", content=b"{not json", headers=JSON)
    assert parse.status_code == 200 and parse.json()["error"]["code"] == -32700
    binary = client.post("/rpc", content=b"\xff\xfe", headers=JSON)
    assert binary.json()["error"]["code"] == -32700
    unknown = call(client, "memory/drop_everything")["error"]
    assert unknown["code"] == -32601
    notification = client.post("/rpc", json={"jsonrpc": "2.0", "method": "consolidation/notify_turn"})
    assert notification.status_code == 204 and notification.content == b""
    too_big = client.post("/rpc", content=b" " * (MAX_REQUEST_BYTES + 1), headers=JSON)
    assert too_big.status_code == 413 and too_big.json()["error"]["code"] == -32600
    assert client.get("/rpc").status_code == 405


def test_healthz_reports_database_queue_and_background_parts(app_with_worker: tuple[TestClient, Runtime]) -> None:
    client, _ = app_with_worker
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {
        "status": "ok",
        "database": "ok",
        "searchIndex": "ok",
        "queue": "ok",
        "broker": "embedded",
        "worker": True,
        "janitor": True,
    }


def test_healthz_reports_a_damaged_search_index_until_it_is_rebuilt(
    app_with_worker: tuple[TestClient, Runtime],
) -> None:
    client, runtime = app_with_worker
    assert call(client, "memory/save_memory_record", {"body": "the deploy region is eu-west-1"})["result"]
    # Given the index's structure record past what FTS5 can read (what a thousand forgets used to leave)
    break_structure(Path(make_url(runtime.config.database_url).database or ""))
    # Then the probe says the service is degraded (reads still work), and how to repair it
    health = client.get("/healthz")
    assert health.status_code == 200 and health.json()["status"] == "degraded"
    assert "memledger db rebuild-index" in health.json()["searchIndex"]
    # When the index is rebuilt beside the running service, then the probe and the writes are fine again
    rebuild_search_index(runtime.ledger.engine)
    assert client.get("/healthz").json()["searchIndex"] == "ok"
    assert call(client, "memory/save_memory_record", {"body": "a pin after the repair"})["result"]["status"] == "active"


def test_api_node_stays_up_when_redis_is_down(make_runtime: Callable[..., Runtime]) -> None:
    from tests.worker.conftest import free_port

    runtime = make_runtime(redis_url=f"redis://127.0.0.1:{free_port()}/9", janitor_interval_s=60)
    runtime.service.update_settings("account:local", mode="apply", harness="offline")
    with TestClient(create_app(runtime, run_worker=False), base_url=LOCAL) as client:
        health = client.get("/healthz").json()
        assert health["status"] == "degraded" and health["queue"] == "unreachable" and health["worker"] is False
        result = call(client, "consolidation/notify_turn")["result"]
        assert result["scheduled"] is True
        assert runtime.service.get_run(result["runId"]).state == RunState.PENDING
