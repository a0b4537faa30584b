"""Prices per model, and the spend of one call in integer micro-USD.

A price is four rates in USD per million tokens (MTok): uncached input, output,
cache write (5-minute TTL) and cache read. Because 1 USD/MTok is exactly 1 micro-USD
per token, the spend of a call is ``sum(tokens * rate)`` in micro-USD; it is computed
with :class:`~decimal.Decimal` (exact for any finite decimal rate) and rounded **up**
to a whole micro-USD, so a run never reports less than it cost.

The default table (:data:`DEFAULT_PRICES`) as of 2026-10. Rates marked *assumed* were
not read from Anthropic's own price table; they come from release notes and third-party
rate cards and should be checked before they are trusted for a budget. Configure a
price to override any of them (``PriceTable.with_overrides``; the worker reads
``MEMLEDGER_`` configuration into it)::

    model                      in     out    cache write  cache read  note
    claude-fable-5-1           10     50     12.50        0.25
    claude-mythos-5-1          10     50     12.50        0.25
    claude-fable-5             10     50     12.50        1.00
    claude-mythos-5            10     50     12.50        1.00
    claude-opus-5-5             4     20      5.00        0.20        assumed
    claude-opus-5               5     25      6.25        0.50
    claude-opus-4-8 / 4-7 /    5     25      6.25        0.50
      4-6 / 4-5
    claude-opus-4-1 / 4 (4-0)  15     75     18.75        1.50        retired on the first-party API
    claude-sonnet-5-5           2     10      2.50        0.10        assumed
    claude-sonnet-5             2     10      2.50        0.20        assumed
    claude-sonnet-4-6 / 4-5 /  3     15      3.75        0.30
      4 (4-0)
    claude-haiku-5-5            0.10   0.50   0.125       0.01        assumed; x5 when the prompt > 100k tokens
    claude-haiku-4-5            1      5      1.25        0.10
    gpt-4.1                     2      8      2           0.50        assumed (OpenAI; cache write n/a)
    gpt-4.1-mini                0.40   1.60   0.40        0.10        assumed
    gpt-4.1-nano                0.10   0.40   0.10        0.025       assumed
    gpt-4o                      2.50  10      2.50        1.25        assumed
    gpt-4o-mini                 0.15   0.60   0.15        0.075       assumed

The OpenAI rates come from published rate cards (2026-06), not from OpenAI's own page:
check them before trusting a budget to them. OpenAI bills no cache writes, so its cache
write rate is the input rate (never used).

A scope can price its own model (``price_in_usd_per_mtok`` / ``price_out_usd_per_mtok``,
:func:`scope_price`): that is how a local model gets a price of 0.

Dated snapshot ids (``claude-haiku-4-5-20251001``, ``gpt-4o-mini-2024-07-18``) resolve to their base model. A
model that is not in the table has no price, and :meth:`PriceTable.price_for` raises
:class:`UnknownModelPrice` naming the known models: configure a price before choosing
it. Long-context surcharges that need an opt-in beta header (Sonnet 4/4.5 over 200k
input tokens) are not modelled; the harness never sends that header.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from decimal import ROUND_CEILING, Decimal, InvalidOperation, localcontext
from typing import Any, Protocol

from consolidation.errors import UnknownModelPrice

Rate = Decimal | int | float | str

# Anthropic's standard cache multipliers, used when a configured price omits them.
_CACHE_WRITE_MULTIPLIER = Decimal("1.25")
_CACHE_READ_MULTIPLIER = Decimal("0.1")
# A typical consolidation call, used only to rank models by cost in ``cheapest``.
_REFERENCE_INPUT_TOKENS = 8_000
_REFERENCE_OUTPUT_TOKENS = 1_000
_DATE_SUFFIX = re.compile(r"-(?:\d{8}|\d{4}-\d{2}-\d{2})$")

_FIELD_ALIASES = {
    "input_usd_per_mtok": "input_usd_per_mtok",
    "input": "input_usd_per_mtok",
    "output_usd_per_mtok": "output_usd_per_mtok",
    "output": "output_usd_per_mtok",
    "cache_write_usd_per_mtok": "cache_write_usd_per_mtok",
    "cache_write": "cache_write_usd_per_mtok",
    "cache_read_usd_per_mtok": "cache_read_usd_per_mtok",
    "cache_read": "cache_read_usd_per_mtok",
    "long_prompt_over_tokens": "long_prompt_over_tokens",
    "long_prompt_multiplier": "long_prompt_multiplier",
}


class TokenUsage(Protocol):
    """What spend is computed from (``consolidation.harnesses.base.Usage`` fits)."""

    @property
    def input_tokens(self) -> int: ...
    @property
    def output_tokens(self) -> int: ...
    @property
    def cache_creation_input_tokens(self) -> int: ...
    @property
    def cache_read_input_tokens(self) -> int: ...


def _rate(value: Rate, *, field: str) -> Decimal:
    try:
        # str() first so a float such as 0.1 becomes Decimal("0.1"), not its binary expansion.
        rate = value if isinstance(value, Decimal) else Decimal(str(value))
    except (InvalidOperation, ValueError) as exc:
        raise ValueError(f"{field} must be a number of USD per million tokens, got {value!r}") from exc
    if not rate.is_finite() or rate < 0:
        raise ValueError(f"{field} must be a finite, non-negative number of USD per million tokens, got {value!r}")
    return rate


class ModelPrice:
    """Rates of one model in USD per million tokens (immutable, hashable).

    ``cache_write_usd_per_mtok`` and ``cache_read_usd_per_mtok`` default to Anthropic's
    standard 1.25x and 0.1x of the input rate. ``long_prompt_over_tokens`` with
    ``long_prompt_multiplier`` model a prompt-length tier: when a call's prompt
    (input + cache write + cache read tokens) exceeds the threshold, every rate of
    that call is multiplied. ``assumed`` marks a rate that was not read from
    Anthropic's own table.

    Raises:
        ValueError: a rate is negative, infinite or not a number.
    """

    __slots__ = (
        "assumed",
        "cache_read_usd_per_mtok",
        "cache_write_usd_per_mtok",
        "input_usd_per_mtok",
        "long_prompt_multiplier",
        "long_prompt_over_tokens",
        "output_usd_per_mtok",
    )

    input_usd_per_mtok: Decimal
    output_usd_per_mtok: Decimal
    cache_write_usd_per_mtok: Decimal
    cache_read_usd_per_mtok: Decimal
    long_prompt_over_tokens: int | None
    long_prompt_multiplier: Decimal
    assumed: bool

    def __init__(
        self,
        input_usd_per_mtok: Rate,
        output_usd_per_mtok: Rate,
        cache_write_usd_per_mtok: Rate | None = None,
        cache_read_usd_per_mtok: Rate | None = None,
        *,
        long_prompt_over_tokens: int | None = None,
        long_prompt_multiplier: Rate = 1,
        assumed: bool = False,
    ) -> None:
        input_rate = _rate(input_usd_per_mtok, field="input_usd_per_mtok")
        set_ = object.__setattr__
        set_(self, "input_usd_per_mtok", input_rate)
        set_(self, "output_usd_per_mtok", _rate(output_usd_per_mtok, field="output_usd_per_mtok"))
        set_(
            self,
            "cache_write_usd_per_mtok",
            input_rate * _CACHE_WRITE_MULTIPLIER
            if cache_write_usd_per_mtok is None
            else _rate(cache_write_usd_per_mtok, field="cache_write_usd_per_mtok"),
        )
        set_(
            self,
            "cache_read_usd_per_mtok",
            input_rate * _CACHE_READ_MULTIPLIER
            if cache_read_usd_per_mtok is None
            else _rate(cache_read_usd_per_mtok, field="cache_read_usd_per_mtok"),
        )
        if long_prompt_over_tokens is not None and (
            isinstance(long_prompt_over_tokens, bool)
            or not isinstance(long_prompt_over_tokens, int)
            or long_prompt_over_tokens < 0
        ):
            raise ValueError(f"long_prompt_over_tokens must be a non-negative integer, got {long_prompt_over_tokens!r}")
        set_(self, "long_prompt_over_tokens", long_prompt_over_tokens)
        set_(self, "long_prompt_multiplier", _rate(long_prompt_multiplier, field="long_prompt_multiplier"))
        set_(self, "assumed", bool(assumed))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"ModelPrice is immutable; use ModelPrice.replace() to change {name}")

    def _key(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in sorted(self.__slots__))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ModelPrice) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        fields = ", ".join(
            f"{name}={getattr(self, name)!r}"
            for name in (
                "input_usd_per_mtok",
                "output_usd_per_mtok",
                "cache_write_usd_per_mtok",
                "cache_read_usd_per_mtok",
            )
        )
        extra = ""
        if self.long_prompt_over_tokens is not None:
            extra += (
                f", long_prompt_over_tokens={self.long_prompt_over_tokens}"
                f", long_prompt_multiplier={self.long_prompt_multiplier!r}"
            )
        if self.assumed:
            extra += ", assumed=True"
        return f"ModelPrice({fields}{extra})"

    def replace(self, **changes: Any) -> ModelPrice:
        """A copy with the given fields changed (names as in the constructor)."""
        current: dict[str, Any] = {name: getattr(self, name) for name in self.__slots__}
        unknown = set(changes) - set(current)
        if unknown:
            raise ValueError(f"unknown price field(s) {sorted(unknown)}; allowed: {sorted(current)}")
        current.update(changes)
        return ModelPrice(**current)

    def spend_micro_usd(self, usage: TokenUsage) -> int:
        """Spend of one call in micro-USD, exact and rounded up to a whole micro-USD.

        Raises:
            ValueError: a token count is negative.
        """
        counts = (
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_creation_input_tokens,
            usage.cache_read_input_tokens,
        )
        if any(count < 0 for count in counts):
            raise ValueError(f"token counts cannot be negative: {counts}")
        input_tokens, output_tokens, cache_write_tokens, cache_read_tokens = counts
        prompt_tokens = input_tokens + cache_write_tokens + cache_read_tokens
        multiplier = Decimal(1)
        if self.long_prompt_over_tokens is not None and prompt_tokens > self.long_prompt_over_tokens:
            multiplier = self.long_prompt_multiplier
        with localcontext() as ctx:
            # Enough digits that no product or sum of realistic counts and rates is ever rounded.
            ctx.prec = 60
            total = (
                input_tokens * self.input_usd_per_mtok
                + output_tokens * self.output_usd_per_mtok
                + cache_write_tokens * self.cache_write_usd_per_mtok
                + cache_read_tokens * self.cache_read_usd_per_mtok
            ) * multiplier
            return int(total.to_integral_value(rounding=ROUND_CEILING))


class PriceTable:
    """An immutable mapping of model id to :class:`ModelPrice`."""

    __slots__ = ("_prices",)

    def __init__(self, prices: Mapping[str, ModelPrice]) -> None:
        for model, price in prices.items():
            if not isinstance(price, ModelPrice):
                raise TypeError(f"price of {model!r} must be a ModelPrice, got {type(price).__name__}")
        self._prices: dict[str, ModelPrice] = dict(prices)

    def __contains__(self, model: object) -> bool:
        return isinstance(model, str) and self._resolve(model) is not None

    def __len__(self) -> int:
        return len(self._prices)

    def __repr__(self) -> str:
        return f"PriceTable({len(self._prices)} models)"

    def items(self) -> list[tuple[str, ModelPrice]]:
        """Every (model, price), sorted by model id."""
        return sorted(self._prices.items())

    def models(self) -> list[str]:
        """Every priced model id, sorted."""
        return sorted(self._prices)

    def _resolve(self, model: str) -> str | None:
        if model in self._prices:
            return model
        base = _DATE_SUFFIX.sub("", model.removesuffix("-latest"))
        return base if base in self._prices else None

    def price_for(self, model: str) -> ModelPrice:
        """The price of ``model`` (a dated snapshot id resolves to its base model).

        Raises:
            UnknownModelPrice: the model has no price; the message names the known models.
        """
        resolved = self._resolve(model)
        if resolved is None:
            raise UnknownModelPrice(model, known=self._prices)
        return self._prices[resolved]

    def spend_micro_usd(self, model: str, usage: TokenUsage) -> int:
        """Spend of one call of ``model`` in micro-USD, rounded up.

        Raises:
            UnknownModelPrice: the model has no price.
        """
        return self.price_for(model).spend_micro_usd(usage)

    def cheapest(self, *, include_assumed: bool = False, prefix: str = "") -> str:
        """The model with the lowest cost for a typical consolidation call (8k input, 1k output tokens).

        Models whose price is only assumed are skipped unless ``include_assumed`` (an
        unverified rate should not decide a default); only ids starting with ``prefix`` count
        (``"claude-"``: one vendor's models); ties go to the smaller model id.

        Raises:
            LookupError: the table holds no eligible model.
        """
        reference = _ReferenceUsage()
        eligible = [
            (model, price)
            for model, price in self._prices.items()
            if (include_assumed or not price.assumed) and model.startswith(prefix)
        ]
        if not eligible:
            raise LookupError("the price table holds no model with a known price; configure one")
        return min(eligible, key=lambda item: (item[1].spend_micro_usd(reference), item[0]))[0]

    def with_overrides(self, overrides: Mapping[str, ModelPrice | Mapping[str, Any]]) -> PriceTable:
        """A new table with configured prices added or replacing defaults.

        Each value is a :class:`ModelPrice` or a mapping of fields (``input_usd_per_mtok``,
        ``output_usd_per_mtok``, ``cache_write_usd_per_mtok``, ``cache_read_usd_per_mtok``,
        ``long_prompt_over_tokens``, ``long_prompt_multiplier``; the short names ``input``,
        ``output``, ``cache_write`` and ``cache_read`` are accepted too). For a model already
        in the table, a mapping changes only the fields it names; a new model needs at least
        ``input`` and ``output`` (cache rates then default to 1.25x and 0.1x of input). A
        configured price is never marked assumed.

        Raises:
            ValueError: an unknown field, a missing rate, or a rate that is not a number.
        """
        prices = dict(self._prices)
        for model, override in overrides.items():
            if not isinstance(model, str) or not model.strip():
                raise ValueError(f"a model id must be a non-empty string, got {model!r}")
            if isinstance(override, ModelPrice):
                prices[model] = override
                continue
            fields: dict[str, Any] = {}
            for key, value in override.items():
                if key not in _FIELD_ALIASES:
                    raise ValueError(
                        f"unknown price field {key!r} for model {model!r}; allowed: {sorted(set(_FIELD_ALIASES))}"
                    )
                fields[_FIELD_ALIASES[key]] = value
            existing = prices.get(model)
            if existing is not None:
                prices[model] = existing.replace(**fields, assumed=False)
            else:
                missing = {"input_usd_per_mtok", "output_usd_per_mtok"} - set(fields)
                if missing:
                    raise ValueError(
                        f"model {model!r} has no default price, so its configured price needs {sorted(missing)}"
                    )
                prices[model] = ModelPrice(**fields)
        return PriceTable(prices)


class _ReferenceUsage:
    input_tokens = _REFERENCE_INPUT_TOKENS
    output_tokens = _REFERENCE_OUTPUT_TOKENS
    cache_creation_input_tokens = 0
    cache_read_input_tokens = 0


def _family(models: Iterable[str], price: ModelPrice) -> dict[str, ModelPrice]:
    return dict.fromkeys(models, price)


DEFAULT_PRICES = PriceTable(
    {
        **_family(["claude-fable-5-1", "claude-mythos-5-1"], ModelPrice("10", "50", "12.50", "0.25")),
        **_family(["claude-fable-5", "claude-mythos-5"], ModelPrice("10", "50", "12.50", "1")),
        "claude-opus-5-5": ModelPrice("4", "20", "5", "0.20", assumed=True),
        **_family(
            ["claude-opus-5", "claude-opus-4-8", "claude-opus-4-7", "claude-opus-4-6", "claude-opus-4-5"],
            ModelPrice("5", "25", "6.25", "0.50"),
        ),
        **_family(["claude-opus-4-1", "claude-opus-4", "claude-opus-4-0"], ModelPrice("15", "75", "18.75", "1.50")),
        "claude-sonnet-5-5": ModelPrice("2", "10", "2.50", "0.10", assumed=True),
        "claude-sonnet-5": ModelPrice("2", "10", "2.50", "0.20", assumed=True),
        **_family(
            ["claude-sonnet-4-6", "claude-sonnet-4-5", "claude-sonnet-4", "claude-sonnet-4-0"],
            ModelPrice("3", "15", "3.75", "0.30"),
        ),
        "claude-haiku-5-5": ModelPrice(
            "0.10", "0.50", "0.125", "0.01", long_prompt_over_tokens=100_000, long_prompt_multiplier=5, assumed=True
        ),
        "claude-haiku-4-5": ModelPrice("1", "5", "1.25", "0.10"),
        "gpt-4.1": ModelPrice("2", "8", "2", "0.50", assumed=True),
        "gpt-4.1-mini": ModelPrice("0.40", "1.60", "0.40", "0.10", assumed=True),
        "gpt-4.1-nano": ModelPrice("0.10", "0.40", "0.10", "0.025", assumed=True),
        "gpt-4o": ModelPrice("2.50", "10", "2.50", "1.25", assumed=True),
        "gpt-4o-mini": ModelPrice("0.15", "0.60", "0.15", "0.075", assumed=True),
    }
)
"""The built-in table; see the module docstring for sources and which rates are assumed."""


def default_price_table() -> PriceTable:
    """The built-in :data:`DEFAULT_PRICES` (immutable; extend it with ``with_overrides``)."""
    return DEFAULT_PRICES


def scope_price(prices: PriceTable, model: str, *, input_usd_per_mtok: Rate, output_usd_per_mtok: Rate) -> PriceTable:
    """``prices`` with ``model`` priced as a scope's settings say (a local model: 0 and 0).

    For a model the table knows, the cache rates keep their ratio to the input rate (the
    vendor's cache discount); for one it does not, cache reads are charged at the input
    rate, so a run never reports less than it cost.

    Raises:
        ValueError: a rate is negative or not a number.
    """
    rate_in = _rate(input_usd_per_mtok, field="price_in_usd_per_mtok")
    rate_out = _rate(output_usd_per_mtok, field="price_out_usd_per_mtok")
    if model in prices:
        known = prices.price_for(model)
        base = known.input_usd_per_mtok
        ratio_write = known.cache_write_usd_per_mtok / base if base else Decimal(1)
        ratio_read = known.cache_read_usd_per_mtok / base if base else Decimal(1)
        price = known.replace(
            input_usd_per_mtok=rate_in,
            output_usd_per_mtok=rate_out,
            cache_write_usd_per_mtok=rate_in * ratio_write,
            cache_read_usd_per_mtok=rate_in * ratio_read,
            assumed=False,
        )
    else:
        price = ModelPrice(rate_in, rate_out, rate_in, rate_in)
    return prices.with_overrides({model: price})
