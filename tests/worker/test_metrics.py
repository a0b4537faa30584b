"""Metrics: a settled run counts what it observed; offline runs call no model and count none."""

from __future__ import annotations

from consolidation.models import ConsolidationRun, Outcome, RunState
from tests.conftest import T0
from worker.metrics import get_metrics


def settled(harness: str, **kw: object) -> ConsolidationRun:
    fields: dict[str, object] = dict(
        id="run_1", scope_key="account:local", state=RunState.SETTLED, outcome=Outcome.APPLIED, turns=1,
        created_at=T0, due_at=T0, started_at=T0, settled_at=T0, harness=harness, model="m",
        input_tokens=0, output_tokens=0, cache_creation_input_tokens=0, cache_read_input_tokens=0,
        spend_micro_usd=0, model_calls=1, ops_proposed=0, ops_applied=0, ops_refused=0, refusals={}, error=None,
    )  # fmt: skip
    fields.update(kw)
    return ConsolidationRun(**fields)  # type: ignore[arg-type]


def test_an_offline_run_is_not_a_model_call_and_an_anthropic_one_is() -> None:
    metrics = get_metrics()
    before = metrics.model_calls._value.get()

    metrics.observe_settled(settled("offline"))
    assert metrics.model_calls._value.get() == before

    metrics.observe_settled(settled("anthropic", input_tokens=10))
    assert metrics.model_calls._value.get() == before + 1


def test_refusals_are_counted_by_reason() -> None:
    metrics = get_metrics()
    counter = metrics.refusals.labels(reason="removal_off")
    before = counter._value.get()

    metrics.observe_settled(settled("offline", refusals={"removal_off": 2, "too_many_operations": 1}))

    assert counter._value.get() == before + 2
