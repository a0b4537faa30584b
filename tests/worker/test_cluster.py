"""A short cluster run (``make test-cluster``, a step of CI after the suite): two API processes, two workers, one
PostgreSQL schema and one Redis of the run's own, the load of ``memledger bench cluster``, then one of each
fault. The database must show no acknowledged save lost, no run applied twice and every run settled. Not a timed
test: it reads only the three counts and that the figures are there."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import PG_URL, service_missing

pytestmark = [pytest.mark.cluster, pytest.mark.postgres, pytest.mark.redis]


@pytest.mark.timeout(900)
def test_a_cluster_loses_a_worker_an_api_process_and_redis_without_losing_a_save_or_applying_a_run_twice(
    pg_available: BaseException | None,
) -> None:
    if pg_available is not None:
        service_missing("PostgreSQL", pg_available)
    args = ["bench", "cluster", "--database-url", PG_URL, "--api", "2", "--workers", "2", "--seconds", "5"]
    command = [sys.executable, "-c", "from worker.cli import main; main()", *args, "--format", "json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, start_new_session=True)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    report = json.loads(done.stdout)
    assert set(report["saves_per_s"]) == set(report["runs_per_s"]) == {"2"}
    assert report["saves_per_s"]["2"] > 0 and report["runs_per_s"]["2"] > 0, report
    faults = report["faults"]
    assert len(faults["faults"]) == 3 and faults["acknowledged_saves"] > 0, faults
    assert (faults["lost_saves"], faults["double_applied"], faults["unsettled"]) == (0, 0, 0), faults


def test_the_cluster_benchmark_refuses_sqlite_and_says_why() -> None:
    args = ["bench", "cluster", "--database-url", "sqlite:///x.db", "--quick"]
    command = [sys.executable, "-c", "from worker.cli import main; main()", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "needs PostgreSQL" in done.stderr, (done.stdout, done.stderr)
