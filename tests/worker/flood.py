"""A flood of idle sockets against a real ``memledger serve``, and ordinary requests timed through it.

Shared by ``tests/worker/test_flood.py`` (1,100 sockets, 20 requests) and
``tests/bench/bench_flood.py`` (1,100 and 5,000 sockets, held for the whole run).
Loopback only: every socket goes to 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import resource
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.conftest import tool_missing
from tests.hygiene import kill_group, popen, redis_namespace

MEMLEDGER = str(Path(sys.executable).parent / "memledger")
# A request head that never ends: the request line and one header, then nothing.
PARTIAL_HEAD = b"POST /rpc HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
ORDINARY = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "memory/get_memory_capabilities"})
SERVER_SOFT_NOFILE = 1024  # the usual default soft limit: serve must raise its own to hold a flood


def raise_own_file_limit(needed: int) -> None:
    """Let this (client) process hold ``needed`` sockets; skip (fail in CI) when the hard limit forbids it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            tool_missing(f"the hard limit on open files is {hard}; this flood needs {needed}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def _usual_soft_limit() -> None:
    """In the server's child process: start from the usual soft limit, as a login shell would."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(SERVER_SOFT_NOFILE, hard), hard))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def serve(tmp_path: Path, **env_extra: str) -> Iterator[str]:
    """``memledger serve`` in a subprocess with the usual soft open-file limit; yields its base URL."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("MEMLEDGER_", "ANTHROPIC_"))}
    env.update(
        MEMLEDGER_DATABASE_URL=f"sqlite:///{tmp_path / 'ledger.db'}",
        MEMLEDGER_LOG_LEVEL="WARNING",
        MEMLEDGER_REDIS_NAMESPACE=redis_namespace(),
        **env_extra,
    )
    with (tmp_path / "serve.err").open("wb") as err:
        proc = popen(
            [MEMLEDGER, "serve", "--port", str(port), "--no-banner"],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=err,
            preexec_fn=_usual_soft_limit,  # the child only sets its limit, then execs
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{base}/livez", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, (tmp_path / "serve.err").read_text()[-3000:]
            assert time.monotonic() < deadline, "serve did not start within 30 s"
            time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        with suppress(subprocess.TimeoutExpired):
            proc.wait(30)
        kill_group(proc)


def idle_socket(port: int) -> socket.socket:
    """A connection that sends part of a request head and then nothing."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(PARTIAL_HEAD)
    return sock


def still_open(sock: socket.socket) -> bool:
    """True when the server has not closed ``sock`` (nothing to read, no EOF, no reset)."""
    sock.setblocking(False)
    try:
        return sock.recv(1) != b""  # data would be an answer: the server did not wait for the head
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        sock.setblocking(True)


@dataclass
class Flood:
    """``size`` idle sockets to ``port``; with ``hold``, a thread replaces those the server closes."""

    port: int
    size: int
    hold: bool = False
    sockets: list[socket.socket] = field(default_factory=list)
    reopened: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Flood:
        self.sockets = [idle_socket(self.port) for _ in range(self.size)]
        if self.hold:
            self._thread = threading.Thread(target=self._keep_up, daemon=True)
            self._thread.start()
        return self

    def _keep_up(self) -> None:
        """Reopen each socket the server closes; poll() finds them without a system call per socket."""
        poller = select.poll()
        slot = {}
        for i, sock in enumerate(self.sockets):
            poller.register(sock, select.POLLIN | select.POLLHUP | select.POLLERR)
            slot[sock.fileno()] = i
        while not self._stop.is_set():
            for fd, _event in poller.poll(200):
                i = slot.pop(fd)
                poller.unregister(fd)
                self.sockets[i].close()
                try:
                    self.sockets[i] = idle_socket(self.port)
                except OSError:
                    continue
                self.reopened += 1
                poller.register(self.sockets[i], select.POLLIN | select.POLLHUP | select.POLLERR)
                slot[self.sockets[i].fileno()] = i

    def open_count(self) -> int:
        return sum(still_open(sock) for sock in self.sockets)

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        for sock in self.sockets:
            sock.close()


@dataclass
class Served:
    """What ordinary requests got through a flood: status codes and seconds, one per request."""

    statuses: list[int]
    seconds: list[float]

    @property
    def fraction_ok(self) -> float:
        return sum(1 for status in self.statuses if status == 200) / len(self.statuses)

    @property
    def worst_s(self) -> float:
        return max(self.seconds)

    def within(self, limit_s: float) -> float:
        """The fraction answered 200 within ``limit_s``."""
        good = sum(1 for st, s in zip(self.statuses, self.seconds, strict=True) if st == 200 and s <= limit_s)
        return good / len(self.statuses)


def ordinary_requests(base: str, count: int, *, timeout_s: float = 10.0) -> Served:
    """``count`` ordinary ``POST /rpc`` calls, each on a new connection, one after another, timed."""
    statuses, seconds = [], []
    headers = {"Content-Type": "application/json"}
    for _ in range(count):
        started = time.perf_counter()
        try:
            status = httpx.post(f"{base}/rpc", content=ORDINARY, headers=headers, timeout=timeout_s).status_code
        except httpx.HTTPError:
            status = 0
        seconds.append(time.perf_counter() - started)
        statuses.append(status)
    return Served(statuses, seconds)


def slow_body_socket(port: int, token: str, *, declared: int = 200, sent: int = 10) -> socket.socket:
    """A ``POST /rpc`` with a whole head (a valid token, ``Content-Length: declared``) and only ``sent`` bytes
    of its body, then nothing: a client dribbling its body."""
    head = (
        f"POST /rpc HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {token}\r\nContent-Length: {declared}\r\n\r\n"
    ).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(head + b" " * sent)
    return sock


def answered(socks: list[socket.socket], *, at_least: int, timeout_s: float) -> dict[socket.socket, int]:
    """The status of each socket the server answered, waiting until ``at_least`` are or ``timeout_s`` has passed."""
    statuses: dict[socket.socket, int] = {}
    poller = select.poll()
    by_fd = {sock.fileno(): sock for sock in socks}
    for sock in socks:
        poller.register(sock, select.POLLIN | select.POLLHUP | select.POLLERR)
    deadline = time.monotonic() + timeout_s
    while len(statuses) < at_least and (left := deadline - time.monotonic()) > 0:
        for fd, _event in poller.poll(int(left * 1000) + 1):
            sock = by_fd[fd]
            poller.unregister(fd)
            line = sock.recv(64).split(b"\r\n", 1)[0].split()
            statuses[sock] = int(line[1]) if len(line) > 1 else 0
    return statuses
