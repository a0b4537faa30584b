"""``serve`` answers ``/livez`` before the slow parts of its start (the worker, the janitor, the sweep)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from starlette.testclient import TestClient

from worker.runtime import Runtime
from worker.server import create_app


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
