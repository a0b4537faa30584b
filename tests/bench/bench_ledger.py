"""Ledger benchmarks (``make bench``): each figure measured side by side in one run.

* save throughput — ``Ledger.save`` against raw ``sqlite3`` doing the same writes on
  the same schema and pragmas: one ``BEGIN IMMEDIATE`` transaction with the budget
  count, the record insert (whose trigger writes the FTS row), the event insert
  (target: <= 1.5x);
* as-of latency on a full scope (200 active records) as its history grows 3x, at a
  recent and at a mid instant (target: <= 1.2x in CPU time), with the query plan checked;
* sweep time for the same number of due records among 20x more held records
  (target: <= 1.5x in CPU time);
* against LangGraph's ``SqliteStore`` with both sides at ``synchronous=NORMAL``, then both at ``FULL``:
  save vs ``put`` (target: <= 2x the time), edit vs ``put`` over a key (<= 3x), list and get; beside them
  the floor, the ledger's own statements replayed on raw ``sqlite3`` at the same level
  (``tests/bench/sqlite_floor.py``); then where one save's and one edit's time goes on each side, statement
  by statement.

Each figure is the median of interleaved rounds (see ``tests/bench/conftest.py``; the
save target applies to wall-clock time, the scaling targets to CPU time, and both are
printed); the figures and the method are recorded in ``docs/performance.md``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, event

from ledger import Ledger, open_ledger, screen_body, to_micros
from ledger.store import sqlite as ledger_sqlite
from tests.bench.conftest import Sample, interleave, load, median, note, once, per_op, report
from tests.bench.sqlite_floor import LedgerStatements, RawSqlite
from tests.bench.where_time_goes import TimedSqlite, breakdown, sqlite_clock

pytestmark = [pytest.mark.bench, pytest.mark.timeout(900)]

T0 = datetime(2026, 1, 1, tzinfo=UTC)
FAR = datetime(2100, 1, 1, tzinfo=UTC)
SCOPE_SIZE = 200  # the default budget: a full scope

SAVES_PER_ROUND = 100
SAVE_ROUNDS = 41
HISTORY_EDITS = 5  # H = 5 edits of each of the 200 records = 1,000 superseded versions; 3H = 3,000
AS_OF_CALLS_PER_ROUND = 3
AS_OF_ROUNDS = 31
SWEEP_DUE = 200
SWEEP_HELD_FACTOR = 20
SWEEP_ROUNDS = 15

# What a chat user pins: short prose, some of it mentioning ports, versions, codes and regions.
PINS = (
    "I prefer metric units and 24-hour times",
    "The staging cluster runs in eu-west-1; production is in us-east-2",
    "Deploys go out on weekdays before 3pm, never on Fridays",
    "Our Postgres is version 16 and listens on port 5432",
    "Code review needs two approvals for anything under billing/",
    "Answer in British English, keep replies short",
    "The on-call rotation changes every Monday at 09:00 UTC",
    "Use pnpm, not npm, in the web repository",
    "My manager is Priya; the team is platform-infra",
    "Release branches are named release/YYYY.MM",
)


def pin(r: int, i: int) -> str:
    return f"{PINS[i % len(PINS)]} (note {r}.{i})"


def count(led: Ledger, sql: str) -> int:
    with led.engine.connect() as conn:
        raw = conn.connection.dbapi_connection
        assert raw is not None
        return int(raw.execute(sql).fetchone()[0])


# --------------------------------------------------------------------------- save
def test_save_throughput_against_raw_sqlite3(tmp_path: Path) -> None:
    # Given the ledger and a raw sqlite3 connection on two files of the same schema
    base = open_ledger(f"sqlite:///{tmp_path / 'ours.db'}")
    raw = RawSqlite(tmp_path / "raw.db", checkpoints_aside=True)
    inline = RawSqlite(tmp_path / "raw-inline.db")  # checkpoints in the commit past 1,000 pages, SQLite's default

    # When each round saves 100 pins into a fresh scope of each (a scope holds at most 200)
    def ours(r: int) -> Sample:
        led = Ledger(base.engine, account=f"save{r}")
        start = T0 + timedelta(days=r)
        return per_op(lambda i: led.save(pin(r, i), now=start + timedelta(seconds=i)), SAVES_PER_ROUND)

    def hand_written(db: RawSqlite) -> Callable[[int], Sample]:
        def baseline(r: int) -> Sample:
            scope = f"account:save{r}"
            db.add_scope(scope, SCOPE_SIZE)
            db.checkpoint()
            start_us = to_micros(T0 + timedelta(days=r))
            return per_op(lambda i: db.save(scope, pin(r, i), start_us + i * 1_000_000), SAVES_PER_ROUND)

        return baseline

    def ledger_sql(r: int) -> Sample:
        scope = f"account:save{r}"
        start_us = to_micros(T0 + timedelta(days=r))
        replay.checkpoint()
        return per_op(lambda i: replay.save(scope, pin(r, i), start_us + i * 1_000_000), SAVES_PER_ROUND)

    def screening(r: int) -> Sample:
        return per_op(lambda i: screen_body(pin(r, i)), SAVES_PER_ROUND)

    replay = LedgerStatements(tmp_path / "replay.db", checkpoints_aside=True)
    samples = interleave(
        {
            "ours": ours,
            "raw": hand_written(raw),
            "raw-inline": hand_written(inline),
            "ledger-sql": ledger_sql,
            "screening": screening,
        },
        rounds=SAVE_ROUNDS,
    )

    # Then the ledger stays within 1.5x of the raw writes
    figure = report(
        "save, per record",
        samples["ours"],
        samples["raw"],
        target=1.5,
        baseline_label="raw sqlite3, same 4 writes, checkpoints between rounds",
    )
    wall = {name: median([s.wall_s for s in runs]) for name, runs in samples.items()}
    note(
        f"raw sqlite3 checkpointing in its commits (SQLite's default): {wall['raw-inline'] * 1e6:.0f} us, "
        f"{wall['ours'] / wall['raw-inline']:.2f}x"
    )
    note(f"saves per second: memledger {1 / wall['ours']:,.0f}, raw sqlite3 {1 / wall['raw']:,.0f}")
    note(
        f"the ledger's own {LedgerStatements.STATEMENTS} statements replayed on raw sqlite3: "
        f"{wall['ledger-sql'] * 1e6:.0f} us "
        f"({wall['ledger-sql'] / wall['raw']:.2f}x raw); body screening: {wall['screening'] * 1e6:.1f} us"
    )
    # Both did the same writes: the same rows, events and FTS entries
    fts = "SELECT COUNT(*) FROM memory_fts WHERE memory_fts MATCH '\"weekdays\"'"
    for sql in ("SELECT COUNT(*) FROM memory_records", "SELECT COUNT(*) FROM ledger_events", fts):
        assert count(base, sql) == raw.count(sql), sql
    raw.close()
    inline.close()
    replay.close()
    base.close()
    figure.check()


# --------------------------------------------------------------------------- as-of
def build_history(led: Ledger, edits: int) -> list[datetime]:
    """A full scope (200 active records) whose records were each edited ``edits`` times.

    Returns the instant of every write, in order: 200 saves, then ``edits`` rounds that
    supersede each record once. The scope ends with 200 active records and
    ``200 * edits`` superseded versions.
    """
    instants: list[datetime] = []
    heads: list[str] = []
    t = T0
    for i in range(SCOPE_SIZE):
        t += timedelta(minutes=1)
        heads.append(led.save(pin(0, i), now=t).id)
        instants.append(t)
    for e in range(1, edits + 1):
        for i in range(SCOPE_SIZE):
            t += timedelta(minutes=1)
            heads[i] = led.save(pin(e, i), supersedes=heads[i], now=t).id
            instants.append(t)
    return instants


def recent_and_mid(instants: list[datetime]) -> tuple[datetime, datetime]:
    """Half-way through the last edit round, and half-way through the whole history."""
    return instants[-SCOPE_SIZE // 2], instants[len(instants) // 2]


@pytest.fixture
def captured_sql(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Engine], list[tuple[str, Any]]]]:
    """``capture(engine)`` starts recording the statements (and parameters) the engine runs.

    Reads go either through SQLAlchemy (seen by its ``before_cursor_execute`` event) or
    straight to the sqlite3 cursor through ``ledger.store.sqlite._exec_dbapi`` (wrapped here).
    """
    listening: list[tuple[Engine, Callable[..., None]]] = []
    seen: list[tuple[str, Any]] = []
    direct = ledger_sqlite._exec_dbapi

    def recording(dbapi_conn: Any, sql: str, params: Any) -> Any:
        seen.append((sql, params))
        return direct(dbapi_conn, sql, params)

    def capture(engine: Engine) -> list[tuple[str, Any]]:
        def on_execute(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_args: Any) -> None:
            seen.append((statement, parameters))

        event.listen(engine, "before_cursor_execute", on_execute)
        listening.append((engine, on_execute))
        monkeypatch.setattr(ledger_sqlite, "_exec_dbapi", recording)
        return seen

    yield capture
    for engine, fn in listening:
        event.remove(engine, "before_cursor_execute", fn)


def test_as_of_is_flat_as_history_grows(
    tmp_path: Path, captured_sql: Callable[[Engine], list[tuple[str, Any]]]
) -> None:
    # Given two full scopes in one database, one with 3x the other's history
    base = open_ledger(f"sqlite:///{tmp_path / 'asof.db'}")
    short, long = Ledger(base.engine, account="history-h"), Ledger(base.engine, account="history-3h")
    short_recent, short_mid = recent_and_mid(build_history(short, HISTORY_EDITS))
    long_recent, long_mid = recent_and_mid(build_history(long, 3 * HISTORY_EDITS))
    cases = {
        "h-recent": (short, short_recent),
        "3h-recent": (long, long_recent),
        "h-mid": (short, short_mid),
        "3h-mid": (long, long_mid),
    }
    for led, at in cases.values():
        assert len(led.list_as_of(led.scope_key, at)) == SCOPE_SIZE

    # When list_as_of runs at a recent and at a mid instant on each, interleaved
    def reading(led: Ledger, at: datetime) -> Callable[[int], Sample]:
        return lambda _r: per_op(lambda _i: led.list_as_of(led.scope_key, at), AS_OF_CALLS_PER_ROUND)

    samples = interleave({name: reading(*case) for name, case in cases.items()}, rounds=AS_OF_ROUNDS)

    # Then the cost (CPU time: the same code on other data, so other tenants' load is noise) stays flat
    labels = {"ours_label": "3H (3,000 versions)", "baseline_label": "H (1,000 versions)", "metric": "cpu"}
    recent = report("as-of at a recent instant, 3H vs H", samples["3h-recent"], samples["h-recent"], 1.2, **labels)
    mid = report("as-of at a mid instant, 3H vs H", samples["3h-mid"], samples["h-mid"], 1.2, **labels)
    # And its queries use the as-of index; the SQL alone grows only by the index entries it skips
    seen = captured_sql(base.engine)
    short.list_as_of(short.scope_key, short_mid)
    short_sql = [(sql, params) for sql, params in seen if "memory_records" in sql]
    seen.clear()
    long.list_as_of(long.scope_key, long_mid)
    long_sql = [(sql, params) for sql, params in seen if "memory_records" in sql]
    plans = explain(tmp_path / "asof.db", long_sql)
    for plan in plans:
        note(f"plan: {' / '.join(plan)}")
    sql_only = time_sql(tmp_path / "asof.db", {"3h": long_sql, "h": short_sql})
    h_us, long_us = (median([s.cpu_s for s in sql_only[k]]) * 1e6 for k in ("h", "3h"))
    note(f"the as-of SQL alone at the mid instant (raw sqlite3): H {h_us:.0f} us, 3H {long_us:.0f} us")
    assert plans and all(any("ix_memory_records_asof" in step for step in plan) for plan in plans), plans
    base.close()
    recent.check()
    mid.check()


def time_sql(path: Path, statements: dict[str, list[tuple[str, Any]]]) -> dict[str, list[Sample]]:
    """Each named list of statements run on a raw sqlite3 connection, interleaved."""
    conn = sqlite3.connect(path)

    def running(batch: list[tuple[str, Any]]) -> Callable[[int], Sample]:
        return lambda _r: per_op(lambda _i: [conn.execute(sql, params).fetchall() for sql, params in batch], 20)

    try:
        return interleave({name: running(batch) for name, batch in statements.items()}, rounds=AS_OF_ROUNDS)
    finally:
        conn.close()


def explain(path: Path, statements: list[tuple[str, Any]]) -> list[list[str]]:
    conn = sqlite3.connect(path)
    try:
        return [[row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)] for sql, params in statements]
    finally:
        conn.close()


# --------------------------------------------------------------------------- sweep
def hold(led_engine: Engine, held: int) -> None:
    """``held`` active records (full scopes of 200) that expire, but long after any sweep here."""
    for k in range(0, held, SCOPE_SIZE):
        led = Ledger(led_engine, account=f"held{k // SCOPE_SIZE}")
        for i in range(min(SCOPE_SIZE, held - k)):
            led.save(pin(k, i), now=T0, expires_at=FAR + timedelta(minutes=k + i))


def test_sweep_cost_follows_what_is_due(tmp_path: Path) -> None:
    # Given two databases holding N and 20N records that are not due
    small = open_ledger(f"sqlite:///{tmp_path / 'held-n.db'}")
    large = open_ledger(f"sqlite:///{tmp_path / 'held-20n.db'}")
    hold(small.engine, SWEEP_DUE)
    hold(large.engine, SWEEP_HELD_FACTOR * SWEEP_DUE)

    # When each round saves N records due within the hour into each and sweeps after it
    def sweeping(base: Ledger) -> Callable[[int], Sample]:
        def one_round(r: int) -> Sample:
            due = Ledger(base.engine, account=f"due{r}")
            saved_at = T0 + timedelta(days=r + 1)
            for i in range(SWEEP_DUE):
                due.save(pin(r, i), now=saved_at, expires_at=saved_at + timedelta(hours=1, microseconds=i))
            expired: list[int] = []
            sample = once(lambda: expired.append(base.sweep_expired(saved_at + timedelta(hours=2))))
            assert expired == [SWEEP_DUE]
            return sample

        return one_round

    samples = interleave({"20n": sweeping(large), "n": sweeping(small)}, rounds=SWEEP_ROUNDS, warmup=1)

    # Then the sweep costs what is due, not what is held
    figure = report(
        f"sweep of {SWEEP_DUE} due, {SWEEP_HELD_FACTOR}x vs 1x held",
        samples["20n"],
        samples["n"],
        target=1.5,
        metric="cpu",  # our code on two data sets: CPU time is its cost, whatever else the machine runs
        ours_label=f"{SWEEP_HELD_FACTOR * SWEEP_DUE:,} held",
        baseline_label=f"{SWEEP_DUE} held",
    )
    note(f"per due record: {figure.ours_s / SWEEP_DUE * 1e6:.0f} us among {SWEEP_HELD_FACTOR}x held")
    small.close()
    large.close()
    figure.check()


# --------------------------------------------------------------------------- LangGraph's SqliteStore
LANGGRAPH_N = 1_500
LANGGRAPH_ROUNDS = 5
BREAKDOWN_N = 300
# PRAGMA synchronous reads back as a number
SYNCHRONOUS_LEVEL = {"normal": 1, "full": 2}


class LangGraphStore:
    """LangGraph's ``SqliteStore`` (the store LangMem keeps memories in) on a WAL file of its own, at ``synchronous``.

    Its connection is a :class:`TimedSqlite` (a plain sqlite3 connection until a statement clock is set).
    """

    def __init__(self, path: Path, synchronous: str) -> None:
        from langgraph.store.sqlite import SqliteStore

        self.conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None, factory=TimedSqlite)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
        self.store = SqliteStore(self.conn)
        self.store.setup()

    def close(self) -> None:
        self.conn.close()


@pytest.mark.parametrize("synchronous", ["normal", "full"])
def test_side_by_side_with_langgraph_sqlite_store(
    tmp_path: Path, synchronous: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same 1,500 bodies, file SQLite in WAL on both sides at the same ``PRAGMA synchronous``, one process,
    interleaved rounds; then where one save's and one edit's time goes, statement by statement, on both sides."""
    pytest.importorskip("langgraph.store.sqlite", reason="pip install -e '.[bench]' (make bench does)")
    note(f"both sides at synchronous={synchronous.upper()}; load: {load()}")
    base = open_ledger(f"sqlite:///{tmp_path / 'ours.db'}", sqlite_synchronous=synchronous)
    theirs = LangGraphStore(tmp_path / "langgraph.db", synchronous)
    assert theirs.conn.execute("PRAGMA synchronous").fetchone()[0] == SYNCHRONOUS_LEVEL[synchronous]
    with base.engine.connect() as conn:
        level = conn.exec_driver_sql("PRAGMA synchronous").scalar()
    assert level == SYNCHRONOUS_LEVEL[synchronous]
    bodies = [pin(0, i) for i in range(LANGGRAPH_N)]
    scopes: dict[int, Ledger] = {}
    recs: dict[int, list[str]] = {}
    level_name = synchronous.upper()

    def ours_save(r: int) -> Sample:
        led = scopes[r] = Ledger(base.engine, account=f"lg{r}")
        led.set_budget(led.scope_key, LANGGRAPH_N + 10)
        out = recs[r] = []
        return per_op(lambda i: out.append(led.save(bodies[i]).id), LANGGRAPH_N)

    def their_put(r: int) -> Sample:
        return per_op(lambda i: theirs.store.put(("memories", f"lg{r}"), f"k{i}", {"text": bodies[i]}), LANGGRAPH_N)

    # The floor: the ledger's own statements on raw sqlite3 at the same level, no ledger code around them
    floor = LedgerStatements(tmp_path / "floor.db", checkpoints_aside=True, synchronous=synchronous)
    floor_ids: dict[int, list[str]] = {}

    def floor_save(r: int) -> Sample:
        floor.checkpoint()
        out = floor_ids[r] = []
        start_us = to_micros(T0 + timedelta(days=r))
        return per_op(lambda i: out.append(floor.save(f"account:floor{r}", bodies[i], start_us + i)), LANGGRAPH_N)

    saves = interleave({"ours": ours_save, "theirs": their_put, "floor": floor_save}, rounds=LANGGRAPH_ROUNDS, warmup=1)
    save_fig = report(
        f"SQLite {level_name}: save vs SqliteStore.put",
        saves["ours"],
        saves["theirs"],
        target=2.0,  # at least half LangGraph's saves per second
        baseline_label=f"LangGraph SqliteStore.put at {level_name}",
    )
    last = max(scopes)

    def ours_list(r: int) -> Sample:
        return once(lambda: scopes[last].list(scopes[last].scope_key))

    def their_search(r: int) -> Sample:
        return once(lambda: theirs.store.search(("memories", f"lg{last}"), limit=LANGGRAPH_N))

    lists = interleave({"ours": ours_list, "theirs": their_search}, rounds=15)
    list_fig = report(
        f"SQLite {level_name}: list 1,500 vs search(limit=1500)",
        lists["ours"],
        lists["theirs"],
        target=1.0,
        baseline_label="LangGraph SqliteStore.search",
    )
    ids = recs[last]

    def ours_get(r: int) -> Sample:
        return per_op(lambda i: scopes[last].get(ids[i]), 200)

    def their_get(r: int) -> Sample:
        return per_op(lambda i: theirs.store.get(("memories", f"lg{last}"), f"k{i}"), 200)

    gets = interleave({"ours": ours_get, "theirs": their_get}, rounds=9)
    get_fig = report(f"SQLite {level_name}: get one vs get", gets["ours"], gets["theirs"], target=2.0)
    edited: dict[int, str] = {}

    def edit(r: int, i: int) -> None:
        led = scopes[last]
        key = (r * 100 + i) % len(ids)
        new = led.save(bodies[key] + " (edited)", supersedes=edited.get(key, ids[key]))
        edited[key] = new.id

    def overwrite(r: int, i: int) -> None:
        theirs.store.put(("memories", f"lg{last}"), f"k{(r * 100 + i) % len(ids)}", {"text": "edited"})

    floor_last = floor_ids[max(floor_ids)]
    floor_clock = [to_micros(FAR)]

    def floor_edit(r: int, i: int) -> None:
        key = (r * 100 + i) % len(floor_last)
        floor_clock[0] += 1
        floor_last[key] = floor.edit(f"account:floor{max(floor_ids)}", floor_last[key], bodies[key], floor_clock[0])

    def floor_edits(r: int) -> Sample:
        floor.checkpoint()
        return per_op(partial(floor_edit, r), 100)

    edits = interleave(
        {
            "ours": lambda r: per_op(partial(edit, r), 100),
            "theirs": lambda r: per_op(partial(overwrite, r), 100),
            "floor": floor_edits,
        },
        rounds=9,
    )
    edit_fig = report(
        f"SQLite {level_name}: edit vs put over a key",
        edits["ours"],
        edits["theirs"],
        target=3.0,
        baseline_label=f"LangGraph SqliteStore.put over a key at {level_name}",
    )
    wall = {name: median([s.wall_s for s in runs]) for name, runs in saves.items()}
    note(f"saves per second: memledger {1 / wall['ours']:,.0f}, LangGraph SqliteStore {1 / wall['theirs']:,.0f}")
    edit_wall = {name: median([s.wall_s for s in runs]) for name, runs in edits.items()}
    note(
        f"the floor at {level_name}, the ledger's own statements on raw sqlite3 with no ledger code around them "
        f"(checkpoints between rounds): save {wall['floor'] * 1e6:.0f} us = {wall['floor'] / wall['theirs']:.2f}x "
        f"a put (target 2x), edit {edit_wall['floor'] * 1e6:.0f} us = "
        f"{edit_wall['floor'] / edit_wall['theirs']:.2f}x a put over a key (target 3x)"
    )
    floor.close()

    # Where one save's and one edit's time goes (hooks on both drivers; writes of their own, after the figures)
    fresh = Ledger(base.engine, account="breakdown")
    fresh.set_budget(fresh.scope_key, BREAKDOWN_N + 10)
    with sqlite_clock(monkeypatch) as clock:
        breakdown(clock, lambda i: fresh.save(bodies[i]), BREAKDOWN_N, f"memledger save at {level_name}")
    with sqlite_clock(monkeypatch) as clock:
        ns = ("memories", "breakdown")
        breakdown(clock, lambda i: theirs.store.put(ns, f"k{i}", {"text": bodies[i]}), BREAKDOWN_N, "LangGraph put")
    with sqlite_clock(monkeypatch) as clock:
        breakdown(clock, partial(edit, 1_000), BREAKDOWN_N, f"memledger edit at {level_name}")
    with sqlite_clock(monkeypatch) as clock:
        breakdown(clock, partial(overwrite, 1_000), BREAKDOWN_N, "LangGraph put over a key")
    note(f"load: {load()}")
    theirs.close()
    base.close()
    for figure in (save_fig, list_fig, get_fig, edit_fig):
        figure.check()
