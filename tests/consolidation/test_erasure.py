"""Erasure reaches runs: forgetting a record erases every stored prompt and answer built from it.

A run registers its prompt, answer and raw answer in the ledger's derived-text registry,
keyed by the records in its prompt; forgetting one of them (or any record of its chain)
clears those columns in the delete's own transaction. The ledger parses no run format.

Erasure (docs/ledger.md): no read hands an erased body back — stored run prompts and answers
included — and on SQLite a search of the database files for a distinctive word of
the body finds nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import text

from consolidation import ConsolidationRun, ConsolidationService, Outcome
from consolidation.fake_anthropic import FakeAnthropic
from consolidation.prompt import decode_user_message
from ledger import Ledger, Provenance, open_ledger
from tests.conftest import T0, Clock
from tests.consolidation.conftest import SCOPE, at

MODEL = "claude-haiku-4-5"
WORD = "Zyzzogeton"
# A body with everything the prompt encodes differently from the raw text: quotes, a tag, non-ASCII.
SECRET = f'I call my bike "{WORD}" — it is très fast <3 and lives in the <garage>'
SECRET_TWIN = f'i call my bike "{WORD}" — it is très fast <3 and lives in the <garage>'
KEPT = "My deploy region is eu-west-1"


def by_body(*operations: dict[str, Any]) -> Callable[[dict[str, Any]], list[dict[str, Any]]]:
    """A scripted answer whose targets are written as bodies, sent as the per-run ids the model saw."""

    def answer(request: dict[str, Any]) -> list[dict[str, Any]]:
        seen = {r.body: r.id for r in decode_user_message(request["messages"][0]["content"])}
        return [{**op, "targets": [seen[t] for t in op["targets"]]} for op in operations]

    return answer


def run_once(svc: ConsolidationService, now: datetime, **settings: Any) -> ConsolidationRun:
    svc.update_settings(
        SCOPE, mode="apply", harness="anthropic", model=MODEL, debounce_s=0, wall_clock_cap_s=5, now=now, **settings
    )
    svc.notify_turn(SCOPE, now=now)
    [done] = svc.run_due(now=now)
    return done


def stored_columns(led: Ledger, run_id: str) -> dict[str, Any]:
    """The run's raw prompt/answer columns, read past the model layer."""
    with led.engine.connect() as conn:
        row = (
            conn.execute(
                text("SELECT prompt, answer, answer_raw FROM consolidation_runs WHERE id = :id"), {"id": run_id}
            )
            .mappings()
            .one()
        )
    return dict(row)


def merge_then_forget(svc: ConsolidationService, fake: FakeAnthropic) -> tuple[ConsolidationRun, dict[str, Any]]:
    """A run merges the two bike pins; then the user forgets the merged record (the chain's head)."""
    led = svc.led
    led.save(SECRET, now=T0)
    led.save(SECRET_TWIN, now=T0)
    led.save(KEPT, now=T0)
    fake.set_operations(
        by_body({"op": "merge", "targets": [SECRET, SECRET_TWIN], "body": SECRET, "rationale": f"both say {WORD}"})
    )
    done = run_once(svc, at(1))
    assert done.outcome == Outcome.APPLIED and done.ops_applied == 1
    before = stored_columns(led, done.id)
    assert all(WORD in before[column] for column in ("prompt", "answer", "answer_raw"))
    [merged] = [r for r in led.list(SCOPE, now=at(2)) if r.provenance == Provenance.MODEL_CONSOLIDATION]
    led.delete(merged.id, now=at(3))
    return done, stored_columns(led, done.id)


def test_forgetting_the_head_scrubs_every_body_of_its_chain_from_stored_runs(
    make_service: Callable[..., ConsolidationService], fake_anthropic: FakeAnthropic
) -> None:
    # Given a run whose prompt and answer hold the bodies of a chain, when its head is forgotten
    svc = make_service(api_key="test-key", base_url=fake_anthropic.base_url)
    done, after = merge_then_forget(svc, fake_anthropic)

    # Then the run's stored prompt and answers are erased (derived from a forgotten chain)
    assert after == {"prompt": None, "answer": None, "answer_raw": None}
    run = svc.get_run(done.id)
    assert run.prompt is None and run.answer is None and run.answer_raw is None
    # ... while the run's accounting is intact
    assert run.outcome == Outcome.APPLIED and run.ops_applied == 1 and run.model_calls == 1


def test_forgetting_a_record_scrubs_an_unparseable_raw_answer_that_echoed_it(
    make_service: Callable[..., ConsolidationService], fake_anthropic: FakeAnthropic
) -> None:
    # Given a model that echoed a body back in a reply that did not parse
    svc = make_service(api_key="test-key", base_url=fake_anthropic.base_url)
    led = svc.led
    secret = led.save(SECRET, now=T0)
    led.save(KEPT, now=T0)
    fake_anthropic.set_text(f"I would merge {SECRET} with nothing, but here is no JSON")
    done = run_once(svc, at(1))
    assert done.outcome == Outcome.FAILED and WORD in stored_columns(led, done.id)["answer_raw"]

    # When the user forgets it
    led.delete(secret.id, now=at(2))

    # Then neither the prompt nor the raw answer holds it any more
    assert stored_columns(led, done.id) == {"prompt": None, "answer": None, "answer_raw": None}


def test_a_refused_operation_that_paraphrased_the_record_is_scrubbed_too(
    make_service: Callable[..., ConsolidationService], fake_anthropic: FakeAnthropic
) -> None:
    # Given a run whose refused operation restated the record in words of its own
    svc = make_service(api_key="test-key", base_url=fake_anthropic.base_url)
    led = svc.led
    secret = led.save(SECRET, now=T0)
    led.save(KEPT, now=T0)
    paraphrase = f"My bike {WORD} is really quick"
    fake_anthropic.set_operations(
        by_body(
            {"op": "correct", "targets": [SECRET], "body": paraphrase, "rationale": f"{WORD} reads better"},
            {"op": "correct", "targets": [KEPT], "body": "My deploy region is eu-west-1 (EU)"},
        )
    )
    done = run_once(svc, at(1), allowed_ops=["merge"])
    assert done.refusals == {"op_not_allowed": 2}
    assert all(WORD in stored_columns(led, done.id)[c] for c in ("prompt", "answer", "answer_raw"))

    # When the user forgets the record
    led.delete(secret.id, now=at(2))

    # Then the paraphrase is gone with the rest of the run's text (no parsing needed to find it)
    assert stored_columns(led, done.id) == {"prompt": None, "answer": None, "answer_raw": None}


def test_runs_that_never_saw_the_record_are_left_alone(
    make_service: Callable[..., ConsolidationService], fake_anthropic: FakeAnthropic
) -> None:
    svc = make_service(api_key="test-key", base_url=fake_anthropic.base_url)
    led = svc.led
    led.save(KEPT, now=T0)
    fake_anthropic.set_operations([])
    first = run_once(svc, at(1))
    late = led.save(SECRET, now=at(2))
    before = stored_columns(led, first.id)

    led.delete(late.id, now=at(3))

    assert stored_columns(led, first.id) == before


def test_sqlite_files_hold_no_trace_of_the_forgotten_body(tmp_path: Path, fake_anthropic: FakeAnthropic) -> None:
    # Given a SQLite ledger whose run stored the body in its prompt and answer
    path = tmp_path / "ledger.db"
    led = open_ledger(f"sqlite:///{path}", clock=Clock(T0))
    try:
        svc = ConsolidationService(led, api_key="test-key", base_url=fake_anthropic.base_url)

        def files_hold(word: str) -> list[str]:
            needle = word.encode()
            return [p.name for p in sorted(tmp_path.glob("ledger.db*")) if needle in p.read_bytes()]

        led.save(SECRET, now=T0)
        led.save(SECRET_TWIN, now=T0)
        led.save(KEPT, now=T0)
        fake_anthropic.set_operations(by_body({"op": "merge", "targets": [SECRET, SECRET_TWIN], "body": SECRET}))
        done = run_once(svc, at(1))
        assert done.ops_applied == 1 and files_hold(WORD)  # the check can see the word when it is there

        # When the user forgets the merged record (the head of the chain)
        [merged] = [r for r in led.list(SCOPE, now=at(2)) if r.provenance == Provenance.MODEL_CONSOLIDATION]
        led.delete(merged.id, now=at(3))

        # Then no database file holds the word: rows, run prompts and answers, free pages, FTS and WAL
        assert files_hold(WORD) == []
        assert files_hold("eu-west-1")  # what was not forgotten is still there
    finally:
        led.close()


def test_forgetting_through_a_bare_ledger_scrubs_runs_too(
    make_service: Callable[..., ConsolidationService], fake_anthropic: FakeAnthropic, ledger_url: str
) -> None:
    # Given a run that stored the chain's bodies, made by a service
    svc = make_service(api_key="test-key", base_url=fake_anthropic.base_url)
    led = svc.led
    led.save(SECRET, now=T0)
    led.save(SECRET_TWIN, now=T0)
    fake_anthropic.set_operations(by_body({"op": "merge", "targets": [SECRET, SECRET_TWIN], "body": SECRET}))
    done = run_once(svc, at(1))
    [merged] = [r for r in led.list(SCOPE, now=at(2)) if r.provenance == Provenance.MODEL_CONSOLIDATION]
    # When another program with no consolidation service at all (the CLI's `unpin`) forgets the head
    bare = open_ledger(ledger_url, migrate=True)
    try:
        bare.delete(merged.id, now=at(3))
    finally:
        bare.close()
    # Then the run's stored prompt and answers hold no trace of it either
    after = stored_columns(led, done.id)
    for column in ("prompt", "answer", "answer_raw"):
        assert WORD not in (after[column] or ""), column


def test_a_record_forgotten_while_the_model_thinks_erases_the_answer_when_it_is_stored(
    make_service: Callable[..., ConsolidationService], fake_anthropic: FakeAnthropic
) -> None:
    # Given a run that claimed (and put in its prompt) a record the user forgets during the call
    holder: dict[str, Any] = {}

    def forget_during_call(step: str) -> None:
        if step == "after_claim":
            holder["svc"].led.delete(holder["secret"].id)

    svc = make_service(api_key="test-key", base_url=fake_anthropic.base_url, fault_hook=forget_during_call)
    holder["svc"] = svc
    holder["secret"] = svc.led.save(SECRET, now=T0)
    svc.led.save(KEPT, now=T0)
    fake_anthropic.set_operations(by_body({"op": "correct", "targets": [SECRET], "body": f"{WORD} again"}))

    # When the answer arrives and is stored
    done = run_once(svc, at(1))

    # Then it was erased in the transaction that stored it, nothing was applied, and the run settled
    assert stored_columns(svc.led, done.id) == {"prompt": None, "answer": None, "answer_raw": None}
    assert done.outcome == Outcome.FAILED and "erased" in (done.error or "") and done.model_calls == 1
    assert WORD not in repr(svc.led.records(SCOPE))
