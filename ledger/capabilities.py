"""What this ledger offers (``capabilities()``, docs/packet.md), so a client can be honest about it.

The ledger answers for itself (the bound scope, ``maxBodyChars``, the kinds, the
injection switch). Another package, which the ledger cannot import, states its sections
twice: how they read when it does not run here (a mapping the ``memledger.capabilities``
entry points name, :func:`offered_elsewhere`), and what it offers a scope when it runs,
through a provider it registers on the ledger (:meth:`ledger.core.Ledger.add_capability_provider`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from functools import cache
from importlib.metadata import entry_points
from typing import Any

from ledger.models import Kind

# A provider answers for one scope with camelCase keys merged over the ledger's own.
CapabilityProvider = Callable[[str], Mapping[str, Any]]
# The entry-point group naming each package's sections as they read while it does not run (pyproject.toml).
CAPABILITIES_GROUP = "memledger.capabilities"


@cache
def offered_elsewhere() -> dict[str, Any]:
    """Other packages' sections as they read with no provider registered: what the ``memledger.capabilities``
    entry points name, merged (``{"consolidation": {"available": False, ...}}``)."""
    out: dict[str, Any] = {}
    for entry in sorted(entry_points(group=CAPABILITIES_GROUP), key=lambda e: e.name):
        out = merge_capabilities(out, entry.load())
    return out


def base_capabilities(*, scope_key: str, max_body_chars: int, injection: bool) -> dict[str, Any]:
    """The ledger's own part, and other packages' sections as they read until a provider answers."""
    own = {
        "scopeKey": scope_key,
        "maxBodyChars": max_body_chars,
        "kinds": [k.value for k in Kind],
        "slashCommands": ["/pin", "/pins", "/unpin"],
        "injection": injection,
    }
    return merge_capabilities(own, copy.deepcopy(offered_elsewhere()))  # the caller's to change


def merge_capabilities(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``extra`` over ``base``, one level deep for the nested sections."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out
