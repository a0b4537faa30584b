"""Resident memory of ``memledger serve`` under oversized requests (one 500 MB POST <= 20 MB growth).

A real ``memledger serve`` subprocess (uvicorn) receives, over raw sockets, one 500 MB POST
with its ``Content-Length`` declared, one 500 MB chunked POST (no length, streamed from a
generator: the client never holds more than one 64 KiB chunk), and four 100 MB chunked
POSTs at once. The figure is the growth of the server's peak resident memory (``VmHWM``)
over what the same server reached after a baseline of 500 ordinary requests, measured in
the same run. Before requests were bounded the same 500 MB POST raised it by ~950 MB.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

MEMLEDGER = str(Path(sys.executable).parent / "memledger")
MB = 1 << 20
CHUNK = 64 * 1024
TARGET_MB = 20.0


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[int, int]]:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMLEDGER_", "ANTHROPIC_"))}
    env.update(MEMLEDGER_DATABASE_URL=f"sqlite:///{tmp_path / 'ledger.db'}", MEMLEDGER_LOG_LEVEL="WARNING")
    proc = subprocess.Popen([MEMLEDGER, "serve", "--port", str(port)], env=env, cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "serve did not start"
                time.sleep(0.1)
        yield port, proc.pid
    finally:
        proc.terminate()
        proc.wait(30)


def _head(*, length: int | None) -> bytes:
    framing = f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
    return f"POST /rpc HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{framing}\r\n\r\n".encode()


def _body(total: int, *, chunked: bool) -> Iterator[bytes]:
    """``total`` bytes of JSON-ish filler, one chunk at a time (never all of it in memory)."""
    piece = b" " * CHUNK
    sent = 0
    while sent < total:
        size = min(CHUNK, total - sent)
        data = piece[:size]
        yield (f"{size:x}\r\n".encode() + data + b"\r\n") if chunked else data
        sent += size
    if chunked:
        yield b"0\r\n\r\n"


def _oversized_post(port: int, total: int, *, chunked: bool) -> tuple[int, int]:
    """Send one oversized POST; returns (HTTP status, bytes the server let us send)."""
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(_head(length=None if chunked else total))
        try:
            for chunk in _body(total, chunked=chunked):
                sock.sendall(chunk)
                sent += len(chunk)
        except OSError:
            pass  # the server answered 413 and closed the connection
        reply = b""
        try:
            while b"\r\n" not in reply:
                data = sock.recv(4096)
                if not data:
                    break
                reply += data
        except OSError:
            pass
    status = int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/1.1") else 0
    return status, sent


def _ordinary_requests(port: int, n: int) -> None:
    body = b'{"jsonrpc":"2.0","id":1,"method":"memory/list_memory_records","params":{"scopeKey":"account:local"}}'
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        for _ in range(n):
            sock.sendall(_head(length=len(body)) + body)
            reply = b""
            while not reply.endswith(b"}"):
                reply += sock.recv(65536)


@pytest.mark.bench
def test_resident_memory_under_oversized_requests(server: tuple[int, int]) -> None:
    port, pid = server
    _ordinary_requests(port, 500)
    baseline = _peak_rss_mb(pid)
    rows = []

    status, sent = _oversized_post(port, 500 * MB, chunked=False)
    rows.append(("one 500 MB POST, Content-Length declared", status, sent, _peak_rss_mb(pid) - baseline))
    status, sent = _oversized_post(port, 500 * MB, chunked=True)
    rows.append(("one 500 MB POST, chunked", status, sent, _peak_rss_mb(pid) - baseline))
    results: list[tuple[int, int]] = []
    threads = [
        threading.Thread(target=lambda: results.append(_oversized_post(port, 100 * MB, chunked=True))) for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    rows.append(
        ("four 100 MB chunked POSTs at once", results[0][0] if results else 0, sum(s for _, s in results),
         _peak_rss_mb(pid) - baseline)
    )  # fmt: skip

    print(f"\nserve peak RSS after 500 ordinary requests (baseline): {baseline:.1f} MB")
    print(f"{'request':45} {'status':>6} {'sent MB':>12} {'peak RSS growth MB':>19} {'target':>8}")
    for name, code, accepted, growth in rows:
        print(f"{name:45} {code:>6} {accepted / MB:>12.1f} {growth:>19.1f} {'<= 20':>8}")
    for name, code, _, growth in rows:
        assert code == 413, name
        assert growth <= TARGET_MB, (name, growth)
