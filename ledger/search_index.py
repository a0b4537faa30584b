"""The full-text index beside the records: ``memledger db check`` and ``db rebuild-index`` (docs/operations.md).

Searches, and on SQLite every save and forget, go through the index; the records are the truth
it is built from, so a damaged index is rebuilt from them and nothing is lost.
"""

from __future__ import annotations

from sqlalchemy import Engine

from ledger.db import current_revision
from ledger.errors import LedgerError
from ledger.store import store_for


def check_search_index(engine: Engine, *, thorough: bool = True) -> str | None:
    """What is wrong with the full-text index, or None when it is sound.

    ``thorough`` reads the whole index (SQLite: every entry, and that it lists exactly the active
    records); otherwise one lookup, as the service's health check does.

    Raises:
        LedgerBusy: the database stayed busy.
        LedgerError: the database refused (unreachable), or holds no ledger.
    """
    _require_schema(engine)
    return store_for(engine).search_index_problem(thorough=thorough)


def rebuild_search_index(engine: Engine) -> None:
    """Build the full-text index again from the active records, whatever state it is in; safe beside live writers.

    Raises:
        LedgerError: the index is still damaged afterwards, the database refused, or holds no ledger.
    """
    _require_schema(engine)
    store_for(engine).rebuild_search_index()


def _require_schema(engine: Engine) -> None:
    if current_revision(engine) is None:
        raise LedgerError("the database holds no ledger (no schema): run `memledger db upgrade` first")
