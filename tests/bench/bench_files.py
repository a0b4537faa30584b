"""File-ledger benchmark (``make bench``): auditing 10,000 entries, side by side with a baseline.

The entries are in the reference memory-ledger format (docs/file-ledger.md: ``fact`` in the front
matter, whole-day dates, a free Markdown body of context and evidence notes).

* ``audit_directory`` over 10,000 entries in nested directories (chains of 1-5 across
  them, a few invalid, expired, out-of-scope and overdue entries), interleaved in rounds with
* the baseline: reading every file and loading its front matter with PyYAML's
  libyaml ``CSafeLoader`` — no rule, no screening, no chains: about what any
  auditor pays at least (target: at most 3x);
* the command line, start-up included: ``memledger files audit --format markdown``
  (the reference's report) and ``--format json``, each run once after the rounds.

Target: the audit of 10,000 entries in under 5 s, through the command line with its
start-up. The in-process assertion is on CPU time (on this shared 2-core machine wall
time mostly measures the other processes; it is printed beside it). The figures are
recorded in ``docs/performance.md``.
"""

from __future__ import annotations

import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from ledger.files import AuditReport, audit_directory, entry_files
from tests.bench.conftest import Sample, interleave, note, once, report
from tests.ledger.files.helpers import AS_OF, SCOPE, entry

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


FACTS = BODIES


def _name(i: int) -> str:
    return f"team-{i // 1000}/e{i:05d}.md"  # ten subdirectories: ids are relative paths


def _entry(i: int, chain_pos: int, chain_len: int, base: int) -> str:
    # superseded-by names the successor's basename: unique, so the audit resolves it across directories.
    sup = f"e{base + chain_pos + 1:05d}.md" if chain_pos < chain_len - 1 else None
    fact = FACTS[i % len(FACTS)].format(i=i)
    notes = NOTES.format(i=i)
    if i % 97 == 0:
        return entry(conf="1.7", sup=sup, fact=fact, body=notes)  # invalid
    if i % 89 == 0:
        return entry(sref="acme/gadgets", sup=sup, fact=fact, body=notes)  # out of scope
    if i % 83 == 0:
        return entry(expires="2025-02-01", sup=sup, fact=fact, body=notes)  # expired
    if i % 7 == 0:
        return entry(
            expires=None, review="2025-09-30", auth="false", kind="inferred", conf="0.6", sup=sup, fact=fact, body=notes
        )
    ref = f"https://tracker.example/ACME-{i}"
    return entry(ref=ref, auth="true" if i % 10 == 0 else "false", sup=sup, fact=fact, body=notes)


NOTES = """
## Context

Recorded while reviewing change {i}; it applies to this repository only.

## Evidence notes

The linked ticket states the fact in its description. It does not say who approved it.
"""


def build(directory: Path, count: int = ENTRIES) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    i = 0
    while i < count:
        length = min(1 + (i // 5) % 5, count - i)  # chains of 1, 2, 3, 4, 5, 1, ...
        for pos in range(length):
            path = directory / _name(i + pos)
            path.parent.mkdir(exist_ok=True)
            path.write_text(_entry(i + pos, pos, length, i), encoding="utf-8")
        i += length
    return directory


def _baseline(directory: Path) -> int:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: the fastest naive parse
    loaded = 0
    for path in entry_files(directory):
        front = path.read_text(encoding="utf-8").split("---\n", 2)[1]
        loaded += bool(yaml.load(front, Loader=loader))  # a safe loader
    return loaded


def _cli(directory: Path, fmt: str) -> tuple[subprocess.CompletedProcess[str], float, float]:
    cmd = [str(Path(sys.executable).with_name("memledger")), "files", "audit", str(directory), "--scope", SCOPE]
    cmd += ["--as-of", AS_OF.isoformat(), "--format", fmt]
    started, children = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return proc, wall, (after.ru_utime + after.ru_stime) - (children.ru_utime + children.ru_stime)


def _startup() -> tuple[float, float]:
    cmd = [str(Path(sys.executable).with_name("memledger")), "files", "--help"]
    started, children = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, capture_output=True, text=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter() - started, (after.ru_utime + after.ru_stime) - (children.ru_utime + children.ru_stime)


def test_audit_10000_entries(tmp_path: Path) -> None:
    directory = build(tmp_path / "memories")
    cpu: list[float] = []
    reports: list[AuditReport] = []

    def ours(_round: int) -> Sample:
        sample = once(lambda: reports.append(audit_directory(directory, scope=SCOPE, as_of=AS_OF)))
        cpu.append(sample.cpu_s)
        return sample

    def baseline(_round: int) -> Sample:
        return once(lambda: _baseline(directory))

    samples = interleave({"ours": ours, "baseline": baseline}, rounds=3, warmup=1)
    figure = report(
        "files audit, 10,000 entries (whole run)",
        samples["ours"],
        samples["baseline"],
        target=3.0,
        baseline_label="read + libyaml CSafeLoader, no rules",
    )
    cli = {fmt: _cli(directory, fmt) for fmt in ("markdown", "json")}
    cpu_s = statistics.median(cpu[1:])
    wall_s = statistics.median(x.wall_s for x in samples["ours"])
    note(
        f"audit of {ENTRIES:,} entries: {wall_s:.2f} s wall, {cpu_s:.2f} s CPU "
        f"({cpu_s / ENTRIES * 1e6:.0f} us CPU per entry); target < {TARGET_S:g} s"
    )
    for fmt, (_proc, wall, cpu_cli) in cli.items():
        note(f"memledger files audit --format {fmt}, start-up included: {wall:.2f} s wall, {cpu_cli:.2f} s CPU")
    start_wall, start_cpu = _startup()
    note(f"memledger files --help (start-up alone): {start_wall:.2f} s wall, {start_cpu:.2f} s CPU")
    doc = json.loads(cli["json"][0].stdout)
    note(f"{len(doc['findings'])} findings, {len(doc['candidates'])} candidates")
    markdown = cli["markdown"][0].stdout

    assert all(proc.returncode == 1 for proc, _, _ in cli.values()), cli["json"][0].stderr
    assert markdown.startswith("# Memory ledger audit\n") and "| Entries scanned | 10000 |" in markdown
    assert len(reports[-1].entries) == ENTRIES
    assert len(doc["candidates"]) == len(reports[-1].candidates) > 0
    # Basenames resolve across directories: a link finds no target only when its target is invalid.
    final = reports[-1]
    invalid = {Path(name).name for name in final.invalid}
    assert final.chains.chains and final.chains.missing
    assert all(target in invalid for target in final.chains.missing.values())
    assert cpu_s < TARGET_S, f"audit of {ENTRIES} entries used {cpu_s:.2f} s of CPU (target {TARGET_S} s)"
    for fmt, (_, _, cpu_cli) in cli.items():
        assert cpu_cli < TARGET_S, f"memledger files audit --format {fmt} used {cpu_cli:.2f} s of CPU"
    figure.check()
