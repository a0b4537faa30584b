"""PostgreSQL: a save against a bare psycopg transaction with one insert, measured in the same run.

``make bench`` (or ``pytest -m bench tests/bench/bench_postgres.py -s``). The bare transaction
is what any write costs on this server: ``BEGIN``, one ``INSERT`` of a body, ``COMMIT`` (the
commit's WAL flush is most of it). Target: a save costs at most twice as much. Also printed:
a consolidation run's claim and settlement, each a transaction of its own.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from functools import partial
from typing import Any

import psycopg
import pytest

from consolidation import ConsolidationService, Outcome
from consolidation import runs as R
from ledger import Ledger, Transaction, open_ledger
from tests.bench.conftest import Sample, interleave, median, note, per_op, report
from tests.conftest import PG_URL, durable

pytestmark = pytest.mark.bench

SAVES = 100
ROUNDS = 15


@pytest.fixture
def pg(pg_schema: str) -> Iterator[Ledger]:
    led = open_ledger(durable(pg_schema), migrate=True)
    led.set_budget(led.scope_key, 1_000_000)
    yield led
    led.close()


@pytest.fixture
def bare(pg_schema: str) -> Iterator[psycopg.Connection[Any]]:
    """A plain psycopg connection to the same schema, with a table of its own."""
    schema = pg_schema.rsplit("%3D", 1)[1]
    conn = psycopg.connect(PG_URL.replace("postgresql+psycopg://", "postgresql://"), options=f"-csearch_path={schema}")
    conn.execute("CREATE TABLE bare (id bigserial PRIMARY KEY, body text NOT NULL, at bigint NOT NULL)")
    conn.commit()
    yield conn
    conn.close()


def _load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def test_a_save_costs_at_most_twice_a_bare_transaction(pg: Ledger, bare: psycopg.Connection[Any]) -> None:
    note(f"load: {_load()}")

    def ours(r: int) -> Sample:
        return per_op(lambda i: pg.save(f"pin {r}.{i}: the staging database is on port 5433"), SAVES)

    def raw(r: int) -> Sample:
        def one(i: int) -> None:
            with bare.transaction():
                bare.execute(
                    "INSERT INTO bare (body, at) VALUES (%s, %s)",
                    (f"pin {r}.{i}: the staging database is on port 5433", i),
                )

        return per_op(one, SAVES)

    samples = interleave({"ours": ours, "bare": raw}, rounds=ROUNDS)
    figure = report(
        "PostgreSQL save vs bare psycopg transaction",
        samples["ours"],
        samples["bare"],
        target=2.0,
        baseline_label="bare psycopg BEGIN/INSERT/COMMIT",
    )
    note(f"load: {_load()}")
    figure.check()


def test_a_runs_claim_and_settlement(pg: Ledger) -> None:
    svc = ConsolidationService(pg)
    svc.update_settings(pg.scope_key, mode="apply", debounce_s=0)
    for i in range(50):
        pg.save(f"pin {i} about the deploy region")
    claims: list[float] = []
    settles: list[float] = []

    def settle(tx: Transaction, run_id: str) -> bool:
        return R.settle(tx, run_id, Outcome.APPLIED, tx.now_us)

    for _ in range(60):
        pending = svc.notify_turn(pg.scope_key)
        assert pending is not None
        run = svc.get_run(pending.id)
        started = time.perf_counter()
        assert pg.run(pg.scope_key, partial(svc.consolidation._claim, run=run)) is not None
        claimed = time.perf_counter()
        assert pg.run(pg.scope_key, partial(settle, run_id=run.id))
        claims.append(claimed - started)
        settles.append(time.perf_counter() - claimed)
    note(f"claim (50 active records read) p50 {median(claims) * 1e3:.2f} ms; settle p50 {median(settles) * 1e3:.2f} ms")
    note(f"load: {_load()}")
