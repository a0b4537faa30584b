"""The operator overview: every scope's month (spend against the cap, runs by outcome, refusals) and backlog,
in a few grouped reads, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from consolidation import ConsolidationService
from consolidation.overview import scope_overview
from consolidation.runs import month_bounds
from tests.conftest import Clock

SCOPE = "account:local"


def test_month_bounds_are_the_utc_calendar_month() -> None:
    assert month_bounds(datetime(2026, 12, 31, 23, 59, tzinfo=UTC)) == (
        datetime(2026, 12, 1, tzinfo=UTC),
        datetime(2027, 1, 1, tzinfo=UTC),
    )
    assert month_bounds(datetime(2026, 3, 1, tzinfo=UTC))[0] == datetime(2026, 3, 1, tzinfo=UTC)


def test_overview_counts_each_scope_this_month(svc: ConsolidationService, clock: Clock) -> None:
    led = svc.led
    # Given: a scope with duplicates consolidated (applied), a scope whose proposal is refused for budget,
    # a scope with a pending run, and a scope that only holds records
    for body in ("I prefer metric units", "i prefer  metric units."):
        led.save(body)
    svc.update_settings(SCOPE, mode="apply", debounce_s=0, spend_budget_micro_usd=2_000_000)
    svc.notify_turn(SCOPE)
    svc.update_settings("account:carol", mode="propose", debounce_s=3600, max_wait_s=None)
    svc.notify_turn("account:carol")
    clock.advance(seconds=1)
    [applied] = svc.run_due()
    # When the overview is read
    overview = scope_overview(led, now=clock())
    by_key = {s.scope_key: s for s in overview.scopes}
    # Then each scope has its mode, budget use, month and backlog
    local = by_key[SCOPE]
    assert (local.mode, local.active, local.runs_by_outcome) == ("apply", 1, {applied.outcome.value: 1})
    assert local.spend_budget_micro_usd == 2_000_000 and local.month_spend_micro_usd == applied.spend_micro_usd
    assert local.remaining_micro_usd == 2_000_000 - applied.spend_micro_usd
    carol = by_key["account:carol"]
    assert (carol.mode, carol.pending, carol.runs_by_outcome) == ("propose", 1, {})
    assert carol.oldest_due_at is not None and carol.oldest_due_at > clock()
    assert overview.pending == 1 and overview.running == 0
    # And next month starts from zero spend and no runs
    later = scope_overview(led, now=clock() + timedelta(days=40))
    assert {s.scope_key: s.month_spend_micro_usd for s in later.scopes}[SCOPE] == 0
    assert {s.scope_key: s.runs_by_outcome for s in later.scopes}[SCOPE] == {}


def test_a_refusal_counts_under_its_reason(svc: ConsolidationService, clock: Clock) -> None:
    led = svc.led
    for body in ("I prefer metric units", "i prefer  metric units.", "My dog is named Rex"):
        led.save(body)
    led.set_budget(SCOPE, 3)
    svc.update_settings(SCOPE, mode="propose", debounce_s=0)
    svc.notify_turn(SCOPE)
    clock.advance(seconds=1)
    svc.run_due()
    overview = scope_overview(led, now=clock())
    (local,) = [s for s in overview.scopes if s.scope_key == SCOPE]
    assert local.refusals == {"budget_exceeded": 1} and local.runs_by_outcome == {"proposed": 1}
    assert local.max_records == 3 and local.held == 3
