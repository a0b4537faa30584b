"""The account memory ledger.

>>> led = open_ledger("sqlite:///memledger.db", account="local")
>>> rec = led.save("I prefer metric units")
"""

from __future__ import annotations

from ledger.audit import check_session_id
from ledger.compact import CompactReport, compact
from ledger.core import DEFAULT_MAX_RECORDS, Ledger, ScopeView
from ledger.db import current_revision, head_revision, make_engine, upgrade
from ledger.errors import (
    BodyRejected,
    BudgetExceeded,
    InvalidArgument,
    InvalidInstant,
    InvalidTransition,
    LedgerBusy,
    LedgerError,
    OutcomeUnknown,
    RecordNotFound,
    RequestIdReused,
    ScopeError,
)
from ledger.instants import (
    Clock,
    format_rfc3339,
    from_micros,
    opt_from_micros,
    parse_rfc3339,
    require_aware,
    system_clock,
    to_micros,
)
from ledger.lines import escape_line_breaks
from ledger.models import EventKind, Kind, LedgerEvent, MemoryRecord, Provenance, ScopeUsage, Status, SweepStatus
from ledger.packet import CITATION_CHARS, Packet
from ledger.paging import Page
from ledger.reader import Reader
from ledger.reads import check_scope
from ledger.screening import find_credential, screen_body
from ledger.search_index import check_search_index, rebuild_search_index
from ledger.slash import SlashResult
from ledger.store import Pending
from ledger.tx import Transaction

# The front door: consolidation/ and worker/ import from here, and from ledger.schema (the tables),
# ledger.errors, ledger.protocol and ledger.files; tests/test_seams.py holds them to it.
__all__ = [
    "CITATION_CHARS",
    "DEFAULT_MAX_RECORDS",
    "BodyRejected",
    "BudgetExceeded",
    "Clock",
    "CompactReport",
    "EventKind",
    "InvalidArgument",
    "InvalidInstant",
    "InvalidTransition",
    "Kind",
    "Ledger",
    "LedgerBusy",
    "LedgerError",
    "LedgerEvent",
    "MemoryRecord",
    "OutcomeUnknown",
    "Packet",
    "Page",
    "Pending",
    "Provenance",
    "Reader",
    "RecordNotFound",
    "RequestIdReused",
    "ScopeError",
    "ScopeUsage",
    "ScopeView",
    "SlashResult",
    "Status",
    "SweepStatus",
    "Transaction",
    "check_scope",
    "check_search_index",
    "check_session_id",
    "compact",
    "current_revision",
    "escape_line_breaks",
    "find_credential",
    "format_rfc3339",
    "from_micros",
    "head_revision",
    "make_engine",
    "open_ledger",
    "opt_from_micros",
    "parse_rfc3339",
    "rebuild_search_index",
    "require_aware",
    "screen_body",
    "system_clock",
    "to_micros",
    "upgrade",
]


def open_ledger(
    url: str = "sqlite:///./memledger.db",
    *,
    account: str = "local",
    clock: Clock = system_clock,
    migrate: bool | None = None,
    max_body_chars: int | None = None,
    sqlite_synchronous: str = "normal",
) -> Ledger:
    """Open (and on SQLite, create and migrate) the ledger at ``url``, bound to ``account:<account>``.

    A fresh SQLite file is ready at once. PostgreSQL is migrated only when
    ``migrate=True`` (operators run ``memledger db upgrade``); by default it must
    already be at the head revision. On SQLite, ``sqlite_synchronous`` is ``normal`` (a committed write
    survives a crash of the process) or ``full`` (it survives a power loss too; docs/operations.md).

    Raises:
        ScopeError: the account name cannot form a scope key.
        LedgerError: the URL is unsupported, ``sqlite_synchronous`` is not ``normal`` or ``full``, or the
            database is behind the code.
    """
    from ledger.store import store_for

    check_scope(f"account:{account}")  # before any connection is opened
    engine = make_engine(url, sqlite_synchronous=sqlite_synchronous)
    do_migrate = migrate if migrate is not None else store_for(engine).migrate_on_open
    at_head = current_revision(engine) == head_revision()  # a read: no write lock when nothing is due
    if do_migrate and not at_head:
        upgrade(engine)
    elif not at_head:
        engine.dispose()
        raise LedgerError("the database schema is not up to date: run `memledger db upgrade` first")
    kwargs = {} if max_body_chars is None else {"max_body_chars": max_body_chars}
    return Ledger(engine, account=account, clock=clock, **kwargs)
