"""Operator visibility: /livez, scrape-time gauges from the database, RPC metrics, access logs, /ops."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry, Gauge, make_wsgi_app
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine
from starlette.testclient import TestClient

from ledger import open_ledger
from ledger.store import store_for
from tests.worker.conftest import free_port
from tests.worker.ops_seed import (
    EDIT_BODY,
    EXPIRING_BODY,
    FORGOTTEN_BODY,
    FORGOTTEN_EARLIER_BODY,
    SCOPE,
    seed_scope,
)
from worker.gauges import OTHER_SCOPES
from worker.http.guard import guarded_wsgi, serve_guarded_metrics
from worker.http.server import create_app
from worker.http.tokens import TokenStore
from worker.logging import configure_logging
from worker.runtime import Runtime

LOOPBACK = {"base_url": "http://127.0.0.1:8080", "client": ("127.0.0.1", 50123)}
TOKEN = "op-" + "x" * 30


@pytest.fixture
def runtime(make_runtime: Callable[..., Runtime]) -> Runtime:
    return make_runtime(sweep_interval_s=0, janitor_interval_s=60)


@pytest.fixture
def loopback_client(runtime: Runtime) -> Iterator[TestClient]:
    with TestClient(create_app(runtime, run_worker=False), **LOOPBACK) as client:  # type: ignore[arg-type]
        yield client


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(text: str, name: str, **labels: str) -> float | None:
    return samples(text).get((name, tuple(sorted(labels.items()))))


def rpc(client: TestClient, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    request: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": method}
    if params is not None:
        request["params"] = params
    body: dict[str, Any] = client.post("/rpc", json=request).json()
    return body


# --- liveness ------------------------------------------------------------------------------------


def test_livez_answers_while_the_database_is_down_and_healthz_does_not(
    runtime: Runtime, loopback_client: TestClient
) -> None:
    assert loopback_client.get("/livez").json() == {"status": "alive"}
    # Given the database becomes unreachable (its engine now points at a closed port)
    runtime.ledger.engine.dispose()
    runtime.ledger.engine = create_engine(f"postgresql+psycopg://nobody@127.0.0.1:{free_port()}/none")
    runtime.ledger.store = store_for(runtime.ledger.engine)  # reads go through the store: it must point there too
    # Then readiness fails and liveness does not: an outage must not restart the process
    assert loopback_client.get("/healthz").status_code == 503
    live = loopback_client.get("/livez")
    assert live.status_code == 200 and live.json() == {"status": "alive"}
    # And the scrape still answers, saying the operator gauges could not be read
    assert value(loopback_client.get("/metrics").text, "memledger_ops_scrape_ok") == 0


# --- sweep health --------------------------------------------------------------------------------


def test_a_sweep_from_another_process_shows_in_this_process_metrics(
    runtime: Runtime, loopback_client: TestClient
) -> None:
    text = loopback_client.get("/metrics").text
    assert value(text, "memledger_sweep_last_run_timestamp_seconds") is None  # never swept: nothing to report
    # Given a one-shot sweep (as cron runs it) through a ledger of its own that expires two records
    now = datetime.now(UTC)
    for n in range(2):
        runtime.ledger.save(f"expiring {n}", expires_at=now + timedelta(seconds=1 + n), now=now - timedelta(seconds=5))
    other = open_ledger(runtime.config.database_url)
    try:
        assert other.sweep_expired(now + timedelta(seconds=10)) == 2
    finally:
        other.close()
    # Then this serving process exports it at the next scrape
    text = loopback_client.get("/metrics").text
    finished = value(text, "memledger_sweep_last_run_timestamp_seconds")
    assert finished is not None and abs(finished - datetime.now(UTC).timestamp()) < 60
    assert value(text, "memledger_sweep_last_expired") == 2
    assert value(text, "memledger_sweep_runs_recorded_total") == 1
    assert value(text, "memledger_sweep_last_swept_to_timestamp_seconds") == pytest.approx(
        (now + timedelta(seconds=10)).timestamp(), abs=1e-3
    )
    # And the page shows the same run
    page = loopback_client.get("/ops").text
    assert 'id="sweep-expired" class="num">2<' in page


# --- per-scope gauges ----------------------------------------------------------------------------


def test_scope_gauges_show_spend_budget_backlog_and_mode(runtime: Runtime, loopback_client: TestClient) -> None:
    seed_scope(runtime.ledger, runtime.service)
    runtime.service.update_settings("account:other", mode="propose", harness="offline")
    runtime.service.notify_turn("account:other")  # a pending run: the backlog
    text = loopback_client.get("/metrics").text
    assert value(text, "memledger_scope_consolidation_mode", scope=SCOPE, mode="apply") == 1
    assert value(text, "memledger_scope_consolidation_mode", scope=SCOPE, mode="off") == 0
    assert value(text, "memledger_scope_consolidation_mode", scope="account:other", mode="propose") == 1
    assert value(text, "memledger_scope_month_runs", scope=SCOPE, outcome="applied") == 1
    assert value(text, "memledger_scope_pending_runs", scope="account:other") == 1
    assert value(text, "memledger_pending_runs") == 1
    budget = runtime.service.settings(SCOPE).spend_budget_micro_usd
    assert value(text, "memledger_scope_month_budget_micro_usd", scope=SCOPE) == budget
    assert value(text, "memledger_scope_month_remaining_micro_usd", scope=SCOPE) == budget  # offline costs nothing
    assert value(text, "memledger_scope_records", scope=SCOPE, status="active") == 1
    assert value(text, "memledger_scopes", mode="apply") == 1
    assert value(text, "memledger_ops_scrape_ok") == 1


def test_scope_labels_are_bounded(make_runtime: Callable[..., Runtime]) -> None:
    runtime = make_runtime(sweep_interval_s=0, janitor_interval_s=60, ops_metrics_max_scopes=2)
    for n in range(5):
        runtime.service.update_settings(f"account:s{n}", mode="propose", harness="offline")
    with TestClient(create_app(runtime, run_worker=False), **LOOPBACK) as client:  # type: ignore[arg-type]
        text = client.get("/metrics").text
    scopes = {dict(labels).get("scope") for (name, labels) in samples(text) if name == "memledger_scope_pending_runs"}
    assert len(scopes) == 3 and OTHER_SCOPES in scopes
    assert value(text, "memledger_scope_month_budget_micro_usd", scope=OTHER_SCOPES) == 3 * 5_000_000
    assert value(text, "memledger_scopes", mode="propose") == 5  # the totals still count every scope


# --- RPC metrics and access logs -----------------------------------------------------------------


def test_rpc_metrics_count_time_and_give_error_reasons(loopback_client: TestClient) -> None:
    # The series are process-wide (other tests of this process count too): compare before and after.
    save, get = "memory/save_memory_record", "memory/get_memory_record"
    wanted = [
        ("memledger_rpc_requests_total", {"method": save, "outcome": "ok"}),
        ("memledger_rpc_request_duration_seconds_count", {"method": save}),
        ("memledger_rpc_errors_total", {"method": get, "reason": "not_found"}),
        ("memledger_rpc_errors_total", {"method": "unknown", "reason": "method_not_found"}),
        ("memledger_rpc_errors_total", {"method": "unparsed", "reason": "parse_error"}),
    ]

    def counts() -> list[float]:
        text = loopback_client.get("/metrics").text
        return [value(text, name, **labels) or 0.0 for name, labels in wanted]

    before = counts()
    assert "result" in rpc(loopback_client, save, {"body": "I prefer tea"})
    assert rpc(loopback_client, get, {"id": "mem_nope"})["error"]["data"]["reason"] == "not_found"
    assert rpc(loopback_client, "memory/made_up_method_x")["error"]["data"]["reason"] == "method_not_found"
    loopback_client.post("/rpc", content=b"{not json", headers={"content-type": "application/json"})
    after = counts()
    assert [a - b for a, b in zip(after, before, strict=True)] == [1, 1, 1, 1, 1]
    text = loopback_client.get("/metrics").text
    # A made-up method name never becomes a label of its own
    assert "made_up_method_x" not in text
    # A notification to a name the server does not serve is not answered, and not labelled either
    loopback_client.post("/rpc", json={"jsonrpc": "2.0", "method": "memory/made_up_notification"})
    assert "made_up_notification" not in loopback_client.get("/metrics").text


def test_access_log_has_method_status_latency_account_and_never_a_body(loopback_client: TestClient) -> None:
    stream = io.StringIO()
    configure_logging(fmt="json", level="INFO", stream=stream)
    try:
        secret_body = "my passport number is X1234567"
        rpc(loopback_client, "memory/save_memory_record", {"body": secret_body})
        rpc(loopback_client, "memory/search_memory_records", {"scopeKey": SCOPE, "query": "passport"})
        loopback_client.get("/livez")
    finally:
        logging.getLogger().handlers.clear()
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    access = [line for line in lines if line["logger"] == "memledger.access"]
    assert [(a["rpc_method"], a["status"], a["rpc_outcome"]) for a in access if a["path"] == "/rpc"] == [
        ("memory/save_memory_record", 200, "ok"),
        ("memory/search_memory_records", 200, "ok"),
    ]
    assert all(a["account"] == "local" and a["latency_ms"] >= 0 and a["http_method"] for a in access)
    assert any(a["path"] == "/livez" and a["status"] == 200 for a in access)
    assert "passport" not in stream.getvalue()


def test_a_path_cannot_forge_a_console_log_line_or_reach_the_terminal(loopback_client: TestClient) -> None:
    # Given the console log (for people, in a terminal)
    stream = io.StringIO()
    configure_logging(fmt="console", level="INFO", stream=stream)
    try:
        # When a client asks for a path whose escapes decode to an escape sequence, a line break and a bell
        assert loopback_client.get("/%1b%5b31mRED%0aFAKE-LINE%07").status_code == 404
    finally:
        logging.getLogger().handlers.clear()
    # Then its access line is one line, showing the path as it was sent, with no control character at all
    lines = stream.getvalue().splitlines()
    access = [line for line in lines if "memledger.access" in line]
    assert len(access) == 1 and "GET /%1b%5b31mRED%0aFAKE-LINE%07 404" in access[0], lines
    assert not any(line.startswith("FAKE-LINE") for line in lines)
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", stream.getvalue()), stream.getvalue()


# --- /ops: who may see it ------------------------------------------------------------------------


def test_ops_is_loopback_only_without_a_token(runtime: Runtime, loopback_client: TestClient) -> None:
    assert loopback_client.get("/ops").status_code == 200
    # A DNS-rebinding page: loopback client, foreign Host
    assert loopback_client.get("/ops", headers={"host": "evil.example:8080"}).status_code == 403
    # A page's script (it sends an Origin), even from an origin the API allows
    assert loopback_client.get("/ops", headers={"origin": "http://127.0.0.1:8080"}).status_code == 403
    with TestClient(create_app(runtime, run_worker=False), base_url="http://10.0.0.5:8080") as remote:
        refused = remote.get("/ops")
        assert refused.status_code == 403 and "MEMLEDGER_OPERATOR_TOKEN" in refused.text
        assert remote.get("/ops", headers={"authorization": f"Bearer {TOKEN}"}).status_code == 403  # none configured
    # Read-only: no other method
    assert loopback_client.post("/ops").status_code == 405


def test_ops_takes_the_operator_token_from_anywhere(make_runtime: Callable[..., Runtime]) -> None:
    runtime = make_runtime(sweep_interval_s=0, janitor_interval_s=60, operator_token=TOKEN)
    with TestClient(create_app(runtime, run_worker=False), base_url="http://10.0.0.5:8080") as remote:
        missing = remote.get("/ops")
        assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
        assert remote.get("/ops", headers={"authorization": "Bearer wrong-token-wrong-token"}).status_code == 401
        page = remote.get("/ops", headers={"authorization": f"Bearer {TOKEN}"})
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert (
            page.headers["cache-control"] == "no-store"
            and "frame-ancestors 'none'" in page.headers["content-security-policy"]
        )


# --- /metrics: the operator's, like /ops -------------------------------------------------------


def test_metrics_on_a_tokens_on_server_are_loopback_only_without_an_operator_token(
    make_runtime: Callable[..., Runtime],
) -> None:
    # Given a multi-account server (tokens on, no operator token) with a scope that has spend settings
    runtime = make_runtime(sweep_interval_s=0, janitor_interval_s=60, auth="tokens")
    runtime.service.update_settings("account:alice", mode="propose", harness="offline")
    _, alice_token = TokenStore.for_ledger(runtime.ledger).create("alice")
    # Then a DNS-rebinding page (loopback client, foreign Host) and any remote client are refused,
    # with or without an account's API token, and nothing of any account is in the answer
    with TestClient(create_app(runtime, run_worker=False), **LOOPBACK) as local:  # type: ignore[arg-type]
        rebinding = local.get("/metrics", headers={"host": "evil.example"})
        assert rebinding.status_code == 403 and "MEMLEDGER_OPERATOR_TOKEN" in rebinding.text
        assert "alice" not in rebinding.text
        # A script of a web page open in the operator's browser sends an Origin: it reads nothing either
        scripted = local.get("/metrics", headers={"origin": "https://chat.example.com"})
        assert scripted.status_code == 403 and "alice" not in scripted.text
        # ... while the operator on the machine itself reads every scope
        scraped = local.get("/metrics")
        assert scraped.status_code == 200 and 'scope="account:alice"' in scraped.text
    with TestClient(create_app(runtime, run_worker=False), base_url="http://evil.example") as remote:
        for headers in ({}, {"authorization": f"Bearer {alice_token}"}):
            refused = remote.get("/metrics", headers=headers)
            assert refused.status_code == 403 and "alice" not in refused.text, headers


def test_metrics_take_the_operator_token_from_anywhere(make_runtime: Callable[..., Runtime]) -> None:
    runtime = make_runtime(sweep_interval_s=0, janitor_interval_s=60, auth="tokens", operator_token=TOKEN)
    runtime.service.update_settings("account:alice", mode="propose", harness="offline")
    _, alice_token = TokenStore.for_ledger(runtime.ledger).create("alice")
    with TestClient(create_app(runtime, run_worker=False), base_url="http://evil.example") as remote:
        for headers in (
            {},
            {"authorization": "Bearer wrong-token-wrong-token"},
            {"authorization": f"Bearer {alice_token}"},
        ):
            refused = remote.get("/metrics", headers=headers)
            assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer", headers
            assert "alice" not in refused.text
        scraped = remote.get("/metrics", headers={"authorization": f"Bearer {TOKEN}"})
        assert scraped.status_code == 200 and 'scope="account:alice"' in scraped.text


def test_a_workers_metrics_port_has_the_same_guard() -> None:
    # Given the worker's metrics server on a real socket, with a gauge naming a scope
    registry = CollectorRegistry()
    Gauge("memledger_scope_pending_runs", "pending", ["scope"], registry=registry).labels(scope="account:alice").set(1)
    port = free_port()
    server = serve_guarded_metrics(port, registry, None, addr="127.0.0.1")
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        # Then loopback with a loopback Host reads it; a rebinding page's Host is refused
        assert 'scope="account:alice"' in httpx.get(url, timeout=5).text
        rebinding = httpx.get(url, headers={"host": "evil.example"}, timeout=5)
        assert rebinding.status_code == 403 and "alice" not in rebinding.text
    finally:
        server.shutdown()
        server.server_close()
    # ... and a remote client needs the operator token (checked on the WSGI app itself)
    app = guarded_wsgi(make_wsgi_app(registry), TOKEN, what="metrics", path="/metrics")
    for auth, status in (("", "401"), ("Bearer wrong-token-wrong-token", "401"), (f"Bearer {TOKEN}", "200")):
        environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics", "QUERY_STRING": "", "REMOTE_ADDR": "10.0.0.5"}
        started, body = _call_wsgi(app, environ | {"HTTP_HOST": "worker:9191", "HTTP_AUTHORIZATION": auth})
        assert started.startswith(status) and (b"account:alice" in body) == (status == "200"), auth


def _call_wsgi(app: Any, environ: dict[str, Any]) -> tuple[str, bytes]:
    started: list[str] = []
    body = b"".join(app(environ, lambda status_line, _headers, *_: started.append(status_line)))
    return started[0], body


def test_ops_refuses_a_bad_scope(loopback_client: TestClient) -> None:
    answer = loopback_client.get("/ops", params={"scope": "no scope"})
    assert answer.status_code == 400 and "account:local" in answer.text


# --- /ops: what it shows -------------------------------------------------------------------------


def _bars(html: str) -> list[dict[str, str]]:
    return [dict(re.findall(r'(data-[a-z]+)="([^"]*)"', tag)) for tag in re.findall(r"<rect [^>]*>", html)]


def test_ops_page_shows_scopes_runs_and_the_timeline_without_forgotten_bodies(
    runtime: Runtime, loopback_client: TestClient
) -> None:
    seeded = seed_scope(runtime.ledger, runtime.service)
    html = loopback_client.get("/ops").text
    assert f'data-scope="{SCOPE}"' in html and f'data-run="{seeded.run_id}"' in html
    bars = {bar["data-id"]: bar for bar in _bars(html) if "data-id" in bar}
    assert set(bars) == {seeded.original, seeded.edit, seeded.expiring, seeded.forgotten_first, seeded.forgotten}
    assert bars[seeded.original]["data-status"] == "superseded" and bars[seeded.edit]["data-status"] == "active"
    assert bars[seeded.original]["data-to"] == bars[seeded.edit]["data-from"]  # the edit closes it exactly
    assert bars[seeded.original]["data-lane"] == bars[seeded.edit]["data-lane"]  # one chain, one line
    assert bars[seeded.expiring]["data-status"] == "expired" and bars[seeded.edit]["data-to"] == ""
    assert bars[seeded.forgotten]["data-status"] == "deleted"
    assert f'data-from="{seeded.original}" data-to="{seeded.edit}"' in html  # the supersession link
    # Bodies: shown for the bound account's own scope, never for what was forgotten
    assert EDIT_BODY in html and EXPIRING_BODY in html
    assert FORGOTTEN_BODY not in html and FORGOTTEN_EARLIER_BODY not in html


def test_ops_shows_no_bodies_for_another_accounts_scope(runtime: Runtime, loopback_client: TestClient) -> None:
    other = open_ledger(runtime.config.database_url, account="bob")
    try:
        record = other.save("bob's private note about lunch")
    finally:
        other.close()
    html = loopback_client.get("/ops", params={"scope": "account:bob"}).text
    assert f'data-id="{record.id}"' in html and "private note" not in html


# --- memledger status ----------------------------------------------------------------------------


def test_status_prints_what_the_page_and_the_gauges_show(runtime: Runtime, loopback_client: TestClient) -> None:
    from typer.testing import CliRunner

    from worker.cli import app

    seeded = seed_scope(runtime.ledger, runtime.service)
    url = runtime.config.database_url
    runner = CliRunner()
    shown = runner.invoke(app, ["status", "--json", "--database-url", url])
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.stdout)
    (scope,) = data["scopes"]
    assert scope["scopeKey"] == SCOPE and scope["mode"] == "apply" and scope["runsByOutcome"] == {"applied": 1}
    assert scope["remainingMicroUsd"] == scope["spendBudgetMicroUsd"] - scope["monthSpendMicroUsd"]
    assert [run["id"] for run in data["runs"]] == [seeded.run_id]
    assert data["sweep"]["lastExpired"] == 1 and data["sweep"]["runs"] == 1
    assert data["backlog"] == {"pending": 0, "running": 0}
    # The same figures as the gauges of a serving process
    text = loopback_client.get("/metrics").text
    assert value(text, "memledger_scope_month_runs", scope=SCOPE, outcome="applied") == 1
    assert value(text, "memledger_sweep_last_expired") == data["sweep"]["lastExpired"]
    # And as a table
    table = runner.invoke(app, ["status", "--database-url", url])
    assert table.exit_code == 0 and SCOPE in table.stdout and seeded.run_id in table.stdout
    assert "Sweep: last finished" in table.stdout and "apply" in table.stdout
    assert FORGOTTEN_BODY not in table.stdout and EDIT_BODY not in table.stdout  # status never shows a body


def test_status_filters_by_scope_and_refuses_a_bad_one(runtime: Runtime) -> None:
    from typer.testing import CliRunner

    from worker.cli import app

    seed_scope(runtime.ledger, runtime.service)
    runtime.service.update_settings("account:other", mode="propose", harness="offline")
    url = runtime.config.database_url
    runner = CliRunner()
    data = json.loads(
        runner.invoke(app, ["status", "--json", "--scope", "account:other", "--database-url", url]).stdout
    )
    assert [s["scopeKey"] for s in data["scopes"]] == ["account:other"] and data["runs"] == []
    refused = runner.invoke(app, ["status", "--scope", "no scope", "--database-url", url])
    assert refused.exit_code == 2 and "invalid scope key" in refused.output


def test_refusals_by_reason_show_per_run_per_scope_and_in_status(runtime: Runtime, loopback_client: TestClient) -> None:
    # Given a propose-mode run whose proposal does not fit the scope's budget (the gate refuses it)
    led, service = runtime.ledger, runtime.service
    for body in ("I prefer metric units", "i prefer  metric units.", "My dog is named Rex"):
        led.save(body)
    led.set_budget(SCOPE, 3)
    service.update_settings(SCOPE, mode="propose", harness="offline", debounce_s=0)
    service.notify_turn(SCOPE)
    [run] = service.run_due()
    assert run.refusals == {"budget_exceeded": 1}
    # Then the page shows the reason on the run's row and in the scope's month
    html = loopback_client.get("/ops").text
    row = html[html.index(f'data-run="{run.id}"') :]
    assert 'class="refusals">budget_exceeded 1<' in row[: row.index("</tr>")]
    scope_row = html[html.index(f'data-scope="{SCOPE}"') :]
    assert "budget_exceeded 1" in scope_row[: scope_row.index("</tr>")]
    # And so does memledger status --json
    from typer.testing import CliRunner

    from worker.cli import app

    data = json.loads(
        CliRunner().invoke(app, ["status", "--json", "--database-url", runtime.config.database_url]).stdout
    )
    assert data["scopes"][0]["refusals"] == {"budget_exceeded": 1}
    assert data["runs"][0]["refusals"] == {"budget_exceeded": 1}


def test_a_propose_mode_run_shows_its_proposals_apart_from_what_it_applied(
    runtime: Runtime, loopback_client: TestClient
) -> None:
    # Given a propose-mode run that turned one merge into a proposal (nothing in the ledger changed)
    led, service = runtime.ledger, runtime.service
    for body in ("I prefer metric units", "i prefer  metric units."):
        led.save(body)
    service.update_settings(SCOPE, mode="propose", harness="offline", debounce_s=0)
    service.notify_turn(SCOPE)
    [run] = service.run_due()
    assert (run.ops_proposed, run.ops_applied, run.proposals_written, run.ops_refused) == (1, 0, 1, 0)
    # Then /ops reads "0/1/0 applied/proposals/refused", and `memledger status --json` the same
    html = loopback_client.get("/ops").text
    assert "<th>Ops applied / proposals / refused</th>" in html
    row = html[html.index(f'data-run="{run.id}"') :]
    assert '<td class="num">0/1/0</td>' in row[: row.index("</tr>")]
    from typer.testing import CliRunner

    from worker.cli import app

    status = CliRunner().invoke(app, ["status", "--json", "--database-url", runtime.config.database_url])
    [shown] = json.loads(status.stdout)["runs"]
    assert (shown["opsApplied"], shown["proposalsWritten"], shown["opsRefused"]) == (0, 1, 0)
