"""A flood of idle sockets does not take ``serve`` down (the short version; tests/bench/bench_flood.py is the long one).

1,100 sockets from one address (loopback) send part of a request head and wait: more than
uvicorn's ``limit_concurrency`` of 1000 once was, which answered every real request 503.
The server starts with the usual soft limit of 1024 open files, so it must also raise its own.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import httpx
from starlette.types import Receive, Scope, Send

from tests.worker.flood import Flood, ordinary_requests, raise_own_file_limit, serve
from worker.http.limits import InFlightLimit

FLOOD = 1_100
REQUESTS = 20


def test_ordinary_requests_are_served_through_a_flood_of_idle_sockets(tmp_path: Path) -> None:
    raise_own_file_limit(FLOOD + 200)
    # Given: serve, whose header timeout outlasts the test (the flood stays for the whole of it)
    with serve(tmp_path, MEMLEDGER_HEADER_TIMEOUT_S="120") as base:
        port = int(base.rsplit(":", 1)[1])
        # When: 1,100 sockets hold half a request head each, and 20 ordinary requests follow
        with Flood(port, FLOOD) as flood:
            served = ordinary_requests(base, REQUESTS, timeout_s=3.0)
            still_open = flood.open_count()
    # Then: every request is answered within 2 s, while the flood is still there
    assert still_open == FLOOD, f"the server closed {FLOOD - still_open} idle sockets: the flood was not held"
    assert served.within(2.0) >= 0.95, (served.statuses, [round(s, 3) for s in served.seconds])
    assert served.statuses == [200] * REQUESTS


def test_past_the_in_flight_limit_a_request_gets_503_busy_at_once() -> None:
    release = anyio.Event()
    started = 0

    async def slow(scope: Scope, receive: Receive, send: Send) -> None:
        nonlocal started
        if scope["path"] == "/rpc":
            started += 1
            await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    limited = InFlightLimit(slow, limit=2)
    got: dict[str, httpx.Response] = {}

    async def scenario() -> None:
        transport = httpx.ASGITransport(app=limited)
        async with (
            httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client,
            anyio.create_task_group() as tg,
        ):

            async def call(name: str, path: str = "/rpc") -> None:
                got[name] = await client.post(path, content=b"{}")

            tg.start_soon(call, "first")
            tg.start_soon(call, "second")
            with anyio.fail_after(10):
                while started < 2:
                    await anyio.sleep(0.01)
            await call("third")  # answered while the two are still in flight
            await call("probe", "/livez")  # liveness is never refused: it would get the process killed
            assert limited.in_flight == 2
            release.set()

    anyio.run(scenario)
    assert got["third"].status_code == 503 and got["third"].headers["retry-after"] == "1"
    error = json.loads(got["third"].content)["error"]
    assert error["code"] == -32005 and error["data"]["reason"] == "busy" and "retry" in error["message"]
    assert got["probe"].status_code == 200
    assert got["first"].status_code == got["second"].status_code == 200 and limited.in_flight == 0
