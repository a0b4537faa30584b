"""MCP benchmark (``make bench``): ``list_pins`` over stdio against the same read over ``memledger rpc``.

Both servers are real ``memledger`` processes on one SQLite file holding 200 active
pins: ``memledger mcp`` driven by the SDK's own client (``stdio_client`` +
``ClientSession``, which parses every result and validates it against the tool's
output schema, as MCP clients do), and ``memledger rpc`` driven by writing one JSON-RPC
line (``memory/list_memory_records``) and reading one back. Calls alternate in rounds
(MCP first, then rpc first in the next round) after warm-up, so both see the same
machine load. The figure is the p50 latency of one call; the target is MCP <= 2x rpc:
what MCP itself costs on top of the ledger's read. Recorded in ``docs/performance.md``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import time
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from ledger import open_ledger
from tests.bench.conftest import FigureTable
from tests.worker.conftest import MEMLEDGER

pytestmark = [pytest.mark.bench, pytest.mark.timeout(600)]

PINS = 200
ROUNDS = 20
CALLS_PER_ROUND = 10
WARMUP_ROUNDS = 2
TARGET = 2.0

TABLE = FigureTable("MCP benchmarks", widths=(46, 14, 14, 10, 4))
table = TABLE.fixture()
record = TABLE.record


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def _seed(path: Path) -> None:
    led = open_ledger(f"sqlite:///{path}")
    led.set_budget(led.scope_key, PINS + 10)
    kinds = ("preference", "fact", "decision", "constraint")
    for i in range(PINS):
        led.save(f"Pin {i}: for project {i % 17} I prefer setting {i * 7} over the default", kind=kinds[i % 4])
    led.close()


class RpcClient:
    """``memledger rpc`` as a subprocess: one request line out, one response line back."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen([MEMLEDGER, "rpc"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        request = {"jsonrpc": "2.0", "id": 1, "method": "memory/list_memory_records"}
        request["params"] = {"scopeKey": "account:local"}
        self.line = (json.dumps(request) + "\n").encode()

    def list_records(self) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(self.line)
        self.proc.stdin.flush()
        answer = json.loads(self.proc.stdout.readline())
        return len(answer["result"]["records"])

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.wait(30)
        self.proc.stdout.close()


def test_list_pins_over_stdio_against_memledger_rpc(tmp_path: Path) -> None:
    db = tmp_path / "bench.db"
    _seed(db)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMLEDGER_")}
    env.update(MEMLEDGER_DATABASE_URL=f"sqlite:///{db}", MEMLEDGER_LOG_LEVEL="WARNING")
    rpc = RpcClient(env)
    mcp_times: list[float] = []
    rpc_times: list[float] = []
    round_ratios: list[float] = []

    async def main() -> None:
        params = StdioServerParameters(command=MEMLEDGER, args=["mcp"], env=env)
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await session.list_tools()  # the client caches the output schemas it validates against

            async def mcp_round() -> list[float]:
                times = []
                for _ in range(CALLS_PER_ROUND):
                    started = time.perf_counter()
                    result = await session.call_tool("list_pins", {})
                    times.append(time.perf_counter() - started)
                    assert not result.is_error and result.structured_content is not None
                    assert result.structured_content["count"] == PINS
                return times

            def rpc_round() -> list[float]:
                times = []
                for _ in range(CALLS_PER_ROUND):
                    started = time.perf_counter()
                    assert rpc.list_records() == PINS
                    times.append(time.perf_counter() - started)
                return times

            for r in range(WARMUP_ROUNDS + ROUNDS):
                if r % 2 == 0:
                    ours, theirs = await mcp_round(), rpc_round()
                else:
                    theirs = rpc_round()
                    ours = await mcp_round()
                if r >= WARMUP_ROUNDS:
                    mcp_times.extend(ours)
                    rpc_times.extend(theirs)
                    round_ratios.append(statistics.median(ours) / statistics.median(theirs))

    try:
        anyio.run(main)
    finally:
        rpc.close()
    ours_p50, theirs_p50 = statistics.median(mcp_times), statistics.median(rpc_times)
    ratio = statistics.median(round_ratios)
    record(f"list_pins, {PINS} pins: p50 (stdio)", _ms(ours_p50), f"{_ms(theirs_p50)} rpc", f"<= {TARGET:g}x", None)
    record("  ratio, median of per-round p50 ratios", f"{ratio:.2f}x", "", f"<= {TARGET:g}x", ratio <= TARGET)
    record("  p95", _ms(_p95(mcp_times)), _ms(_p95(rpc_times)))
    record("  rounds x calls", f"{ROUNDS} x {CALLS_PER_ROUND}", "")
    assert ratio <= TARGET, f"list_pins over MCP stdio is {ratio:.2f}x memledger rpc; target <= {TARGET:g}x"


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
