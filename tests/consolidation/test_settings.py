"""A scope's settings: its model target, the same for both jobs (harness, model, base_url and the scope's own
prices); allow_removal and max_prompt_chars."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from consolidation import ConsolidationService, InvalidSettings
from consolidation.harnesses import Usage
from consolidation.pricing import DEFAULT_PRICES
from tests.conftest import T0
from tests.consolidation.conftest import SCOPE

LOCAL = {"harness": "openai", "model": "qwen2.5:7b-instruct", "base_url": "http://127.0.0.1:11434/v1"}
FREE = {"price_in_usd_per_mtok": 0, "price_out_usd_per_mtok": 0}


@pytest.fixture(params=["consolidation", "extraction"])
def job(request: pytest.FixtureRequest, svc: ConsolidationService) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """(update, read) of one job's settings."""
    if request.param == "consolidation":
        return svc.update_settings, svc.settings
    return svc.update_extraction_settings, svc.extraction_settings


def test_a_local_model_is_configured_free_of_charge(job) -> None:
    update, read = job

    update(SCOPE, **LOCAL, **FREE, now=T0)

    settings = read(SCOPE)
    assert (settings.harness, settings.model, settings.base_url) == tuple(LOCAL.values())
    assert (settings.price_in_usd_per_mtok, settings.price_out_usd_per_mtok) == (0, 0)
    assert settings.to_json()["base_url"] == LOCAL["base_url"]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (LOCAL, "set price_in_usd_per_mtok and price_out_usd_per_mtok"),
        ({**LOCAL, "price_in_usd_per_mtok": 0}, "both"),
        ({**LOCAL, **FREE, "base_url": "ftp://host/v1"}, "http"),
        ({**LOCAL, **FREE, "base_url": "http:///v1"}, "http"),
        ({**LOCAL, **FREE, "base_url": "http://host:99999/v1"}, "not a valid URL"),
        ({**LOCAL, **FREE, "base_url": "http://k:sk-1@host/v1"}, "must not carry credentials"),
        ({**LOCAL, **FREE, "base_url": "http://host/v1?key=sk-1"}, "must not have a .query"),
        ({**LOCAL, **FREE, "base_url": "http://host/v1/sk-proj-AbCdEfGhIjKlMnOpQrStUv0123"}, "key in its path"),
        ({**LOCAL, **FREE, "base_url": "http://host/v1 x"}, "http"),
        ({**LOCAL, **FREE, "base_url": 5}, "http"),
        ({**LOCAL, "price_in_usd_per_mtok": -1, "price_out_usd_per_mtok": 0}, "price_in_usd_per_mtok"),
        ({**LOCAL, "price_in_usd_per_mtok": float("nan"), "price_out_usd_per_mtok": 0}, "price_in_usd_per_mtok"),
        ({**LOCAL, "price_in_usd_per_mtok": True, "price_out_usd_per_mtok": 0}, "price_in_usd_per_mtok"),
        ({**LOCAL, **FREE, "model": "qwen 2.5"}, "model must be"),
        ({"harness": "openai"}, "needs a model"),
        ({"harness": "anthropic", "base_url": "http://127.0.0.1:9/v1"}, "takes no base_url"),
        ({"harness": "offline", **FREE}, "offline harness calls no model"),
        ({"harness": "offline", "base_url": "http://127.0.0.1:9/v1"}, "offline harness calls no model"),
        ({"harness": "nonesuch"}, "anthropic, openai, offline"),
    ],
)
def test_bad_targets_are_refused_and_change_nothing(job, changes: dict[str, Any], message: str) -> None:
    update, read = job
    before = read(SCOPE)

    with pytest.raises(InvalidSettings, match=message) as caught:
        update(SCOPE, now=T0, **changes)

    assert read(SCOPE) == before
    assert "sk-1" not in str(caught.value)


def test_a_new_harness_drops_the_old_server_and_a_new_model_the_old_prices(job) -> None:
    update, read = job
    update(SCOPE, **LOCAL, **FREE, now=T0)

    # A new model without prices: the old prices were for the old model, so it must be priced again
    with pytest.raises(InvalidSettings, match=re.escape("no price is known for model 'llama3.1:8b'")):
        update(SCOPE, model="llama3.1:8b", now=T0 + timedelta(seconds=1))
    update(SCOPE, model="gpt-4o-mini", now=T0 + timedelta(seconds=2))  # priced by the table
    assert read(SCOPE).price_in_usd_per_mtok is None and read(SCOPE).base_url == LOCAL["base_url"]

    # A new harness without a server: the old server was the other harness's
    update(SCOPE, harness="offline", now=T0 + timedelta(seconds=3))
    assert (read(SCOPE).base_url, read(SCOPE).model) == (None, "offline")


def test_a_new_model_with_one_price_does_not_keep_the_other_from_the_old_model(job) -> None:
    # Given a free local model (0 and 0)
    update, read = job
    update(SCOPE, **LOCAL, **FREE, now=T0)
    before = read(SCOPE)
    # When the model changes with its input price only, Then it is refused: the old output price of 0 was
    # the old model's, and carrying it over would charge a paid model's output at nothing
    with pytest.raises(InvalidSettings, match="set both price_in_usd_per_mtok and price_out_usd_per_mtok"):
        update(SCOPE, model="gpt-4.1", price_in_usd_per_mtok=2, now=T0 + timedelta(seconds=1))
    assert read(SCOPE) == before
    # And with both prices it is the new model's price, whole
    update(SCOPE, model="gpt-4.1", price_in_usd_per_mtok=2, price_out_usd_per_mtok=8, now=T0 + timedelta(seconds=2))
    assert (read(SCOPE).price_in_usd_per_mtok, read(SCOPE).price_out_usd_per_mtok) == (2, 8)


def test_the_scopes_prices_override_the_table_for_anthropic_too(make_service, fake_anthropic) -> None:  # type: ignore[no-untyped-def]
    # Given a scope that pays half the table's haiku-4-5 rates (a negotiated price)
    svc = make_service(api_key="test-key", base_url=fake_anthropic.base_url)
    svc.update_settings(
        SCOPE, mode="apply", harness="anthropic", model="claude-haiku-4-5", debounce_s=0,
        price_in_usd_per_mtok=0.5, price_out_usd_per_mtok=2.5, now=T0,
    )  # fmt: skip
    svc.led.save("I prefer metric units", now=T0)
    fake_anthropic.set_usage(input_tokens=1000, output_tokens=100)

    # When a run executes
    svc.notify_turn(SCOPE, now=T0 + timedelta(seconds=1))
    [done] = svc.run_due(now=T0 + timedelta(seconds=1))

    # Then its spend is at the scope's rates, not the table's
    table = DEFAULT_PRICES.spend_micro_usd("claude-haiku-4-5", Usage(input_tokens=1000, output_tokens=100))
    assert done.spend_micro_usd == 500 + 250 and table == 1000 + 500


# allow_removal, max_prompt_chars, and no model for the harness that pays nothing.
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
    from consolidation.extraction.models import ExtractionSettings
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
