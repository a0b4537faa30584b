"""Consolidation's and extraction's sections of :meth:`ledger.Ledger.capabilities` while they do not run here.

The ``memledger.capabilities`` entry point names :data:`UNAVAILABLE`, so a ledger without a consolidation
service says both jobs are off; a running service answers for its scopes instead
(:meth:`consolidation.service.ConsolidationService.capabilities`).
"""

from __future__ import annotations

from typing import Any

UNAVAILABLE: dict[str, Any] = {
    "consolidation": {"available": False, "mode": "off", "operations": []},
    "extraction": {"available": False, "mode": "off", "enabled": False},
}
