"""The whole vocabulary through each paying harness's real SDK against its fake: expire, group, retire, the limits.

Every test drives ``ConsolidationService`` end to end (notify_turn → run_due → settle) on
SQLite and PostgreSQL (the openai harness on SQLite), scripting the model's answer by body (``target_bodies``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest

from consolidation import ConsolidationRun, ConsolidationService, Outcome, RunState
from consolidation.fake_anthropic import FakeModelServer, request_records
from ledger import BudgetExceeded, Ledger, Provenance, Status
from tests.conftest import T0
from tests.consolidation.conftest import SCOPE, at
from tests.consolidation.vendors import Vendor, content, stack_fixtures

stack, vendor, ledger_url, fake = stack_fixtures()
TARGET: dict[str, Any] = {}
PARIS, LYON, ROME = "I live in Paris", "I live in Lyon", "I live in Rome"


@pytest.fixture
def vendor_svc(
    led: Ledger, make_service: Callable[..., ConsolidationService], fake: FakeModelServer, vendor: Vendor
) -> ConsolidationService:
    TARGET.clear()
    TARGET.update(vendor.settings())
    return make_service(led, **vendor.service_kwargs(fake.base_url))


def enable(svc: ConsolidationService, **changes: Any) -> None:
    settings: dict[str, Any] = {"mode": "apply", **TARGET, "debounce_s": 0}
    settings.update(changes)
    svc.update_settings(SCOPE, now=at(0), **settings)


def run_once(svc: ConsolidationService, *, now: datetime) -> ConsolidationRun:
    pending = svc.notify_turn(SCOPE, now=now)
    assert pending is not None
    [done] = svc.run_due(now=now)
    assert done.id == pending.id and done.state == RunState.SETTLED
    return done


def answer(fake: FakeModelServer, *operations: dict[str, Any]) -> None:
    fake.set_operations(list(operations))


def bodies(led: Ledger, now: datetime) -> set[str | None]:
    return {r.body for r in led.list(SCOPE, now=now)}


# -- expire --------------------------------------------------------------------------------------


def test_expire_sets_the_expiry_from_the_apply_instant_and_the_past_reads_as_before(
    led: Ledger, vendor_svc: ConsolidationService, fake: FakeModelServer
) -> None:
    # Given a pin, and an answer that expires it after 7 days
    pin = led.save("I am in Tokyo this week", now=T0)
    enable(vendor_svc)
    answer(fake, {"op": "expire", "target_bodies": [pin.body], "after_days": 7, "rationale": "a trip"})
    before = [(r.id, r.body, r.valid_from, r.valid_to) for r in led.list_as_of(SCOPE, at(0.5))]

    # When the run applies it
    done = run_once(vendor_svc, now=at(1))

    # Then the pin stays active until apply instant + 7 days, and the sweep expires it then, as any other
    assert (done.outcome, done.ops_applied, done.ops_refused) == (Outcome.APPLIED, 1, 0)
    record = led.get(pin.id)
    assert record.status == Status.ACTIVE and record.id == pin.id and record.body == pin.body
    assert record.expires_at is not None
    assert timedelta(days=7) <= record.expires_at - at(1) < timedelta(days=7, seconds=1)
    assert [(r.id, r.body, r.valid_from, r.valid_to) for r in led.list_as_of(SCOPE, at(0.5))] == before
    assert [r.id for r in led.list(SCOPE, now=at(2))] == [pin.id]
    later = record.expires_at + timedelta(seconds=1)
    assert led.list(SCOPE, now=later) == []
    led.sweep_expired(later)
    swept = led.get(pin.id)
    assert swept.status == Status.EXPIRED and swept.valid_to == record.expires_at
    assert [r.id for r in led.list_as_of(SCOPE, at(3))] == [pin.id]


def test_expire_keeps_an_earlier_existing_expiry(
    led: Ledger, vendor_svc: ConsolidationService, fake: FakeModelServer
) -> None:
    soon = at(3600)
    pin = led.save("Conference badge pickup at hall B", expires_at=soon, now=T0)
    enable(vendor_svc)
    answer(fake, {"op": "expire", "target_bodies": [pin.body], "after_days": 30})

    done = run_once(vendor_svc, now=at(1))

    assert done.ops_applied == 1 and led.get(pin.id).expires_at == soon


def test_expire_in_propose_mode_is_a_proposal_and_changes_nothing_until_accepted(
    led: Ledger, vendor_svc: ConsolidationService, fake: FakeModelServer
) -> None:
    pin = led.save("I am in Tokyo this week", now=T0)
    enable(vendor_svc, mode="propose")
    answer(fake, {"op": "expire", "target_bodies": [pin.body], "after_days": 7})

    done = run_once(vendor_svc, now=at(1))

    assert done.outcome == Outcome.PROPOSED and (done.ops_applied, done.proposals_written) == (0, 1)
    assert led.get(pin.id).expires_at is None
    [proposal] = led.proposals(SCOPE)
    assert proposal.provenance == Provenance.MODEL_CONSOLIDATION and proposal.supersedes == [pin.id]
    assert proposal.expires_at is not None and proposal.body == pin.body
    accepted = led.accept(proposal.id, now=at(5))
    assert accepted.status == Status.ACTIVE and accepted.expires_at == proposal.expires_at
    assert led.get(pin.id).status == Status.SUPERSEDED
    assert [r.id for r in led.list_as_of(SCOPE, at(2))] == [pin.id]


# -- group ---------------------------------------------------------------------------------------


def test_group_keeps_the_newest_target_and_a_later_save_into_the_group_supersedes_it(
    led: Ledger, vendor_svc: ConsolidationService, fake: FakeModelServer
) -> None:
    # Given two competing claims, the newer one second
    paris = led.save(PARIS, now=T0)
    lyon = led.save(LYON, now=at(0.1))
    enable(vendor_svc)
    answer(fake, {"op": "group", "target_bodies": [PARIS, LYON], "subject": "Home city"})

    # When a run groups them
    done = run_once(vendor_svc, now=at(1))

    # Then one active member answers, the newest claim, in the group derived from the subject
    assert (done.ops_applied, done.ops_refused) == (1, 0)
    [survivor] = led.list(SCOPE, now=at(2))
    assert survivor.body == LYON and survivor.conflict_group == "home-city"
    assert survivor.provenance == Provenance.MODEL_CONSOLIDATION
    assert sorted(survivor.supersedes) == sorted([paris.id, lyon.id])
    for old in (paris, lyon):
        closed = led.get(old.id)
        assert closed.status == Status.SUPERSEDED and closed.superseded_by == survivor.id
        assert closed.valid_to == survivor.valid_from
    assert {r.body for r in led.list_as_of(SCOPE, at(0.5))} == {PARIS, LYON}  # the past as it was
    # And a later save into that group supersedes the survivor
    nice = led.save("I live in Nice", conflict_group="home-city", now=at(10))
    assert [r.id for r in led.list(SCOPE, now=at(11))] == [nice.id]
    assert led.get(survivor.id).superseded_by == nice.id


def test_group_closes_the_groups_active_member_that_was_not_a_target(
    led: Ledger, vendor_svc: ConsolidationService, fake: FakeModelServer
) -> None:
    rome = led.save(ROME, conflict_group="home-city", now=T0)
    led.save(PARIS, now=at(0.1))
    led.save(LYON, now=at(0.2))
    enable(vendor_svc)
    answer(fake, {"op": "group", "target_bodies": [LYON, PARIS], "subject": "home city"})

    run_once(vendor_svc, now=at(1))

    [survivor] = led.list(SCOPE, now=at(2))
    assert survivor.body == LYON and led.get(rome.id).superseded_by == survivor.id


def test_group_in_propose_mode_waits_for_the_user(
    led: Ledger, vendor_svc: ConsolidationService, fake: FakeModelServer
) -> None:
    paris, lyon = led.save(PARIS, now=T0), led.save(LYON, now=at(0.1))
    enable(vendor_svc, mode="propose")
    answer(fake, {"op": "group", "target_bodies": [PARIS, LYON], "subject": "home city"})

    run_once(vendor_svc, now=at(1))

    assert bodies(led, at(2)) == {PARIS, LYON}
    [proposal] = led.proposals(SCOPE)
    assert proposal.body == LYON and proposal.conflict_group == "home-city"
    led.accept(proposal.id, now=at(3))
    assert [r.body for r in led.list(SCOPE, now=at(4))] == [LYON]
    assert led.get(paris.id).status == led.get(lyon.id).status == Status.SUPERSEDED


# -- retire --------------------------------------------------------------------------------------


def test_retire_is_refused_when_removal_is_off(
    led: Ledger, vendor_svc: ConsolidationService, fake: FakeModelServer
) -> None:
    pin = led.save("My old phone number is private", now=T0)
    enable(vendor_svc)  # allow_removal defaults to off
    answer(fake, {"op": "retire", "target_bodies": [pin.body]})

    done = run_once(vendor_svc, now=at(1))

    assert done.refusals == {"removal_off": 1} and (done.ops_applied, done.ops_refused) == (0, 1)
    assert led.get(pin.id).status == Status.ACTIVE and led.get(pin.id).body == pin.body


def test_retire_forgets_like_the_user_and_erases_the_chains_bodies(
    led: Ledger, vendor_svc: ConsolidationService, fake: FakeModelServer
) -> None:
    # Given a pin edited once (a chain of two) and removal allowed
    first = led.save("I work at Initech as a contractor", now=T0)
    head = led.save("I work at Initech", supersedes=first.id, now=at(0.1))
    enable(vendor_svc, allow_removal=True)
    answer(fake, {"op": "retire", "target_bodies": [head.body], "rationale": "the user left"})

    # When a run retires the head
    done = run_once(vendor_svc, now=at(1))

    # Then it is a tombstone, and no read hands back a body of its chain
    assert done.ops_applied == 1 and done.refusals == {}
    gone = led.get(head.id)
    assert gone.status == Status.DELETED and gone.body is None
    assert [r.body for r in led.history(head.id)] == [None, None]
    assert led.list(SCOPE, now=at(2)) == []
    assert all(r.body is None for r in led.list_as_of(SCOPE, at(0.5)))
    assert led.search(SCOPE, "Initech") == []
    [stored] = vendor_svc.runs(SCOPE)
    assert "Initech" not in (vendor_svc.get_run(stored.id).prompt or "")


def test_retire_in_propose_mode_is_a_pending_forget_applied_on_accept(
    led: Ledger, vendor_svc: ConsolidationService, fake: FakeModelServer
) -> None:
    pin = led.save("I am training for the Berlin marathon", now=T0)
    enable(vendor_svc, mode="propose", allow_removal=True)
    answer(fake, {"op": "retire", "target_bodies": [pin.body]})

    run_once(vendor_svc, now=at(1))

    # Nothing is forgotten until the user accepts
    assert led.get(pin.id).status == Status.ACTIVE
    [proposal] = led.proposals(SCOPE)
    assert "Berlin" not in (proposal.body or "")  # the proposal does not copy the body it would erase
    led.accept(proposal.id, now=at(3))
    assert led.get(pin.id).status == Status.DELETED and led.get(pin.id).body is None
    assert led.proposals(SCOPE) == [] and led.list(SCOPE, now=at(4)) == []


def test_a_rejected_retire_proposal_forgets_nothing(
    led: Ledger, vendor_svc: ConsolidationService, fake: FakeModelServer
) -> None:
    pin = led.save("I am training for the Berlin marathon", now=T0)
    enable(vendor_svc, mode="propose", allow_removal=True)
    answer(fake, {"op": "retire", "target_bodies": [pin.body]})
    run_once(vendor_svc, now=at(1))

    [proposal] = led.proposals(SCOPE)
    led.reject(proposal.id, now=at(3))

    assert led.get(pin.id).status == Status.ACTIVE and led.get(pin.id).body == pin.body


# -- limits and refusals -------------------------------------------------------------------------


def test_at_most_20_operations_are_considered_and_every_one_is_counted(
    led: Ledger, vendor_svc: ConsolidationService, fake: FakeModelServer
) -> None:
    pins = [led.save(f"Pin number {n}", now=T0).body for n in range(25)]
    enable(vendor_svc)
    answer(fake, *({"op": "keep", "target_bodies": [body]} for body in pins))

    done = run_once(vendor_svc, now=at(1))

    assert done.refusals == {"too_many_operations": 5}
    assert (done.ops_proposed, done.ops_applied, done.ops_refused) == (25, 20, 5)


def test_every_new_refusal_reason_is_counted_and_the_rest_applies(
    led: Ledger, vendor_svc: ConsolidationService, fake: FakeModelServer
) -> None:
    pins = [led.save(f"Pin number {n}", now=T0).body for n in range(14)]
    enable(vendor_svc)
    answer(
        fake,
        {"op": "retire", "target_bodies": [pins[0]]},  # removal_off
        {"op": "expire", "target_bodies": [pins[1]], "after_days": 0},  # horizon_out_of_range
        {"op": "expire", "target_bodies": [pins[2]], "after_days": 3651},  # horizon_out_of_range
        {"op": "group", "target_bodies": [pins[3], pins[4]], "subject": " "},  # subject_out_of_range
        {"op": "group", "target_bodies": [pins[3], pins[4]], "subject": "x" * 81},  # subject_out_of_range
        {"op": "group", "target_bodies": [pins[5]], "subject": "s"},  # too_few_targets
        {"op": "merge", "target_bodies": pins[:11], "body": "all"},  # too_many_targets
        {"op": "expire", "target_bodies": [pins[6]], "after_days": 3, "body": "x"},  # field_not_carried
        {"op": "expire", "target_bodies": [pins[7]], "after_days": "3"},  # malformed
        {"op": "retire", "target_bodies": ["nothing like this"]},  # target_not_in_scope (before removal? no)
        {"op": "expire", "target_bodies": [pins[13]], "after_days": 3650},  # applies
    )

    done = run_once(vendor_svc, now=at(1))

    assert done.refusals == {
        "removal_off": 2,
        "horizon_out_of_range": 2,
        "subject_out_of_range": 2,
        "too_few_targets": 1,
        "too_many_targets": 1,
        "field_not_carried": 1,
        "malformed": 1,
    }
    assert (done.ops_proposed, done.ops_applied, done.ops_refused) == (11, 1, 10)
    assert led.list(SCOPE, now=at(2))[0].expires_at is not None or any(
        r.expires_at is not None for r in led.list(SCOPE, now=at(2))
    )


# -- the bounded candidate list ------------------------------------------------------------------


def test_every_record_is_sent_within_ceil_scope_over_bound_plus_one_runs(
    led: Ledger, vendor_svc: ConsolidationService, fake: FakeModelServer
) -> None:
    # Given a scope of 60 pins and a bound that holds about 12 of them
    saved = {led.save(f"Standing note {n:03d} about the quarterly planning", now=T0).id for n in range(60)}
    enable(vendor_svc, max_prompt_chars=1_000)
    seen_per_run: list[set[str]] = []

    # When runs follow one another with nothing changed in between
    first = run_once(vendor_svc, now=at(1))
    per_run = len(request_records(fake.requests[-1].json))
    runs = math.ceil(len(saved) / per_run) + 1
    seen_per_run.append({r.body for r in request_records(fake.requests[-1].json)})
    for n in range(1, runs):
        run_once(vendor_svc, now=at(1 + n))
        seen_per_run.append({r.body for r in request_records(fake.requests[-1].json)})

    # Then each request stays within the bound, and every pin was sent at least once
    assert first.outcome == Outcome.APPLIED and 5 <= per_run < 60
    for request in fake.requests:
        assert len(content(request.json)) <= 1_000 + 60
    seen = set().union(*seen_per_run)
    assert seen == {led.get(i).body for i in saved}


def test_a_new_near_duplicate_is_sent_in_the_same_run_as_its_old_record(
    led: Ledger, vendor_svc: ConsolidationService, fake: FakeModelServer
) -> None:
    old = led.save("My deploy region for the billing service is eu-west-1", now=T0)
    for n in range(60):
        led.save(f"Standing note {n:03d} about the quarterly planning", now=T0)
    enable(vendor_svc, max_prompt_chars=1_000)
    run_once(vendor_svc, now=at(1))
    run_once(vendor_svc, now=at(2))

    led.save("my deploy region for the billing service is eu-west-1", now=at(3))
    run_once(vendor_svc, now=at(4))

    sent = {r.body for r in request_records(fake.requests[-1].json)}
    assert {old.body, "my deploy region for the billing service is eu-west-1"} <= sent


# -- a full scope makes room ---------------------------------------------------------------------


def test_reaching_the_budget_with_consolidation_on_schedules_a_run_and_the_refusal_says_so(
    led: Ledger, vendor_svc: ConsolidationService
) -> None:
    enable(vendor_svc, debounce_s=30)
    led.set_budget(SCOPE, 3)
    for n in range(3):
        led.save(f"Pin {n}", now=at(1 + n))

    # The save that filled the scope scheduled a run, without a turn
    [pending] = vendor_svc.pending_runs()
    assert pending.scope_key == SCOPE and pending.turns == 0
    with pytest.raises(BudgetExceeded, match="Consolidation is on: run run_"):
        led.save("One too many", now=at(5))


def test_a_full_scope_without_consolidation_schedules_nothing(led: Ledger, vendor_svc: ConsolidationService) -> None:
    led.set_budget(SCOPE, 1)
    led.save("Pin", now=at(1))

    assert vendor_svc.pending_runs() == []
    with pytest.raises(BudgetExceeded) as refused:
        led.save("One too many", now=at(2))
    assert "scheduled" not in str(refused.value)


def test_turning_consolidation_on_for_a_full_scope_schedules_a_run(
    led: Ledger, vendor_svc: ConsolidationService
) -> None:
    led.set_budget(SCOPE, 1)
    led.save("Pin", now=at(1))

    enable(vendor_svc)

    assert [r.scope_key for r in vendor_svc.pending_runs()] == [SCOPE]
