"""The doors: how soon each way into memledger answers, beside bare Python in the same run.

* ``memledger --help``: CPU (user + system) of the whole process; target 0.35 s.
* ``memledger pins`` on an existing database: CPU; target 0.7 s.
* ``memledger mcp``: spawn until the answer to ``initialize`` is read; target 1.0 s.
* ``memledger serve`` on an existing database: spawn until ``GET /livez`` answers (a restart after a
  crash); target 1.5 s.

Each round runs the door and ``python -c pass`` back to back (alternating which goes first), so
both see the same load; the figure is the median over the rounds. The targets are for a quiet
2-core machine: on a loaded one every process is slower alike, so a door must meet its target
times the load factor, bare Python's median over its quiet figure (never below 1). The figures,
the load factor and ``uptime`` are printed; docs/performance.md records a run.

``MEMLEDGER_BENCH_BEFORE=DIR`` (an older source tree, e.g. ``git archive REV | tar -x -C DIR``) adds
that tree's figure to each row, measured in the same rounds (``PYTHONPATH=DIR``): before and after
under the same load.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from ledger import open_ledger
from tests.bench.conftest import Sample, interleave, median, note
from tests.worker.conftest import MEMLEDGER

pytestmark = pytest.mark.bench

ROUNDS = 5
BARE_CPU_QUIET_S = 0.05  # `python -c pass` on a quiet machine of this kind (user + system)
BARE_WALL_QUIET_S = 0.05
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}},
}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(argv: list[str], env: dict[str, str]) -> Sample:
    """A process run to its end: wall clock and its CPU."""
    cpu, wall = _children_cpu(), time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return Sample(time.perf_counter() - wall, _children_cpu() - cpu)


def _mcp(env: dict[str, str]) -> Sample:
    """Spawn ``memledger mcp`` until the answer to ``initialize`` is read (its CPU counted to the end)."""
    cpu, wall = _children_cpu(), time.perf_counter()
    proc = subprocess.Popen(
        [MEMLEDGER, "mcp"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write((json.dumps(INITIALIZE) + "\n").encode())
    proc.stdin.flush()
    answer = json.loads(proc.stdout.readline())
    answered = time.perf_counter() - wall
    assert answer["id"] == 1 and "result" in answer, answer
    proc.stdin.close()
    proc.wait(30)
    proc.stdout.close()
    return Sample(answered, _children_cpu() - cpu)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _serve(env: dict[str, str]) -> Sample:
    """Spawn ``memledger serve`` until ``GET /livez`` answers 200 (its CPU counted to its clean exit)."""
    port = _free_port()
    cpu, wall = _children_cpu(), time.perf_counter()
    proc = subprocess.Popen(
        [MEMLEDGER, "serve", "--port", str(port), "--no-banner"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = wall + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/livez", timeout=1) as response:
                assert response.status == 200
                break
        except OSError:
            assert proc.poll() is None, "serve exited"
            assert time.perf_counter() < deadline, "serve did not answer /livez in 60 s"
            time.sleep(0.005)  # polling the port: the next try comes at once
    answered = time.perf_counter() - wall
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)
    return Sample(answered, _children_cpu() - cpu)


@pytest.fixture
def door_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMLEDGER_")}
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    led = open_ledger(url)  # an existing database, migrated, with a few pins
    try:
        for n in range(20):
            led.save(f"pin number {n}: I prefer metric units")
    finally:
        led.close()
    env.update(MEMLEDGER_DATABASE_URL=url, MEMLEDGER_LOG_LEVEL="WARNING", MEMLEDGER_SWEEP_INTERVAL_S="0")
    return env


def _uptime() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def _door(
    name: str, measure: Callable[[dict[str, str]], Sample], env: dict[str, str], *, metric: str, target_s: float
) -> tuple[str, float, float, float, bool]:
    bare = [sys.executable, "-c", "pass"]
    contenders = {"door": lambda _r: measure(env), "bare": lambda _r: _run(bare, env)}
    before = os.environ.get("MEMLEDGER_BENCH_BEFORE")
    if before:
        contenders["before"] = lambda _r: measure({**env, "PYTHONPATH": before})
    samples = interleave(contenders, rounds=ROUNDS, warmup=1)
    pick = (lambda s: s.cpu_s) if metric == "cpu" else (lambda s: s.wall_s)
    ours = median([pick(s) for s in samples["door"]])
    if before:
        note(f"{name}: before {median([pick(s) for s in samples['before']]):.3f} s ({before})")
    base = median([pick(s) for s in samples["bare"]])
    quiet = BARE_CPU_QUIET_S if metric == "cpu" else BARE_WALL_QUIET_S
    load = max(1.0, base / quiet)
    met = ours <= target_s * load
    print(
        f"\n{name:<44} {metric:>4} {ours:7.3f} s   bare python {base:6.3f} s   target {target_s:.2f} s"
        f" x load {load:4.2f}   {'met' if met else 'NOT MET'}"
    )
    return name, ours, base, load, met


@pytest.mark.timeout(1800)
def test_the_doors_answer_at_once(door_env: dict[str, str]) -> None:
    note(f"load average (1, 5, 15 min) at the start: {_uptime()}")
    rows = [
        _door("memledger --help", lambda e: _run([MEMLEDGER, "--help"], e), door_env, metric="cpu", target_s=0.35),
        _door("memledger pins", lambda e: _run([MEMLEDGER, "pins"], e), door_env, metric="cpu", target_s=0.7),
        _door("memledger mcp: spawn to initialize", _mcp, door_env, metric="wall", target_s=1.0),
        _door("memledger serve: spawn to /livez", _serve, door_env, metric="wall", target_s=1.5),
    ]
    note(f"load average (1, 5, 15 min) at the end: {_uptime()}")
    missed = [row[0] for row in rows if not row[4]]
    assert missed == [], f"missed: {missed}"
