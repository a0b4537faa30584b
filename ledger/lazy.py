"""The names a package hands out, each loaded on first use: the package's module ``__getattr__``."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def loader(package: str, namespace: dict[str, Any], where: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``, whose globals are ``namespace``. ``where`` maps each name to the
    module defining it (``"module:name"`` where it is defined under another name); a name loaded is kept in
    ``namespace``, so its module is looked up once."""

    def load(name: str) -> Any:
        found = where.get(name)
        if found is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, defined_as = found.partition(":")
        value = getattr(importlib.import_module(module), defined_as or name)
        namespace[name] = value
        return value

    return load
