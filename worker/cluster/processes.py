"""The benchmark's processes: Redis, the API processes and the workers, each in a process group of its own."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worker.cluster.report import ClusterPlan
from worker.config import child_environment
from worker.errors import ClusterError

MEMLEDGER = [sys.executable, "-c", "from worker.cli import main; main()"]
WAIT_S = 60.0  # how long a process may take to answer, and the queue to drain after a phase


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait(predicate: Callable[[], Any], what: str, timeout_s: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise ClusterError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.05)


# ------------------------------------------------------------------------------------------------ processes


@dataclass
class Child:
    name: str
    args: list[str]
    env: dict[str, str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Child:
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(
                self.args, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        return self

    def check(self) -> None:
        """Raise ClusterError, with the end of its log, when the child has exited."""
        if self.popen is not None and self.popen.poll() is not None:
            log = self.log.read_text(errors="replace")[-2000:]
            raise ClusterError(f"{self.name} exited with status {self.popen.returncode}:\n{log}")

    def kill(self) -> None:
        """``kill -9`` of the child's whole process group (a worker's own children too)."""
        if self.popen is None or self.popen.poll() is not None:
            return
        with suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(timeout=WAIT_S)

    def stop(self) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        try:
            os.killpg(self.popen.pid, signal.SIGTERM)
            self.popen.wait(timeout=15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            self.kill()


class Children:
    """Every process the benchmark started; all of them are killed when it ends, whatever happens."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.all: list[Child] = []

    def start(self, name: str, args: list[str], env: dict[str, str]) -> Child:
        child = Child(name, args, env, self.directory / f"{name}.log").start()
        self.all.append(child)
        return child

    def close(self) -> None:
        for child in reversed(self.all):
            child.kill()


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class Cluster:
    """The processes of one benchmark: Redis, N API processes, M workers; each can be killed and restarted."""

    def __init__(self, plan: ClusterPlan, url: str, model_url: str, children: Children) -> None:
        self.plan = plan
        self.children = children
        self.redis_port = free_port()
        namespace = "cluster" + secrets.token_hex(4)
        self.env = child_environment(
            MEMLEDGER_DATABASE_URL=url,
            MEMLEDGER_REDIS_URL=f"redis://127.0.0.1:{self.redis_port}/0",
            MEMLEDGER_REDIS_NAMESPACE=namespace,
            MEMLEDGER_AUTH="tokens",
            MEMLEDGER_LOG_LEVEL="WARNING",
            MEMLEDGER_SWEEP_INTERVAL_S="0",
            MEMLEDGER_JANITOR_INTERVAL_S="1",
            MEMLEDGER_JANITOR_RESEND_AFTER_S="2",
            MEMLEDGER_JANITOR_GRACE_S="2",
            MEMLEDGER_MAX_REQUESTS_PER_ACCOUNT="64",
            ANTHROPIC_API_KEY="sk-ant-fake-benchmark-key",
            ANTHROPIC_BASE_URL=model_url,
        )
        self.redis: Child | None = None
        self.apis: list[tuple[int, Child]] = []
        self.workers: list[Child] = []

    def start_redis(self) -> None:
        args = [self.plan.redis_server, "--port", str(self.redis_port), "--bind", "127.0.0.1", "--save", ""]
        args += ["--appendonly", "no", "--dir", str(self.children.directory)]
        self.redis = self.children.start("redis", args, self.env)
        wait(lambda: _listening(self.redis_port), "redis-server to listen")

    def restart_redis(self) -> None:
        """Redis lost and back, without its data (a restart with no persistence)."""
        assert self.redis is not None
        self.redis.kill()
        self.start_redis()

    def start_api(self, n: int, port: int | None = None) -> None:
        import httpx

        port = port or free_port()
        child = self.children.start(f"api{n}", [*MEMLEDGER, "serve", "--no-worker", "--port", str(port)], self.env)

        def ready() -> bool:
            child.check()
            try:
                return httpx.get(f"http://127.0.0.1:{port}/livez", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait(ready, f"API process {n} to answer on port {port}")
        self.apis.append((port, child))

    def kill_api(self) -> None:
        port, child = self.apis.pop(0)
        child.kill()
        self.start_api(len(self.children.all), port)

    def ports(self) -> list[int]:
        return [port for port, _ in self.apis]

    def scale_workers(self, m: int) -> None:
        while len(self.workers) > m:
            self.workers.pop().stop()
        while len(self.workers) < m:
            args = [*MEMLEDGER, "worker", "--processes", "1", "--threads", str(self.plan.threads)]
            env = {**self.env, "MEMLEDGER_LOG_LEVEL": "INFO"}  # its "ready" line
            worker = self.children.start(f"worker{len(self.children.all)}", args, env)
            self.workers.append(worker)

            def ready(worker: Child = worker) -> bool:
                worker.check()
                return "memledger worker ready" in worker.log.read_text(errors="replace")

            wait(ready, f"{worker.name} to be ready")

    def kill_worker(self) -> None:
        self.workers.pop(0).kill()
        self.scale_workers(len(self.workers) + 1)
