"""What a write transaction takes from the ledger that opens it: :class:`WritePolicy` (limits and hooks)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from sqlalchemy import Connection

log = logging.getLogger(__name__)

# Hooks called inside the delete transaction with the scope, and the ids and bodies it erased.
EraseHook = Callable[[Connection, str, Sequence[str], Sequence[str]], None]
# The entry-point group naming other packages' erase hooks (pyproject.toml): text they keep that the derived-text
# registry cannot reach, which every delete must scrub whichever program deletes (the ledger imports no other package).
ERASURE_GROUP = "memledger.erasure"
# Hooks called when a scope reaches its budget: ``hook(tx)`` inside the save or proposal that takes the
# last slot, and in a transaction of its own after a save or proposal refused for the budget. A hook
# returns a sentence for the refusal message (consolidation: "a run is scheduled to make room"), or None.
# The hook takes a ledger.tx.Transaction; it is typed Any here so that this module, which tx.py imports,
# imports nothing of tx.py.
BudgetHook = Callable[[Any], "str | None"]


class WritePolicy:
    """The limits and hooks every write transaction of a ledger applies.

    One per ledger, shared with the ledger's twins (:meth:`ledger.Ledger.for_account`): a hook
    added through any of them is called by the transactions of all.
    """

    __slots__ = ("budget_hooks", "default_max_records", "erase_hooks", "max_body_chars")

    def __init__(self, *, max_body_chars: int, default_max_records: int) -> None:
        self.max_body_chars = max_body_chars
        self.default_max_records = default_max_records  # a scope's budget until one is set
        self.erase_hooks: list[EraseHook] = []
        self.budget_hooks: dict[str, BudgetHook] = {}

    def budget_reached(self, tx: Any) -> list[str]:
        """Call every budget hook in ``tx`` (a :class:`ledger.tx.Transaction`); what they say, in order."""
        return [note for hook in list(self.budget_hooks.values()) if (note := hook(tx))]

    def erased(self, conn: Connection, scope_key: str, record_ids: Sequence[str], bodies: Sequence[str]) -> None:
        """Call every package's erase hook (:func:`package_erase_hooks`), then those added to this ledger, inside
        the delete's transaction."""
        for hook in (*package_erase_hooks(), *self.erase_hooks):
            hook(conn, scope_key, record_ids, bodies)


@cache
def package_erase_hooks() -> tuple[EraseHook, ...]:
    """The erase hooks the ``memledger.erasure`` entry points name, loaded on the first delete, in name order.

    A hook that cannot be loaded (its import fails), or no entry point at all (memledger run from a source tree
    without its package metadata), never fails a forget nor goes unsaid: in its place a stand-in logs, at each
    forget, which text was left unscrubbed and what to do.
    """
    found = sorted(entry_points(group=ERASURE_GROUP), key=lambda e: e.name)
    if not found:
        return (_unscrubbed(f"no {ERASURE_GROUP} entry point is registered", "install memledger (make install)"),)
    return tuple(_load(entry) for entry in found)


def _load(entry: EntryPoint) -> EraseHook:
    try:
        hook: EraseHook = entry.load()
    except Exception as exc:
        log.exception("the erase hook %s (%s) cannot be loaded", entry.name, entry.value)
        why = f"the erase hook {entry.name} ({entry.value}) cannot be loaded: {exc!r}"
        return _unscrubbed(why, "reinstall memledger")
    return hook


def _unscrubbed(why: str, fix: str) -> EraseHook:
    """A stand-in hook: the forget goes on (the records' bodies are erased) and says what it could not scrub."""

    def hook(conn: Connection, scope_key: str, record_ids: Sequence[str], bodies: Sequence[str]) -> None:
        log.error(
            "forget of %s in %s: the text other packages keep of it (extraction digests) was not scrubbed: %s; %s "
            "so that later forgets scrub it (docs/extraction.md)",
            ", ".join(record_ids),
            scope_key,
            why,
            fix,
        )

    return hook
