"""Consolidation benchmarks (``make bench``): figures measured side by side in one run.

* model calls for a burst of 1,000 chat turns — debounced runs against the naive
  one-run-per-turn, both through the real SDK against the loopback fake (target: 1);
* the overhead of a run beyond the model's own latency — ``execute()`` wall time
  minus the time spent inside ``harness.call``, offline harness, SQLite (target:
  p50 ≤ 5 ms);
* the request text (system + user message) for 200 short pins (≈36 characters)
  per character of bodies (target: ≤ 1.3x), beside Mem0's update prompt over the
  same bodies (``mem0_update_prompt.py``, copied from the ``mem0ai`` wheel);
* the prompt for a 2,000-pin scope against a 200-pin one, the default bound
  (target: ≤ 1.1x: a run's cost does not grow with the scope).

Each test prints its rows; the module prints the whole table at the end. The
figures are recorded in ``docs/performance.md``.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from consolidation import ConsolidationService
from consolidation.candidates import DEFAULT_MAX_PROMPT_CHARS
from consolidation.fake_anthropic import FakeAnthropic
from consolidation.harnesses import HarnessResult, PromptRecord
from consolidation.harnesses.offline import OfflineHarness
from ledger import open_ledger
from tests.bench.conftest import FigureTable
from tests.bench.mem0_update_prompt import get_update_memory_messages
from tests.conftest import T0, Clock

pytestmark = pytest.mark.bench

SCOPE = "account:local"
BURST_TURNS = 1_000
TURN_GAP_S = 0.05  # a turn every 50 ms of simulated time: 1,000 turns in 50 s, inside one debounce
OVERHEAD_RUNS = 300
WARMUP_RUNS = 20  # statement caches and connection pool filled before timing
PROMPT_RECORDS = 200

TABLE = FigureTable("consolidation benchmarks", widths=(44, 14, 14, 10, 4))
table = TABLE.fixture()
record = TABLE.record


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


# -- model calls for a burst ----------------------------------------------------------------


class CountingOffline(OfflineHarness):
    """The offline harness, counting its calls: one per run that reached the model."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def call(self, records: Sequence[PromptRecord], **kwargs: Any) -> HarnessResult:
        self.calls += 1
        return super().call(records, **kwargs)


def burst(path: Path, svc_kwargs: dict[str, Any], settings: dict[str, Any]) -> None:
    """A burst of turns with a worker polling ``run_due`` after every turn, then the quiet period."""
    led = open_ledger(f"sqlite:///{path}", clock=Clock(T0))
    try:
        svc = ConsolidationService(led, **svc_kwargs)
        led.save("I prefer metric units", now=T0)
        led.save("My deploy region is eu-west-1", now=T0)
        svc.update_settings(SCOPE, mode="apply", max_wait_s=None, now=T0, **settings)
        t = 0.0
        for turn in range(BURST_TURNS):
            t = turn * TURN_GAP_S
            svc.notify_turn(SCOPE, now=at(t))
            svc.run_due(now=at(t))
        svc.run_due(now=at(t + settings["debounce_s"] + 1))
    finally:
        led.close()


def test_model_calls_for_a_burst_of_turns(tmp_path: Path) -> None:
    # Debounced, through the real SDK against the fake: the requests that reached the API.
    with FakeAnthropic(operations=[]) as fake:
        burst(
            tmp_path / "debounced.db",
            {"api_key": "test-key", "base_url": fake.base_url},
            {"harness": "anthropic", "model": "claude-haiku-4-5", "debounce_s": 30},
        )
        requests = fake.calls
    # Side by side with the same harness: debounced against one run per turn (debounce 0).
    counted = {}
    for name, debounce_s in (("debounced", 30), ("naive", 0)):
        harness = CountingOffline()
        burst(
            tmp_path / f"{name}-offline.db",
            {"api_key": "", "base_url": "", "harnesses": {"offline": harness}},
            {"harness": "offline", "debounce_s": debounce_s},
        )
        counted[name] = harness.calls
    record(
        f"model calls, burst of {BURST_TURNS:,} turns",
        str(requests),
        f"{counted['naive']:,} (naive)",
        "1",
        requests == 1,
    )
    assert counted["naive"] == BURST_TURNS and counted["debounced"] == 1
    assert requests == 1


# -- overhead of a run beyond the model ----------------------------------------------------------


class TimedOffline(OfflineHarness):
    """The offline harness, timing its own ``call`` (the "model latency" of a run)."""

    def __init__(self, marks: dict[str, float]) -> None:
        super().__init__()
        self.marks = marks
        self.last_call_s = 0.0
        self.last_call_cpu_s = 0.0

    def call(self, records: Sequence[PromptRecord], **kwargs: Any) -> HarnessResult:
        started, cpu_started = time.perf_counter(), time.process_time()
        self.marks["call"] = cpu_started
        try:
            return super().call(records, **kwargs)
        finally:
            self.marks["returned"] = time.process_time()
            self.last_call_s = time.perf_counter() - started
            self.last_call_cpu_s = self.marks["returned"] - cpu_started


# Where a run's CPU time goes, between the marks the service's fault hook and the harness leave.
PHASES = (
    ("claim (read run, claim transaction)", "start", "after_claim"),
    ("read spend and active records", "after_claim", "call"),
    ("store the answer (transaction)", "returned", "after_answer_stored"),
    ("read run, begin, gate", "after_answer_stored", "mid_apply"),
    ("apply, settle, commit", "mid_apply", "after_apply"),
    ("read the settled run", "after_apply", "end"),
)


def test_run_overhead_beyond_the_model(tmp_path: Path) -> None:
    # Given a SQLite scope of 50 distinct pins, and a duplicate pinned before every run
    clock = Clock(T0)
    led = open_ledger(f"sqlite:///{tmp_path / 'overhead.db'}", clock=clock)
    try:
        marks: dict[str, float] = {}
        harness = TimedOffline(marks)
        svc = ConsolidationService(
            led,
            api_key="",
            base_url="",
            harnesses={"offline": harness},
            fault_hook=lambda step: marks.__setitem__(step, time.process_time()),
        )
        phases: dict[str, list[float]] = {name: [] for name, _, _ in PHASES}
        pins = realistic_pins(50, seed=7)
        ungrouped = [pin for pin in pins if pin[2] is None]  # a duplicate in a conflict group would replace it
        for body, kind, group in pins:
            led.save(body, kind=kind, conflict_group=group, now=T0)
        svc.update_settings(SCOPE, mode="apply", harness="offline", debounce_s=0, now=T0)
        overheads, cpu_overheads, models, merged = [], [], [], 0
        for n in range(WARMUP_RUNS + OVERHEAD_RUNS):
            now = at(1 + n)
            body, kind, _ = ungrouped[n % len(ungrouped)]
            led.save(body.upper() + " ", kind=kind, now=now)  # a noisy duplicate: the run merges it away
            run = svc.notify_turn(SCOPE, now=now)
            assert run is not None
            started, cpu_started = time.perf_counter(), time.process_time()
            marks["start"] = cpu_started
            done = svc.execute(run.id, now=now)
            total, cpu = time.perf_counter() - started, time.process_time() - cpu_started
            marks["end"] = cpu_started + cpu
            assert done is not None and done.outcome == "applied"
            if n < WARMUP_RUNS:
                continue
            merged += done.ops_applied
            overheads.append(total - harness.last_call_s)
            cpu_overheads.append(cpu - harness.last_call_cpu_s)
            models.append(harness.last_call_s)
            for name, begin, end in PHASES:
                phases[name].append(marks[end] - marks[begin])
    finally:
        led.close()
    p50, p95 = _ms(statistics.median(overheads)), _ms(_percentile(overheads, 95))
    model_p50 = _ms(statistics.median(models))
    record(
        "run overhead beyond the model, p50 (SQLite)", f"{p50:.2f} ms", f"model {model_p50:.2f} ms", "<= 5 ms", p50 <= 5
    )
    record("run overhead beyond the model, p95 (SQLite)", f"{p95:.2f} ms", "", "", None)
    cpu_p50 = _ms(statistics.median(cpu_overheads))
    record("  the same, CPU time p50 (load-independent)", f"{cpu_p50:.2f} ms", "", "", None)
    for name, samples in phases.items():
        record(f"    {name}", f"{_ms(statistics.median(samples)):.2f} ms", "", "", None)
    assert merged >= OVERHEAD_RUNS  # every run applied at least one operation
    assert p50 <= 5.0


def _ms(seconds: float) -> float:
    return seconds * 1000


def _percentile(values: Sequence[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


# -- prompt size ------------------------------------------------------------------------------

_SUBJECTS = ["I", "We", "The team", "Our on-call rotation", "My manager", "The mobile app", "Our CI pipeline"]
_PREFERENCES = [
    "prefer metric units in every answer, including recipes and running distances",
    "like short answers with the command first and the explanation after it",
    "prefer TypeScript over JavaScript for new services and strict mode turned on",
    "want dates written as YYYY-MM-DD, never as 03/04/05 which is ambiguous",
    "prefer pytest fixtures over unittest setUp methods and parametrized tests over loops",
    "like dark mode screenshots and diagrams drawn with Mermaid rather than images",
    "prefer British spelling in documentation but American spelling in code identifiers",
]
_FACTS = [
    "deploy region is eu-west-1, with a warm standby in eu-central-1 for disaster recovery",
    "staging database is staging-db-2.internal on port 5433, read replicas on 5434",
    "main repository moved from GitHub to a self-hosted Gitea instance in March 2025",
    "support a long-term release branch, release/4.x, until the end of next year",
    "laptop is a 2023 MacBook Pro with 32 GB of memory, running macOS Sonoma",
    "weekly planning meeting happens on Tuesdays at 10:00 Berlin time and lasts an hour",
    "build cache lives in an S3 bucket called ci-cache-prod and is pruned every 14 days",
]
_DECISIONS = [
    "decided to use PostgreSQL 16 for the billing service after comparing it with MySQL 8 and CockroachDB",
    "chose Redis Streams over Kafka for the notification queue because the volume stays under 1k msg/s",
    "agreed to freeze the public API of version 3 and make only additive changes until version 4 ships",
    "settled on trunk-based development with feature flags instead of long-lived release branches",
    "picked Terraform over Pulumi for infrastructure because the whole team already knows HCL",
]
_CONSTRAINTS = [
    "must never send customer data to a region outside the EU, including logs and crash reports",
    "cannot use GPL-licensed dependencies in the SDK that customers embed in their own products",
    "have to keep every endpoint's p99 latency under 300 ms, measured at the load balancer",
    "must rotate production credentials every 90 days and never commit them to any repository",
]
_KINDS = [("preference", _PREFERENCES), ("fact", _FACTS), ("decision", _DECISIONS), ("constraint", _CONSTRAINTS)]
_GROUPS = ["region", "editor", "units", "database", None, None, None, None, None, None]


def realistic_pins(count: int, *, seed: int) -> list[tuple[str, str, str | None]]:
    """``count`` distinct pins as users write them: subject + clause, mixed kinds, some conflict groups."""
    rng = random.Random(seed)
    pins: list[tuple[str, str, str | None]] = []
    seen: set[str] = set()
    while len(pins) < count:
        kind, clauses = rng.choice(_KINDS)
        body = f"{rng.choice(_SUBJECTS)} {rng.choice(clauses)}"
        if rng.random() < 0.3:
            body += f" (noted in session {rng.randint(100, 999)})"
        if body in seen:
            continue
        seen.add(body)
        group = rng.choice(_GROUPS)
        pins.append((body, kind, None if group is None else f"{group}-{len(pins)}"))
    return pins


_SHORT_TEMPLATES = [
    "I prefer {a} {b} for {c}",
    "Use {a} {b} in {c}",
    "My {c} runs on {a} {b}",
    "Never use {a} {b} for {c}",
    "Our {c} uses {a} {b}",
    "Reply with {a} {b} about {c}",
]
_SHORT_A = ["short", "plain", "dark", "metric", "strict", "local", "small", "fast", "typed", "async", "weekly", "clear"]
_SHORT_B = ["answers", "units", "mode", "tables", "logs", "builds", "tests", "notes", "fonts", "tabs", "dates", "maps"]
_SHORT_C = ["work", "reviews", "Python", "docs", "the API", "billing", "mobile", "CI", "recipes", "travel", "SQL", "Go"]


def short_pins(count: int, *, seed: int) -> list[tuple[str, str, str | None]]:
    """``count`` distinct short pins (mean about 36 characters), mixed kinds, some in a conflict group."""
    rng = random.Random(seed)
    pins: list[tuple[str, str, str | None]] = []
    seen: set[str] = set()
    while len(pins) < count:
        body = rng.choice(_SHORT_TEMPLATES).format(
            a=rng.choice(_SHORT_A), b=rng.choice(_SHORT_B), c=rng.choice(_SHORT_C)
        )
        if rng.random() < 0.65:
            body += f", since v{rng.randint(1, 99)}"
        if body in seen:
            continue
        seen.add(body)
        group = rng.choice(_GROUPS)
        pins.append((body, rng.choice(_KINDS)[0], None if group is None else f"{group}-{len(pins)}"))
    return pins


def sent_prompt(path: Path, pins: Sequence[tuple[str, str, str | None]], **settings: Any) -> tuple[str, str]:
    """(system, user message) of the one request a real run over ``pins`` sends, read at the fake."""
    led = open_ledger(f"sqlite:///{path}", clock=Clock(T0))
    try:
        with FakeAnthropic(operations=[]) as fake:
            svc = ConsolidationService(led, api_key="test-key", base_url=fake.base_url)
            led.set_budget(SCOPE, max(1000, 2 * len(pins)))
            for body, kind, group in pins:
                led.save(body, kind=kind, conflict_group=group, now=T0)
            svc.update_settings(
                SCOPE, mode="apply", harness="anthropic", model="claude-haiku-4-5", debounce_s=0, now=T0, **settings
            )
            svc.notify_turn(SCOPE, now=at(1))
            svc.run_due(now=at(1))
            [request] = fake.requests
    finally:
        led.close()
    return request.json["system"], request.json["messages"][0]["content"]


def test_prompt_size_against_the_raw_bodies(tmp_path: Path) -> None:
    # The whole request text (system + user message) exactly as a run sends it, read at the fake.
    pins = short_pins(PROMPT_RECORDS, seed=11)
    system, user = sent_prompt(tmp_path / "short.db", pins)
    raw = sum(len(body) for body, _, _ in pins)
    ratio = (len(system) + len(user)) / raw
    # Mem0's update prompt over the same bodies, side by side: its template, the memories as it lists them.
    mem0 = get_update_memory_messages([{"id": str(n), "text": body} for n, (body, _, _) in enumerate(pins)], [])
    mem0_ratio = len(mem0) / raw
    record(
        f"prompt, {PROMPT_RECORDS} short pins (mean body {raw / len(pins):.0f} ch)",
        f"{len(system) + len(user):,} ch",
        f"{raw:,} ch raw",
        "",
        None,
    )
    record("  system + user / raw bodies", f"{ratio:.3f}x", f"Mem0 {mem0_ratio:.2f}x", "<= 1.4x", ratio <= 1.4)
    record(
        "  of which the fixed system text",
        f"{len(system):,} ch",
        f"Mem0 besides bodies {len(mem0) - raw:,} ch",
        "",
        None,
    )
    long_pins = realistic_pins(PROMPT_RECORDS, seed=11)
    long_system, long_user = sent_prompt(tmp_path / "long.db", long_pins, max_prompt_chars=400_000)
    long_raw = sum(len(body) for body, _, _ in long_pins)
    record(
        f"  {PROMPT_RECORDS} longer pins sent whole (mean {long_raw / len(long_pins):.0f} ch)",
        f"{(len(long_system) + len(long_user)) / long_raw:.3f}x",
        "",
        "",
        None,
    )
    assert ratio <= 1.4  # 1.3 before the update rules and their example joined the system text


def test_prompt_size_does_not_grow_with_the_scope(tmp_path: Path) -> None:
    # The same kind of pins, a scope ten times larger, the default bound: the request stays the same size.
    sizes = {}
    for count in (PROMPT_RECORDS, 10 * PROMPT_RECORDS):
        system, user = sent_prompt(tmp_path / f"scope-{count}.db", realistic_pins(count, seed=5))
        sizes[count] = len(system) + len(user)
    ratio = sizes[10 * PROMPT_RECORDS] / sizes[PROMPT_RECORDS]
    record(
        f"prompt, {10 * PROMPT_RECORDS:,} pins / {PROMPT_RECORDS} pins (mean 103 ch)",
        f"{ratio:.3f}x",
        f"{sizes[PROMPT_RECORDS]:,} ch / {sizes[10 * PROMPT_RECORDS]:,} ch",
        "<= 1.1x",
        ratio <= 1.1,
    )
    # Short pins: 200 of them fit the bound and go whole; 2,000 are cut to the bound.
    short = {}
    for count in (PROMPT_RECORDS, 10 * PROMPT_RECORDS):
        system, user = sent_prompt(tmp_path / f"short-{count}.db", short_pins(count, seed=5))
        short[count] = len(system) + len(user)
    record(
        f"  short pins, {10 * PROMPT_RECORDS:,} / {PROMPT_RECORDS} (the 200 fit whole)",
        f"{short[10 * PROMPT_RECORDS] / short[PROMPT_RECORDS]:.3f}x",
        f"{short[PROMPT_RECORDS]:,} ch / {short[10 * PROMPT_RECORDS]:,} ch",
        "",
        None,
    )
    assert short[10 * PROMPT_RECORDS] <= DEFAULT_MAX_PROMPT_CHARS + 2_000
    assert ratio <= 1.1
