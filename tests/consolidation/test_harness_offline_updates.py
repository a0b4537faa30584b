"""The offline harness's updates, conflicts, cascades and temporary facts (docs/consolidation.md, "Updates").

Unit cases on ``propose_operations`` (milliseconds), and the user's own examples end to end through a real
ledger and service (pins, a turn, the due run, the gate, the apply): about a second per backend.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from consolidation import ConsolidationService
from consolidation.harnesses import PromptRecord
from consolidation.harnesses.offline import propose_operations
from ledger import Ledger, Status
from tests.conftest import T0, Clock
from tests.consolidation.conftest import SCOPE


def records(*bodies: str, kinds: tuple[str, ...] = ()) -> list[PromptRecord]:
    """One record per body, a day apart, oldest first."""
    return [
        PromptRecord(f"r{n}", kinds[n] if kinds else "fact", body, None, valid_from=T0 + timedelta(days=n))
        for n, body in enumerate(bodies)
    ]


def together(*bodies: str) -> list[set[str]]:
    """The target sets of the operations that put two or more records together (merge or group)."""
    return [set(op["targets"]) for op in propose_operations(records(*bodies)) if len(op["targets"]) > 1]


# -- updates ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("I live in Porto", "I live in Ghent now"),
        ("My manager is Priya", "My manager is now Tomasz"),
        ("My standup is at 9:15", "My standup is at 10:00"),
        ("I live in Porto", "I've moved to Ghent"),
        ("My new manager is Priya", "Actually, my manager is Tomasz"),
        ("I work at Acme", "As of this week, I work at Globex"),
        ("I am 34 years old", "I am 35 years old"),
        ("My timezone is CET", "My timezone is PST"),
        ("My diet is vegetarian", "My diet is vegan"),
        ("My phone number is +49 170 1234567", "My phone number is +49 171 7654321"),
        ("Alice's birthday is on May 3", "Alice's birthday is on May 5"),
        ("The rent is 900 euros a month", "The rent is 950 euros a month"),
    ],
)
def test_a_new_value_of_a_single_valued_fact_is_grouped_with_the_old(old: str, new: str) -> None:
    [operation] = propose_operations(records(old, new))
    assert operation["op"] == "group" and operation["targets"] == ["r0", "r1"]  # the gate keeps the newest
    assert 1 <= len(operation["subject"]) <= 80


def test_competing_values_in_one_run_are_one_group() -> None:
    [operation] = propose_operations(records("I live in Porto", "I live in Ghent", "I live in Lisbon"))
    assert operation["op"] == "group" and set(operation["targets"]) == {"r0", "r1", "r2"}


@pytest.mark.parametrize(
    ("a", "b"),
    [
        # facts that hold several at once
        ("I speak French", "I speak German"),
        ("I have a cat called Alice", "I have a cat called Bruno"),
        ("I own a Tesla", "I own a BMW"),
        ("I play tennis with Alice on Saturdays", "I play tennis with Bruno on Saturdays"),
        ("I use Vim", "I use Emacs"),
        ("I am allergic to peanuts", "I am allergic to shellfish"),
        ("My sister lives in Berlin", "My sister lives in Paris"),
        ("My kids are 5 and 7", "My kids are 6 and 8"),
        ("I have a meeting on Tuesday", "I have a meeting on Thursday"),
        ("My dentist appointment is on Tuesday", "My dentist appointment is on Thursday"),
        ("I paid invoice 4417 on Monday", "I paid invoice 4471 on Monday"),
        ("Deploys go out every Tuesday", "Deploys go out every Thursday"),
        # the subjects differ in one detail
        ("My sister lives in Berlin", "My brother lives in Berlin"),
        ("The staging database runs PostgreSQL 14", "The production database runs PostgreSQL 14"),
        ("The Tuesday meeting starts at 9:00", "The Thursday meeting starts at 9:00"),
        ("Invoice 4417 was paid on Monday", "Invoice 4471 was paid on Monday"),
        ("Alice's birthday is on May 3", "Bruno's birthday is on May 3"),
        ("The Berlin office is open until 18:00 on weekdays", "The Berlin office is open until 18:00 on weekends"),
        # one amount with another sign or unit, a trigger, an instruction, the past
        ("I keep a cash reserve of 1200 EUR", "I keep a cash reserve of 1200 USD"),
        ("Alert me when my balance changes by +500 EUR", "Alert me when my balance changes by -500 EUR"),
        ("Keep the nightly backups for 7 days", "Keep the nightly backups for 7 weeks"),
        ("Remind me at 9:00", "Remind me at 10:00"),
        ("I was born in Porto", "I was born in Ghent"),
        ("We meet on Tuesday", "We meet on Thursday"),
    ],
)
def test_facts_held_at_once_or_about_another_subject_are_never_put_together(a: str, b: str) -> None:
    assert together(a, b) == []


def test_two_conflict_groups_the_user_made_stay_apart() -> None:
    first, second = records("I live in Porto", "I live in Ghent")
    grouped = [PromptRecord(r.id, r.kind, r.body, "*", valid_from=r.valid_from) for r in (first, second)]
    assert propose_operations(grouped) == []


# -- cascades ---------------------------------------------------------------------------------------------


def test_an_update_takes_the_records_quoting_its_old_value_in_the_same_sense() -> None:
    ops = propose_operations(
        records(
            "My office is in room 301",
            "The printer next to room 301 is the one I use",
            "Our production database runs PostgreSQL 14",
            "The backup scripts use the PostgreSQL 14 client",
            "My office is in room 415",
            "Our production database runs PostgreSQL 16",
        )
    )
    assert sorted(sorted(op["targets"]) for op in ops) == [["r0", "r1", "r4"], ["r2", "r3", "r5"]]


def test_a_record_quoting_the_old_value_about_something_else_is_left_alone() -> None:
    ops = propose_operations(
        records(
            "I live in Berlin",
            "My sister lives in Berlin",
            "I was born in Berlin",
            "The Berlin office opens at 9:00",
            "I live in Ghent now",
        )
    )
    assert [sorted(op["targets"]) for op in ops] == [["r0", "r4"]]


def test_a_record_newer_than_the_new_value_is_not_a_cascade() -> None:
    ops = propose_operations(
        records("My office is in room 301", "My office is in room 415", "The printer next to room 301 is mine")
    )
    assert [sorted(op["targets"]) for op in ops] == [["r0", "r1"]]


# -- temporary facts and kinds ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "days"),
    [
        ("I am visiting Oslo for the next 3 days, so meetings should be remote", 3),
        ("For 4 more days I am working from Porto", 4),
        ("I am at a conference for the coming two weeks", 14),
    ],
)
def test_a_fact_true_for_a_few_days_expires_after_them(body: str, days: int) -> None:
    assert propose_operations(records(body)) == [
        {
            "op": "expire",
            "targets": ["r0"],
            "after_days": days,
            "rationale": "offline: true for a stated number of days",
        }
    ]


def test_a_record_that_already_expires_is_left_alone() -> None:
    [record] = records("I am in Oslo for the next 3 days")
    expiring = PromptRecord(record.id, record.kind, record.body, None, valid_from=record.valid_from, expires=True)
    assert propose_operations([expiring]) == []


@pytest.mark.parametrize(
    ("kinds", "kept"),
    [
        (("fact", "preference"), "preference"),
        (("preference", "fact"), "preference"),
        (("preference", "constraint"), "constraint"),
        (("decision", "preference"), "decision"),
    ],
)
def test_identical_pins_of_different_kinds_merge_keeping_the_named_kind(kinds: tuple[str, ...], kept: str) -> None:
    [operation] = propose_operations(records("I prefer metric units", "I prefer metric units", kinds=kinds))
    assert operation["op"] == "merge" and operation["targets"] == ["r0", "r1"] and operation["kind"] == kept


# -- end to end -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("I live in Porto", "I live in Ghent now"),
        ("My manager is Priya", "My manager is now Tomasz"),
        ("My standup is at 9:15", "My standup is at 10:00"),
    ],
)
def test_a_pin_whose_value_changes_a_day_later_leaves_one_active_record_with_the_newest(
    make_ledger: Callable[..., Ledger],
    make_service: Callable[..., ConsolidationService],
    clock: Clock,
    old: str,
    new: str,
) -> None:
    led = make_ledger()
    svc = make_service(led)
    svc.update_settings(SCOPE, mode="apply", harness="offline", debounce_s=30)
    # Given a pin, a turn and its run; and a day later the new value, a turn
    first = led.save(old, scope_key=SCOPE)
    svc.notify_turn(SCOPE)
    clock.advance(seconds=31)
    svc.run_due()
    clock.advance(days=1)
    second = led.save(new, scope_key=SCOPE)
    svc.notify_turn(SCOPE)
    # When the run is due
    clock.advance(seconds=31)
    [run] = svc.run_due()
    # Then one active record says the newest value, and both pins are its history, superseded, not deleted
    assert run.ops_applied == 1 and run.ops_refused == 0
    [active] = led.list(SCOPE)
    assert active.body == new
    assert {r.id for r in led.history(active.id)} >= {first.id, second.id}
    assert {led.get(first.id).status, led.get(second.id).status} == {Status.SUPERSEDED}
    # And what the scope held before the run still reads as it did
    assert [r.body for r in led.list_as_of(SCOPE, clock.now - timedelta(seconds=10))] == [old, new]


def test_identical_pins_of_different_kinds_become_one_end_to_end(
    make_ledger: Callable[..., Ledger], make_service: Callable[..., ConsolidationService], clock: Clock
) -> None:
    led = make_ledger()
    svc = make_service(led)
    svc.update_settings(SCOPE, mode="apply", harness="offline", debounce_s=30)
    led.save("I prefer metric units", scope_key=SCOPE)
    led.save("I prefer metric units", kind="preference", scope_key=SCOPE)
    svc.notify_turn(SCOPE)
    clock.advance(seconds=31)
    svc.run_due()
    [active] = led.list(SCOPE)
    assert active.body == "I prefer metric units" and active.kind.value == "preference"


def test_an_edit_shows_its_old_value_so_the_records_quoting_it_follow() -> None:
    printer, office = records("The printer next to room 301 is the one I use", "My office is in room 415")
    edited = PromptRecord(
        office.id, office.kind, office.body, None, valid_from=office.valid_from, replaced="My office is in room 301"
    )
    assert propose_operations([printer, edited]) == [
        {
            "op": "group",
            "targets": ["r1", "r0"],
            "subject": "my office is in room",
            "rationale": "offline: one single-valued fact stated with another value; the newest stays",
        }
    ]
    # an edit that nothing quotes needs nothing more: the user's edit already superseded the old value
    assert propose_operations([edited]) == []


def test_an_edited_fact_takes_the_record_quoting_its_old_value_end_to_end(
    make_ledger: Callable[..., Ledger], make_service: Callable[..., ConsolidationService], clock: Clock
) -> None:
    led = make_ledger()
    svc = make_service(led)
    svc.update_settings(SCOPE, mode="apply", harness="offline", debounce_s=30)
    office = led.save("My office is in room 301", scope_key=SCOPE)
    printer = led.save("The printer next to room 301 is the one I use", scope_key=SCOPE)
    svc.notify_turn(SCOPE)
    clock.advance(seconds=31)
    svc.run_due()
    clock.advance(days=1)
    # When the user edits the fact, and the run is due
    led.save("My office is in room 415", supersedes=office.id, scope_key=SCOPE)
    svc.notify_turn(SCOPE)
    clock.advance(seconds=31)
    svc.run_due()
    # Then no active record still names the old room; the printer is history
    assert [r.body for r in led.list(SCOPE)] == ["My office is in room 415"]
    assert led.get(printer.id).status == Status.SUPERSEDED
