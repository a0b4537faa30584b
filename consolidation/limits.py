"""The range of every numeric per-scope setting, stated once, for both jobs and every surface.

Each is a pydantic type (``Annotated[..., Field(ge=..., le=...)]``): the settings models of consolidation
and extraction (:class:`consolidation.models.ConsolidationSettings`,
:class:`consolidation.extraction.models.ExtractionSettings`) declare their fields with it, their checks
word a refused change with its bounds (:func:`bounds`), and the protocol's params
(``memory/update_consolidation_settings``, ``memory/update_extraction_settings``) declare them as
their field types, so a limit changes in one place. The command line passes values through to the
settings, which apply the same bounds (see docs/consolidation.md, "Settings").
"""

from __future__ import annotations

from typing import Annotated, Any

from annotated_types import Ge, Le
from pydantic import Field, StrictFloat, StrictInt

DAY_S = 86_400
MAX_DEBOUNCE_S = float(DAY_S)
MAX_MAX_WAIT_S = float(7 * DAY_S)
MIN_MAX_PROMPT_CHARS = 1_000
MAX_MAX_PROMPT_CHARS = 400_000
MAX_PRICE_USD_PER_MTOK = 10_000

Number = StrictFloat | StrictInt
DebounceS = Annotated[Number, Field(ge=0, le=MAX_DEBOUNCE_S)]
"""Seconds of quiet after a turn before a run (both jobs)."""
MaxWaitS = Annotated[Number, Field(ge=0, le=MAX_MAX_WAIT_S)]
"""Longest delay of a run after its first turn (both jobs; unset: none)."""
WallClockCapS = Annotated[Number, Field(ge=0.1, le=1800)]
"""Wall-clock cap of one model call, retries and every byte of the answer included (a CPU model may need minutes)."""
MaxOutputTokens = Annotated[StrictInt, Field(ge=16, le=64_000)]
SpendBudgetMicroUsd = Annotated[StrictInt, Field(ge=0, le=10**12)]
"""The scope's monthly spend budget, shared by both jobs."""
MaxPromptChars = Annotated[StrictInt, Field(ge=MIN_MAX_PROMPT_CHARS, le=MAX_MAX_PROMPT_CHARS)]
"""Bound of the records one consolidation run sends."""
PriceUsdPerMtok = Annotated[Number, Field(ge=0, le=MAX_PRICE_USD_PER_MTOK)]
"""A scope's own price of its model (0: a free local model)."""
Temperature = Annotated[Number, Field(ge=0, le=2)]
"""Sampling temperature of the model call (0: the most likely answer; consolidation is bookkeeping, not prose)."""
ContextWindowTokens = Annotated[StrictInt, Field(ge=512, le=2_000_000)]
"""The model's context window in its own tokens: the prompt and the answer together."""


def bounds(kind: Any) -> tuple[Any, Any]:
    """The ``(low, high)`` a range type above states (both inclusive; ints for an integer setting)."""
    low: Any = None
    high: Any = None
    for meta in getattr(kind, "__metadata__", ()):
        for item in getattr(meta, "metadata", [meta]):
            if isinstance(item, Ge):
                low = item.ge
            elif isinstance(item, Le):
                high = item.le
    if low is None or high is None:
        raise TypeError(f"{kind!r} states no range")
    return low, high
