"""The account memory ledger.

>>> led = open_ledger("sqlite:///memledger.db", account="local")
>>> rec = led.save("I prefer metric units")

The names load on first use, as :mod:`consolidation`'s do: ``import ledger`` (or ``ledger.errors``, which
the configuration needs) imports none of the heavy modules, and taking one name imports only the module
that defines it, so a command pays only for what it uses (docs/cli.md, "How commands load").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ledger.instants import system_clock
from ledger.lazy import loader

if TYPE_CHECKING:
    from ledger.audit import check_session_id
    from ledger.compaction import CompactReport, compact
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
    from ledger.lines import escape_line_breaks, show_controls
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
    from ledger.wire import check_line

# Where each name of the surface is defined (``open_ledger`` is defined below). No name of the surface is a
# submodule's: importing ``ledger.x`` sets the package's attribute ``x`` to the module.
_WHERE: dict[str, str] = {
    "check_session_id": "ledger.audit",
    "CompactReport": "ledger.compaction",
    "compact": "ledger.compaction",
    "DEFAULT_MAX_RECORDS": "ledger.core",
    "Ledger": "ledger.core",
    "ScopeView": "ledger.core",
    "current_revision": "ledger.db",
    "head_revision": "ledger.db",
    "make_engine": "ledger.db",
    "upgrade": "ledger.db",
    "BodyRejected": "ledger.errors",
    "BudgetExceeded": "ledger.errors",
    "InvalidArgument": "ledger.errors",
    "InvalidInstant": "ledger.errors",
    "InvalidTransition": "ledger.errors",
    "LedgerBusy": "ledger.errors",
    "LedgerError": "ledger.errors",
    "OutcomeUnknown": "ledger.errors",
    "RecordNotFound": "ledger.errors",
    "RequestIdReused": "ledger.errors",
    "ScopeError": "ledger.errors",
    "Clock": "ledger.instants",
    "format_rfc3339": "ledger.instants",
    "from_micros": "ledger.instants",
    "opt_from_micros": "ledger.instants",
    "parse_rfc3339": "ledger.instants",
    "require_aware": "ledger.instants",
    "system_clock": "ledger.instants",
    "to_micros": "ledger.instants",
    "escape_line_breaks": "ledger.lines",
    "show_controls": "ledger.lines",
    "EventKind": "ledger.models",
    "Kind": "ledger.models",
    "LedgerEvent": "ledger.models",
    "MemoryRecord": "ledger.models",
    "Provenance": "ledger.models",
    "ScopeUsage": "ledger.models",
    "Status": "ledger.models",
    "SweepStatus": "ledger.models",
    "CITATION_CHARS": "ledger.packet",
    "Packet": "ledger.packet",
    "Page": "ledger.paging",
    "Reader": "ledger.reader",
    "check_scope": "ledger.reads",
    "find_credential": "ledger.screening",
    "screen_body": "ledger.screening",
    "check_search_index": "ledger.search_index",
    "rebuild_search_index": "ledger.search_index",
    "SlashResult": "ledger.slash",
    "Pending": "ledger.store",
    "Transaction": "ledger.tx",
    "check_line": "ledger.wire",
}

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
    "check_line",
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
    "show_controls",
    "system_clock",
    "to_micros",
    "upgrade",
]


__getattr__ = loader(__name__, globals(), _WHERE)


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
    from ledger.core import Ledger
    from ledger.db import current_revision, head_revision, make_engine, upgrade
    from ledger.errors import LedgerError
    from ledger.reads import check_scope
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
