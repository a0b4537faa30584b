"""Extraction runs end to end through each paying harness's real SDK against its loopback fake
(anthropic on SQLite and PostgreSQL, openai as a local server on SQLite), and with the offline
harness: debounce per session, the prompt holds the digest and pinned bodies and nothing else,
every refusal class, the budget refusal recorded on the run, exactly once across a crash, the
digest gone after settlement, and a forgotten pin's body in no digest, audit or run afterwards."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import text

from consolidation import ConsolidationService, InvalidSettings, Outcome, RunState
from consolidation.engine import ERASED as ENGINE_ERASED
from consolidation.errors import InvalidExtractionInput
from consolidation.extraction.prompt import SYSTEM_PROMPT, decode_user_message
from consolidation.fake_anthropic import FakeModelServer, Reply
from ledger import InvalidArgument, Ledger, Provenance, Status
from tests.conftest import T0
from tests.consolidation.conftest import SCOPE, at
from tests.consolidation.vendors import Vendor, backends_only, content, stack_fixtures, system_text

stack, vendor, ledger_url, fake = stack_fixtures()
CAP_S = 5.0
GRACE_S = 30.0


class Crash(Exception):
    """Stands in for a worker killed at a fault point."""


def user(text_: str, mid: str | None = None) -> dict[str, Any]:
    return {"role": "user", "text": text_} if mid is None else {"id": mid, "role": "user", "text": text_}


def assistant(text_: str) -> dict[str, Any]:
    return {"role": "assistant", "text": text_}


@pytest.fixture
def make_extracting(
    make_service: Callable[..., ConsolidationService], fake: FakeModelServer, vendor: Vendor
) -> Callable[..., ConsolidationService]:
    def factory(led: Ledger | None = None, **kwargs: Any) -> ConsolidationService:
        svc = make_service(led, **vendor.service_kwargs(fake.base_url), janitor_grace_s=GRACE_S, **kwargs)
        svc.update_extraction_settings(
            SCOPE, mode="propose", **vendor.settings(), debounce_s=10, wall_clock_cap_s=CAP_S, now=T0
        )
        return svc

    return factory


@pytest.fixture
def extracting(make_extracting: Callable[..., ConsolidationService]) -> ConsolidationService:
    return make_extracting()


def digests(led: Ledger) -> list[tuple[str, str]]:
    with led.engine.connect() as conn:
        return [(r[0], r[1]) for r in conn.execute(text("SELECT session_id, messages FROM extraction_digests"))]


def extraction_requests(fake: FakeModelServer) -> list[dict[str, Any]]:
    return [r.json for r in fake.requests if content(r.json).startswith("<conversation>")]


@backends_only()
# --------------------------------------------------------------------------- settings
def test_extraction_is_off_by_default_and_stores_nothing(svc: ConsolidationService) -> None:
    assert svc.extraction_settings(SCOPE).mode == "off"
    assert svc.notify_turn(SCOPE, session_id="s1", messages=[user("I prefer tea")], now=T0) is None
    assert digests(svc.led) == [] and svc.runs(SCOPE) == []


@backends_only()
@pytest.mark.parametrize(
    "changes",
    [{"mode": "apply"}, {"harness": "gpt"}, {"debounce_s": -1}, {"model": ""}, {"colour": "red"},
     {"harness": "anthropic", "model": "claude-unknown-9"}, {"max_wait_s": 1, "debounce_s": 5}],
)  # fmt: skip
def test_bad_extraction_settings_are_refused_and_change_nothing(svc: ConsolidationService, changes: Any) -> None:
    before = svc.extraction_settings(SCOPE)
    with pytest.raises(InvalidSettings):
        svc.update_extraction_settings(SCOPE, **changes)
    assert svc.extraction_settings(SCOPE) == before


@backends_only()
def test_bad_turns_are_refused_and_store_nothing(svc: ConsolidationService) -> None:
    svc.update_extraction_settings(SCOPE, mode="propose", harness="offline", now=T0)
    with pytest.raises(InvalidArgument):
        svc.notify_turn(SCOPE, session_id="", messages=[user("x")], now=T0)
    with pytest.raises(InvalidExtractionInput):
        svc.notify_turn(SCOPE, session_id="s1", messages=[{"role": "system", "text": "x"}], now=T0)
    assert digests(svc.led) == [] and svc.runs(SCOPE) == []


# --------------------------------------------------------------------------- debounce and the prompt
def test_a_burst_of_turns_is_one_call_per_session(extracting: ConsolidationService, fake: FakeModelServer) -> None:
    # Given a burst of turns in two sessions, seconds apart (debounce 10 s)
    for n in range(5):
        extracting.notify_turn(SCOPE, session_id="s1", messages=[user(f"message {n} of s1")], now=at(n))
    extracting.notify_turn(SCOPE, session_id="s2", messages=[user("only message of s2")], now=at(2))
    pending = [r for r in extracting.pending_runs() if r.job == "extract"]
    assert sorted((r.session_id, r.turns) for r in pending) == [("s1", 5), ("s2", 1)]
    # When nothing is due yet, nothing is called; once due, one call per session
    assert extracting.run_due(now=at(11)) == [] and fake.calls == 0
    done = extracting.run_due(now=at(30))
    assert sorted(r.session_id or "" for r in done) == ["s1", "s2"]
    assert len(extraction_requests(fake)) == 2
    s1 = next(r for r in extraction_requests(fake) if "s1" in content(r))
    assert [m.text for m in decode_user_message(content(s1))[0]] == [f"message {n} of s1" for n in range(5)]
    settled = [r for r in extracting.runs(SCOPE) if r.job == "extract"]
    assert all(r.state == RunState.SETTLED and r.outcome == Outcome.PROPOSED for r in settled)
    assert digests(extracting.led) == []  # the digest is gone after settlement


def test_the_prompt_holds_the_digest_and_pinned_bodies_and_nothing_else(
    extracting: ConsolidationService, fake: FakeModelServer, make_ledger: Callable[..., Ledger]
) -> None:
    # Given pins in this scope and in another account, and two sessions
    led = extracting.led
    for n in range(25):
        led.save(f"already pinned {n}", now=at(n - 100))
    other = make_ledger(account="other")
    other.save("another account's pin", now=T0)
    extracting.notify_turn(SCOPE, session_id="other-session", messages=[user("other session text")], now=at(0))
    extracting.notify_turn(
        SCOPE, session_id="s1", messages=[user("I prefer tea", "u1"), assistant("Noted!")], now=at(1)
    )
    # When the s1 run executes
    [run] = [r for r in extracting.pending_runs() if r.session_id == "s1"]
    extracting.execute(run.id, now=at(20))
    # Then the one request is tool-less, one user turn: the digest lines and 20 newest pinned bodies
    [request] = [r for r in extraction_requests(fake) if "I prefer tea" in content(r)]
    users = [m for m in request["messages"] if m.get("role", "user") == "user"]
    assert "tools" not in request and len(users) == 1 and system_text(request) == SYSTEM_PROMPT
    digest, bodies = decode_user_message(content(request))
    assert [(m.id, m.role, m.text) for m in digest] == [("u1", "user", "I prefer tea"), ("m2", "assistant", "Noted!")]
    assert bodies == [f"already pinned {n}" for n in range(24, 4, -1)]
    sent = content(request)
    assert "other session text" not in sent and "another account" not in sent


# --------------------------------------------------------------------------- the gate
def test_proposals_land_proposed_with_the_session_and_every_refusal_is_counted(
    extracting: ConsolidationService, fake: FakeModelServer
) -> None:
    led = extracting.led
    led.save("Uses vim", now=T0)
    rejected = led.reject(led.propose("likes jazz", kind="preference", now=T0).id, now=T0)
    fake.set_proposals(
        [
            {"body": "I prefer tea", "kind": "preference", "confidence_bps": 8000, "source_message_id": "u1"},
            {"body": "x", "kind": "feeling"},
            {"body": 3, "kind": "fact"},
            {"body": "my password is Tr0ub4dor&3xyz", "kind": "fact"},
            {"body": "uses  VIM", "kind": "fact"},
            {"body": rejected.body, "kind": "preference"},
            {"body": "Said by the assistant", "kind": "fact", "source_message_id": "m2"},
            {"body": "From nowhere", "kind": "fact", "source_message_id": "zz"},
            {"body": "ninth", "kind": "fact"},
            {"body": "tenth", "kind": "fact"},
            {"body": "eleventh", "kind": "fact"},
        ]
    )
    extracting.notify_turn(SCOPE, session_id="s1", messages=[user("I prefer tea", "u1"), assistant("ok")], now=at(0))
    [done] = extracting.run_due(now=at(20))
    assert done.job == "extract" and done.outcome == Outcome.PROPOSED
    assert done.ops_proposed == 11 and (done.ops_applied, done.proposals_written) == (0, 3) and done.ops_refused == 8
    assert done.refusals == {
        "unknown_kind": 1,
        "malformed": 1,
        "body_rejected": 1,
        "duplicate": 2,
        "not_from_user": 1,
        "unknown_message": 1,
        "too_many_proposals": 1,
    }
    waiting = {p.body: p for p in led.proposals(SCOPE, now=at(20))}
    assert set(waiting) == {"I prefer tea", "ninth", "tenth"}
    tea = waiting["I prefer tea"]
    assert tea.status == Status.PROPOSED and tea.provenance == Provenance.MODEL_PROPOSAL
    assert tea.source_session_id == "s1" and tea.confidence_bps == 8000
    assert led.build_packet(SCOPE, now=at(21)).records[0].body == "Uses vim"  # not in a packet until accepted


def test_a_proposal_over_the_budget_is_refused_before_it_is_stored_and_recorded(
    extracting: ConsolidationService, fake: FakeModelServer
) -> None:
    led = extracting.led
    led.set_budget(SCOPE, 2, now=T0)
    led.save("first pin", now=T0)
    fake.set_proposals([{"body": f"suggestion {n}", "kind": "fact"} for n in range(3)])
    extracting.notify_turn(SCOPE, session_id="s1", messages=[user("hello")], now=at(0))
    [done] = extracting.run_due(now=at(20))
    assert (done.ops_applied, done.proposals_written) == (0, 1)
    assert done.refusals == {"budget_exceeded": 2} and done.ops_refused == 2
    assert [p.body for p in led.proposals(SCOPE, now=at(20))] == ["suggestion 0"]
    refused = [e for e in led.events(SCOPE) if e.event == "proposal_refused" and e.run_id == done.id]
    assert len(refused) == 2 and all(e.reason == "budget_exceeded" for e in refused)


def test_an_unparseable_answer_settles_failed_with_its_usage(
    extracting: ConsolidationService, fake: FakeModelServer
) -> None:
    fake.set_text("I think you like tea")
    extracting.notify_turn(SCOPE, session_id="s1", messages=[user("I prefer tea")], now=at(0))
    [done] = extracting.run_due(now=at(20))
    assert done.outcome == Outcome.FAILED and done.refusals == {"unparseable": 1}
    assert done.model_calls == 1 and done.input_tokens > 0 and done.spend_micro_usd > 0
    assert digests(extracting.led) == []


def test_no_spend_budget_left_means_no_call(extracting: ConsolidationService, fake: FakeModelServer) -> None:
    extracting.update_settings(SCOPE, spend_budget_micro_usd=0, now=T0)
    extracting.notify_turn(SCOPE, session_id="s1", messages=[user("I prefer tea")], now=at(0))
    [done] = extracting.run_due(now=at(20))
    assert done.outcome == Outcome.SKIPPED_BUDGET and fake.calls == 0 and digests(extracting.led) == []


def test_extraction_and_consolidation_share_the_monthly_spend(
    extracting: ConsolidationService, fake: FakeModelServer
) -> None:
    fake.set_usage(input_tokens=1_000_000, output_tokens=0)  # 1 USD or so per call on the cheapest model
    extracting.update_settings(SCOPE, spend_budget_micro_usd=1, now=T0)
    extracting.notify_turn(SCOPE, session_id="s1", messages=[user("I prefer tea")], now=at(0))
    [first] = extracting.run_due(now=at(20))
    assert first.spend_micro_usd > 1
    extracting.notify_turn(SCOPE, session_id="s1", messages=[user("I prefer coffee")], now=at(30))
    [second] = extracting.run_due(now=at(50))
    assert second.outcome == Outcome.SKIPPED_BUDGET and fake.calls == 1


def test_a_failed_call_settles_failed_and_drops_the_digest(
    extracting: ConsolidationService, fake: FakeModelServer
) -> None:
    fake.push(Reply(status=500))
    extracting.notify_turn(SCOPE, session_id="s1", messages=[user("I prefer tea")], now=at(0))
    [done] = extracting.run_due(now=at(20))
    assert done.outcome == Outcome.FAILED and "HTTP 500" in (done.error or "") and digests(extracting.led) == []
    with extracting.led.engine.connect() as conn:
        assert (
            conn.execute(text("SELECT prompt FROM consolidation_runs WHERE id = :i"), {"i": done.id}).scalar() is None
        )


# --------------------------------------------------------------------------- exactly once
def test_a_crash_after_the_answer_is_stored_never_calls_again(
    make_extracting: Callable[..., ConsolidationService], fake: FakeModelServer
) -> None:
    def crash_at(step: str) -> Callable[[str], None]:
        def hook(point: str) -> None:
            if point == step:
                raise Crash(point)

        return hook

    svc = make_extracting(fault_hook=crash_at("after_answer_stored"))
    fake.set_proposals([{"body": "I prefer tea", "kind": "preference"}])
    svc.notify_turn(SCOPE, session_id="s1", messages=[user("I prefer tea")], now=at(0))
    [run] = svc.pending_runs()
    with pytest.raises(Crash):
        svc.execute(run.id, now=at(20))
    assert fake.calls == 1 and svc.get_run(run.id).state == RunState.RUNNING
    # When the janitor finds it past cap + grace, the stored answer is applied: no second call
    [recovered] = svc.recover_stuck(now=at(20 + CAP_S + GRACE_S + 1))
    assert recovered.id == run.id and recovered.outcome == Outcome.PROPOSED and recovered.proposals_written == 1
    assert fake.calls == 1 and [p.body for p in svc.led.proposals(SCOPE)] == ["I prefer tea"]
    assert svc.execute(run.id, now=at(200)) is None and fake.calls == 1
    assert svc.recover_stuck(now=at(400)) == []


def test_a_crash_before_the_answer_is_abandoned_and_keeps_no_transcript(
    make_extracting: Callable[..., ConsolidationService], fake: FakeModelServer
) -> None:
    def hook(point: str) -> None:
        if point == "after_claim":
            raise Crash(point)

    svc = make_extracting(fault_hook=hook)
    svc.notify_turn(SCOPE, session_id="s1", messages=[user("I prefer tea")], now=at(0))
    [run] = svc.pending_runs()
    with pytest.raises(Crash):
        svc.execute(run.id, now=at(20))
    [abandoned] = svc.recover_stuck(now=at(20 + CAP_S + GRACE_S + 1))
    assert abandoned.outcome == Outcome.ABANDONED and fake.calls == 0 and digests(svc.led) == []


def test_concurrent_executions_make_one_call(extracting: ConsolidationService, fake: FakeModelServer) -> None:
    import threading

    extracting.notify_turn(SCOPE, session_id="s1", messages=[user("I prefer tea")], now=at(0))
    [run] = extracting.pending_runs()
    results: list[Any] = []
    threads = [
        threading.Thread(target=lambda: results.append(extracting.execute(run.id, now=at(20)))) for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert fake.calls == 1 and len([r for r in results if r is not None]) == 1


# --------------------------------------------------------------------------- erasure
def test_a_forgotten_pins_body_is_in_no_digest_audit_or_run(
    extracting: ConsolidationService, fake: FakeModelServer
) -> None:
    led = extracting.led
    secret_plan = "my zanzibar surprise party plan"
    pin = led.save(secret_plan, now=T0)
    led.build_packet(SCOPE, session_id="s1", now=at(0))
    fake.set_proposals([{"body": f"Remember {secret_plan}", "kind": "fact"}])
    # A settled run (whose prompt carried the pinned body) and a pending digest that quotes it
    extracting.notify_turn(SCOPE, session_id="s1", messages=[user(f"about {secret_plan}, ok")], now=at(0))
    extracting.run_due(now=at(20))
    extracting.notify_turn(SCOPE, session_id="s1", messages=[user(f"Again: {secret_plan.upper()}!")], now=at(30))
    led.delete(pin.id, now=at(31))
    with led.engine.connect() as conn:
        stored = [
            json.dumps([list(r) for r in conn.execute(text(f"SELECT * FROM {table}"))], default=str).lower()
            for table in ("extraction_digests", "packet_audits", "consolidation_runs")
        ]
    assert all("zanzibar" not in blob for blob in stored), stored


def test_forgetting_leaves_another_accounts_audits_and_digests_alone(
    extracting: ConsolidationService, vendor: Vendor
) -> None:
    """Each account's texts are its own: a body forgotten by one account stays in another account's words."""
    led, other = extracting.led, extracting.led.for_account("other")
    words = "my zanzibar surprise party plan"
    mine, theirs = led.save(words, now=T0), other.save(words, now=T0)
    led.build_packet(SCOPE, session_id="s1", now=at(0))
    other.build_packet(other.scope_key, session_id="s1", now=at(0))
    extracting.update_extraction_settings(other.scope_key, mode="propose", **vendor.settings(), debounce_s=10, now=T0)
    extracting.notify_turn(SCOPE, session_id="s1", messages=[user(f"about {words}")], now=at(1))
    extracting.notify_turn(other.scope_key, session_id="s1", messages=[user(f"about {words}")], now=at(1))
    led.delete(mine.id, now=at(2))
    with led.engine.connect() as conn:
        kept = {
            table: json.dumps(
                [list(r) for r in conn.execute(text(f"SELECT * FROM {table} WHERE scope_key = :s"), {"s": s})]
            )
            for table, s in (("extraction_digests", other.scope_key), ("packet_audits", other.scope_key))
        }
        erased = conn.execute(text("SELECT messages FROM extraction_digests WHERE scope_key = :s"), {"s": SCOPE})
        assert words not in json.dumps([list(r) for r in erased])
    assert all(words in blob for blob in kept.values()), kept
    assert other.get(theirs.id).body == words


def test_turning_extraction_off_cancels_pending_runs_and_drops_digests(extracting: ConsolidationService) -> None:
    extracting.notify_turn(SCOPE, session_id="s1", messages=[user("I prefer tea")], now=at(0))
    extracting.update_extraction_settings(SCOPE, mode="off", now=at(1))
    [run] = extracting.runs(SCOPE)
    assert run.outcome == Outcome.CANCELLED and digests(extracting.led) == []


@backends_only()
# --------------------------------------------------------------------------- offline
def test_offline_extraction_end_to_end(svc: ConsolidationService) -> None:
    svc.update_extraction_settings(SCOPE, mode="propose", harness="offline", debounce_s=0, now=T0)
    svc.notify_turn(
        SCOPE,
        session_id="chat-9",
        messages=[
            user("Remember that my deploy region is eu-west-1. What's the weather?"),
            assistant("Remember that you prefer YAML."),
            user("If I had a dog, my dog's name would be Rex."),
        ],
        now=at(0),
    )
    [done] = svc.run_due(now=at(1))
    assert done.job == "extract" and done.harness == "offline" and (done.ops_applied, done.proposals_written) == (0, 1)
    [prop] = svc.led.proposals(SCOPE)
    assert prop.body == "My deploy region is eu-west-1" and prop.source_session_id == "chat-9"
    assert svc.led.capabilities()["extraction"] == {"available": True, "mode": "propose", "enabled": True}
    assert "consolidate" not in {r.job for r in svc.runs(SCOPE)}


def test_a_forget_from_a_program_without_the_service_erases_through_the_registry(
    extracting: ConsolidationService, fake: FakeModelServer, make_ledger: Callable[..., Ledger]
) -> None:
    # Given a pin, a settled run whose prompt and answer carried it, and a pending digest quoting it
    led = extracting.led
    pin = led.save("my quokka sanctuary donation", now=T0)
    fake.set_proposals([{"body": "my quokka sanctuary donation", "kind": "fact"}])  # a duplicate: refused
    extracting.notify_turn(SCOPE, session_id="s1", messages=[user("note: my quokka sanctuary donation")], now=at(0))
    [done] = extracting.run_due(now=at(20))
    assert done.refusals == {"duplicate": 1}
    extracting.notify_turn(SCOPE, session_id="s2", messages=[user("About my Quokka  sanctuary donation")], now=at(30))
    # When another program (a plain ledger, no consolidation service, no erase hook) forgets the pin
    plain = make_ledger()
    plain.delete(pin.id, now=at(31))
    # Then the digest's messages and the run's answers are gone (the registry cleared them)
    with led.engine.connect() as conn:
        digest = conn.execute(text("SELECT messages FROM extraction_digests WHERE session_id = 's2'")).scalar()
        run = conn.execute(
            text("SELECT prompt, answer, answer_raw FROM consolidation_runs WHERE id = :i"), {"i": done.id}
        ).one()
    assert digest is None and tuple(run) == (None, None, None)
    # And the session's next run still works: the erased digest counts as empty
    [nothing] = extracting.run_due(now=at(60))
    assert nothing.session_id == "s2" and nothing.outcome == Outcome.PROPOSED and fake.calls == 1


def test_a_pin_saved_after_the_message_quoting_it_and_forgotten_by_a_plain_program_leaves_no_digest_text(
    extracting: ConsolidationService, fake: FakeModelServer, make_ledger: Callable[..., Ledger]
) -> None:
    # Given a pending digest whose message says what the user pins only afterwards (no registry row names the pin)
    led = extracting.led
    extracting.notify_turn(SCOPE, session_id="s1", messages=[user("note: my wombat xylograph locker")], now=at(0))
    pin = led.save("my wombat xylograph locker", now=at(1))
    # When another program (a plain ledger, as `memledger unpin` opens, no service on it) forgets the pin
    plain = make_ledger()
    plain.delete(pin.id, now=at(2))
    # Then no digest holds its words, and the run that takes the digest sends none of them to the model
    assert all("xylograph" not in (messages or "") for _, messages in digests(led))
    extracting.run_due(now=at(30))
    assert all("xylograph" not in json.dumps(r) for r in extraction_requests(fake))
    assert all("xylograph" not in (p.body or "") for p in led.proposals(SCOPE))


def test_a_pin_saved_after_the_message_leaves_it_even_where_only_case_folding_matches(
    extracting: ConsolidationService,
) -> None:
    # Given a message that says, in capitals, what the user pins afterwards ("ß" folds to "ss": no regex case match)
    led = extracting.led
    said = "Wir wohnen: GROSSE STRASSE 12, ZEPHYRWEG. Und du?"
    extracting.notify_turn(SCOPE, session_id="s1", messages=[user(said)], now=at(0))
    pin = led.save("Große Straße 12, Zephyrweg", now=at(1))
    # When the pin is forgotten
    led.delete(pin.id, now=at(2))
    # Then the digest holds none of it: the quotes are compared case-folded, as the registry's are
    assert all("zephyrweg" not in (messages or "").casefold() for _, messages in digests(led))


# --------------------------------------------------------------------------- pins saved while a run is in flight
# The conversation says it; the user pins it while the run is in flight, and forgets it. The run's claim read
# the scope before the pin existed, so only the steps after it can find it (docs/extraction.md, "Pins saved
# while a run is in flight"). The run is made without an explicit instant: each step at its own, as in service.
FLIGHT = "my axolotl is called Brunhilde"
FLIGHT_WORD = "brunhilde"
UNRELATED = "my locker code is on the blue card"
UNRELATED_WORD = "locker"
Step = Callable[[Ledger], object]


def traces(led: Ledger, word: str) -> list[str]:
    """The tables that still store ``word`` (case-insensitively): runs, digests, records (and so proposals)."""
    found = []
    with led.engine.connect() as conn:
        for table in ("consolidation_runs", "extraction_digests", "memory_records"):
            rows = [list(r) for r in conn.execute(text(f"SELECT * FROM {table}"))]
            if word in json.dumps(rows, default=str).lower():
                found.append(table)
    return found


def in_flight(
    make_extracting: Callable[..., ConsolidationService],
    fake: FakeModelServer,
    *,
    while_called: Step,
    after_store: Step,
    proposals: list[dict[str, Any]],
) -> ConsolidationService:
    """A service with a pending run of a conversation that says FLIGHT: ``while_called`` runs while the model
    call is in flight, ``after_store`` between the answer's transaction and the apply's."""
    services: list[ConsolidationService] = []

    def hook(step: str) -> None:
        if step == "after_answer_stored":
            after_store(services[0].led)

    def answer(request: dict[str, Any]) -> list[dict[str, Any]]:
        while_called(services[0].led)
        return proposals

    services.append(make_extracting(fault_hook=hook))
    fake.set_proposals(answer)
    services[0].notify_turn(SCOPE, session_id="s1", messages=[user(f"remember: {FLIGHT}")], now=at(0))
    return services[0]


def run_now(svc: ConsolidationService) -> Any:
    [(_, done)] = svc.run_now(SCOPE, job="extract")
    assert done is not None
    return done


def save(body: str) -> Step:
    return lambda led: led.save(body)


def forget(body: str) -> Step:
    def step(led: Ledger) -> None:
        [record] = [r for r in led.records(SCOPE) if r.body == body]
        led.delete(record.id)

    return step


def both(*steps: Step) -> Step:
    return lambda led: [step(led) for step in steps]


def nothing(led: Ledger) -> None:
    return None


@pytest.mark.parametrize(
    ("while_called", "after_store"),
    [
        (both(save(FLIGHT), forget(FLIGHT)), nothing),
        (save(FLIGHT), forget(FLIGHT)),
        (nothing, both(save(FLIGHT), forget(FLIGHT))),
    ],
    ids=["forgotten-during-the-call", "forgotten-before-the-apply", "saved-and-forgotten-before-the-apply"],
)
def test_a_pin_saved_and_forgotten_while_a_run_is_in_flight_is_in_no_run_or_proposal(
    make_extracting: Callable[..., ConsolidationService], fake: FakeModelServer, while_called: Step, after_store: Step
) -> None:
    # Given a model whose answer restates the pin the user saved after the claim, and forgot
    svc = in_flight(
        make_extracting, fake, while_called=while_called, after_store=after_store,
        proposals=[{"body": FLIGHT, "kind": "fact"}, {"body": "I prefer tea", "kind": "preference"}],
    )  # fmt: skip
    done = run_now(svc)
    # Then no run, digest or record holds the pin's body: the run settles as erased, nothing of it proposed
    assert traces(svc.led, FLIGHT_WORD) == []
    assert done.outcome == Outcome.FAILED and done.error == ENGINE_ERASED and done.proposals_written == 0
    assert svc.led.proposals(SCOPE) == [] and fake.calls == 1


def test_a_pin_saved_while_the_model_thinks_leaves_an_unapplied_answer_when_forgotten(
    make_extracting: Callable[..., ConsolidationService], fake: FakeModelServer
) -> None:
    # Given a run that stored its answer and prompt (the transcript), whose worker died before the apply
    def crash(led: Ledger) -> None:
        raise Crash("after_answer_stored")

    svc = in_flight(
        make_extracting, fake, while_called=save(FLIGHT), after_store=crash,
        proposals=[{"body": FLIGHT, "kind": "fact"}],
    )  # fmt: skip
    with pytest.raises(Crash):
        run_now(svc)
    [running] = svc.runs(SCOPE)
    assert running.state == RunState.RUNNING and FLIGHT_WORD in (running.prompt or "").lower()
    # When the user forgets the pin, saved after the claim, before the janitor comes
    forget(FLIGHT)(svc.led)
    # Then the stored prompt and answer are gone at once, and the janitor settles the run as erased
    assert traces(svc.led, FLIGHT_WORD) == []
    [recovered] = svc.recover_stuck(now=at(CAP_S + GRACE_S + 60))
    assert recovered.outcome == Outcome.FAILED and recovered.error == ENGINE_ERASED
    assert svc.led.proposals(SCOPE) == [] and fake.calls == 1


def test_an_unrelated_pin_saved_while_the_model_thinks_and_forgotten_after_the_store_leaves_the_answer(
    make_extracting: Callable[..., ConsolidationService], fake: FakeModelServer
) -> None:
    # Given a pin the conversation and the answer never mention, saved during the call, forgotten after the store
    svc = in_flight(
        make_extracting, fake, while_called=save(UNRELATED), after_store=forget(UNRELATED),
        proposals=[{"body": FLIGHT, "kind": "fact"}],
    )  # fmt: skip
    done = run_now(svc)
    # Then the answer is applied and kept: its proposal is written, the run keeps its answer
    assert done.outcome == Outcome.PROPOSED and done.proposals_written == 1 and done.error is None
    assert [p.body for p in svc.led.proposals(SCOPE)] == [FLIGHT]
    assert svc.get_run(done.id).answer is not None
    assert traces(svc.led, UNRELATED_WORD) == []


def test_a_pin_saved_and_forgotten_during_the_call_erases_the_answer_even_when_unrelated(
    make_extracting: Callable[..., ConsolidationService], fake: FakeModelServer
) -> None:
    # Given a pin saved and forgotten while the model thinks: its body is gone, so whether the answer restates
    # it cannot be checked
    svc = in_flight(
        make_extracting, fake, while_called=both(save(UNRELATED), forget(UNRELATED)), after_store=nothing,
        proposals=[{"body": FLIGHT, "kind": "fact"}],
    )  # fmt: skip
    done = run_now(svc)
    # Then the answer is erased all the same (the rule errs on the side of the forget)
    assert done.outcome == Outcome.FAILED and done.error == ENGINE_ERASED and svc.led.proposals(SCOPE) == []
