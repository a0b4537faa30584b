"""Operator page benchmarks (``make bench``): the /ops timeline of a big scope against the ledger's own read.

A scope of 2,000 records, each with its history (an earlier revision closed by an edit), plus
expired and forgotten ones — 4,000+ rows. Measured side by side, interleaved, server time only
(no HTTP):

* ``GET /ops`` for that scope — the snapshot (scopes, runs, sweep), the read of every record and
  revision of the scope, the timeline's SVG and the page template — against the ledger reading
  those records and their histories (``Ledger.records``, every revision in one read). Target: the
  page in <= 3x the read (medians of the per-round ratios, wall clock).
* the timeline alone (the SVG of the records already read) is shown for context.

The figures are recorded in ``docs/performance.md``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from consolidation import ConsolidationService
from ledger import Ledger, open_ledger
from tests.bench.conftest import interleave, once, report
from worker.http.ops_page import render_ops
from worker.http.timeline import render_svg
from worker.snapshot import take_snapshot

pytestmark = [pytest.mark.bench, pytest.mark.timeout(900)]

RECORDS = 2_000
SCOPE = "account:local"
ROUNDS = 11


@pytest.fixture(scope="module")
def big_scope(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Ledger, ConsolidationService]]:
    path: Path = tmp_path_factory.mktemp("ops-bench") / "ops.db"
    led = open_ledger(f"sqlite:///{path}")
    led.set_budget(SCOPE, RECORDS * 2)
    service = ConsolidationService(led)
    t = datetime.now(UTC) - timedelta(days=20)
    step = timedelta(seconds=1)
    for n in range(RECORDS):
        t += step
        first = led.save(f"preference {n}: I like option {n % 7}", now=t, expires_at=t + timedelta(days=10 + n % 30))
        t += step
        led.save(f"preference {n}: I like option {n % 7} (edited)", supersedes=first.id, now=t)
    for n in range(RECORDS // 20):
        t += step
        gone = led.save(f"forgotten note {n}", now=t)
        t += step
        led.delete(gone.id, now=t)
    led.sweep_expired(datetime.now(UTC))
    yield led, service
    led.close()


def test_ops_timeline_renders_within_3x_the_ledger_read(big_scope: tuple[Ledger, ConsolidationService]) -> None:
    led, service = big_scope
    rows = len(led.records(SCOPE))
    assert rows >= 2 * RECORDS

    def page(_r: int) -> object:
        return once(lambda: render_ops(led, take_snapshot(led, service), scope=SCOPE, bound_scope=SCOPE))

    def read(_r: int) -> object:
        return once(lambda: led.records(SCOPE))

    records = led.records(SCOPE)
    now = datetime.now(UTC)

    def svg(_r: int) -> object:
        return once(lambda: render_svg(records, now=now, show_bodies=True))

    samples = interleave({"page": page, "read": read, "svg": svg}, rounds=ROUNDS)  # type: ignore[dict-item]
    figure = report(
        f"/ops page for {RECORDS} records + history ({rows} rows)",
        samples["page"],
        samples["read"],
        target=3.0,
        ours_label="GET /ops (server time)",
        baseline_label="Ledger.records",
    )
    report(
        "timeline SVG alone (records already read)",
        samples["svg"],
        samples["read"],
        target=3.0,
        ours_label="render_svg",
        baseline_label="Ledger.records",
    )
    html = render_ops(led, take_snapshot(led, service), scope=SCOPE, bound_scope=SCOPE)
    assert html.count('class="bar') == rows
    figure.check()
