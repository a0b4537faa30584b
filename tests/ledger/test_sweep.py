"""The sweep's last run is recorded in the database (ops_sweep), on SQLite and PostgreSQL; and each scope's row
keeps the latest instant a record of it was closed at, whichever write closed it."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from sqlalchemy import text

from ledger import InvalidArgument, Ledger
from ledger.instants import to_micros
from tests.conftest import Clock

SCOPE = "account:local"


def test_no_sweep_recorded_until_one_finishes(led: Ledger) -> None:
    assert led.last_sweep() is None


def test_each_sweep_records_its_instant_count_and_running_totals(led: Ledger, clock: Clock) -> None:
    # Given three records due at different instants
    start = clock()
    for n in range(3):
        led.save(f"expires {n}", expires_at=start + timedelta(minutes=10 * (n + 1)))
    # When the sweep runs at +25 min (two due) and again at +26 min (none due)
    clock.advance(minutes=25)
    assert led.sweep_expired(clock()) == 2
    first = led.last_sweep()
    assert first is not None
    assert (first.last_expired, first.runs, first.expired_total) == (2, 1, 2)
    assert first.last_now == clock() and first.last_started_at <= first.last_finished_at
    clock.advance(minutes=1)
    assert led.sweep_expired(clock()) == 0
    # Then the row says when the last one ran and what it did, and totals keep growing
    second = led.last_sweep()
    assert second is not None
    assert (second.last_expired, second.runs, second.expired_total) == (0, 2, 2)
    assert second.last_finished_at >= first.last_finished_at and second.last_now == clock()


def test_a_refused_sweep_records_nothing(led: Ledger) -> None:
    with pytest.raises(InvalidArgument):
        led.sweep_expired(led.now(), batch_size=0)
    assert led.last_sweep() is None


def test_the_migration_matches_the_table_class(led: Ledger) -> None:
    from sqlalchemy import inspect

    from ledger.schema import SWEEPS

    migrated = {c["name"]: c for c in inspect(led.engine).get_columns("ops_sweep")}
    declared = SWEEPS.columns
    assert set(migrated) == {c.name for c in declared}
    for column in declared:
        assert migrated[column.name]["nullable"] == column.nullable, column.name
    assert next(c for c in declared if c.primary_key).name == "name"


def _closed(led: Ledger) -> tuple[int | None, int | None]:
    """The scope row's ``latest_closed_at``, and the latest ``valid_to`` of the scope's records."""
    params = {"s": led.scope_key}
    with led.engine.connect() as conn:
        kept = conn.execute(text("SELECT latest_closed_at FROM scope_settings WHERE scope_key = :s"), params)
        found = conn.execute(text("SELECT max(valid_to) FROM memory_records WHERE scope_key = :s"), params)
        return kept.scalar_one(), found.scalar_one()


def _us(value: datetime | None) -> int:
    assert value is not None
    return to_micros(value)


def test_the_scope_row_keeps_the_latest_instant_a_record_was_closed_at(led: Ledger, clock: Clock) -> None:
    # Given open records only: nothing closed
    first = led.save("the office is in Porto")
    due = led.save("the door is painted on Friday", expires_at=clock() + timedelta(hours=2))
    assert _closed(led) == (None, None)
    # When a record is edited (one statement on PostgreSQL), edited through the transaction (a conflict group),
    # a proposal is made and rejected, and a sweep runs at an instant past the clock:
    # Then each time the row holds the latest valid_to
    clock.advance(minutes=1)
    second = led.save("the office is in Lisbon", supersedes=first.id)
    assert _closed(led) == (_us(led.get(first.id).valid_to),) * 2
    clock.advance(minutes=1)
    led.save("the office is in Faro", supersedes=second.id, conflict_group="office")
    assert _closed(led) == (_us(led.get(second.id).valid_to),) * 2
    clock.advance(minutes=1)
    proposal = led.propose("the office may move to Braga")
    assert _closed(led) == (_us(proposal.valid_to),) * 2
    clock.advance(minutes=1)
    led.reject(proposal.id)
    assert _closed(led) == (_us(proposal.valid_to),) * 2
    assert led.sweep_expired(clock() + timedelta(hours=3)) == 1
    assert _closed(led) == (_us(due.expires_at),) * 2
