"""Settings of consolidation v2: allow_removal, max_prompt_chars, and no model for the harness that pays nothing."""

from __future__ import annotations

from datetime import timedelta

import pytest

from consolidation import ConsolidationService, InvalidSettings
from tests.conftest import T0
from tests.consolidation.conftest import SCOPE


def test_defaults_removal_off_bound_near_16000_every_op(svc: ConsolidationService) -> None:
    settings = svc.settings(SCOPE)

    assert settings.allow_removal is False and settings.max_prompt_chars == 16_000
    assert settings.allowed_ops == ["merge", "correct", "expire", "group", "retire", "keep"]
    assert {"allow_removal", "max_prompt_chars"} <= set(settings.to_json())


def test_allow_removal_and_the_bound_are_stored(svc: ConsolidationService) -> None:
    svc.update_settings(SCOPE, allow_removal=True, max_prompt_chars=4_000, now=T0)

    settings = svc.settings(SCOPE)
    assert settings.allow_removal is True and settings.max_prompt_chars == 4_000
    svc.update_settings(SCOPE, allow_removal=False, now=T0 + timedelta(seconds=1))
    assert svc.settings(SCOPE).allow_removal is False and svc.settings(SCOPE).max_prompt_chars == 4_000


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"allow_removal": "yes"}, "allow_removal must be true or false"),
        ({"allow_removal": 1}, "allow_removal must be true or false"),
        ({"max_prompt_chars": 999}, "max_prompt_chars must be an integer from 1000"),
        ({"max_prompt_chars": 400_001}, "max_prompt_chars"),
        ({"max_prompt_chars": 2.5}, "max_prompt_chars"),
        ({"max_prompt_chars": True}, "max_prompt_chars"),
        ({"harness": "offline", "model": "gpt-4"}, "the offline harness calls no model"),
        ({"harness": "anthropic", "model": "gpt-4"}, "gpt-4"),
        ({"allowed_ops": ["merge", "forget"]}, "expire, group, retire"),
    ],
)
def test_bad_values_are_refused_and_change_nothing(
    svc: ConsolidationService, changes: dict[str, object], message: str
) -> None:
    before = svc.settings(SCOPE)

    with pytest.raises(InvalidSettings, match=message):
        svc.update_settings(SCOPE, now=T0, **changes)

    assert svc.settings(SCOPE) == before


def test_a_model_for_the_offline_harness_is_refused_even_when_it_is_already_offline(svc: ConsolidationService) -> None:
    svc.update_settings(SCOPE, harness="offline", now=T0)

    with pytest.raises(InvalidSettings, match="takes none"):
        svc.update_settings(SCOPE, model="claude-haiku-4-5", now=T0)
    assert svc.settings(SCOPE).model == "offline"


def test_switching_to_offline_drops_the_paid_model(make_service) -> None:  # type: ignore[no-untyped-def]
    svc = make_service(api_key="sk-test", base_url="http://127.0.0.1:9")
    assert svc.settings(SCOPE).harness == "anthropic"

    svc.update_settings(SCOPE, harness="offline", now=T0)

    assert svc.settings(SCOPE).model == "offline"


def test_the_settings_models_state_the_ranges_of_limits() -> None:
    """Both jobs' settings declare every numeric field with its range type: one statement of the range."""
    from pydantic import ValidationError

    from consolidation import limits
    from consolidation.extraction.settings import ExtractionSettings
    from consolidation.extraction.settings import defaults as extraction_defaults
    from consolidation.pricing import default_price_table
    from consolidation.settings import defaults as consolidation_defaults

    prices = default_price_table()
    for settings in (
        consolidation_defaults("s", api_key=None, prices=prices),
        extraction_defaults("s", api_key=None, prices=prices),
    ):
        kinds = {
            "debounce_s": limits.DebounceS,
            "wall_clock_cap_s": limits.WallClockCapS,
            "max_output_tokens": limits.MaxOutputTokens,
        }
        for name, kind in kinds.items():
            _, high = limits.bounds(kind)
            with pytest.raises(ValidationError, match=name):
                type(settings).model_validate({**settings.model_dump(), name: high + 1})
    assert ExtractionSettings.model_fields["max_wait_s"].annotation == limits.MaxWaitS | None


def test_a_stored_value_outside_todays_range_is_refused_as_invalid_settings() -> None:
    from consolidation.pricing import default_price_table
    from consolidation.settings import defaults, merge

    prices = default_price_table()
    stored = defaults("s", api_key=None, prices=prices).model_copy(update={"wall_clock_cap_s": 10_000.0})
    with pytest.raises(InvalidSettings, match=r"^wall_clock_cap_s input should be less than or equal to 1800"):
        merge(stored, {"debounce_s": 5}, prices)
    assert merge(stored, {"wall_clock_cap_s": 30}, prices).wall_clock_cap_s == 30.0
