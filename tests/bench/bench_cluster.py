"""Past one machine: ``memledger bench cluster`` at M = 1, 2 and 4 workers, then with faults (``make bench``).

Two API processes, 16 clients (an account each), a fake model answering in 200 ms, one thread per worker:
each worker runs at most one run at a time, so runs per second can only grow by adding workers. Targets:
runs/s at M = 4 at least 3x M = 1; under faults no acknowledged save lost, no run applied twice, every
run settled (counted from the database). Figures and method: docs/performance.md.
"""

from __future__ import annotations

import pytest

from tests.bench.conftest import note
from tests.conftest import PG_URL
from worker.cluster import ClusterPlan, format_report, run_cluster

pytestmark = pytest.mark.bench


def test_runs_per_second_grow_with_workers_and_faults_lose_nothing() -> None:
    report = run_cluster(ClusterPlan(PG_URL, workers=(1, 2, 4), seconds=15.0), progress=note)
    print("\n" + format_report(report))
    runs = {phase.workers: phase.summary()["runs_per_s"] for phase in report.phases}
    scaling = runs[4] / max(runs[1], 1e-9)
    note(f"runs/s at M=4 / M=1: {scaling:.2f}x (target >= 3x)")
    assert report.faults is not None
    assert (report.faults["lost_saves"], report.faults["double_applied"], report.faults["unsettled"]) == (0, 0, 0)
    assert scaling >= 3.0, runs
