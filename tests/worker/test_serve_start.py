"""``serve`` answers ``/livez`` before the slow parts of its start (the MCP SDK, the worker, the janitor, the sweep)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

import worker.http.server
from worker.http.server import create_app
from worker.runtime import Runtime

ACCEPT = {"Accept": "application/json, text/event-stream"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


def test_livez_answers_while_the_worker_is_still_starting(make_runtime: Callable[..., Runtime]) -> None:
    # Given a runtime whose worker takes long to start (importing the model SDKs, on a loaded machine)
    runtime = make_runtime()
    release = threading.Event()
    events: list[str] = []
    start_worker = runtime.start_worker

    def slow_start_worker(*, threads: int | None = None) -> None:
        release.wait(10)
        events.append("worker started")
        start_worker(threads=threads)

    runtime.start_worker = slow_start_worker  # type: ignore[method-assign]
    # When the server starts
    with TestClient(create_app(runtime, run_worker=True), base_url="http://127.0.0.1") as client:
        # Then /livez answers at once, and /healthz says the worker is not running yet
        assert client.get("/livez").status_code == 200
        events.append("livez answered")
        assert client.get("/healthz").json()["worker"] is False
        release.set()
        starting = runtime._starting
        assert starting is not None
        starting.join(10)
        assert client.get("/healthz").json()["worker"] is True
    assert events == ["livez answered", "worker started"]


def test_creating_the_app_does_not_import_the_mcp_sdk(tmp_path: Path) -> None:
    # Given a fresh process that builds serve's runtime and app, as `memledger serve` does before listening
    code = """
import json, sys
from worker.config import WorkerConfig
from worker.runtime import build_runtime
from worker.http.server import create_app
runtime = build_runtime(WorkerConfig(database_url=sys.argv[1]))
create_app(runtime, run_worker=False)
runtime.close()
print(json.dumps(sorted(name for name in sys.modules if name == "mcp" or name.startswith(("mcp.", "mcp_types")))))
"""
    done = subprocess.run(
        [sys.executable, "-c", code, f"sqlite:///{tmp_path / 'ledger.db'}"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    # Then the MCP SDK is not loaded yet: it loads after the server listens
    assert json.loads(done.stdout.splitlines()[-1]) == []
    from worker.mcp.server import MCP_PATH

    assert worker.http.server.MCP_PATH == MCP_PATH


def test_livez_answers_while_the_mcp_endpoint_loads_and_mcp_waits_for_it(
    make_runtime: Callable[..., Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a server whose MCP endpoint takes long to load (the SDK's imports, on a loaded machine)
    runtime = make_runtime()
    release = threading.Event()
    events: list[str] = []
    make_endpoint = worker.http.server.mcp_endpoint

    def slow_mcp_endpoint(rt: Runtime) -> Any:
        release.wait(10)
        events.append("mcp loaded")
        return make_endpoint(rt)

    monkeypatch.setattr(worker.http.server, "mcp_endpoint", slow_mcp_endpoint)
    with TestClient(create_app(runtime, run_worker=False), base_url="http://127.0.0.1") as client:
        # Then /livez answers at once
        assert client.get("/livez").status_code == 200
        events.append("livez answered")
        release.set()
        # And an MCP request waits for the endpoint, then is answered
        answer = client.post("/mcp", json=INITIALIZE, headers=ACCEPT)
        assert answer.status_code == 200, answer.text
        assert answer.json()["result"]["serverInfo"]["name"] == "memledger"
    assert events == ["livez answered", "mcp loaded"]


def test_mcp_answers_503_when_its_endpoint_cannot_load(
    make_runtime: Callable[..., Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a server whose MCP endpoint fails to load
    def broken(_rt: Runtime) -> Any:
        raise ImportError("no mcp here")

    monkeypatch.setattr(worker.http.server, "mcp_endpoint", broken)
    with TestClient(create_app(make_runtime(), run_worker=False), base_url="http://127.0.0.1") as client:
        # Then /mcp answers 503 and the rest of the server serves on
        answer = client.post("/mcp", json=INITIALIZE, headers=ACCEPT)
        assert answer.status_code == 503 and "unavailable" in answer.text
        assert client.get("/livez").status_code == 200
