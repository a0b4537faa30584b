"""What this ledger offers (``capabilities()``, docs/packet.md), so a client can be honest about it.

The ledger answers for itself (the bound scope, ``maxBodyChars``, the kinds, the
injection switch); the consolidation service, which the ledger cannot import, adds
what it offers through a provider it registers on the ledger
(:meth:`ledger.core.Ledger.add_capability_provider`). Without one, consolidation and
extraction read as unavailable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ledger.models import Kind

# A provider answers for one scope with camelCase keys merged over the ledger's own.
CapabilityProvider = Callable[[str], Mapping[str, Any]]


def base_capabilities(*, scope_key: str, max_body_chars: int, injection: bool) -> dict[str, Any]:
    """The ledger's own part; ``consolidation`` and ``extraction`` say "unavailable" until a provider answers."""
    return {
        "scopeKey": scope_key,
        "maxBodyChars": max_body_chars,
        "kinds": [k.value for k in Kind],
        "slashCommands": ["/pin", "/pins", "/unpin"],
        "injection": injection,
        "consolidation": {"available": False, "mode": "off", "operations": []},
        "extraction": {"available": False, "mode": "off", "enabled": False},
    }


def merge_capabilities(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``extra`` over ``base``, one level deep for the nested sections."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out
