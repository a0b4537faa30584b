"""Every numeric per-scope setting has one range (consolidation/limits.py): both jobs' settings and the
protocol's params accept its ends and refuse just past them, and no surface restates a limit."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from consolidation import ConsolidationService, InvalidSettings, limits
from ledger import Ledger
from worker.rpc.account import UpdateConsolidationParams
from worker.rpc.extraction import UpdateExtractionParams

ROOT = Path(__file__).resolve().parents[2]
SCOPE = "account:local"
# setting -> its range type, for each job (extraction has no spend budget or prompt bound of its own)
SHARED = {
    "debounce_s": limits.DebounceS,
    "max_wait_s": limits.MaxWaitS,
    "wall_clock_cap_s": limits.WallClockCapS,
    "max_output_tokens": limits.MaxOutputTokens,
}
CONSOLIDATION = {
    **SHARED,
    "spend_budget_micro_usd": limits.SpendBudgetMicroUsd,
    "max_prompt_chars": limits.MaxPromptChars,
}


def _service(led: Ledger) -> ConsolidationService:
    return ConsolidationService(led, api_key="", base_url="", openai_api_key="", openai_base_url="")


def _past(value: Any, step: int) -> Any:
    return value + step if isinstance(value, int) else value + step * 0.5


@pytest.mark.parametrize("job", ["consolidation", "extraction"])
def test_both_jobs_accept_each_end_of_a_range_and_refuse_past_it(make_ledger: Any, job: str) -> None:
    svc = _service(make_ledger())
    update = svc.update_settings if job == "consolidation" else svc.update_extraction_settings
    ranges = CONSOLIDATION if job == "consolidation" else SHARED
    for name, kind in ranges.items():
        low, high = limits.bounds(kind)
        for end in (low, high):
            # max_wait_s may not be shorter than debounce_s: the other one is set out of the way
            other = {"debounce_s": {"max_wait_s": None}, "max_wait_s": {"debounce_s": 0}}.get(name, {})
            changes = {name: end, **other}
            assert getattr(update(SCOPE, **changes), name) == end
        for outside in (_past(low, -1), _past(high, 1)):
            shown = [str(v) if isinstance(v, int) else f"{v:g}" for v in (low, high)]
            with pytest.raises(InvalidSettings, match=rf"^{name} must be (an integer )?from {shown[0]} to {shown[1]}"):
                update(SCOPE, **{name: outside})


@pytest.mark.parametrize("params", [UpdateConsolidationParams, UpdateExtractionParams])
def test_the_protocol_params_take_the_settings_range_of_debounce(params: Any) -> None:
    low, high = limits.bounds(limits.DebounceS)
    assert params.model_validate({"debounceS": high}).debounce_s == high
    assert params.model_validate({"debounceS": low}).debounce_s == low
    for outside in (high + 0.5, low - 0.5):
        with pytest.raises(ValidationError):
            params.model_validate({"debounceS": outside})


def test_no_module_restates_a_limit_of_the_settings() -> None:
    """86,400 s (a day, the debounce limit) and 7 days are stated in consolidation/limits.py only."""
    stated = re.compile(r"\b86_?400(\.0)?\b|\b604_?800\b|7 \* 86_?400")
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for package in ("consolidation", "worker", "ledger")
        for path in sorted((ROOT / package).rglob("*.py"))
        if path.name != "limits.py" and "replay" not in path.parts
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if stated.search(line)
    ]
    assert found == []
