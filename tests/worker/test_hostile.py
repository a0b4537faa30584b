"""Hostile clients against a real ``memledger serve`` (uvicorn) and ``memledger rpc``.

Hypothesis generates JSON-RPC traffic full of lone surrogates, control characters, odd
instants, wrong types, unknown params, batches and garbage. Every reply must be a
well-formed JSON-RPC response (or a batch of them), never a 5xx or a dropped connection;
afterwards the SQLite file passes ``integrity_check`` and the ledger's invariants hold.
A few hundred requests run in ``make test``; thousands behind ``@pytest.mark.soak``.

Raw sockets check what a client library would hide: pipelined requests after a former
internal error, header and body read timeouts, and a chunked body cut off at the limit.
"""

from __future__ import annotations

import http.client
import json
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger import Status, open_ledger
from ledger.protocol import METHODS
from tests.hygiene import popen
from tests.worker.conftest import MEMLEDGER, Proc, free_port, memledger_env, start_process, wait_until

SCOPE = "account:local"
NASTY = [
    "\ud800", "\udfff", "\udbff\udc00", "\x00", "\x1b[31m", "\x07", "\x7f", "\x85", "\x9b", "\u200b", "\u2028",
    "\ufeff", "\n", "\t", "\r", "20300101T000000Z", "2030-W01-1T00:00:00Z", "2030-001T00:00:00Z",
    "2030-01-01T00:00:00.1234567Z", "2030-01-01T00:00:00Z", "2030-02-30T00:00:00Z", "9999-12-31T23:59:59-05:00",
    "0001-01-01T00:00:00+01:00", SCOPE, "account:other", "account:", "mem_", "mem_000000000000000000000000",
    "'", '"', "*", "NEAR(", "AND OR NOT", "{", "]", "%s", "${x}", "/pin ", "/unpin ", "/pins",
    "sk-ant-api03-" + "Zq7vX2mK9pL4nR8sT1wY6bC3dF5gH0jA" * 2, "password=hunter2!", "é", "😀",
    "\uff46\uff55\uff4c\uff4c",
]  # fmt: skip
WIRE_NAMES = [
    "body", "kind", "supersedes", "expiresAt", "conflictGroup", "sourceSessionId", "scopeKey", "asOf", "id",
    "recordId", "query", "limit", "text", "maxChars", "mode", "debounceS", "maxRecords", "allowRemoval", "now",
]  # fmt: skip
EXTRA = ["consolidation/notify_turn", "memory/get_consolidation_settings", "memory/update_consolidation_settings"]

texts = st.lists(st.one_of(st.sampled_from(NASTY), st.text(max_size=8)), max_size=5).map("".join)
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True), texts
)
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3), max_leaves=6
)
params = st.one_of(st.dictionaries(st.sampled_from(WIRE_NAMES) | texts, values, max_size=5), values)
requests = st.fixed_dictionaries(
    {"jsonrpc": st.just("2.0") | values, "method": st.sampled_from([*METHODS, *EXTRA]) | texts},
    optional={"id": st.integers(-(2**63), 2**63) | texts | values, "params": params, "extra": values},
)
messages = st.one_of(requests, requests, st.lists(requests, max_size=4), values)


def encode(message: Any) -> bytes:
    """The message as a client would send it; surrogates travel as JSON escapes."""
    return json.dumps(message).encode("ascii")


def check_response(obj: Any) -> None:
    """One well-formed JSON-RPC 2.0 response object."""
    assert isinstance(obj, dict) and obj.get("jsonrpc") == "2.0", obj
    assert "id" in obj and (obj["id"] is None or isinstance(obj["id"], str | int)), obj
    assert ("result" in obj) != ("error" in obj), obj
    if "error" in obj:
        error = obj["error"]
        assert isinstance(error["code"], int) and isinstance(error["message"], str) and error["message"]
        assert isinstance(error["data"]["reason"], str)
        assert error["code"] != -32603, obj  # nothing a client sends is an internal error
        assert len(error["message"]) < 1200, len(error["message"])


def check_answer(payload: Any) -> None:
    if isinstance(payload, list):
        assert payload, "an empty batch answer is never sent"
        for item in payload:
            check_response(item)
    else:
        check_response(payload)


# ---------------------------------------------------------------------- a real server
@dataclass
class Served:
    proc: Proc
    port: int
    db: Path

    def connect(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)


@pytest.fixture(scope="module")
def server_of_the_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One ``memledger serve`` for every test here: none needs an empty ledger (the invariants hold on any), and
    starting a server, and stopping it once its worker has started, was most of what each test took."""
    directory = tmp_path_factory.mktemp("served")
    port = free_port()
    env = {
        **memledger_env(directory),
        "MEMLEDGER_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S),
        "MEMLEDGER_BODY_TIMEOUT_S": "1",
        "MEMLEDGER_MAX_REQUEST_BYTES": "65536",
        "MEMLEDGER_SWEEP_INTERVAL_S": "0",
    }
    proc = start_process("serve", ["memledger", "serve", "--port", str(port)], env, directory)
    try:

        def healthy() -> bool:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return True
            except OSError:
                return proc.popen.poll() is not None

        wait_until(healthy, timeout_s=30)
        assert proc.popen.poll() is None, proc.text()
        yield Served(proc, port, directory / "ledger.db")
        assert proc.terminate() == 0, proc.text()[-3000:]
    finally:
        proc.kill()


@pytest.fixture
def served(server_of_the_module: Served, request: pytest.FixtureRequest) -> Iterator[Served]:
    """The module's server, which must still be serving after each test (its log is shown when one fails)."""
    yield server_of_the_module
    proc = server_of_the_module.proc
    if getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed:
        sys.stderr.write(f"\n----- serve (pid {proc.pid}) -----\n{proc.text()[-6000:]}\n")
    assert proc.popen.poll() is None, f"the server stopped during this test: {proc.text()[-3000:]}"


def post(conn: http.client.HTTPConnection, body: bytes) -> tuple[int, bytes, str | None]:
    conn.request("POST", "/rpc", body=body, headers={"content-type": "application/json"})
    response = conn.getresponse()
    return response.status, response.read(), response.getheader("connection")


def check_invariants(db: Path) -> None:
    with sqlite3.connect(db) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert raw.execute("PRAGMA foreign_key_check").fetchall() == []
    led = open_ledger(f"sqlite:///{db}")
    try:
        scopes = {r[0] for r in led.engine.connect().exec_driver_sql("SELECT DISTINCT scope_key FROM memory_records")}
        assert scopes <= {SCOPE}, scopes  # nothing reached another account
        records = {r.id: r for r in led.records(SCOPE)}
        active = [r for r in records.values() if r.status == Status.ACTIVE]
        groups = [r.conflict_group for r in active if r.conflict_group is not None]
        assert len(groups) == len(set(groups))
        for r in records.values():
            assert r.body is None or not any(c in r.body for c in "\x00\x1b\x07\x7f\x85")
            if r.superseded_by is not None:
                assert r.status == Status.SUPERSEDED and records[r.superseded_by].valid_from == r.valid_to
        assert sorted(r.id for r in led.list(SCOPE)) == sorted(
            r.id for r in active if r.expires_at is None or r.expires_at > led.now()
        )
    finally:
        led.close()


HEADER_TIMEOUT_S = 1.0  # the module's server closes a connection idle this long after its last answer
_CLOSED_WHILE_IDLE = (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected)


class KeptAlive:
    """One keep-alive connection to the server, opened again (as any HTTP client does) only when the server
    closed it for sitting idle past its header timeout, which a slow example can take on a loaded machine.
    A connection closed sooner after an answer is the server dropping a client, and fails the test."""

    def __init__(self, served: Served) -> None:
        self.served = served
        self.conn = served.connect()
        self.answered_at = time.monotonic()

    def post(self, body: bytes) -> tuple[int, bytes, str | None]:
        try:
            answer = post(self.conn, body)
        except _CLOSED_WHILE_IDLE:
            if time.monotonic() - self.answered_at < HEADER_TIMEOUT_S:
                raise
            self.conn.close()
            self.conn = self.served.connect()
            answer = post(self.conn, body)
        self.answered_at = time.monotonic()
        return answer


def _hostile_http(served: Served, examples: int) -> None:
    client = KeptAlive(served)
    seen = {"answers": 0}

    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(messages)
    def one(message: Any) -> None:
        status, body, connection = client.post(encode(message))
        assert status in (200, 204), (status, body[:300])
        assert connection != "close"
        if status == 200:
            check_answer(json.loads(body))
            seen["answers"] += 1

    one()
    client.conn.close()
    assert seen["answers"] > examples // 2
    check_invariants(served.db)


def test_hostile_clients_over_http(served: Served) -> None:
    _hostile_http(served, 300)


@pytest.mark.soak
def test_hostile_clients_over_http_soak(served: Served) -> None:
    _hostile_http(served, 5000)


def _hostile_stdio(tmp_path: Path, base_env: dict[str, str], examples: int) -> None:
    env = {**base_env, "MEMLEDGER_DATABASE_URL": f"sqlite:///{tmp_path / 'stdio.db'}"}
    with popen(
        [MEMLEDGER, "rpc"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        counter = {"n": 0}

        @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(messages)
        def one(message: Any) -> None:
            counter["n"] += 1
            ping = f"ping-{counter['n']}"
            marker = {"jsonrpc": "2.0", "id": ping, "method": "memory/list_memory_records",
                      "params": {"scopeKey": SCOPE}}  # fmt: skip
            proc.stdin.write(encode(message) + b"\n" + encode(marker) + b"\n")  # type: ignore[union-attr]
            proc.stdin.flush()  # type: ignore[union-attr]
            while True:
                line = proc.stdout.readline()  # type: ignore[union-attr]
                assert line, f"memledger rpc stopped answering: {proc.stderr.read()[-2000:]!r}"  # type: ignore[union-attr]
                answer = json.loads(line)
                check_answer(answer)
                if isinstance(answer, dict) and answer["id"] == ping:
                    assert "result" in answer
                    break

        one()
        proc.stdin.close()
        assert proc.wait(30) == 0
        assert b"Traceback" not in (proc.stderr.read() if proc.stderr else b"")
    check_invariants(tmp_path / "stdio.db")


def test_hostile_clients_over_stdio(tmp_path: Path, base_env: dict[str, str]) -> None:
    _hostile_stdio(tmp_path, base_env, 200)


@pytest.mark.soak
def test_hostile_clients_over_stdio_soak(tmp_path: Path, base_env: dict[str, str]) -> None:
    _hostile_stdio(tmp_path, base_env, 5000)


# ---------------------------------------------------------------------- what only raw sockets show
def _raw(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    return sock


def _request(body: bytes, *, extra: str = "") -> bytes:
    head = (
        f"POST /rpc HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{extra}\r\n"
    )
    return head.encode() + body


def _read_responses(sock: socket.socket, count: int) -> list[tuple[int, Any]]:
    """Read ``count`` HTTP responses (Content-Length framed) from ``sock``."""
    buffer = b""
    out: list[tuple[int, Any]] = []
    while len(out) < count:
        while b"\r\n\r\n" not in buffer:
            chunk = sock.recv(65536)
            assert chunk, f"connection closed after {len(out)} responses"
            buffer += chunk
        head, buffer = buffer.split(b"\r\n\r\n", 1)
        lines = head.decode().split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
        length = int(headers.get("content-length", "0"))
        while len(buffer) < length:
            buffer += sock.recv(65536)
        body, buffer = buffer[:length], buffer[length:]
        out.append((status, json.loads(body) if body else None))
    return out


def test_pipelined_requests_are_all_answered(served: Served) -> None:
    # A lone surrogate in a body was an HTTP 500 that dropped the next pipelined request.
    surrogate = b'{"jsonrpc":"2.0","id":1,"method":"memory/save_memory_record","params":{"body":"x\\ud800"}}'
    fine = b'{"jsonrpc":"2.0","id":2,"method":"memory/save_memory_record","params":{"body":"pipelined"}}'
    garbage = b'{"jsonrpc":"2.0","id":"\\udfff","method":"\\ud800"}'
    with _raw(served.port) as sock:
        sock.sendall(_request(surrogate) + _request(garbage) + _request(fine))
        answers = _read_responses(sock, 3)
    assert [status for status, _ in answers] == [200, 200, 200]
    assert answers[0][1]["error"]["data"]["field"] == "body"
    assert answers[1][1]["error"]["code"] == -32600 and answers[1][1]["id"] is None
    assert answers[2][1]["result"]["body"] == "pipelined"


def test_slow_headers_time_out(served: Served) -> None:
    sockets = [_raw(served.port) for _ in range(5)]
    for sock in sockets:
        sock.sendall(b"POST /rpc HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the rest
    started = time.monotonic()
    for sock in sockets:
        sock.settimeout(10)
        assert sock.recv(1024) == b""  # closed by the server
        sock.close()
    assert time.monotonic() - started < 5


def test_trickled_headers_time_out(served: Served) -> None:
    with _raw(served.port) as sock:
        started = time.monotonic()
        closed = False
        for byte in b"POST /rpc HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 40:
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                closed = True
                break
            time.sleep(0.1)
        if not closed:
            sock.settimeout(5)
            assert sock.recv(1024) == b""
        assert time.monotonic() - started < 6


def test_slow_bodies_time_out(served: Served) -> None:
    with _raw(served.port) as sock:
        sock.sendall(_request(b'{"jsonrpc":"2.0","id":1,"method":"x"}' + b" " * 60)[:-50])  # 50 bytes short
        sock.settimeout(10)
        [(status, answer)] = _read_responses(sock, 1)
    assert status == 408 and answer["error"]["data"]["reason"] == "request_timeout"


def test_a_chunked_body_is_cut_off_at_the_limit(served: Served) -> None:
    with _raw(served.port) as sock:
        sock.sendall(
            b"POST /rpc HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        status = None
        try:
            for _ in range(200):  # up to 3.2 MB offered; the limit is 64 KiB
                sock.sendall(b"4000\r\n" + b" " * 0x4000 + b"\r\n")
        except OSError:
            pass  # the server closed the connection after answering
        sock.settimeout(10)
        [(status, answer)] = _read_responses(sock, 1)
    assert status == 413 and answer["error"]["data"]["reason"] == "request_too_large"


def test_a_declared_oversize_body_is_refused_before_it_is_sent(served: Served) -> None:
    with _raw(served.port) as sock:
        sock.sendall(
            b"POST /rpc HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 500000000\r\n\r\n"
        )
        sock.settimeout(10)
        [(status, _)] = _read_responses(sock, 1)
    assert status == 413


def test_rpc_answers_every_line_after_a_lone_surrogate(tmp_path: Path, base_env: dict[str, str]) -> None:
    # `memledger rpc` used to exit with status 1 on a lone surrogate and never answer the next line.
    env = {**base_env, "MEMLEDGER_DATABASE_URL": f"sqlite:///{tmp_path / 'stdio.db'}"}
    lines = [
        b'{"jsonrpc":"2.0","id":1,"method":"memory/save_memory_record","params":{"body":"x\\ud800"}}',
        b'{"jsonrpc":"2.0","id":"\\udc00","method":"memory/list_memory_records","params":{"scopeKey":"account:local"}}',
        b'[{"jsonrpc":"2.0","id":3,"method":"memory/\\ud800"},{"jsonrpc":"2.0","id":4,"method":"memory/save_memory_record",'
        b'"params":{"body":"after the surrogates"}}]',
    ]
    done = subprocess.run([MEMLEDGER, "rpc"], input=b"\n".join(lines) + b"\n", env=env, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert answers[0]["error"]["data"] == {"reason": "invalid_params", "field": "body"}
    assert answers[1]["id"] is None and answers[1]["error"]["code"] == -32600
    assert [a["id"] for a in answers[2]] == [3, 4] and answers[2][1]["result"]["body"] == "after the surrogates"
