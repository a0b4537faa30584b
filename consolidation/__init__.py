"""Consolidation: debounced per-scope runs, the hidden model call, the gate, exactly-once settlement.

Uses :mod:`ledger`; knows nothing of queues (the worker wires it to dramatiq).

This module is the package's surface: worker/ and tools/ import from here (``from consolidation import
ConsolidationService``) and from no module inside it; tests/test_seams.py holds them to :data:`__all__`.
The names load on first use, so that ``import consolidation`` imports none of the package's modules, and
taking one name (``PriceTable`` for the configuration) imports only the module that defines it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ledger.lazy import loader

if TYPE_CHECKING:
    from consolidation.connections import Target
    from consolidation.errors import ConsolidationError, InvalidSettings, RunNotFound
    from consolidation.extraction.models import ExtractionMode, ExtractionSettings
    from consolidation.fake_anthropic import FakeAnthropic
    from consolidation.fake_model import request_records
    from consolidation.harnesses import HARNESS_NAMES, HARNESSES, give_up_calls
    from consolidation.harnesses import preload as preload_harnesses
    from consolidation.limits import MAX_DEBOUNCE_S, ContextWindowTokens, DebounceS, Temperature
    from consolidation.models import (
        CALL_FIELDS,
        DEFAULT_SPEND_BUDGET_MICRO_USD,
        ConsolidationRun,
        ConsolidationSettings,
        Mode,
        Op,
        Outcome,
        ResponseFormat,
        RunState,
    )
    from consolidation.overview import OUTCOMES, Overview, ScopeOverview, scope_overview
    from consolidation.pricing import PriceTable, default_price_table
    from consolidation.replay import BASELINES, ReplayReport
    from consolidation.replay import replay as run_replay
    from consolidation.replay.score import Tally
    from consolidation.service import ConsolidationService, RetryResult, TurnRuns
    from consolidation.setting_checks import PRICE_FIELDS, TARGET_FIELDS
    from consolidation.target_check import TargetCheck

# Where each name of the surface is defined: "module", or "module:name" where the surface names it otherwise
# (a name of the surface is never a submodule's: ``consolidation.replay`` is the package, ``run_replay`` its call).
_WHERE: dict[str, str] = {
    # the service, its runs and their settings
    "ConsolidationService": "consolidation.service",
    "RetryResult": "consolidation.service",
    "TurnRuns": "consolidation.service",
    "ConsolidationRun": "consolidation.models",
    "ConsolidationSettings": "consolidation.models",
    "Mode": "consolidation.models",
    "Op": "consolidation.models",
    "Outcome": "consolidation.models",
    "RunState": "consolidation.models",
    "ResponseFormat": "consolidation.models",
    "CALL_FIELDS": "consolidation.models",
    "DEFAULT_SPEND_BUDGET_MICRO_USD": "consolidation.models",
    "ExtractionMode": "consolidation.extraction.models",
    "ExtractionSettings": "consolidation.extraction.models",
    "PRICE_FIELDS": "consolidation.setting_checks",
    "TARGET_FIELDS": "consolidation.setting_checks",
    "MAX_DEBOUNCE_S": "consolidation.limits",
    "ContextWindowTokens": "consolidation.limits",
    "DebounceS": "consolidation.limits",
    "Temperature": "consolidation.limits",
    # errors
    "ConsolidationError": "consolidation.errors",
    "InvalidSettings": "consolidation.errors",
    "RunNotFound": "consolidation.errors",
    # models: the harnesses, their targets, spend
    "HARNESSES": "consolidation.harnesses",
    "HARNESS_NAMES": "consolidation.harnesses",
    "give_up_calls": "consolidation.harnesses",
    "preload_harnesses": "consolidation.harnesses:preload",
    "Target": "consolidation.connections",
    "TargetCheck": "consolidation.target_check",
    "PriceTable": "consolidation.pricing",
    "default_price_table": "consolidation.pricing",
    # what the status pages and gauges read
    "OUTCOMES": "consolidation.overview",
    "Overview": "consolidation.overview",
    "ScopeOverview": "consolidation.overview",
    "scope_overview": "consolidation.overview",
    # the replay benchmark
    "BASELINES": "consolidation.replay",
    "ReplayReport": "consolidation.replay",
    "run_replay": "consolidation.replay:replay",
    "Tally": "consolidation.replay.score",
    # the fake model servers (benchmarks, the cluster's load)
    "FakeAnthropic": "consolidation.fake_anthropic",
    "request_records": "consolidation.fake_model",
}

__all__ = [
    "BASELINES",
    "CALL_FIELDS",
    "DEFAULT_SPEND_BUDGET_MICRO_USD",
    "HARNESSES",
    "HARNESS_NAMES",
    "MAX_DEBOUNCE_S",
    "OUTCOMES",
    "PRICE_FIELDS",
    "TARGET_FIELDS",
    "ConsolidationError",
    "ConsolidationRun",
    "ConsolidationService",
    "ConsolidationSettings",
    "ContextWindowTokens",
    "DebounceS",
    "ExtractionMode",
    "ExtractionSettings",
    "FakeAnthropic",
    "InvalidSettings",
    "Mode",
    "Op",
    "Outcome",
    "Overview",
    "PriceTable",
    "ReplayReport",
    "ResponseFormat",
    "RetryResult",
    "RunNotFound",
    "RunState",
    "ScopeOverview",
    "Tally",
    "Target",
    "TargetCheck",
    "Temperature",
    "TurnRuns",
    "default_price_table",
    "give_up_calls",
    "preload_harnesses",
    "request_records",
    "run_replay",
    "scope_overview",
]


__getattr__ = loader(__name__, globals(), _WHERE)
