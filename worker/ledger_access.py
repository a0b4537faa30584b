"""The ledger commands' three variables, read without the rest of the configuration.

``MEMLEDGER_DATABASE_URL``, ``MEMLEDGER_ACCOUNT`` and ``MEMLEDGER_SQLITE_SYNCHRONOUS`` are all
``memledger pins`` and the other ledger commands read: they open a ledger with them whatever the rest
of the configuration says. They are read as :class:`worker.config.WorkerConfig` reads its own
(a name in any case, an empty value unset), but without pydantic-settings, which a read would load
for nothing (about 0.025 s of its start-up: docs/performance.md). With :mod:`worker.config`, which takes
the prefix and the check of ``sqlite_synchronous`` from here, the only code that reads the environment
(``tests/test_seams.py`` holds it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from worker.errors import ConfigError

ENV_PREFIX = "MEMLEDGER_"
SQLITE_SYNCHRONOUS = ("normal", "full")
SQLITE_SYNCHRONOUS_ENV = "MEMLEDGER_SQLITE_SYNCHRONOUS"


def check_sqlite_synchronous(value: str) -> str:
    """``value`` as a ``PRAGMA synchronous`` mode (``normal`` or ``full``, any case). Raises ValueError otherwise."""
    mode = value.strip().lower()
    if mode not in SQLITE_SYNCHRONOUS:
        raise ValueError("must be normal or full (docs/operations.md, What is durable)")
    return mode


@dataclass(frozen=True)
class LedgerAccess:
    """``MEMLEDGER_DATABASE_URL``, ``MEMLEDGER_ACCOUNT`` and ``MEMLEDGER_SQLITE_SYNCHRONOUS`` alone, unchecked
    (:meth:`synchronous` checks the last; the ledger checks the others); None when unset or empty."""

    database_url: str | None = None
    account: str | None = None
    sqlite_synchronous: str | None = None

    @classmethod
    def from_environment(cls) -> LedgerAccess:
        """The three as the environment has them now."""
        # Lower case, as pydantic-settings compares: upper() also takes names it does not (U+017F, long s, is S)
        names = {(ENV_PREFIX + field).lower(): field for field in ("database_url", "account", "sqlite_synchronous")}
        found = {names[key.lower()]: value for key, value in os.environ.items() if key.lower() in names and value}
        return cls(**found)

    def synchronous(self) -> str:
        """``MEMLEDGER_SQLITE_SYNCHRONOUS`` (``normal`` unset).

        Raises:
            ConfigError: it is neither ``normal`` nor ``full``.
        """
        try:
            return check_sqlite_synchronous(self.sqlite_synchronous or "normal")
        except ValueError as exc:
            raise ConfigError([f"{SQLITE_SYNCHRONOUS_ENV}={self.sqlite_synchronous!r}: {exc}"]) from None
