"""Consolidation: debounced per-scope runs, the hidden model call, the gate, exactly-once settlement.

Uses :mod:`ledger`; knows nothing of queues (the worker wires it to dramatiq).

The names below load on first use, so that importing one module of the package
(``consolidation.pricing`` for the configuration) does not import the service and the harnesses.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from consolidation.errors import ConsolidationError, InvalidSettings, RunNotFound
    from consolidation.models import ConsolidationRun, ConsolidationSettings, Mode, Op, Outcome, RunState
    from consolidation.service import ConsolidationService

_WHERE = {
    "ConsolidationError": "consolidation.errors",
    "InvalidSettings": "consolidation.errors",
    "RunNotFound": "consolidation.errors",
    "ConsolidationRun": "consolidation.models",
    "ConsolidationSettings": "consolidation.models",
    "Mode": "consolidation.models",
    "Op": "consolidation.models",
    "Outcome": "consolidation.models",
    "RunState": "consolidation.models",
    "ConsolidationService": "consolidation.service",
}

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


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value
