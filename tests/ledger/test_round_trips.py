"""PostgreSQL round trips: how many times a write waits for the server, counted on the wire.

psycopg's libpq trace records every protocol message in order. The server holds its answers
until the client asks for them (``Sync``, ``Flush``, or a simple ``Query``), so each run of
answers in the trace is one round trip.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, create_engine, event, select, text, update

from consolidation import ConsolidationService, Outcome, runs
from ledger import Ledger, open_ledger, validate
from ledger.errors import LedgerError
from ledger.schema import RECORDS
from ledger.store import PostgresStore, Prepared, lit, param, store_for
from ledger.store.postgres import _Plan
from tests.conftest import PG_URL


@pytest.fixture
def pg(pg_migrated: str, clock: Any) -> Iterator[Ledger]:
    led = open_ledger(pg_migrated, migrate=True, clock=clock)
    yield led
    led.close()


@contextmanager
def waits(engine: Engine, tmp_path: Path) -> Iterator[Callable[[], list[str]]]:
    """Trace every connection ``engine`` checks out; the callable returns, per round trip so far, what
    the client sent last before it (``Query`` for a simple query such as the pool's liveness check)."""
    path = tmp_path / "trace.txt"
    out = path.open("w")

    def on_checkout(dbapi_conn: psycopg.Connection[Any], record: object, proxy: object) -> None:
        dbapi_conn.pgconn.trace(out.fileno())
        dbapi_conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)

    def on_checkin(dbapi_conn: psycopg.Connection[Any], record: object) -> None:
        dbapi_conn.pgconn.untrace()

    def sent() -> list[str]:
        out.flush()
        trips, last = [], ""
        for line in path.read_text().splitlines():
            side, _size, message = [*line.split("\t"), "", ""][:3]
            if side == "F":
                last = message.split()[0] if message.split() else ""
            elif side == "B" and last:
                trips.append(last)
                last = ""
        return trips

    event.listen(engine, "checkout", on_checkout)
    event.listen(engine, "checkin", on_checkin)
    try:
        yield sent
    finally:
        event.remove(engine, "checkout", on_checkout)
        event.remove(engine, "checkin", on_checkin)
        out.close()


def test_a_plain_save_waits_for_the_server_once(pg: Ledger, tmp_path: Path) -> None:
    # Given a scope that has been written before (its settings row exists)
    pg.save("the first pin creates the scope's row")
    with waits(pg.engine, tmp_path) as sent:
        # When one more pin is saved
        rec = pg.save("a second pin, saved in one round trip")
        # Then its one statement is the only wait (there were eight: BEGIN, each of six statements, COMMIT)
        assert len(sent()) == 1
    assert pg.get(rec.id).body == "a second pin, saved in one round trip"
    assert [r.body for r in pg.list(pg.scope_key)][-1] == rec.body


def test_a_save_at_an_explicit_instant_waits_for_the_server_three_times(pg: Ledger, clock: Any, tmp_path: Path) -> None:
    # Given a scope that has been written before, and a save the write transaction makes (an explicit instant)
    pg.save("the first pin creates the scope's row")
    with waits(pg.engine, tmp_path) as sent:
        rec = pg.save("the office is in Lisbon", now=clock.now + timedelta(seconds=1))
        # Then the lock, the budget check and the commit are the only waits
        assert len(sent()) == 3
    assert pg.get(rec.id).body == "the office is in Lisbon"


def test_an_edit_waits_for_the_server_once(pg: Ledger, tmp_path: Path) -> None:
    # Given an active record
    old = pg.save("the office is in Porto")
    with waits(pg.engine, tmp_path) as sent:
        # When it is edited
        new = pg.save("the office is in Lisbon", supersedes=old.id)
        # Then the edit is one statement (memledger_edit), its own commit
        assert len(sent()) == 1
    assert pg.get(old.id).superseded_by == new.id
    assert [r.body for r in pg.list(pg.scope_key)] == ["the office is in Lisbon"]


def test_an_edit_in_the_transaction_waits_for_the_server_four_times(pg: Ledger, tmp_path: Path) -> None:
    # Given an active record, and a ledger without the one-statement edit
    old = pg.save("the office is in Porto")
    pg.store.saves_plain = False  # type: ignore[misc]
    with waits(pg.engine, tmp_path) as sent:
        # When it is edited
        new = pg.save("the office is in Lisbon", supersedes=old.id)
        # Then the lock, the usage read with the target's row, the close's row count and the commit are the waits
        assert len(sent()) == 4
    assert pg.get(old.id).superseded_by == new.id


def test_an_edit_of_a_record_that_expired_under_the_lock_is_refused(pg: Ledger, clock: Any) -> None:
    # Given an active record whose expiry passes before the edit (the edit's usage read expires it)
    old = pg.save("the door code changes tonight", expires_at=clock.now + timedelta(seconds=5))
    clock.advance(seconds=10)
    # When it is edited, Then the edit is refused as for any record no longer active, and nothing is written
    with pytest.raises(LedgerError, match="not active"):
        pg.save("the door code changed", supersedes=old.id)
    assert pg.get(old.id).status == "expired"
    assert pg.list(pg.scope_key) == []


def test_a_failed_insert_in_the_pipeline_rolls_the_whole_write_back(
    pg: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a save whose insert fails only on the server (the record id is taken), sent with the COMMIT
    first = pg.save("kept")
    before = pg.budget(pg.scope_key)
    with monkeypatch.context() as patch:
        patch.setattr(validate, "new_record_id", lambda: first.id)
        # When it is saved, the error comes back with the commit's answer
        with pytest.raises(LedgerError):
            pg.save("never stored")
    # Then nothing of it was committed, and the connection serves the next write
    assert [r.body for r in pg.list(pg.scope_key)] == ["kept"]
    assert pg.budget(pg.scope_key) == before
    assert pg.save("next").body == "next"


def test_a_statement_sent_inside_a_savepoint_fails_inside_it(pg: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a transaction whose savepoint holds a save that fails only on the server
    first = pg.save("kept")
    with pg.transaction() as tx:
        with monkeypatch.context() as patch:
            patch.setattr(validate, "new_record_id", lambda: first.id)
            # When the failure is caught around the savepoint
            with pytest.raises(Exception, match=r"duplicate key|unique"), tx.savepoint():
                tx.save("a clash, rolled back to the savepoint")
        # Then the transaction goes on and commits what came after
        tx.save("after the savepoint")
    assert [r.body for r in pg.list()] == ["kept", "after the savepoint"]


def test_a_runs_claim_and_settlement_wait_four_and_three_times(pg: Ledger, tmp_path: Path) -> None:
    # Given a due consolidation run
    svc = ConsolidationService(pg)
    svc.update_settings(pg.scope_key, mode="apply", debounce_s=0)
    pg.save("I prefer tea")
    pending = svc.notify_turn(pg.scope_key)
    assert pending is not None
    run = svc.get_run(pending.id)
    with waits(pg.engine, tmp_path) as sent:
        # When it is claimed: the lock; the stamp + settings; the claim + spend + due check +
        # active set together; the commit (there were nine)
        claimed = pg.run(pg.scope_key, lambda tx: svc.consolidation.claim(tx, run))
        assert claimed is not None and [r.body for r in claimed.inputs.records] == ["I prefer tea"]
        assert len(sent()) == 4
    with waits(pg.engine, tmp_path) as sent:
        # And settled: the lock; the stamp + settlement; the commit (there were seven)
        assert pg.run(pg.scope_key, lambda tx: runs.settle(tx, run.id, Outcome.APPLIED, tx.now_us))
        assert len(sent()) == 3
    assert svc.get_run(run.id).state == "settled"


def test_the_postgres_plan_renders_literals_and_binds_lists_as_arrays(pg: Ledger) -> None:
    store = store_for(pg.engine)
    assert isinstance(store, PostgresStore)
    pick = Prepared(
        select(RECORDS.c.body)
        .where(RECORDS.c.id.in_(param("ids", expanding=True)), RECORDS.c.status == lit("active"))
        .order_by(RECORDS.c.seq)
    )
    plan = _Plan.build(pick, pg.engine.dialect)
    assert plan is not None and "'active'" in plan.sql and "= ANY(" in plan.sql
    a, b = pg.save("alpha"), pg.save("beta")
    with store.read() as conn:
        assert store.rows(conn, pick, {"ids": [b.id, a.id, "mem_unknown"]}) == [("alpha",), ("beta",)]
        assert store.rows(conn, pick, {"ids": []}) == []
    # An update's constant values are bound with every call
    touch = Prepared(update(RECORDS).where(RECORDS.c.id == param("rid")).values(kind="decision"))
    with store.write() as conn:
        assert store.run(conn, touch, {"rid": a.id}) == 1
    assert pg.get(a.id).kind == "decision"


def _end_server_process_of_a_pooled_connection(led: Ledger) -> None:
    with led.engine.connect() as conn:
        pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
    admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        assert conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid}).scalar_one()
    admin.dispose()


def test_a_dead_pooled_connection_costs_a_write_nothing(pg: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    pg.save("first")
    # Given a pooled connection whose server process ended a moment after it was used (not checked)
    _end_server_process_of_a_pooled_connection(pg)
    # When the next write finds it dead before its COMMIT was sent, it runs again on another connection
    assert pg.save("second").body == "second"
    # And a connection that sat idle is checked before use, and a dead one replaced
    _end_server_process_of_a_pooled_connection(pg)
    monkeypatch.setattr(PostgresStore, "ping_after_idle_s", 0.0)  # every connection counts as idle now
    assert pg.save("third").body == "third"
    assert [r.body for r in pg.list()] == ["first", "second", "third"]


def test_a_connection_used_a_moment_ago_is_not_checked_again(pg: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    pings: list[object] = []
    real = pg.engine.dialect.do_ping
    monkeypatch.setattr(pg.engine.dialect, "do_ping", lambda conn: pings.append(conn) or real(conn))
    pg.save("warm the pool")
    pg.save("no liveness check: the connection answered a moment ago")
    assert pings == []
    monkeypatch.setattr(PostgresStore, "ping_after_idle_s", 0.0)
    pg.save("checked: it counts as idle now")
    assert len(pings) == 1


def test_importing_the_ledger_does_not_import_psycopg() -> None:
    # The PostgreSQL store's driver loads when a PostgreSQL engine first uses it, not on `import ledger`.
    code = "import sys, ledger, ledger.store.postgres; sys.exit('psycopg' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
