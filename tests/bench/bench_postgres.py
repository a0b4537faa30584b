"""PostgreSQL: a save against a bare psycopg transaction with one insert, and against LangGraph's ``PostgresStore``.

``make bench`` (or ``pytest -m bench tests/bench/bench_postgres.py -s``). The bare transaction
is what any write costs on this server: ``BEGIN``, one ``INSERT`` of a body, ``COMMIT`` (the
commit's WAL flush is most of it). Target: a save costs at most twice as much. Also printed:
a consolidation run's claim and settlement, each a transaction of its own.

Against ``PostgresStore`` (the ``bench`` extra) both sides commit durably (``synchronous_commit`` on, checked):
save vs ``put`` (target: at least as many saves per second), edit vs ``put`` over a key (target: at most
1.5x the time), beside them the floor (the ledger's save function called with ready values from a bare
psycopg connection), then where one save's and one edit's time goes on both sides, statement by statement
(``tests/bench/where_time_goes.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import psycopg
import pytest

from consolidation import ConsolidationService, Outcome, runs
from ledger import Ledger, Transaction, open_ledger, validate
from ledger.models import Provenance
from ledger.statements import record_detail
from ledger.store import postgres_save
from tests.bench.conftest import Sample, interleave, load, median, note, per_op, report
from tests.bench.where_time_goes import breakdown, psycopg_clock
from tests.conftest import PG_URL, durable

pytestmark = pytest.mark.bench

SAVES = 100
ROUNDS = 15
STORE_ROUNDS = 9
BREAKDOWN_N = 200


@pytest.fixture
def durable_pg(pg_schema: str) -> Iterator[Ledger]:
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


def test_a_save_costs_at_most_twice_a_bare_transaction(durable_pg: Ledger, bare: psycopg.Connection[Any]) -> None:
    note(f"load: {load()}")

    def ours(r: int) -> Sample:
        return per_op(lambda i: durable_pg.save(f"pin {r}.{i}: the staging database is on port 5433"), SAVES)

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
    note(f"load: {load()}")
    figure.check()


def test_a_runs_claim_and_settlement(durable_pg: Ledger) -> None:
    svc = ConsolidationService(durable_pg)
    svc.update_settings(durable_pg.scope_key, mode="apply", debounce_s=0)
    for i in range(50):
        durable_pg.save(f"pin {i} about the deploy region")
    claims: list[float] = []
    settles: list[float] = []

    def settle(tx: Transaction, run_id: str) -> bool:
        return runs.settle(tx, run_id, Outcome.APPLIED, tx.now_us) is not None

    for _ in range(60):
        pending = svc.notify_turn(durable_pg.scope_key)
        assert pending is not None
        run = svc.get_run(pending.id)
        started = time.perf_counter()
        assert durable_pg.run(durable_pg.scope_key, partial(svc.consolidation.claim, run=run)) is not None
        claimed = time.perf_counter()
        assert durable_pg.run(durable_pg.scope_key, partial(settle, run_id=run.id))
        claims.append(claimed - started)
        settles.append(time.perf_counter() - claimed)
    note(f"claim (50 active records read) p50 {median(claims) * 1e3:.2f} ms; settle p50 {median(settles) * 1e3:.2f} ms")
    note(f"load: {load()}")


@pytest.fixture
def langgraph_store(pg_schema: str) -> Iterator[Any]:
    """LangGraph's ``PostgresStore`` on its own psycopg connection to the same schema (autocommit, as it asks)."""
    pytest.importorskip("langgraph.store.postgres", reason="pip install -e '.[bench]' (make bench does)")
    from langgraph.store.postgres import PostgresStore
    from psycopg.rows import dict_row

    schema = pg_schema.rsplit("%3D", 1)[1]
    conn = psycopg.connect(
        PG_URL.replace("postgresql+psycopg://", "postgresql://"),
        autocommit=True,
        prepare_threshold=0,
        row_factory=dict_row,
        options=f"-csearch_path={schema}",
    )
    store = PostgresStore(conn)
    store.setup()
    yield store
    conn.close()


@contextmanager
def floor_saves(led: Ledger, store: Any, body: str) -> Iterator[Callable[[int], Sample]]:
    """Rounds of the ledger's plain save as the server runs it (``memledger_save``), called with ready values from a
    psycopg connection of its own like LangGraph's: what a save costs with no ledger code around the statement."""
    scoped = Ledger(led.engine, account="floor")
    scoped.set_budget(scoped.scope_key, 1_000_000)  # the function declines a scope without its settings row
    conn = psycopg.connect(store.conn.info.dsn, autocommit=True, prepare_threshold=0)
    detail = record_detail((), Provenance.USER_EXPLICIT)

    def save(r: int, i: int) -> None:
        params = {
            "s": scoped.scope_key,
            "clock": time.time_ns() // 1_000,
            "default_max": 200,
            "id": validate.new_record_id(),
            "kind": "fact",
            "body": body.format(r=r, i=i),
            "session": None,
            "expires": None,
            "detail": detail,
        }
        assert conn.execute(postgres_save.CALL, params).fetchone() != (None,), "the floor's save was declined"

    with conn:
        yield lambda r: per_op(partial(save, r), SAVES)


def test_side_by_side_with_langgraph_postgres_store(
    durable_pg: Ledger, langgraph_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Durable commits on both sides; interleaved rounds; then each write's statements and round trips."""
    note(f"load: {load()}")
    with durable_pg.engine.connect() as conn:
        assert conn.exec_driver_sql("SHOW synchronous_commit").scalar() == "on"
    assert langgraph_store.conn.execute("SHOW synchronous_commit").fetchone()["synchronous_commit"] == "on"
    body = "pin {r}.{i}: the staging database is on port 5433"
    ids: list[str] = []

    def ours_save(r: int) -> Sample:
        return per_op(lambda i: ids.append(durable_pg.save(body.format(r=r, i=i)).id), SAVES)

    def their_put(r: int) -> Sample:
        return per_op(
            lambda i: langgraph_store.put(("memories", "pg"), f"k{r}.{i}", {"text": body.format(r=r, i=i)}), SAVES
        )

    with floor_saves(durable_pg, langgraph_store, body) as floor:
        saves = interleave({"ours": ours_save, "theirs": their_put, "floor": floor}, rounds=STORE_ROUNDS)
    wall = {name: median([s.wall_s for s in runs]) for name, runs in saves.items()}
    note(
        f"the floor, the ledger's save function called from a bare psycopg connection (one round trip, no ledger "
        f"code, no screening): {wall['floor'] * 1e6:.0f} us = {wall['floor'] / wall['theirs']:.2f}x a put (target 1x)"
    )
    save_fig = report(
        "PostgreSQL: save vs PostgresStore.put",
        saves["ours"],
        saves["theirs"],
        target=1.0,  # at least as many saves per second
        baseline_label="LangGraph PostgresStore.put",
    )
    heads: dict[int, str] = {}

    def edit(r: int, i: int) -> None:
        key = (r * SAVES + i) % len(ids)
        heads[key] = durable_pg.save(
            f"edited {r}.{i}: staging moved to port 5434", supersedes=heads.get(key, ids[key])
        ).id

    def overwrite(r: int, i: int) -> None:
        langgraph_store.put(("memories", "pg"), f"k{r % STORE_ROUNDS}.{i}", {"text": f"edited {r}.{i}"})

    edits = interleave(
        {"ours": lambda r: per_op(partial(edit, r), SAVES), "theirs": lambda r: per_op(partial(overwrite, r), SAVES)},
        rounds=STORE_ROUNDS,
    )
    edit_fig = report(
        "PostgreSQL: edit vs put over a key",
        edits["ours"],
        edits["theirs"],
        target=1.5,
        baseline_label="LangGraph PostgresStore.put over a key",
    )
    with psycopg_clock(monkeypatch) as clock:
        breakdown(clock, lambda i: durable_pg.save(body.format(r="b", i=i)), BREAKDOWN_N, "memledger save")
    with psycopg_clock(monkeypatch) as clock:
        put = langgraph_store.put
        breakdown(
            clock,
            lambda i: put(("memories", "b"), f"k{i}", {"text": body.format(r="b", i=i)}),
            BREAKDOWN_N,
            "LangGraph put",
        )
    with psycopg_clock(monkeypatch) as clock:
        breakdown(clock, partial(edit, 1_000), BREAKDOWN_N, "memledger edit")
    with psycopg_clock(monkeypatch) as clock:
        breakdown(clock, partial(overwrite, 0), BREAKDOWN_N, "LangGraph put over a key")
    note(f"load: {load()}")
    save_fig.check()
    edit_fig.check()
