"""File-ledger benchmark (``make bench``): auditing 10,000 entries, measured side by side in one run.

* ``audit_directory`` over 10,000 entries (chains of 1-5, a few invalid, expired,
  out-of-scope and overdue entries, realistic bodies), wall and CPU time;
  target: under 5 s. The test fails only when the CPU time alone is over the
  target: wall time on a shared machine mostly measures the other processes;
* the same files through the command line (``memledger files audit --format json``,
  process start-up included);
* the baseline: reading every file and loading its front matter with PyYAML's
  libyaml ``CSafeLoader``, with no rule, no screening and no chains — about what
  any auditor has to pay at least.

The figures are recorded in ``docs/performance.md``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from ledger.files import audit_directory, entry_files
from tests.ledger.files.helpers import NOW, SCOPE, entry

pytestmark = pytest.mark.bench

ENTRIES = 10_000
TARGET_S = 5.0
BODIES = (
    "Production deploys of service {i} go to eu-west-1.",
    "The team prefers metric units in design documents ({i}).",
    "The staging database {i} listens on port 5432.",
    "API keys for service {i} live in 1Password under 'deploy'.",
    "Release {i}.2.3 is the last to support Python 3.9.",
    "Code review for module {i} needs two approvals on the main branch.",
    "On-call rotation {i} hands over on Mondays at 09:00 UTC.",
    "The service {i} token lifetime is 3600 seconds.",
    "Builds for job {i} run on ubuntu-22.04 runners.",
    "Use https://docs.example.com/runbooks/deploy-{i} for rollbacks.",
)


def _entry(i: int, chain_pos: int, chain_len: int, base: int) -> str:
    sup = f"e{base + chain_pos + 1:05d}.md" if chain_pos < chain_len - 1 else None
    body = BODIES[i % len(BODIES)].format(i=i)
    if i % 97 == 0:
        return entry(conf="1.7", sup=sup, body=body)  # invalid
    if i % 89 == 0:
        return entry(sref="acme/gadgets", sup=sup, body=body)  # out of scope
    if i % 83 == 0:
        return entry(expires="2025-02-01", sup=sup, body=body)  # expired (when a head)
    if i % 7 == 0:
        return entry(expires=None, review="2025-09-30", auth="false", kind="inferred", conf="0.6", sup=sup, body=body)
    return entry(ref=f"https://tracker.example/ACME-{i}", auth="true" if i % 10 == 0 else "false", sup=sup, body=body)


def build(directory: Path, count: int = ENTRIES) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    i = 0
    while i < count:
        length = min(1 + (i // 5) % 5, count - i)  # chains of 1, 2, 3, 4, 5, 1, ...
        for pos in range(length):
            (directory / f"e{i + pos:05d}.md").write_text(_entry(i + pos, pos, length, i), encoding="utf-8")
        i += length
    return directory


def timed(fn: Callable[[], object]) -> tuple[float, float, object]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def _baseline(directory: Path) -> int:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: the fastest naive parse
    loaded = 0
    for path in entry_files(directory):
        front = path.read_text(encoding="utf-8").split("---\n", 2)[1]
        loaded += bool(yaml.load(front, Loader=loader))  # a safe loader
    return loaded


def test_audit_10000_entries(tmp_path: Path) -> None:
    directory = build(tmp_path / "memories")
    audit_directory(build(tmp_path / "warm", 50), scope=SCOPE, now=NOW)  # imports, detectors, regexes

    wall, cpu, report = timed(lambda: audit_directory(directory, scope=SCOPE, now=NOW))
    base_wall, base_cpu, _ = timed(lambda: _baseline(directory))
    cmd = [str(Path(sys.executable).with_name("memledger")), "files", "audit", str(directory), "--scope", SCOPE]
    cmd += ["--now", "2025-03-01", "--format", "json"]
    cli_wall, _, proc = timed(lambda: subprocess.run(cmd, capture_output=True, text=True, check=False))

    assert isinstance(proc, subprocess.CompletedProcess) and proc.returncode == 1, proc
    doc = json.loads(proc.stdout)
    assert len(report.entries) == ENTRIES  # type: ignore[attr-defined]
    assert len(doc["candidates"]) == len(report.candidates) > 0  # type: ignore[attr-defined]
    rows = [
        ("audit_directory, 10,000 entries", f"{wall:.2f} s wall", f"{cpu:.2f} s CPU"),
        ("memledger files audit --format json", f"{cli_wall:.2f} s wall", "(process start-up included)"),
        ("baseline: read + CSafeLoader only", f"{base_wall:.2f} s wall", f"{base_cpu:.2f} s CPU"),
        ("audit / baseline", f"{wall / base_wall:.2f}x wall", f"{cpu / base_cpu:.2f}x CPU"),
        ("per entry", f"{wall / ENTRIES * 1e6:.0f} us wall", f"{cpu / ENTRIES * 1e6:.0f} us CPU"),
        ("findings / candidates", f"{len(doc['findings'])}", f"{len(doc['candidates'])}"),
    ]
    print("\nfile-ledger benchmark (target: audit of 10,000 entries < 5 s)")
    for row in rows:
        print("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, (40, 16, 28), strict=True)))
    assert cpu < TARGET_S, f"audit of {ENTRIES} entries used {cpu:.2f} s of CPU (target {TARGET_S} s)"
