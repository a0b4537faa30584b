"""Consolidation: debounced per-scope runs, the hidden model call, the gate, exactly-once settlement.

Uses :mod:`ledger`; knows nothing of queues (the worker wires it to dramatiq).
"""

from __future__ import annotations

from consolidation.errors import ConsolidationError, InvalidSettings, RunNotFound
from consolidation.models import ConsolidationRun, ConsolidationSettings, Mode, Op, Outcome, RunState
from consolidation.service import ConsolidationService

__all__ = [
    "ConsolidationError",
    "ConsolidationRun",
    "ConsolidationService",
    "ConsolidationSettings",
    "InvalidSettings",
    "Mode",
    "Op",
    "Outcome",
    "RunNotFound",
    "RunState",
]
