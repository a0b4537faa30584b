"""A flood of idle sockets does not take ``serve`` down (the short version; tests/bench/bench_flood.py is the long one).

1,100 sockets from one address (loopback) send part of a request head and wait: more than
uvicorn's ``limit_concurrency`` of 1000 once was, which answered every real request 503.
The server starts with the usual soft limit of 1024 open files, so it must also raise its own.

A flood of dribbled bodies by one tenant does not either: its requests wait for their bodies
without holding a place among those being answered, and the tenant has a bounded share.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import anyio
import httpx
from starlette.types import Receive, Scope, Send

from ledger import open_ledger
from tests.worker.flood import (
    ORDINARY,
    Flood,
    answered,
    ordinary_requests,
    raise_own_file_limit,
    serve,
    slow_body_socket,
)
from worker.http.limits import InFlightLimit, Ticket
from worker.http.tokens import TokenStore

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
        if scope["path"] == "/healthz":
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

            async def call(name: str, path: str = "/healthz") -> None:  # a route without a body: a place at its head
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


# Scaled down from 1,100 dribbled bodies against the default 1000 places: twice as many as the places.
IN_FLIGHT = 20
SHARE = 5
SLOW_BODIES = 2 * IN_FLIGHT


def test_one_tenants_dribbled_bodies_do_not_deny_the_others(tmp_path: Path) -> None:
    # Given: two accounts with a token each, and serve with 20 places and a share of 5 per account
    led = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    try:
        tokens = TokenStore.for_ledger(led)
        flooder, other = (tokens.create(account)[1] for account in ("flooder", "other"))
    finally:
        led.close()
    env = {
        "MEMLEDGER_AUTH": "tokens",
        "MEMLEDGER_MAX_REQUESTS_IN_FLIGHT": str(IN_FLIGHT),
        "MEMLEDGER_MAX_REQUESTS_PER_ACCOUNT": str(SHARE),
        "MEMLEDGER_BODY_TIMEOUT_S": "120",  # the dribbled bodies outlast the test
    }
    with serve(tmp_path, **env) as base:
        port = int(base.rsplit(":", 1)[1])
        # When: the flooder sends 40 requests whose bodies never finish ...
        socks = [slow_body_socket(port, flooder) for _ in range(SLOW_BODIES)]
        try:
            refused = answered(socks, at_least=SLOW_BODIES - SHARE, timeout_s=5)
            # ... and then the other account, the server's health and the flooder itself call
            headers = {"Content-Type": "application/json"}
            others = [
                httpx.post(f"{base}/rpc", content=ORDINARY, headers={**headers, "Authorization": f"Bearer {other}"})
                for _ in range(5)
            ]
            health = httpx.get(f"{base}/healthz", timeout=5)
            flooders = httpx.post(
                f"{base}/rpc", content=ORDINARY, headers={**headers, "Authorization": f"Bearer {flooder}"}
            )
        finally:
            for sock in socks:
                sock.close()
        # Then: the other account and the health check are answered; the flooder's share is 5 requests open,
        # every one past it was refused at once with 429 busy
        assert [r.status_code for r in others] == [200] * 5, [r.text for r in others]
        assert all("result" in r.json() for r in others)
        assert health.status_code == 200, health.text
        assert sorted(refused.values()) == [429] * (SLOW_BODIES - SHARE), sorted(refused.values())
        assert flooders.status_code == 429 and flooders.headers["retry-after"] == "1"
        error = flooders.json()["error"]
        assert error["data"]["reason"] == "busy" and f"{SHARE} requests open" in error["message"]
        # And: once the dribbling connections are gone, the flooder's share is free again
        deadline = time.monotonic() + 10
        while (
            status := httpx.post(
                f"{base}/rpc", content=ORDINARY, headers={**headers, "Authorization": f"Bearer {flooder}"}
            ).status_code
        ) == 429 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert status == 200


def test_a_request_waiting_for_its_body_holds_no_place_among_those_answered() -> None:
    limits = InFlightLimit(lambda *_: None, limit=2, per_account=3)  # type: ignore[arg-type]
    # Given: two requests of one account waiting for their bodies (the waiting pool is full)
    waiting = [Ticket(limits), Ticket(limits)]
    assert [t.join("flooder") for t in waiting] == [None, None]
    # Then: both places for requests being answered are still free, for anyone
    answered = [Ticket(limits), Ticket(limits)]
    assert [t.answer() for t in answered] == [None, None] and limits.in_flight == 2
    # And: a third request waiting is refused 503 (the pool bounds the memory bodies take), a fourth of the
    # account 429 past its share of 3 open
    third, fourth = Ticket(limits), Ticket(limits)
    assert getattr(third.join("flooder"), "status", None) == 503
    busy = fourth.join("flooder")
    assert busy is not None and busy.status == 429 and "3 requests open" in busy.message
    # When: everything ends, every counter is back to zero
    for ticket in (*waiting, *answered, third, fourth):
        ticket.release()
    assert (limits.in_flight, limits.waiting, dict(limits.by_account)) == (0, 0, {})
