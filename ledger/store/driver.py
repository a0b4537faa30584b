"""psycopg, imported when first used: ``import ledger`` must not pay for it (a command on SQLite never does).

``from ledger.store.driver import psycopg`` gives a stand-in whose attributes are the module's,
imported on the first attribute read (by then a PostgreSQL engine exists); type checkers see the
module itself.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING, Any


class _Lazy:
    __slots__ = ("_module",)

    def __init__(self) -> None:
        self._module: ModuleType | None = None

    def __getattr__(self, name: str) -> Any:
        module = self._module
        if module is None:
            module = self._module = importlib.import_module("psycopg")
            importlib.import_module("psycopg.errors")
            importlib.import_module("psycopg.pq")
        return getattr(module, name)


if TYPE_CHECKING:
    import psycopg
else:
    psycopg = _Lazy()

__all__ = ["psycopg"]
