"""Runs: debounce, claim, settle exactly once; settings; budget; apply and propose with the offline harness."""

from __future__ import annotations

from datetime import timedelta

import pytest

from consolidation import ConsolidationService, InvalidSettings, Mode, Outcome, RunNotFound, RunState
from ledger import Provenance, ScopeError, Status
from tests.conftest import T0, Clock
from tests.consolidation.conftest import SCOPE, race_execute


def at(seconds: float) -> object:
    return T0 + timedelta(seconds=seconds)


def dupes(svc: ConsolidationService) -> list[str]:
    led = svc.led
    a = led.save("I prefer metric units", now=T0)
    b = led.save("i prefer  metric units.", now=T0)
    led.save("My dog is named Rex", now=T0)
    return [a.id, b.id]


def test_defaults_are_off_and_offline_without_a_key(svc: ConsolidationService) -> None:
    s = svc.settings(SCOPE)
    assert s.mode == Mode.OFF and s.harness == "offline" and s.spend_budget_micro_usd > 0
    assert svc.notify_turn(SCOPE, now=at(1)) is None
    assert svc.runs(SCOPE) == []


def test_default_harness_is_anthropic_with_the_cheapest_model_when_a_key_is_set(make_service) -> None:  # type: ignore[no-untyped-def]
    svc = make_service(api_key="sk-test", base_url="http://127.0.0.1:9")
    s = svc.settings(SCOPE)
    assert s.harness == "anthropic"
    assert s.model == svc.prices.cheapest()


@pytest.mark.parametrize(
    "changes",
    [
        {"mode": "sometimes"},
        {"allowed_ops": ["merge", "delete"]},
        {"allowed_ops": []},
        {"debounce_s": -1},
        {"debounce_s": "soon"},
        {"debounce_s": float("nan")},
        {"max_wait_s": 5, "debounce_s": 30},
        {"harness": "gpt"},
        {"harness": "anthropic", "model": "claude-unknown-9"},
        {"wall_clock_cap_s": 0},
        {"max_output_tokens": 0},
        {"spend_budget_micro_usd": -5},
        {"spend_budget_micro_usd": True},
        {"colour": "blue"},
    ],
)
def test_bad_settings_are_refused_and_change_nothing(svc: ConsolidationService, changes: dict[str, object]) -> None:
    before = svc.settings(SCOPE)
    with pytest.raises(InvalidSettings) as info:
        svc.update_settings(SCOPE, now=at(0), **changes)
    assert info.value.reason == "invalid_params"
    assert svc.settings(SCOPE) == before


def test_unknown_model_message_names_known_models(svc: ConsolidationService) -> None:
    with pytest.raises(InvalidSettings, match="claude-haiku-4-5"):
        svc.update_settings(SCOPE, harness="anthropic", model="claude-nonesuch", now=at(0))


def test_bad_scope_is_refused(svc: ConsolidationService) -> None:
    with pytest.raises(ScopeError):
        svc.notify_turn("not a scope", now=at(0))
    with pytest.raises(ScopeError):
        svc.update_settings("", mode="apply", now=at(0))


def test_turns_debounce_into_one_pending_run(svc: ConsolidationService) -> None:
    svc.update_settings(SCOPE, mode="apply", debounce_s=10, max_wait_s=None, now=at(0))
    first = svc.notify_turn(SCOPE, now=at(1))
    assert first is not None and first.due_at == at(11)
    for t in range(2, 30, 3):
        run = svc.notify_turn(SCOPE, now=at(t))
        assert run is not None and run.id == first.id
    assert run.turns == 11 and run.due_at == at(39)
    assert [r.state for r in svc.runs(SCOPE)] == [RunState.PENDING]


def test_by_default_a_run_waits_for_ten_minutes_of_quiet_and_at_most_an_hour(svc: ConsolidationService) -> None:
    # Given consolidation switched on without a debounce of its own
    settings = svc.update_settings(SCOPE, mode="apply", now=at(0))
    assert (settings.debounce_s, settings.max_wait_s) == (600, 3600)
    # When a conversation goes on, a turn every five minutes
    first = svc.notify_turn(SCOPE, now=at(0))
    assert first is not None and first.due_at == at(600)
    run = svc.notify_turn(SCOPE, now=at(300))
    # Then the run waits for ten quiet minutes after the last turn ...
    assert run is not None and run.id == first.id and run.due_at == at(900)
    assert svc.run_due(now=at(600)) == []
    # ... and a conversation that never pauses is still tidied within the hour
    for t in range(600, 3600, 300):
        run = svc.notify_turn(SCOPE, now=at(t))
    assert run is not None and run.due_at == at(3600)


def test_max_wait_caps_the_debounce(svc: ConsolidationService) -> None:
    svc.update_settings(SCOPE, mode="apply", debounce_s=10, max_wait_s=25, now=at(0))
    run = None
    for t in range(0, 60, 5):
        run = svc.notify_turn(SCOPE, now=at(t))
    assert run is not None and run.due_at == at(25)


def test_a_new_debounce_reschedules_the_pending_run(svc: ConsolidationService) -> None:
    # Given a pending run due ten minutes after its last turn (at 300 s)
    svc.update_settings(SCOPE, mode="apply", now=at(0))
    svc.notify_turn(SCOPE, now=at(0))
    run = svc.notify_turn(SCOPE, now=at(300))
    assert run is not None and run.due_at == at(900)
    # When the operator lowers the debounce to 30 s, the run is due 30 s after its last turn
    svc.update_settings(SCOPE, debounce_s=30, now=at(310))
    assert svc.get_run(run.id).due_at == at(330)
    [settled] = svc.run_due(now=at(330))
    assert settled.id == run.id
    # A longer debounce pushes a pending run back, never past its max wait
    second = svc.notify_turn(SCOPE, now=at(400))
    assert second is not None and second.due_at == at(430)
    svc.update_settings(SCOPE, debounce_s=7200, max_wait_s=7200, now=at(410))
    assert svc.get_run(second.id).due_at == at(400 + 7200)
    svc.update_settings(SCOPE, max_wait_s=3600, debounce_s=600, now=at(420))
    assert svc.get_run(second.id).due_at == at(1000)


def test_a_new_debounce_reschedules_the_pending_extraction_runs(svc: ConsolidationService) -> None:
    svc.update_extraction_settings(SCOPE, mode="propose", debounce_s=600, max_wait_s=None, now=at(0))
    run = svc.notify_turn(SCOPE, session_id="s1", messages=[{"role": "user", "text": "I live in Porto"}], now=at(5))
    assert run is not None and run.job == "extract" and run.due_at == at(605)
    svc.update_extraction_settings(SCOPE, debounce_s=30, now=at(10))
    assert svc.get_run(run.id).due_at == at(35)


def test_run_now_leaves_a_run_pending_while_another_run_of_the_scope_is_running(svc: ConsolidationService) -> None:
    from consolidation import runs

    dupes(svc)
    svc.update_settings(SCOPE, mode="apply", debounce_s=600, now=at(0))
    first = svc.notify_turn(SCOPE, now=at(1))
    assert first is not None
    # Given the first run running (claimed by a worker) and a second pending behind it
    claim = runs.claim
    claimed = svc.led.run(
        SCOPE,
        lambda tx: claim(tx, first.id, tx.now_us, harness="offline", model="offline", mode="apply", cap_s=60).result(),
        now=at(700),
    )
    assert claimed
    second = svc.notify_turn(SCOPE, now=at(701))
    assert second is not None and second.id != first.id
    # When run-now is asked for, the second does not start and stays pending, due now
    [tried] = svc.run_now(SCOPE, now=at(702))
    assert tried == (second.id, None)
    left = svc.get_run(second.id)
    assert left.state == RunState.PENDING and left.due_at == at(702)


def test_a_run_executes_only_when_due_and_settles_once(svc: ConsolidationService) -> None:
    ids = dupes(svc)
    svc.update_settings(SCOPE, mode="apply", debounce_s=10, now=at(0))
    run = svc.notify_turn(SCOPE, now=at(1))
    assert run is not None
    assert svc.execute(run.id, now=at(10)) is None  # not due yet: a stale message does nothing
    assert svc.run_due(now=at(10.999999)) == []
    [settled] = svc.run_due(now=at(11))
    assert settled.id == run.id and settled.outcome == Outcome.APPLIED and settled.ops_applied == 1
    assert settled.harness == "offline" and settled.input_tokens == 0 and settled.spend_micro_usd == 0
    assert svc.execute(run.id, now=at(12)) is None  # redelivered message: nothing happens
    assert svc.get_run(run.id).settled_at == at(11)
    merged = [r for r in svc.led.list(SCOPE, now=at(12)) if r.provenance == Provenance.MODEL_CONSOLIDATION]
    assert len(merged) == 1 and sorted(merged[0].supersedes) == sorted(ids)
    for rid in ids:
        old = svc.led.get(rid)
        assert old.status == Status.SUPERSEDED and old.valid_to == merged[0].valid_from == at(11)
    assert {h.id for h in svc.led.history(merged[0].id)} >= set(ids)


def test_turning_off_cancels_pending_runs_without_a_call(svc: ConsolidationService) -> None:
    dupes(svc)
    svc.update_settings(SCOPE, mode="apply", debounce_s=10, now=at(0))
    run = svc.notify_turn(SCOPE, now=at(1))
    assert run is not None
    svc.update_settings(SCOPE, mode="off", now=at(2))
    cancelled = svc.get_run(run.id)
    assert cancelled.state == RunState.SETTLED and cancelled.outcome == Outcome.CANCELLED
    assert cancelled.model_calls == 0 and cancelled.settled_at == at(2)
    assert svc.run_due(now=at(100)) == []


def test_no_active_records_settles_applied_without_a_call(svc: ConsolidationService) -> None:
    svc.update_settings(SCOPE, mode="apply", debounce_s=0, now=at(0))
    run = svc.notify_turn(SCOPE, now=at(1))
    assert run is not None
    [done] = svc.run_due(now=at(1))
    assert done.outcome == Outcome.APPLIED and done.model_calls == 0 and done.ops_proposed == 0


def test_no_spend_left_settles_skipped_budget_without_a_call(svc: ConsolidationService) -> None:
    dupes(svc)
    svc.update_settings(SCOPE, mode="apply", debounce_s=0, spend_budget_micro_usd=0, now=at(0))
    svc.notify_turn(SCOPE, now=at(1))
    [done] = svc.run_due(now=at(1))
    assert done.outcome == Outcome.SKIPPED_BUDGET and done.model_calls == 0
    assert len(svc.led.list(SCOPE, now=at(2))) == 3


def test_propose_mode_makes_proposals_that_accept_applies(svc: ConsolidationService) -> None:
    ids = dupes(svc)
    svc.update_settings(SCOPE, mode="propose", debounce_s=0, now=at(0))
    svc.notify_turn(SCOPE, now=at(1))
    [done] = svc.run_due(now=at(1))
    assert done.outcome == Outcome.PROPOSED and (done.ops_applied, done.proposals_written) == (0, 1)
    [proposal] = svc.led.proposals(SCOPE, now=at(2))
    assert proposal.provenance == Provenance.MODEL_CONSOLIDATION and sorted(proposal.supersedes) == sorted(ids)
    assert len(svc.led.list(SCOPE, now=at(2))) == 3  # nothing applied yet
    accepted = svc.led.accept(proposal.id, now=at(3))
    assert accepted.status == Status.ACTIVE and all(svc.led.get(i).status == Status.SUPERSEDED for i in ids)


def test_propose_mode_proposal_over_budget_is_refused_and_counted(svc: ConsolidationService) -> None:
    dupes(svc)
    svc.led.set_budget(SCOPE, 3, now=at(0))
    svc.update_settings(SCOPE, mode="propose", debounce_s=0, now=at(0))
    svc.notify_turn(SCOPE, now=at(1))
    [done] = svc.run_due(now=at(1))
    assert done.outcome == Outcome.PROPOSED and done.ops_applied == 0
    assert done.refusals == {"budget_exceeded": 1} and done.ops_refused == 1
    assert any(e.event == "proposal_refused" and e.run_id == done.id for e in svc.led.events(SCOPE))


def test_apply_mode_merge_at_the_budget_ceiling_works(svc: ConsolidationService) -> None:
    dupes(svc)
    svc.led.set_budget(SCOPE, 3, now=at(0))
    svc.update_settings(SCOPE, mode="apply", debounce_s=0, now=at(0))
    svc.notify_turn(SCOPE, now=at(1))
    [done] = svc.run_due(now=at(1))
    assert done.ops_applied == 1 and len(svc.led.list(SCOPE, now=at(2))) == 2


def test_allowed_ops_refusal_is_counted(svc: ConsolidationService) -> None:
    dupes(svc)
    svc.update_settings(SCOPE, mode="apply", debounce_s=0, allowed_ops=["keep"], now=at(0))
    svc.notify_turn(SCOPE, now=at(1))
    [done] = svc.run_due(now=at(1))
    assert done.refusals == {"op_not_allowed": 1} and done.ops_applied == 0
    assert len(svc.led.list(SCOPE, now=at(2))) == 3
    refused = [e for e in svc.led.events(SCOPE) if e.event == "consolidation_op_refused"]
    assert [e.reason for e in refused] == ["op_not_allowed"]


def test_concurrent_execute_runs_and_settles_once(make_service, ledger_url: str) -> None:  # type: ignore[no-untyped-def]
    # Given several services (separate engines, as separate processes would have) racing for one run
    services = [make_service() for _ in range(4)]
    dupes(services[0])
    services[0].update_settings(SCOPE, mode="apply", debounce_s=0, now=at(0))
    run = services[0].notify_turn(SCOPE, now=at(1))
    assert run is not None
    results = race_execute(services, run.id, now=at(2))
    # Then exactly one call executed and settled it; one merged record exists
    assert sum(r is not None for r in results) == 1
    assert services[0].get_run(run.id).model_calls == 1
    merged = [r for r in services[0].led.list(SCOPE, now=at(3)) if r.provenance == Provenance.MODEL_CONSOLIDATION]
    assert len(merged) == 1


def test_a_second_turn_while_running_makes_a_new_pending_run(svc: ConsolidationService) -> None:
    svc.update_settings(SCOPE, mode="apply", debounce_s=5, now=at(0))
    first = svc.notify_turn(SCOPE, now=at(0))
    assert first is not None
    svc.run_due(now=at(5))
    second = svc.notify_turn(SCOPE, now=at(6))
    assert second is not None and second.id != first.id
    assert [r.id for r in svc.runs(SCOPE)] == [second.id, first.id]  # newest first


def test_unknown_run_id(svc: ConsolidationService) -> None:
    with pytest.raises(RunNotFound):
        svc.execute("run_nope", now=at(0))


def test_service_uses_the_ledger_clock(make_ledger) -> None:  # type: ignore[no-untyped-def]
    clock = Clock(T0)
    led = make_ledger(clock=clock)
    svc = ConsolidationService(led, api_key="", base_url="")
    svc.update_settings(SCOPE, mode="apply", debounce_s=30)
    run = svc.notify_turn(SCOPE)
    # the clock is frozen: the turn is stamped 1 µs after the settings change (commit order is time order)
    assert run is not None and run.created_at == T0 + timedelta(microseconds=1)
    assert run.due_at == run.created_at + timedelta(seconds=30)
