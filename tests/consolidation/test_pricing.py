"""The price table and exact, rounded-up spend in micro-USD."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from consolidation.errors import UnknownModelPrice
from consolidation.models import Usage
from consolidation.pricing import (
    DEFAULT_PRICES,
    ModelPrice,
    PriceTable,
    default_price_table,
    scope_price,
)

REQUIRED = [
    "claude-haiku-4-5",
    "claude-haiku-5-5",
    "claude-sonnet-4-5",
    "claude-sonnet-4",
    "claude-opus-4-1",
    "claude-opus-4-5",
]


@pytest.mark.parametrize("model", REQUIRED)
def test_the_default_table_covers_current_models(model):
    price = DEFAULT_PRICES.price_for(model)
    assert price.input_usd_per_mtok > 0 and price.output_usd_per_mtok > price.input_usd_per_mtok


def test_known_rates():
    haiku = DEFAULT_PRICES.price_for("claude-haiku-4-5")
    assert (haiku.input_usd_per_mtok, haiku.output_usd_per_mtok) == (Decimal(1), Decimal(5))
    assert (haiku.cache_write_usd_per_mtok, haiku.cache_read_usd_per_mtok) == (Decimal("1.25"), Decimal("0.10"))
    assert DEFAULT_PRICES.price_for("claude-opus-4-1").output_usd_per_mtok == 75
    assert not haiku.assumed
    assert DEFAULT_PRICES.price_for("claude-haiku-5-5").assumed


def test_dated_snapshots_resolve_to_their_model():
    assert DEFAULT_PRICES.price_for("claude-haiku-4-5-20251001") == DEFAULT_PRICES.price_for("claude-haiku-4-5")
    assert DEFAULT_PRICES.price_for("claude-sonnet-4-20250514") == DEFAULT_PRICES.price_for("claude-sonnet-4")
    assert "claude-opus-4-1-20250805" in DEFAULT_PRICES
    assert default_price_table() is DEFAULT_PRICES


def test_an_unknown_model_names_the_known_ones_and_how_to_configure():
    with pytest.raises(UnknownModelPrice) as caught:
        DEFAULT_PRICES.price_for("claude-imaginary-9")

    message = str(caught.value)
    assert "claude-imaginary-9" in message and "claude-haiku-4-5" in message and "configure a price" in message
    assert caught.value.model == "claude-imaginary-9"
    assert "claude-imaginary-9" not in DEFAULT_PRICES
    assert isinstance(caught.value, LookupError)


def test_spend_is_exact_integer_micro_usd():
    usage = Usage(input_tokens=1000, output_tokens=500, cache_creation_input_tokens=2000, cache_read_input_tokens=3000)
    # 1 USD/MTok is 1 micro-USD per token
    assert DEFAULT_PRICES.spend_micro_usd("claude-haiku-4-5", usage) == 1000 + 2500 + 2500 + 300
    assert DEFAULT_PRICES.spend_micro_usd("claude-opus-4-1", Usage(input_tokens=1, output_tokens=1)) == 90
    assert DEFAULT_PRICES.spend_micro_usd("claude-haiku-4-5", Usage()) == 0


def test_spend_rounds_up_to_a_whole_micro_usd():
    # one cache-read token of haiku-4-5 costs 0.1 micro-USD: reported as 1, never 0
    assert DEFAULT_PRICES.spend_micro_usd("claude-haiku-4-5", Usage(cache_read_input_tokens=1)) == 1
    assert DEFAULT_PRICES.spend_micro_usd("claude-haiku-4-5", Usage(cache_read_input_tokens=10)) == 1
    assert DEFAULT_PRICES.spend_micro_usd("claude-haiku-4-5", Usage(cache_read_input_tokens=11)) == 2


def test_a_long_prompt_tier_multiplies_every_rate():
    price = DEFAULT_PRICES.price_for("claude-haiku-5-5")
    short = Usage(input_tokens=100_000, output_tokens=1_000)
    long = Usage(input_tokens=100_001, output_tokens=1_000)
    assert price.spend_micro_usd(short) == 10_000 + 500
    assert price.spend_micro_usd(long) == math.ceil(Fraction("100001") * Fraction("0.5") + 2_500)


def test_negative_counts_are_refused():
    with pytest.raises(ValueError):
        DEFAULT_PRICES.spend_micro_usd("claude-haiku-4-5", Usage(input_tokens=-1))


def test_cheapest_prefers_a_known_price():
    assert DEFAULT_PRICES.cheapest() == "claude-haiku-4-5"
    assert DEFAULT_PRICES.cheapest(include_assumed=True, prefix="claude-") == "claude-haiku-5-5"
    with pytest.raises(LookupError):
        PriceTable({}).cheapest()


def test_cheapest_keeps_to_one_vendors_models():
    # gpt-4.1-nano is the cheapest of the whole table, but never an Anthropic default
    assert DEFAULT_PRICES.cheapest(include_assumed=True) == "gpt-4.1-nano"
    assert DEFAULT_PRICES.cheapest(include_assumed=True, prefix="claude-").startswith("claude-")
    with pytest.raises(LookupError):
        DEFAULT_PRICES.cheapest(prefix="no-such-vendor-")


def test_openai_snapshot_ids_resolve_to_their_base_model():
    assert DEFAULT_PRICES.price_for("gpt-4o-mini-2024-07-18") == DEFAULT_PRICES.price_for("gpt-4o-mini")


def test_a_scope_price_prices_an_unknown_model_and_overrides_a_known_one():
    free = scope_price(DEFAULT_PRICES, "qwen2.5:7b-instruct", input_usd_per_mtok=0, output_usd_per_mtok=0)
    assert free.spend_micro_usd("qwen2.5:7b-instruct", Usage(input_tokens=10**6, output_tokens=10**6)) == 0
    assert "qwen2.5:7b-instruct" not in DEFAULT_PRICES
    # an unknown model's cache reads cost what input costs: never less than it cost
    local = scope_price(DEFAULT_PRICES, "llama-3.1-8b", input_usd_per_mtok="0.2", output_usd_per_mtok=1)
    assert local.spend_micro_usd("llama-3.1-8b", Usage(cache_read_input_tokens=10**6)) == 200_000
    # a known model keeps its vendor's cache discount, scaled to the new input rate
    cheaper = scope_price(DEFAULT_PRICES, "claude-haiku-4-5", input_usd_per_mtok="0.5", output_usd_per_mtok="2.5")
    price = cheaper.price_for("claude-haiku-4-5")
    assert (price.input_usd_per_mtok, price.output_usd_per_mtok) == (Decimal("0.5"), Decimal("2.5"))
    assert price.cache_read_usd_per_mtok == Decimal("0.05") and price.cache_write_usd_per_mtok == Decimal("0.625")
    with pytest.raises(ValueError, match="price_in_usd_per_mtok"):
        scope_price(DEFAULT_PRICES, "m", input_usd_per_mtok=-1, output_usd_per_mtok=0)


def test_overrides_add_and_change_prices_without_touching_the_original():
    table = DEFAULT_PRICES.with_overrides(
        {
            "claude-custom-1": {"input": "0.5", "output": 2},
            "claude-haiku-5-5": {"input_usd_per_mtok": 0.2},
            "claude-opus-4-5": ModelPrice(1, 2, 3, 4),
        }
    )

    custom = table.price_for("claude-custom-1")
    assert custom.cache_write_usd_per_mtok == Decimal("0.625") and custom.cache_read_usd_per_mtok == Decimal("0.05")
    changed = table.price_for("claude-haiku-5-5")
    assert changed.input_usd_per_mtok == Decimal("0.2") and changed.output_usd_per_mtok == Decimal("0.50")
    assert not changed.assumed
    assert table.price_for("claude-opus-4-5") == ModelPrice(1, 2, 3, 4)
    assert "claude-custom-1" not in DEFAULT_PRICES
    assert DEFAULT_PRICES.price_for("claude-haiku-5-5").input_usd_per_mtok == Decimal("0.10")
    assert table.cheapest() == "claude-haiku-5-5"


@pytest.mark.parametrize(
    "override",
    [
        {"claude-new": {"input": 1}},
        {"claude-new": {"input": 1, "output": 2, "color": "red"}},
        {"claude-new": {"input": -1, "output": 2}},
        {"claude-new": {"input": "lots", "output": 2}},
        {"claude-new": {"input": float("nan"), "output": 2}},
        {"": {"input": 1, "output": 2}},
    ],
)
def test_bad_overrides_are_refused(override):
    with pytest.raises(ValueError):
        DEFAULT_PRICES.with_overrides(override)


def test_model_price_is_immutable_and_floats_become_decimal_text():
    price = ModelPrice(0.1, 0.3)
    assert price.input_usd_per_mtok == Decimal("0.1")
    with pytest.raises(AttributeError):
        price.input_usd_per_mtok = Decimal(2)  # type: ignore[misc]
    assert price.replace(output_usd_per_mtok=1).output_usd_per_mtok == 1
    assert "ModelPrice(" in repr(price)
    assert hash(price) == hash(ModelPrice("0.1", "0.3"))


tokens = st.integers(min_value=0, max_value=10**9)
rates = st.decimals(min_value=0, max_value=1000, places=4, allow_nan=False, allow_infinity=False)


@given(tokens, tokens, tokens, tokens, rates, rates, rates, rates)
def test_spend_is_the_ceiling_of_the_exact_sum(i, o, cw, cr, ri, ro, rcw, rcr):
    price = ModelPrice(ri, ro, rcw, rcr)
    exact = Fraction(i) * Fraction(ri) + Fraction(o) * Fraction(ro) + Fraction(cw) * Fraction(rcw)
    exact += Fraction(cr) * Fraction(rcr)

    assert price.spend_micro_usd(Usage(i, o, cw, cr)) == math.ceil(exact)
