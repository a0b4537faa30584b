"""The replay benchmark on the full default corpus (``make bench``): the offline harness beside both baselines.

Prints the whole table (the one in docs/consolidation-quality.md) and holds the
offline harness to what the normal suite checks on a small corpus: no false merge, no
erased leak, every as-of read exact, and more duplicates merged than ``keep_all``.
"""

from __future__ import annotations

import time

import pytest

from consolidation.replay import BASELINES, DEFAULT_EPISODES, replay
from tests.bench.conftest import FigureTable

pytestmark = pytest.mark.bench

TABLE = FigureTable("replay benchmark (offline | keep_all | latest_wins)", widths=(30, 22, 22, 22, 4))
table = TABLE.fixture()


def test_offline_harness_on_the_default_corpus() -> None:
    started = time.perf_counter()
    report = replay("offline", episodes=DEFAULT_EPISODES, seed=0)
    elapsed = time.perf_counter() - started
    ours = report.tallies["offline"]
    keep_all, latest = (report.tallies[b] for b in BASELINES)
    for name, c in ours.classes.items():
        k, lw = keep_all.classes[name], latest.classes[name]
        TABLE.record(
            f"{name} ({c.episodes}) P/R",
            f"{c.precision():.2f} / {c.recall():.2f}",
            f"{k.precision():.2f} / {k.recall():.2f}",
            f"{lw.precision():.2f} / {lw.recall():.2f}",
        )
    for label, value in (
        ("false merges", lambda t: str(t.false_merges)),
        ("as-of exact", lambda t: f"{t.as_of_exact():.4f}"),
        ("erased leaks", lambda t: str(t.erased_leaks)),
        ("runs / tokens", lambda t: f"{t.runs} / {t.tokens}"),
    ):
        TABLE.record(label, value(ours), value(keep_all), value(latest))
    walls = sorted(ours.run_wall_s)
    TABLE.record("wall per run p50 (ms)", f"{walls[len(walls) // 2] * 1000:.1f}", "", "")
    TABLE.record("whole replay, 3 arms (s)", f"{elapsed:.1f}", "", "")
    assert ours.episodes == 2 * DEFAULT_EPISODES >= 400  # both splits
    assert ours.false_merges == 0
    assert ours.erased_leaks == 0
    assert ours.as_of_exact() == 1.0
    assert ours.classes["duplicate"].recall() > keep_all.classes["duplicate"].recall()
