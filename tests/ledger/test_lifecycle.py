"""Lifecycle of records (docs/ledger.md) on both backends: save, edit, conflict groups, as-of reads,
history, delete/erasure, proposals, sweep, budgets, events, slash commands and refusals."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import text

from ledger import (
    BodyRejected,
    BudgetExceeded,
    InvalidArgument,
    InvalidInstant,
    InvalidTransition,
    Ledger,
    LedgerError,
    RecordNotFound,
    ScopeError,
)
from ledger.models import Kind, Provenance, Status

US = timedelta(microseconds=1)
SCOPE = "account:local"


# --------------------------------------------------------------------------- helpers
def snapshot(led: Ledger) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Every stored record row and every scope's settings row, verbatim."""
    with led.engine.connect() as conn:
        records = conn.execute(text("SELECT * FROM memory_records ORDER BY seq")).all()
        # latest_at is the scope's instant bookkeeping: a refusal's event moves it, nothing else
        scopes = conn.execute(
            text("SELECT scope_key, max_records, created_at, updated_at FROM scope_settings ORDER BY scope_key")
        ).all()
    return [tuple(r) for r in records], [tuple(r) for r in scopes]


def event_rows(led: Ledger) -> list[dict[str, Any]]:
    with led.engine.connect() as conn:
        return [dict(r) for r in conn.execute(text("SELECT * FROM ledger_events ORDER BY seq")).mappings()]


def ids(records: Any) -> list[str]:
    return [r.id for r in records]


def every_read_text(led: Ledger, scope: str, now: datetime, *, as_of: list[datetime] = ()) -> str:  # type: ignore[assignment]
    """Everything every read hands back for ``scope``, flattened to one string."""
    parts: list[Any] = []
    parts += led.list(scope, now=now)
    parts += led.records(scope)
    parts += led.proposals(scope, now=now)
    for instant in as_of:
        parts += led.list_as_of(scope, instant)
    for record in led.records(scope):
        parts.append(led.get(record.id))
        parts += led.history(record.id)
    packet = led.build_packet(scope, now=now)
    parts += [packet.text, *packet.records, *packet.omitted]
    return "\n".join(repr(p) for p in parts)


# --------------------------------------------------------------------------- save and edit
def test_save_defaults(led: Ledger, clock: Any) -> None:
    rec = led.save("  I prefer metric units  ")
    assert rec.id.startswith("mem_")
    assert rec.body == "I prefer metric units"
    assert rec.scope_key == SCOPE
    assert rec.kind == Kind.FACT == "fact"
    assert rec.provenance == Provenance.USER_EXPLICIT
    assert rec.status == Status.ACTIVE
    assert rec.valid_from == clock.now and rec.valid_to is None and rec.expires_at is None
    assert rec.supersedes == [] and rec.superseded_by is None and rec.conflict_group is None
    assert led.get(rec.id) == rec
    assert ids(led.list(SCOPE)) == [rec.id]


def test_save_is_bound_to_the_account_scope(make_ledger: Callable[..., Ledger]) -> None:
    alice = make_ledger(account="alice")
    bob = make_ledger(account="bob")
    rec = alice.save("my deploy region is eu-west-1", kind="decision", source_session_id="sess-1")
    assert rec.scope_key == "account:alice" and rec.kind == Kind.DECISION and rec.source_session_id == "sess-1"
    assert ids(bob.list("account:alice")) == [rec.id]
    assert bob.list("account:bob") == []


def test_edit_supersedes_exactly(led: Ledger, clock: Any) -> None:
    p = led.save("deploy region is eu-west-1", kind="decision", conflict_group="region")
    clock.advance(microseconds=1)
    s = led.save("deploy region is eu-central-1", supersedes=p.id)
    old = led.get(p.id)
    assert old.status == Status.SUPERSEDED
    assert old.valid_to == s.valid_from == p.valid_from + US
    assert old.superseded_by == s.id
    assert s.supersedes == [p.id]
    assert s.status == Status.ACTIVE and s.valid_to is None
    # An edit keeps the target's kind and conflict group unless new ones are given.
    assert s.kind == Kind.DECISION and s.conflict_group == "region"
    assert ids(led.list(SCOPE)) == [s.id]
    assert led.get(s.id) == s


def test_edit_at_the_same_instant_leaves_an_empty_interval(led: Ledger) -> None:
    p = led.save("first draft")
    s = led.save("second draft", supersedes=p.id, now=p.valid_from)
    old = led.get(p.id)
    assert old.valid_from == old.valid_to == s.valid_from
    assert led.list_as_of(SCOPE, s.valid_from) == [led.get(s.id)]


def test_edit_of_a_superseded_record_names_the_successor(led: Ledger) -> None:
    p = led.save("a")
    s = led.save("b", supersedes=p.id)
    before = snapshot(led)
    with pytest.raises(InvalidTransition) as err:
        led.save("c", supersedes=p.id)
    assert s.id in str(err.value)
    assert snapshot(led) == before


def test_edit_refuses_proposed_and_deleted_and_expired(led: Ledger, clock: Any) -> None:
    prop = led.propose("a proposal", confidence_bps=5000, rationale="r")
    gone = led.save("forget me")
    led.delete(gone.id)
    soon = led.save("short lived", expires_at=clock.now + timedelta(seconds=5))
    clock.advance(seconds=5)  # due, but no sweep has run
    before = snapshot(led)
    for target in (prop.id, gone.id, soon.id):
        with pytest.raises(InvalidTransition):
            led.save("edited", supersedes=target)
    assert snapshot(led) == before


def test_edit_across_scopes_is_refused(make_ledger: Callable[..., Ledger]) -> None:
    alice = make_ledger(account="alice")
    bob = make_ledger(account="bob")
    rec = alice.save("alice's fact")
    before = snapshot(alice)
    # Another account's id reads exactly as an unknown one: nothing confirms it exists.
    with pytest.raises(RecordNotFound) as foreign:
        bob.save("bob's edit", supersedes=rec.id)
    with pytest.raises(RecordNotFound) as unknown:
        bob.save("bob's edit", supersedes="mem_" + "0" * 24)
    assert foreign.value.message.replace(rec.id, "mem_" + "0" * 24) == unknown.value.message
    assert snapshot(alice) == before


def test_reads_by_id_are_the_bound_accounts_only(make_ledger: Any, clock: Any) -> None:
    # Given an edited record of alice's
    alice, bob = make_ledger(account="alice"), make_ledger(account="bob")
    first = alice.save("alice's first wording")
    clock.advance(seconds=1)
    second = alice.save("alice's second wording", supersedes=first.id)
    unknown = "mem_" + "0" * 24
    # Then bob's reads (and writes) by id refuse it exactly as an unknown id, naming only the id sent
    for read in (bob.get, bob.history, bob.delete, bob.accept, bob.reject):
        for foreign in (first.id, second.id):
            with pytest.raises(RecordNotFound) as theirs:
                read(foreign)
            with pytest.raises(RecordNotFound) as nobodys:
                read(unknown)
            assert theirs.value.message.replace(foreign, unknown) == nobodys.value.message
            assert theirs.value.context == {"record_id": foreign}
    assert [r.id for r in alice.history(second.id)] == [first.id, second.id]


def test_a_not_found_message_quotes_a_long_id_in_part_and_says_how_long_it_was(led: Ledger) -> None:
    with pytest.raises(RecordNotFound) as refused:
        led.get("mem_" + "a" * 99_996)
    assert len(refused.value.message) < 200 and "(100,000 characters)" in refused.value.message


def test_edit_before_the_target_took_effect_is_refused(led: Ledger, clock: Any) -> None:
    rec = led.save("fact")
    before = snapshot(led)
    with pytest.raises(InvalidInstant):
        led.save("edit", supersedes=rec.id, now=clock.now - US)
    assert snapshot(led) == before


# --------------------------------------------------------------------------- conflict groups
def test_save_into_a_group_supersedes_the_active_member_at_the_same_instant(led: Ledger, clock: Any) -> None:
    a = led.save("units: metric", conflict_group="units")
    clock.advance(seconds=3)
    b = led.save("units: imperial", conflict_group="units")
    old = led.get(a.id)
    assert old.status == Status.SUPERSEDED and old.superseded_by == b.id and old.valid_to == b.valid_from
    assert b.supersedes == [a.id]
    assert ids(led.list(SCOPE)) == [b.id]
    other = led.save("unrelated", conflict_group="other")
    assert sorted(ids(led.list(SCOPE))) == sorted([b.id, other.id])


def test_group_save_works_at_the_budget_ceiling(led: Ledger, clock: Any) -> None:
    led.set_budget(SCOPE, 2)
    a = led.save("tz: UTC", conflict_group="tz")
    led.save("likes tea")
    clock.advance(seconds=1)
    b = led.save("tz: Europe/Paris", conflict_group="tz")
    assert led.get(a.id).superseded_by == b.id
    assert led.budget(SCOPE).held == 2
    # A group with no active member is growth.
    with pytest.raises(BudgetExceeded):
        led.save("lang: en", conflict_group="lang")


def test_edit_into_another_group_closes_that_groups_member_too(led: Ledger, clock: Any) -> None:
    a = led.save("a", conflict_group="g1")
    m = led.save("m", conflict_group="g2")
    clock.advance(seconds=1)
    s = led.save("s", supersedes=a.id, conflict_group="g2")
    assert sorted(s.supersedes) == sorted([a.id, m.id])
    for old in (led.get(a.id), led.get(m.id)):
        assert old.status == Status.SUPERSEDED and old.superseded_by == s.id and old.valid_to == s.valid_from
    assert ids(led.list(SCOPE)) == [s.id]


def test_one_active_member_per_group_over_many_saves(led: Ledger, clock: Any) -> None:
    saved = []
    for n in range(6):
        clock.advance(milliseconds=1)
        saved.append(led.save(f"value {n}", conflict_group="g"))
    active = [r for r in led.records(SCOPE) if r.status == Status.ACTIVE]
    assert ids(active) == [saved[-1].id]
    for prev, nxt in itertools.pairwise(saved):
        assert led.get(prev.id).superseded_by == nxt.id
        assert led.get(prev.id).valid_to == nxt.valid_from
    assert ids(led.history(saved[0].id)) == ids(saved)


# --------------------------------------------------------------------------- list and list_as_of
def test_as_of_boundaries_are_half_open_to_the_microsecond(led: Ledger, clock: Any) -> None:
    t1 = clock.now
    a = led.save("version one")
    t2 = clock.advance(seconds=10)
    b = led.save("version two", supersedes=a.id)
    t3 = t2 + timedelta(seconds=5)
    c = led.save("expiring", expires_at=t3, now=t2)

    assert led.list_as_of(SCOPE, t1 - US) == []
    assert ids(led.list_as_of(SCOPE, t1)) == [a.id]
    assert ids(led.list_as_of(SCOPE, t2 - US)) == [a.id]
    assert ids(led.list_as_of(SCOPE, t2)) == [b.id, c.id]
    assert ids(led.list_as_of(SCOPE, t3 - US)) == [b.id, c.id]
    assert ids(led.list_as_of(SCOPE, t3)) == [b.id]
    assert ids(led.list(SCOPE, now=t3 - US)) == [b.id, c.id]
    assert ids(led.list(SCOPE, now=t3)) == [b.id]
    # The sweep changes nothing about what any instant shows.
    led.sweep_expired(t3)
    assert ids(led.list_as_of(SCOPE, t3 - US)) == [b.id, c.id]
    assert ids(led.list_as_of(SCOPE, t3)) == [b.id]
    assert led.get(c.id).valid_to == t3


def test_as_of_now_equals_list(led: Ledger, clock: Any) -> None:
    a = led.save("a")
    led.save("b", conflict_group="g")
    clock.advance(seconds=1)
    led.save("c", conflict_group="g")
    led.save("a2", supersedes=a.id)
    d = led.save("d", expires_at=clock.now + timedelta(seconds=2))
    led.propose("p", confidence_bps=10)
    led.delete(d.id)
    clock.advance(seconds=1)
    led.save("e", expires_at=clock.now + timedelta(seconds=1))
    for _ in range(3):
        assert led.list_as_of(SCOPE, clock.now) == led.list(SCOPE)
        clock.advance(seconds=1)


def test_proposals_and_rejections_never_show_in_as_of(led: Ledger, clock: Any) -> None:
    p = led.propose("proposed", confidence_bps=9000, rationale="seen twice")
    r = led.propose("to reject", confidence_bps=100)
    led.reject(r.id)
    for instant in (p.valid_from - US, p.valid_from, p.valid_from + US, clock.now + timedelta(days=1)):
        assert led.list_as_of(SCOPE, instant) == []
    assert led.list(SCOPE) == []


# --------------------------------------------------------------------------- get and history
def test_history_is_the_whole_chain_oldest_first_from_any_member(led: Ledger, clock: Any) -> None:
    chain = [led.save("v0")]
    for n in range(1, 4):
        clock.advance(seconds=1)
        chain.append(led.save(f"v{n}", supersedes=chain[-1].id))
    expected = ids(chain)
    for rec in chain:
        assert ids(led.history(rec.id)) == expected
    assert [r.status for r in led.history(chain[0].id)] == [Status.SUPERSEDED] * 3 + [Status.ACTIVE]


def test_merge_by_proposal_reaches_every_source(led: Ledger, clock: Any) -> None:
    a = led.save("likes green tea")
    clock.advance(seconds=1)
    b = led.save("drinks green tea every morning")
    clock.advance(seconds=1)
    m = led.propose(
        "drinks green tea every morning and likes it", supersedes=[a.id, b.id], confidence_bps=9000, rationale="dup"
    )
    # A pending proposal is not yet history.
    assert ids(led.history(a.id)) == [a.id]
    clock.advance(seconds=1)
    accepted = led.accept(m.id)
    assert accepted.status == Status.ACTIVE and accepted.valid_from == clock.now and accepted.valid_to is None
    assert sorted(accepted.supersedes) == sorted([a.id, b.id])
    for src in (a, b):
        old = led.get(src.id)
        assert old.status == Status.SUPERSEDED and old.superseded_by == m.id and old.valid_to == clock.now
    for rec_id in (a.id, b.id, m.id):
        assert ids(led.history(rec_id)) == [a.id, b.id, m.id]
    assert ids(led.list(SCOPE)) == [m.id]


def test_get_and_history_of_unknown_ids(led: Ledger) -> None:
    for bad in ("mem_doesnotexist", "x"):
        with pytest.raises(RecordNotFound) as err:
            led.get(bad)
        assert err.value.record_id == bad
        with pytest.raises(RecordNotFound):
            led.history(bad)


# --------------------------------------------------------------------------- delete
def test_delete_active_is_a_tombstone_that_erases_the_body(led: Ledger, clock: Any) -> None:
    rec = led.save("my locker number is platypusfeather")
    clock.advance(seconds=2)
    gone = led.delete(rec.id)
    assert gone.status == Status.DELETED and gone.valid_to == clock.now and gone.body is None and gone.erased
    assert gone.valid_from == rec.valid_from
    assert led.list(SCOPE) == []
    assert led.search(SCOPE, "platypusfeather") == []
    assert "platypusfeather" not in every_read_text(led, SCOPE, clock.now, as_of=[rec.valid_from])
    events = [e.event for e in led.events(SCOPE, record_id=rec.id)]
    assert events == ["saved", "deleted", "erased"]


def test_delete_proposed_keeps_its_empty_interval_and_leaves_targets_alone(led: Ledger) -> None:
    target = led.save("target body stays")
    prop = led.propose("secret proposal wombatlantern", supersedes=[target.id], confidence_bps=1)
    gone = led.delete(prop.id)
    assert gone.status == Status.DELETED and gone.valid_to == gone.valid_from and gone.body is None
    assert led.get(target.id).body == "target body stays" and led.get(target.id).status == Status.ACTIVE
    assert led.proposals(SCOPE) == []
    assert "wombatlantern" not in every_read_text(led, SCOPE, gone.valid_from)


@pytest.mark.parametrize("swept", [True, False])
def test_delete_expired_keeps_the_expiry_instant(led: Ledger, clock: Any, swept: bool) -> None:
    exp = clock.now + timedelta(seconds=5)
    rec = led.save("expiring narwhalbiscuit", expires_at=exp)
    clock.advance(seconds=9)
    if swept:
        assert led.sweep_expired(clock.now) == 1
    gone = led.delete(rec.id)
    assert gone.status == Status.DELETED and gone.valid_to == exp and gone.body is None
    assert "narwhalbiscuit" not in every_read_text(led, SCOPE, clock.now, as_of=[rec.valid_from])


def test_delete_of_a_superseded_record_is_refused_naming_the_successor(led: Ledger) -> None:
    a = led.save("a")
    b = led.save("b", supersedes=a.id)
    before = snapshot(led)
    with pytest.raises(InvalidTransition) as err:
        led.delete(a.id)
    assert b.id in str(err.value)
    assert snapshot(led) == before


def test_delete_twice_and_delete_before_valid_from_are_refused(led: Ledger, clock: Any) -> None:
    a = led.save("a")
    with pytest.raises(InvalidInstant):
        led.delete(a.id, now=clock.now - US)
    led.delete(a.id)
    before = snapshot(led)
    with pytest.raises(InvalidTransition):
        led.delete(a.id)
    with pytest.raises(RecordNotFound):
        led.delete("mem_nope")
    assert snapshot(led) == before


def test_delete_erases_the_whole_chain(led: Ledger, clock: Any) -> None:
    a = led.save("flat in quokkaville")
    clock.advance(seconds=1)
    b = led.propose("quokkaville flat, 3rd floor", supersedes=[a.id], confidence_bps=8000, rationale="quokkaville")
    led.accept(b.id)
    clock.advance(seconds=1)
    c = led.save("quokkaville flat, 4th floor", supersedes=b.id)
    keep = led.save("unrelated survivor")
    clock.advance(seconds=1)
    led.delete(c.id)
    chain = led.history(a.id)
    assert ids(chain) == [a.id, b.id, c.id]
    assert all(r.body is None and r.erased and r.rationale is None for r in chain)
    assert [r.status for r in chain] == [Status.SUPERSEDED, Status.SUPERSEDED, Status.DELETED]
    assert led.get(keep.id).body == "unrelated survivor"
    assert led.search(SCOPE, "quokkaville") == []
    instants = [a.valid_from, b.valid_from + US, c.valid_from, clock.now]
    assert "quokkaville" not in every_read_text(led, SCOPE, clock.now, as_of=instants)
    # A past view keeps the shape (the scope did hold a pin then), never the words.
    assert ids(led.list_as_of(SCOPE, a.valid_from)) == [a.id]
    assert ids(led.list_as_of(SCOPE, c.valid_from)) == [c.id]
    for instant in instants:
        for rec in led.list_as_of(SCOPE, instant):
            assert rec.id == keep.id or (rec.body is None and rec.erased and rec.rationale is None)
    # The raw rows hold no trace either.
    with led.engine.connect() as conn:
        dump = repr(conn.execute(text("SELECT * FROM memory_records")).all())
        dump += repr(conn.execute(text("SELECT * FROM ledger_events")).all())
    assert "quokkaville" not in dump


def test_delete_of_a_merge_erases_every_source(led: Ledger, clock: Any) -> None:
    a = led.save("axolotlhat one")
    b = led.save("axolotlhat two")
    m = led.propose("axolotlhat both", supersedes=[a.id, b.id], confidence_bps=1)
    clock.advance(seconds=1)
    led.accept(m.id)
    led.delete(m.id)
    assert all(led.get(x).body is None for x in (a.id, b.id, m.id))
    assert "axolotlhat" not in every_read_text(led, SCOPE, clock.now, as_of=[a.valid_from])


# --------------------------------------------------------------------------- proposals
def test_propose_is_an_empty_interval_that_waits(led: Ledger, clock: Any) -> None:
    p = led.propose(
        "prefers dark mode",
        kind="preference",
        confidence_bps=7500,
        rationale="said so twice",
        source_session_id="s1",
        conflict_group="theme",
    )
    assert p.status == Status.PROPOSED and p.provenance == Provenance.MODEL_PROPOSAL
    assert p.valid_from == p.valid_to == clock.now
    assert p.confidence_bps == 7500 and p.rationale == "said so twice" and p.kind == Kind.PREFERENCE
    assert ids(led.proposals(SCOPE)) == [p.id]
    assert led.list(SCOPE) == []
    assert led.budget(SCOPE).proposed == 1
    c = led.propose("from consolidation", provenance="model_consolidation")
    assert c.provenance == Provenance.MODEL_CONSOLIDATION
    with pytest.raises(InvalidArgument):
        led.propose("pretending to be the user", provenance="user_explicit")


def test_accept_closes_targets_and_the_group_member_at_now(led: Ledger, clock: Any) -> None:
    t = led.save("deploys on fridays")
    g = led.save("theme: light", conflict_group="theme")
    p = led.propose("never deploys on fridays; theme dark", supersedes=[t.id], conflict_group="theme")
    clock.advance(minutes=5)
    acc = led.accept(p.id)
    assert acc.status == Status.ACTIVE and acc.valid_from == clock.now and acc.valid_to is None
    assert sorted(acc.supersedes) == sorted([t.id, g.id])
    for old in (led.get(t.id), led.get(g.id)):
        assert old.status == Status.SUPERSEDED and old.superseded_by == p.id and old.valid_to == clock.now
    assert ids(led.list(SCOPE)) == [p.id] and led.proposals(SCOPE) == []
    assert led.list_as_of(SCOPE, clock.now - US) == [led.get(t.id), led.get(g.id)]


def test_accept_refuses_when_a_target_is_no_longer_active(led: Ledger, clock: Any) -> None:
    t = led.save("original")
    p = led.propose("rewrite", supersedes=[t.id])
    clock.advance(seconds=1)
    led.save("user edited it first", supersedes=t.id)
    before = snapshot(led)
    with pytest.raises(InvalidTransition) as err:
        led.accept(p.id)
    assert t.id in str(err.value)
    assert snapshot(led) == before
    rej = led.reject(p.id)
    assert rej.status == Status.REJECTED


def test_accept_refuses_deleted_or_foreign_or_missing_targets(make_ledger: Callable[..., Ledger]) -> None:
    led = make_ledger()
    other = make_ledger(account="other")
    t = led.save("mine")
    led.delete(t.id)
    foreign = other.save("theirs")
    for targets in ([t.id], [foreign.id], ["mem_missing"]):
        p = led.propose("merge", supersedes=targets)
        before = snapshot(led)
        with pytest.raises(InvalidTransition):
            led.accept(p.id)
        assert snapshot(led) == before


def test_reject_keeps_the_empty_interval(led: Ledger, clock: Any) -> None:
    p = led.propose("maybe", confidence_bps=10)
    clock.advance(seconds=3)
    r = led.reject(p.id)
    assert r.status == Status.REJECTED and r.valid_from == r.valid_to == p.valid_from and r.body == "maybe"
    assert led.proposals(SCOPE) == [] and led.budget(SCOPE).held == 0
    before = snapshot(led)
    for op in (led.accept, led.reject):
        with pytest.raises(InvalidTransition):
            op(p.id)
    assert snapshot(led) == before


def test_accept_and_reject_refuse_non_proposals(led: Ledger) -> None:
    a = led.save("active")
    before = snapshot(led)
    for op in (led.accept, led.reject):
        with pytest.raises(InvalidTransition):
            op(a.id)
        with pytest.raises(RecordNotFound):
            op("mem_missing")
    assert snapshot(led) == before


def test_an_expired_proposal_cannot_be_accepted_even_before_the_sweep(led: Ledger, clock: Any) -> None:
    p = led.propose("short-lived", expires_at=clock.now + timedelta(seconds=1))
    clock.advance(seconds=1)
    assert led.proposals(SCOPE) == []
    with pytest.raises(InvalidTransition):
        led.accept(p.id)
    rec = led.get(p.id)
    assert rec.status in (Status.PROPOSED, Status.EXPIRED)
    led.sweep_expired(clock.now)
    rec = led.get(p.id)
    assert rec.status == Status.EXPIRED and rec.valid_to == rec.valid_from == p.valid_from


# --------------------------------------------------------------------------- sweep
def test_sweep_closes_at_expires_at_not_at_the_sweep_instant(led: Ledger, clock: Any) -> None:
    exp = clock.now + timedelta(hours=1)
    a = led.save("active one", expires_at=exp)
    p = led.propose("proposal one", expires_at=exp)
    later = led.save("not yet due", expires_at=exp + US)
    forever = led.save("no expiry")
    sweep_at = exp + timedelta(days=3)
    assert led.sweep_expired(exp - US) == 0
    assert led.sweep_expired(sweep_at - timedelta(days=3)) == 2  # exactly at expires_at: due
    ra, rp = led.get(a.id), led.get(p.id)
    assert ra.status == Status.EXPIRED and ra.valid_to == exp and ra.body == "active one"
    assert rp.status == Status.EXPIRED and rp.valid_to == rp.valid_from
    assert led.get(later.id).status == Status.ACTIVE and led.get(forever.id).status == Status.ACTIVE
    before = snapshot(led)
    assert led.sweep_expired(sweep_at - timedelta(days=3)) == 0
    assert snapshot(led) == before
    assert led.sweep_expired(sweep_at) == 1
    assert led.get(later.id).valid_to == exp + US
    assert [e.event for e in led.events(SCOPE, record_id=a.id)] == ["saved", "expired"]


def test_sweep_in_batches_reaches_everything_due(led: Ledger, clock: Any) -> None:
    exp = clock.now + timedelta(seconds=1)
    made = [led.save(f"item {n}", expires_at=exp + n * US) for n in range(7)]
    seen: list[int] = []
    assert led.sweep_expired(exp + timedelta(seconds=1), batch_size=3, progress=seen.append) == 7
    assert sum(seen) == 7
    assert all(led.get(r.id).status == Status.EXPIRED for r in made)
    assert [led.get(r.id).valid_to for r in made] == [r.expires_at for r in made]


def test_reads_never_return_an_expired_record_before_the_sweep(led: Ledger, clock: Any) -> None:
    exp = clock.now + timedelta(seconds=30)
    led.save("ephemeral kiwibanjo", expires_at=exp)
    led.propose("ephemeral proposal kiwibanjo", expires_at=exp)
    keep = led.save("durable kiwibanjo")
    clock.advance(seconds=30)
    assert ids(led.list(SCOPE)) == [keep.id]
    assert ids(led.list_as_of(SCOPE, clock.now)) == [keep.id]
    assert ids(led.search(SCOPE, "kiwibanjo")) == [keep.id]
    assert led.proposals(SCOPE) == []
    packet = led.build_packet(SCOPE)
    assert ids(packet.records) == [keep.id] and "ephemeral" not in packet.text and packet.omitted == []
    assert led.budget(SCOPE).held in (1, 3)  # counted until the sweep (or a write) expires them


# --------------------------------------------------------------------------- budgets
def _fill(led: Ledger, active: int, proposed: int) -> None:
    for n in range(active):
        led.save(f"held fact {n}")
    for n in range(proposed):
        led.propose(f"held proposal {n}", confidence_bps=1)


def test_budget_refusal_names_the_budget_and_changes_nothing(led: Ledger) -> None:
    led.set_budget(SCOPE, 3)
    _fill(led, 2, 1)
    before_records, before_usage = led.records(SCOPE), led.budget(SCOPE)
    before = snapshot(led)
    with pytest.raises(BudgetExceeded) as err:
        led.save("one too many")
    exc = err.value
    assert (exc.scope_key, exc.budget, exc.active, exc.proposed, exc.held) == (SCOPE, 3, 2, 1, 3)
    msg = str(exc)
    assert "account:local holds 3 of 3 (2 active, 1 proposed)" in msg
    for advice in ("forget", "reject", "consolidation"):
        assert advice in msg
    assert exc.reason == "budget_exceeded"
    assert snapshot(led) == before
    assert led.records(SCOPE) == before_records and led.budget(SCOPE) == before_usage


def test_edit_and_accept_work_at_the_ceiling(led: Ledger, clock: Any) -> None:
    led.set_budget(SCOPE, 2)
    a = led.save("a")
    p = led.propose("a, better", supersedes=[a.id])
    clock.advance(seconds=1)
    b = led.save("a, edited", supersedes=a.id)
    assert led.budget(SCOPE).held == 2
    with pytest.raises(InvalidTransition):
        led.accept(p.id)  # its target was edited meanwhile
    led.reject(p.id)
    q = led.propose("b, proposed", supersedes=[b.id])
    led.accept(q.id)
    assert led.budget(SCOPE).held == 1


def test_proposal_over_budget_is_refused_and_recorded(led: Ledger) -> None:
    led.set_budget(SCOPE, 1)
    led.save("the only one")
    before = snapshot(led)
    with pytest.raises(BudgetExceeded):
        led.propose("no room", confidence_bps=5000, rationale="why not")
    assert snapshot(led) == before
    refused = [e for e in led.events(SCOPE) if e.event == "proposal_refused"]
    assert len(refused) == 1
    assert refused[0].reason == "budget_exceeded" and refused[0].record_id is None
    assert refused[0].detail["budget"] == 1 and refused[0].detail["active"] == 1
    assert led.proposals(SCOPE) == []


def test_budget_below_what_is_held_never_evicts(led: Ledger) -> None:
    _fill(led, 3, 1)
    before = led.records(SCOPE)
    use = led.set_budget(SCOPE, 1)
    assert (use.max_records, use.active, use.proposed) == (1, 3, 1)
    assert led.records(SCOPE) == before
    with pytest.raises(BudgetExceeded):
        led.save("growth")
    led.set_budget(SCOPE, 0)
    with pytest.raises(BudgetExceeded):
        led.propose("growth")


def test_budgets_are_per_scope(make_ledger: Callable[..., Ledger]) -> None:
    a = make_ledger(account="a")
    b = make_ledger(account="b")
    a.set_budget("account:a", 1)
    a.save("a1")
    with pytest.raises(BudgetExceeded):
        a.save("a2")
    for n in range(3):
        b.save(f"b{n}")
    assert b.budget("account:b").held == 3
    assert a.budget("account:a").max_records == 1


def test_set_budget_refuses_bad_values(led: Ledger) -> None:
    before = snapshot(led)
    for bad in (-1, 1_000_001, True, 2.0, "5", None):
        with pytest.raises(InvalidArgument):
            led.set_budget(SCOPE, bad)  # type: ignore[arg-type]
    assert snapshot(led) == before


# --------------------------------------------------------------------------- events
def test_events_never_hold_a_body(led: Ledger, clock: Any) -> None:
    bodies = []

    def save(body: str, **kw: Any) -> Any:
        bodies.append(body)
        return led.save(body, **kw)

    a = save("eventbody alpha marmosetcanoe")
    b = save("eventbody beta marmosetcanoe", supersedes=a.id)
    c = save("eventbody gamma", expires_at=clock.now + timedelta(seconds=1))
    save("eventbody delta", conflict_group="g")
    save("eventbody epsilon", conflict_group="g")
    bodies += ["eventbody proposal one", "eventbody proposal two"]
    p1 = led.propose(bodies[-2], supersedes=[b.id], rationale="eventbody rationale")
    p2 = led.propose(bodies[-1])
    clock.advance(seconds=2)
    led.accept(p1.id)
    led.reject(p2.id)
    led.sweep_expired(clock.now)
    led.delete(p1.id)
    led.set_budget(SCOPE, 1)
    with pytest.raises(BudgetExceeded):
        led.propose("eventbody refused for budget")
    with pytest.raises(BudgetExceeded):
        led.save("eventbody refused save")
    with pytest.raises(BodyRejected):
        led.save("my api key is sk-ant-api03-" + "Zq7xW2kP9mR4tY6uJ8nB3vC5" * 3)
    with pytest.raises(BodyRejected):
        led.propose("eventbody " + "x" * 5000)
    led.set_budget(SCOPE, 5)
    assert led.handle_slash("/pin eventbody by slash").ok
    rows = event_rows(led)
    kinds = {r["event"] for r in rows}
    assert {
        "saved",
        "superseded",
        "deleted",
        "erased",
        "proposed",
        "accepted",
        "rejected",
        "expired",
        "proposal_refused",
        "save_refused",
        "budget_set",
    } <= kinds
    assert c.id in {r["record_id"] for r in rows if r["event"] == "expired"}
    for row in rows:
        flat = json.dumps(row, default=str)
        assert "eventbody" not in flat
        assert "marmosetcanoe" not in flat
        assert "sk-ant" not in flat and "Zq7xW2kP" not in flat
        json.loads(row["detail"])


# --------------------------------------------------------------------------- slash commands
def test_slash_pin_pins_unpin(led: Ledger, clock: Any) -> None:
    empty = led.handle_slash("/pins")
    assert empty.handled and empty.ok and "No pins" in empty.reply
    res = led.handle_slash("/pin   I prefer metric units  ")
    assert res.handled and res.ok
    (rec,) = res.records
    assert rec.body == "I prefer metric units" and rec.id in res.reply
    listed = led.handle_slash("/pins")
    assert listed.handled and rec.id in listed.reply and "metric" in listed.reply
    gone = led.handle_slash(f"/unpin {rec.id}")
    assert gone.handled and gone.ok and led.get(rec.id).status == Status.DELETED
    assert led.list(SCOPE) == []


NOT_OURS = ["/memory", "/memory show", "hello", "", "   ", "/pinned x", "/PIN x", "pin x", "/unpins", "/", "/help", 7]
SLASH_ERRORS = [
    ("/pin", "usage"),
    ("/pin    ", "usage"),
    ("/pins extra", "usage"),
    ("/unpin", "usage"),
    ("/unpin a b", "usage"),
    ("/unpin mem_missing", "not_found"),
    ("/pin my password is Tr0ub4dor&3xYz!", "body_rejected"),
]


def test_slash_anything_else_is_not_handled(led: Ledger) -> None:
    led.save("something held")
    before = snapshot(led)
    for line in NOT_OURS:
        res = led.handle_slash(line)  # type: ignore[arg-type]
        assert res.handled is False, line
    assert snapshot(led) == before


def test_slash_errors_are_handled_but_not_ok(led: Ledger) -> None:
    before = snapshot(led)
    for line, reason in SLASH_ERRORS:
        res = led.handle_slash(line)
        assert (res.handled, res.ok, res.reason) == (True, False, reason), line
        assert res.reply, line
    assert snapshot(led) == before


def test_slash_budget_and_bad_instant(led: Ledger, clock: Any) -> None:
    led.set_budget(SCOPE, 1)
    assert led.handle_slash("/pin first").ok
    res = led.handle_slash("/pin second")
    assert res.handled and not res.ok and res.reason == "budget_exceeded" and "1 of 1" in res.reply
    res = led.handle_slash("/pins", now=datetime(2026, 1, 1))
    assert res.handled and not res.ok and res.reason == "invalid_params"
    assert led.handle_slash("/memory", now=datetime(2026, 1, 1)).handled is False


def test_slash_unpin_only_reaches_the_callers_own_pins(make_ledger: Callable[..., Ledger]) -> None:
    mine = make_ledger(account="alice")
    theirs = make_ledger(account="bob").save("bob's pin")
    before = snapshot(mine)
    res = mine.handle_slash(f"/unpin {theirs.id}")
    assert res.handled and not res.ok and res.reason == "not_found"
    assert snapshot(mine) == before


def test_slash_unpin_of_a_superseded_record_names_the_successor(led: Ledger) -> None:
    a = led.save("a")
    b = led.save("b", supersedes=a.id)
    res = led.handle_slash(f"/unpin {a.id}")
    assert res.handled and not res.ok and res.reason == "invalid_transition" and b.id in res.reply


# --------------------------------------------------------------------------- naive instants and bad arguments
NAIVE = datetime(2026, 1, 1, 12, 0, 0)
WEST, EAST = timezone(timedelta(hours=-5)), timezone(timedelta(hours=5))


def _naive_calls(led: Ledger, rec_id: str, prop_id: str) -> list[tuple[str, Callable[[], object]]]:
    return [
        ("save now", lambda: led.save("x", now=NAIVE)),
        ("save expires_at", lambda: led.save("x", expires_at=NAIVE.replace(year=2030))),
        ("edit now", lambda: led.save("x", supersedes=rec_id, now=NAIVE)),
        ("propose now", lambda: led.propose("x", now=NAIVE)),
        ("propose expires_at", lambda: led.propose("x", expires_at=NAIVE.replace(year=2030))),
        ("accept", lambda: led.accept(prop_id, now=NAIVE)),
        ("reject", lambda: led.reject(prop_id, now=NAIVE)),
        ("delete", lambda: led.delete(rec_id, now=NAIVE)),
        ("list", lambda: led.list(SCOPE, now=NAIVE)),
        ("list_as_of", lambda: led.list_as_of(SCOPE, NAIVE)),
        ("list_as_of none", lambda: led.list_as_of(SCOPE, None)),  # type: ignore[arg-type]
        ("list_as_of text", lambda: led.list_as_of(SCOPE, "2026-01-01T00:00:00Z")),  # type: ignore[arg-type]
        ("proposals", lambda: led.proposals(SCOPE, now=NAIVE)),
        ("search", lambda: led.search(SCOPE, "x", now=NAIVE)),
        ("sweep", lambda: led.sweep_expired(NAIVE)),
        ("sweep none", lambda: led.sweep_expired(None)),  # type: ignore[arg-type]
        ("sweep timestamp", lambda: led.sweep_expired(1_700_000_000)),  # type: ignore[arg-type]
        ("packet", lambda: led.build_packet(SCOPE, now=NAIVE)),
        ("set_budget", lambda: led.set_budget(SCOPE, 5, now=NAIVE)),
        ("expires_at text", lambda: led.save("x", expires_at="2030-01-01T00:00:00Z")),  # type: ignore[arg-type]
        ("expires_at past the range", lambda: led.save("x", expires_at=datetime.max.replace(tzinfo=WEST))),
        ("as_of before the range", lambda: led.list_as_of(SCOPE, datetime.min.replace(tzinfo=EAST))),
        ("now past the range", lambda: led.list(SCOPE, now=datetime.max.replace(tzinfo=WEST))),
    ]


def test_naive_datetimes_are_refused_everywhere(led: Ledger, clock: Any) -> None:
    rec = led.save("existing")
    prop = led.propose("waiting")
    before = snapshot(led)
    for name, call in _naive_calls(led, rec.id, prop.id):
        with pytest.raises(InvalidInstant) as err:
            call()
        assert err.value.reason == "invalid_params", name
        assert snapshot(led) == before, name


def test_expiry_must_be_after_now(led: Ledger, clock: Any) -> None:
    before = snapshot(led)
    for exp in (clock.now, clock.now - US):
        with pytest.raises(InvalidInstant):
            led.save("x", expires_at=exp)
        with pytest.raises(InvalidInstant):
            led.propose("x", expires_at=exp)
    assert snapshot(led) == before
    rec = led.save("x", expires_at=clock.now + US)
    assert rec.expires_at == clock.now + US


def test_other_timezones_are_normalised_to_utc(led: Ledger, clock: Any) -> None:
    tz = datetime(2026, 1, 1, 5, 30, tzinfo=UTC).astimezone(__import__("zoneinfo").ZoneInfo("Asia/Kolkata"))
    rec = led.save("x", now=tz, expires_at=tz + timedelta(hours=1))
    assert rec.valid_from == datetime(2026, 1, 1, 5, 30, tzinfo=UTC)
    assert rec.valid_from.utcoffset() == timedelta(0)
    assert led.get(rec.id).expires_at == datetime(2026, 1, 1, 6, 30, tzinfo=UTC)


BAD_SCOPES = ["", "nocolon", "account:", ":x", "Account:x", "account:x y", 5, None, "a" * 40 + ":x"]


def _user_errors(led: Ledger, rec_id: str, prop_id: str) -> list[tuple[str, type[LedgerError], Callable[[], object]]]:
    calls: list[tuple[str, type[LedgerError], Callable[[], object]]] = [
        ("bad kind", InvalidArgument, lambda: led.save("x", kind="opinion")),
        ("bad kind type", InvalidArgument, lambda: led.save("x", kind=3)),  # type: ignore[arg-type]
        ("propose bad kind", InvalidArgument, lambda: led.propose("x", kind="nope")),
        ("empty body", BodyRejected, lambda: led.save("")),
        ("blank body", BodyRejected, lambda: led.save(" \n\t ")),
        ("body type", BodyRejected, lambda: led.save(5)),  # type: ignore[arg-type]
        ("body none", BodyRejected, lambda: led.save(None)),  # type: ignore[arg-type]
        ("body too long", BodyRejected, lambda: led.save("y" * 2001)),
        ("credential", BodyRejected, lambda: led.save("token ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8")),
        ("propose body type", BodyRejected, lambda: led.propose(["x"])),  # type: ignore[arg-type]
        ("group type", InvalidArgument, lambda: led.save("x", conflict_group=5)),  # type: ignore[arg-type]
        ("group blank", InvalidArgument, lambda: led.save("x", conflict_group="  ")),
        ("group too long", InvalidArgument, lambda: led.save("x", conflict_group="g" * 201)),
        ("session type", InvalidArgument, lambda: led.save("x", source_session_id=7)),  # type: ignore[arg-type]
        ("supersedes type", InvalidArgument, lambda: led.save("x", supersedes=[rec_id])),  # type: ignore[arg-type]
        ("supersedes missing", RecordNotFound, lambda: led.save("x", supersedes="mem_missing")),
        ("supersedes empty", InvalidArgument, lambda: led.save("x", supersedes="")),
        ("edit a proposal", InvalidTransition, lambda: led.save("x", supersedes=prop_id)),
        ("confidence high", InvalidArgument, lambda: led.propose("x", confidence_bps=10_001)),
        ("confidence low", InvalidArgument, lambda: led.propose("x", confidence_bps=-1)),
        ("confidence float", InvalidArgument, lambda: led.propose("x", confidence_bps=0.5)),  # type: ignore[arg-type]
        ("confidence bool", InvalidArgument, lambda: led.propose("x", confidence_bps=True)),
        ("rationale type", InvalidArgument, lambda: led.propose("x", rationale=5)),  # type: ignore[arg-type]
        ("propose supersedes ints", InvalidArgument, lambda: led.propose("x", supersedes=[1])),  # type: ignore[list-item]
        ("propose supersedes dup", InvalidArgument, lambda: led.propose("x", supersedes=[rec_id, rec_id])),
        ("provenance", InvalidArgument, lambda: led.propose("x", provenance="oracle")),
        ("propose scope", ScopeError, lambda: led.propose("x", scope_key="nocolon")),
        ("get none", InvalidArgument, lambda: led.get(None)),  # type: ignore[arg-type]
        ("get int", InvalidArgument, lambda: led.get(123)),  # type: ignore[arg-type]
        ("get empty", InvalidArgument, lambda: led.get("")),
        ("history int", InvalidArgument, lambda: led.history(5)),  # type: ignore[arg-type]
        ("delete none", InvalidArgument, lambda: led.delete(None)),  # type: ignore[arg-type]
        ("delete missing", RecordNotFound, lambda: led.delete("mem_missing")),
        ("accept int", InvalidArgument, lambda: led.accept(1)),  # type: ignore[arg-type]
        ("accept active", InvalidTransition, lambda: led.accept(rec_id)),
        ("reject active", InvalidTransition, lambda: led.reject(rec_id)),
        ("reject list", InvalidArgument, lambda: led.reject([prop_id])),  # type: ignore[arg-type]
        ("search query type", InvalidArgument, lambda: led.search(SCOPE, None)),  # type: ignore[arg-type]
        ("search limit 0", InvalidArgument, lambda: led.search(SCOPE, "x", limit=0)),
        ("search limit big", InvalidArgument, lambda: led.search(SCOPE, "x", limit=10_000)),
        ("search limit type", InvalidArgument, lambda: led.search(SCOPE, "x", limit="5")),  # type: ignore[arg-type]
        ("packet max_chars type", InvalidArgument, lambda: led.build_packet(SCOPE, max_chars="5")),  # type: ignore[arg-type]
        ("packet max_chars neg", InvalidArgument, lambda: led.build_packet(SCOPE, max_chars=-1)),
        ("packet max_chars bool", InvalidArgument, lambda: led.build_packet(SCOPE, max_chars=True)),
        ("sweep batch 0", InvalidArgument, lambda: led.sweep_expired(datetime.now(UTC), batch_size=0)),
        ("sweep batch negative", InvalidArgument, lambda: led.sweep_expired(datetime.now(UTC), batch_size=-1)),
    ]
    for bad in BAD_SCOPES:
        calls += [
            (f"as_of {bad!r}", ScopeError, lambda bad=bad: led.list_as_of(bad, datetime.now(UTC))),  # type: ignore[misc]
            (f"search {bad!r}", ScopeError, lambda bad=bad: led.search(bad, "x")),  # type: ignore[misc]
            (f"packet {bad!r}", ScopeError, lambda bad=bad: led.build_packet(bad)),  # type: ignore[misc]
            (f"set_budget {bad!r}", ScopeError, lambda bad=bad: led.set_budget(bad, 5)),  # type: ignore[misc]
            (f"budget {bad!r}", ScopeError, lambda bad=bad: led.budget(bad)),  # type: ignore[misc]
            (f"records {bad!r}", ScopeError, lambda bad=bad: led.records(bad)),  # type: ignore[misc]
        ]
        if bad is not None:  # these read the bound scope when given none
            calls += [
                (f"list {bad!r}", ScopeError, lambda bad=bad: led.list(bad)),  # type: ignore[misc]
                (f"proposals {bad!r}", ScopeError, lambda bad=bad: led.proposals(bad)),  # type: ignore[misc]
                (f"list_page {bad!r}", ScopeError, lambda bad=bad: led.list_page(bad)),  # type: ignore[misc]
                (f"scope {bad!r}", ScopeError, lambda bad=bad: led.scope(bad)),  # type: ignore[misc]
            ]
    return calls


def test_every_user_error_is_a_ledger_error_and_changes_nothing(led: Ledger, clock: Any) -> None:
    rec = led.save("existing")
    prop = led.propose("waiting")
    before = snapshot(led)
    for name, expected, call in _user_errors(led, rec.id, prop.id):
        with pytest.raises(LedgerError) as err:
            call()
        assert isinstance(err.value, expected), (name, err.value)
        assert err.value.reason in ("invalid_params", "body_rejected", "not_found", "invalid_transition"), name
        assert str(err.value), name
        assert snapshot(led) == before, name


def test_a_bad_account_is_refused(led: Ledger) -> None:
    with pytest.raises(ScopeError):
        Ledger(led.engine, account="has space")


# --------------------------------------------------------------------------- review fixes
T = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    "call",
    [
        lambda led: led.save("hello\x00world", now=T),
        lambda led: led.save("fine", conflict_group="g\x00", now=T),
        lambda led: led.save("fine", source_session_id="s\x00", now=T),
        lambda led: led.get("mem_\x00"),
        lambda led: led.delete("mem_\x00", now=T),
    ],
)
def test_nul_characters_are_refused_before_any_sql_on_both_backends(led: Ledger, call: Callable[[Ledger], Any]) -> None:
    before = snapshot(led)
    with pytest.raises(LedgerError) as info:
        call(led)
    assert info.value.reason in ("body_rejected", "invalid_params")
    assert snapshot(led) == before


def test_an_expired_proposal_built_on_a_forgotten_chain_is_forgotten_with_it(led: Ledger) -> None:
    # Given a proposal that restates a record, expired unaccepted
    rec = led.save("my locker code word is wombatplatypus", now=T)
    proposal = led.propose(
        "locker: wombatplatypus",
        kind="fact",
        confidence_bps=9000,
        rationale="restates wombatplatypus",
        supersedes=[rec.id],
        expires_at=T + timedelta(hours=1),
        now=T,
    )
    assert led.sweep_expired(T + timedelta(hours=2)) == 1
    assert led.get(proposal.id).status == Status.EXPIRED
    # When the record is forgotten
    led.delete(rec.id, now=T + timedelta(hours=3))
    # Then the proposal lost its body and rationale too
    gone = led.get(proposal.id)
    assert gone.status == Status.DELETED and gone.body is None and gone.rationale is None and gone.erased


def test_a_write_expires_every_due_record_first_even_past_one_sweep_batch(sqlite_url: str) -> None:
    from ledger import open_ledger
    from ledger.sweep import SWEEP_BATCH

    led = open_ledger(sqlite_url)
    try:
        led.set_budget(SCOPE, SWEEP_BATCH + 10, now=T)
        for n in range(SWEEP_BATCH + 1):
            led.save(f"note {n}", expires_at=T + timedelta(seconds=10), now=T)
        member = led.save("region eu-west-1", conflict_group="region", expires_at=T + timedelta(seconds=20), now=T)
        # When a later save lands in the group, long after everything expired
        led.save("region us-east-1", conflict_group="region", now=T + timedelta(seconds=60))
        # Then the old member expired at its expires_at; it was not superseded at the save instant
        old = led.get(member.id)
        assert old.status == Status.EXPIRED and old.valid_to == T + timedelta(seconds=20)
    finally:
        led.close()


# --------------------------------------------------------------------------- commit order is time order
def test_writes_on_a_frozen_clock_get_strictly_increasing_instants(led: Ledger, clock: Any) -> None:
    a = led.save("tz: UTC", conflict_group="tz")
    b = led.save("tz: CET", conflict_group="tz")
    c = led.save("tz: PST", conflict_group="tz")
    assert a.valid_from == clock.now
    assert b.valid_from == a.valid_from + US and c.valid_from == b.valid_from + US
    assert led.get(a.id).valid_to == b.valid_from and led.get(b.id).valid_to == c.valid_from
    # a read that omits now sees every committed write, even on a clock that lags the scope
    assert ids(led.list(SCOPE)) == [c.id]
    assert led.get(c.id).status == Status.ACTIVE


def test_a_clock_behind_the_scope_never_refuses_a_write(led: Ledger, clock: Any) -> None:
    first = led.save("draft", now=clock.now + timedelta(seconds=60))
    edited = led.save("draft two", supersedes=first.id)  # the clock is a minute behind the record
    assert edited.valid_from == first.valid_from + US
    assert led.get(first.id).valid_to == edited.valid_from


def test_an_explicit_now_before_what_it_closes_is_refused(led: Ledger, clock: Any) -> None:
    rec = led.save("draft", now=clock.now + timedelta(seconds=60))
    before = snapshot(led)
    with pytest.raises(InvalidInstant):
        led.save("edit", supersedes=rec.id, now=clock.now)
    with pytest.raises(InvalidInstant):
        led.delete(rec.id, now=clock.now)
    assert snapshot(led) == before


def test_the_transaction_reads_its_instant_after_the_lock(led: Ledger, clock: Any) -> None:
    with led.transaction(SCOPE) as tx:
        a = tx.save("one", conflict_group="g")
        b = tx.save("two", conflict_group="g")
        assert a.valid_from == b.valid_from == tx.now
    with led.transaction(SCOPE) as tx2:
        assert tx2.now > tx.now
    assert led.get(a.id).valid_to == led.get(a.id).valid_from  # closed at the same instant: empty


def test_a_failed_transaction_changes_nothing(led: Ledger, clock: Any) -> None:
    led.save("kept")
    before = snapshot(led)
    with pytest.raises(RuntimeError), led.transaction(SCOPE) as tx:
        tx.save("rolled back")
        raise RuntimeError("boom")
    assert snapshot(led) == before


def test_a_lone_surrogate_is_a_ledger_error(led: Ledger) -> None:
    before = snapshot(led)
    with pytest.raises(BodyRejected):
        led.save("a\ud800b")
    with pytest.raises(LedgerError):
        led.save("fine", source_session_id="s\udfff")
    with pytest.raises(LedgerError):
        led.propose("a\ud800b", kind="fact")
    assert snapshot(led) == before


def test_get_and_history_take_now(led: Ledger, clock: Any) -> None:
    rec = led.save("temp", expires_at=clock.now + timedelta(seconds=10))
    assert led.get(rec.id).status == Status.ACTIVE
    later = clock.now + timedelta(seconds=10)
    assert led.get(rec.id, now=later).status == Status.EXPIRED
    assert led.get(rec.id, now=later).valid_to == later
    assert [r.status for r in led.history(rec.id, now=later)] == [Status.EXPIRED]
    assert [r.status for r in led.history(rec.id)] == [Status.ACTIVE]
    with pytest.raises(InvalidInstant):
        led.get(rec.id, now=datetime(2026, 1, 1))  # naive


def test_search_stems_words_on_both_backends(led: Ledger) -> None:
    dog = led.save("my dog is called Rex")
    run = led.save("I was running a marathon")
    assert ids(led.search(SCOPE, "dogs")) == [dog.id]
    assert ids(led.search(SCOPE, "runs")) == [run.id]
    assert ids(led.search(SCOPE, "cats")) == []


def test_a_group_save_keeps_the_replaced_members_kind_unless_given(led: Ledger) -> None:
    a = led.save("units: metric", kind="preference", conflict_group="units")
    b = led.save("units: imperial", conflict_group="units")
    assert b.kind == Kind.PREFERENCE and b.supersedes == [a.id]
    c = led.save("units: SI only", kind="constraint", conflict_group="units")
    assert c.kind == Kind.CONSTRAINT
    assert led.save("no group, no kind").kind == Kind.FACT
