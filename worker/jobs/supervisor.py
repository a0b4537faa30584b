"""``memledger worker``: dramatiq worker processes on the Redis broker.

One process (the default) runs :func:`run_worker` itself: a :class:`dramatiq.Worker`
with N threads, the janitor, and Prometheus metrics on ``MEMLEDGER_METRICS_PORT``.

``--processes N`` (N > 1) makes this process a small supervisor (:func:`supervise`):
it starts N children (``python -m worker.jobs.supervisor``), each a one-process worker
(only the first runs the janitor), restarts a child that dies, serves the metrics of
all of them from one port (prometheus_client multiprocess mode), and on SIGTERM
passes the signal on and waits for the children to finish their in-flight runs.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from worker.config import WorkerConfig

log = logging.getLogger(__name__)

RESTART_DELAY_S = 1.0
MAX_RESTART_DELAY_S = 30.0
STABLE_AFTER_S = 60.0
CHILD_EXTRA_WAIT_S = 5.0


def _wait_for_signal() -> None:
    """Block the main thread until SIGTERM or SIGINT."""
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("received %s: stopping", signal.Signals(signum).name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    while not stop.wait(1.0):
        pass


def run_worker(
    *, threads: int | None = None, janitor: bool = True, serve_metrics: bool = True, config: WorkerConfig | None = None
) -> int:
    """Run one worker process until SIGTERM/SIGINT; returns the exit status.

    Configuration is read here (once) unless ``config`` is given. In-flight runs get
    ``shutdown_timeout_s`` to finish; a run cut off is left ``running`` and settled later by a janitor.
    """
    from worker.config import load_config
    from worker.logging import configure_logging
    from worker.runtime import build_runtime

    config = config if config is not None else load_config()
    configure_logging(fmt=config.log_format, level=config.log_level)
    if config.embedded:
        log.error("memledger worker needs MEMLEDGER_REDIS_URL: the embedded queue lives inside memledger serve")
        return 2
    runtime = build_runtime(config)
    try:
        if serve_metrics and config.metrics_listen_port is not None:
            import prometheus_client

            from worker.http.guard import serve_guarded_metrics

            serve_guarded_metrics(config.metrics_listen_port, prometheus_client.REGISTRY, config.operator_token)
        runtime.start_worker(threads=threads)
        if janitor:
            runtime.start_janitor()
        log.info("memledger worker ready (pid %d)", os.getpid())
        _wait_for_signal()
    finally:
        runtime.close()
    log.info("memledger worker stopped")
    return 0


def _child_command(threads: int, janitor: bool) -> list[str]:
    command = [sys.executable, "-m", "worker.jobs.supervisor", "--threads", str(threads)]
    return command if janitor else [*command, "--no-janitor"]


@dataclass
class _Child:
    """One supervised worker process and its restart schedule (backing off while it keeps dying)."""

    command: list[str]
    env: dict[str, str]
    popen: subprocess.Popen[bytes] = field(init=False)
    started: float = 0.0
    delay_s: float = RESTART_DELAY_S
    restart_at: float | None = None

    def start(self) -> None:
        self.popen = subprocess.Popen(self.command, env=self.env)
        self.started, self.restart_at = time.monotonic(), None

    def check(self, metrics_dir: str) -> None:
        """Notice a death and schedule a restart; restart when the time has come."""
        now = time.monotonic()
        if self.restart_at is None and self.popen.poll() is not None:
            delay = RESTART_DELAY_S if now - self.started > STABLE_AFTER_S else self.delay_s
            self.delay_s = min(MAX_RESTART_DELAY_S, delay * 2)
            self.restart_at = now + delay
            log.warning(
                "worker process %d exited with status %s; restarting it in %.0f s",
                self.popen.pid,
                self.popen.returncode,
                delay,
            )
            _forget_child(self.popen, metrics_dir)
        elif self.restart_at is not None and now >= self.restart_at:
            self.start()


def supervise(
    *,
    processes: int,
    threads: int,
    metrics_port: int | None,
    shutdown_timeout_s: float,
    extra_collectors: Sequence[Any] = (),
    operator_token: str | None = None,
    child_settings: Mapping[str, str] | None = None,
) -> int:
    """Run ``processes`` worker children until SIGTERM/SIGINT; restart any that dies meanwhile.

    ``child_settings`` are environment variables set for the children only (``MEMLEDGER_DATABASE_URL``
    from ``--database-url``): they read their configuration at start.
    """
    from worker.config import child_environment

    metrics_dir = tempfile.mkdtemp(prefix="memledger-metrics-")
    env = child_environment(**(child_settings or {}), PROMETHEUS_MULTIPROC_DIR=metrics_dir)
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    children = [_Child(_child_command(threads, janitor=(i == 0)), env) for i in range(processes)]
    for child in children:
        child.start()
    log.info("supervising %d worker processes: %s", processes, [c.popen.pid for c in children])
    try:
        if metrics_port is not None:
            _serve_aggregated_metrics(metrics_port, metrics_dir, extra_collectors, operator_token=operator_token)
        while not stop.wait(0.2):
            for child in children:
                child.check(metrics_dir)
        return _stop_children([c.popen for c in children], shutdown_timeout_s + CHILD_EXTRA_WAIT_S, metrics_dir)
    finally:
        for child in children:
            if child.popen.poll() is None:
                child.popen.kill()
        shutil.rmtree(metrics_dir, ignore_errors=True)


def _stop_children(children: Sequence[subprocess.Popen[bytes]], timeout_s: float, metrics_dir: str) -> int:
    """SIGTERM every child, wait for them (in-flight runs finish), SIGKILL what is left."""
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    status = 0
    for child in children:
        try:
            child.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.warning("worker process %d did not stop in time; killing it", child.pid)
            child.kill()
            child.wait()
            status = 1
        _forget_child(child, metrics_dir)
    return status


def _forget_child(child: subprocess.Popen[bytes], metrics_dir: str) -> None:
    """Drop a dead child's live gauges from the aggregate (its counters stay counted)."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(child.pid, metrics_dir)  # type: ignore[no-untyped-call]


def _serve_aggregated_metrics(
    port: int, metrics_dir: str, extra_collectors: Sequence[Any] = (), *, operator_token: str | None = None
) -> None:
    import prometheus_client
    from prometheus_client import multiprocess

    from worker.http.guard import serve_guarded_metrics

    registry = prometheus_client.CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=metrics_dir)  # type: ignore[no-untyped-call]
    for collector in extra_collectors:  # e.g. the operator gauges read from the database
        registry.register(collector)
    serve_guarded_metrics(port, registry, operator_token)  # every scope's spend: the operator's only


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of one supervised child process."""
    parser = argparse.ArgumentParser(prog="python -m worker.jobs.supervisor")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--no-janitor", action="store_true")
    args = parser.parse_args(argv)
    return run_worker(threads=args.threads, janitor=not args.no_janitor, serve_metrics=False)


if __name__ == "__main__":
    sys.exit(main())
