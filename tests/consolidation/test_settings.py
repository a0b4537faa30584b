"""A scope's model target, the same for both jobs: harness, model, base_url and the scope's own prices."""

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


def test_the_scopes_prices_override_the_table_for_anthropic_too(make_service, fake) -> None:  # type: ignore[no-untyped-def]
    # Given a scope that pays half the table's haiku-4-5 rates (a negotiated price)
    svc = make_service(api_key="test-key", base_url=fake.base_url)
    svc.update_settings(
        SCOPE, mode="apply", harness="anthropic", model="claude-haiku-4-5", debounce_s=0,
        price_in_usd_per_mtok=0.5, price_out_usd_per_mtok=2.5, now=T0,
    )  # fmt: skip
    svc.led.save("I prefer metric units", now=T0)
    fake.set_usage(input_tokens=1000, output_tokens=100)

    # When a run executes
    svc.notify_turn(SCOPE, now=T0 + timedelta(seconds=1))
    [done] = svc.run_due(now=T0 + timedelta(seconds=1))

    # Then its spend is at the scope's rates, not the table's
    table = DEFAULT_PRICES.spend_micro_usd("claude-haiku-4-5", Usage(input_tokens=1000, output_tokens=100))
    assert done.spend_micro_usd == 500 + 250 and table == 1000 + 500
