"""Ledger commands: pin, pins, unpin, history, as-of, search, sweep, proposals, accept, reject, budget, db, rpc.

The database is ``--database-url``, else ``MEMLEDGER_DATABASE_URL``, else
``sqlite:///./memledger.db``; the account is ``MEMLEDGER_ACCOUNT`` (``local``).
Every read takes ``--json`` (the protocol's camelCase, RFC 3339 forms). Instants
on the command line are RFC 3339 (``2026-01-01T09:00:00Z``) or a plain date
(``2026-01-01``, midnight UTC).

Exit status: 0 done; 1 the ledger refused or failed (a red message on stderr,
never a traceback); 2 a usage error.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Annotated

import typer
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from ledger import (
    Kind,
    Ledger,
    LedgerError,
    MemoryRecord,
    check_line,
    check_search_index,
    current_revision,
    format_rfc3339,
    head_revision,
    make_engine,
    open_ledger,
    parse_rfc3339,
    upgrade,
)
from ledger.errors import BudgetExceeded, InvalidInstant, OutcomeUnknown
from worker.cli.conventions import DbUrl, ScopeOption, ScopePositional, pick_scope
from worker.cli.output import emit_json, fail, print_message, print_records, progress
from worker.errors import ConfigError
from worker.ledger_access import LedgerAccess

log = logging.getLogger(__name__)

DEFAULT_DATABASE_URL = "sqlite:///./memledger.db"
DEFAULT_ACCOUNT = "local"
MAX_RPC_LINE_BYTES = 1 << 20
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


# ---------------------------------------------------------------------- configuration
def database_url_from_env(database_url: str | None = None) -> str:
    """``database_url`` if given, else ``MEMLEDGER_DATABASE_URL``, else the embedded SQLite file."""
    return database_url or LedgerAccess.from_environment().database_url or DEFAULT_DATABASE_URL


def sqlite_synchronous_from_env() -> str:
    """``MEMLEDGER_SQLITE_SYNCHRONOUS`` (``normal`` unset). Raises ConfigError for another value."""
    return LedgerAccess.from_environment().synchronous()


def ledger_from_env(database_url: str | None = None) -> Ledger:
    """Open the ledger the command line works on (database and account from the environment, through the configuration).

    Raises:
        LedgerError: bad URL or account, or a PostgreSQL schema behind the code.
        ConfigError: ``MEMLEDGER_SQLITE_SYNCHRONOUS`` is neither ``normal`` nor ``full``.
        SQLAlchemyError: the database cannot be reached.
    """
    access = LedgerAccess.from_environment()
    return open_ledger(
        database_url_from_env(database_url),
        account=access.account or DEFAULT_ACCOUNT,
        sqlite_synchronous=access.synchronous(),
    )


def safe_url(url: str) -> str:
    """The URL with any password masked, for messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparseable database URL>"


def parse_instant(text: str) -> datetime:
    """An RFC 3339 instant, or ``YYYY-MM-DD`` meaning midnight UTC. Raises :class:`typer.BadParameter`."""
    text = text.strip()
    try:
        if _DATE.fullmatch(text):
            return datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=UTC)
        return parse_rfc3339(text)
    except (ValueError, InvalidInstant) as exc:
        raise typer.BadParameter(
            f"{text!r} is not an instant: use RFC 3339 with a zone (2026-01-01T09:00:00Z) or a date (2026-01-01)"
        ) from exc


@contextmanager
def cli_errors() -> Iterator[None]:
    """Turn every failure into a red message and exit status 1: never a traceback."""
    try:
        yield
    except (typer.Exit, typer.Abort, typer.BadParameter):
        raise
    except OutcomeUnknown as exc:  # not "refused": it may have been applied (docs/worker.md)
        fail(exc.message, reason=exc.reason, code=OUTCOME_UNKNOWN_EXIT)
    except LedgerError as exc:
        fail(exc.message, reason=exc.reason)
    except ConfigError as exc:
        fail(str(exc), reason="invalid_configuration")
    except SQLAlchemyError as exc:
        log.debug("database error", exc_info=True)
        fail(
            f"database error ({type(exc).__name__}): check that the database is reachable and up to date",
            reason="database_error",
        )
    except Exception as exc:
        log.debug("unexpected error", exc_info=True)
        fail(f"unexpected error ({type(exc).__name__}); nothing more was done", reason="internal_error")


@contextmanager
def cli_ledger(database_url: str | None) -> Iterator[Ledger]:
    """Open the ledger for one command, with :func:`cli_errors` around both the opening and the work."""
    with cli_errors():
        led = ledger_from_env(database_url)
        try:
            yield led
        finally:
            led.close()


OUTCOME_UNKNOWN_EXIT = 3  # the write may or may not have been applied: check before running it again

# ---------------------------------------------------------------------- options
Json = Annotated[bool, typer.Option("--json", help="Print JSON (camelCase, RFC 3339) instead of a table.")]
Scope = ScopeOption
RecordIdArg = Annotated[str, typer.Argument(help="A record id (mem_…).", show_default=False)]
InstantHelp = "RFC 3339 (2026-01-01T09:00:00Z) or a date (2026-01-01, midnight UTC)"
# How far past this machine's clock `sweep --now` may reach: the skew between two NTP-synchronised hosts
# (a cron on one, the database's writers on another), never enough to expire a record ahead of its time
# by more than a few seconds (docs/operations.md, "Many machines", the sweep).
SWEEP_SKEW_S = 5.0


# ---------------------------------------------------------------------- writes
def pin(
    text: Annotated[str, typer.Argument(help="The fact to remember.", show_default=False)],
    kind: Annotated[Kind | None, typer.Option("--kind", help="preference, fact, decision or constraint.")] = None,
    supersedes: Annotated[
        str | None, typer.Option("--supersedes", help="Edit: the active record this replaces.", show_default=False)
    ] = None,
    expires: Annotated[
        datetime | None,
        typer.Option(
            "--expires", parser=parse_instant, metavar="INSTANT", help=f"When it stops applying: {InstantHelp}."
        ),
    ] = None,
    group: Annotated[
        str | None, typer.Option("--group", help="Conflict group: at most one active member.", show_default=False)
    ] = None,
    request_id: Annotated[
        str | None,
        typer.Option(
            "--request-id",
            metavar="KEY",
            help="Your key for this save: run again with the same key, it is applied once.",
            show_default=False,
        ),
    ] = None,
    as_json: Json = False,
    database_url: DbUrl = None,
) -> None:
    """Pin a fact in the account scope (or edit one with --supersedes)."""
    with cli_ledger(database_url) as led:

        def save() -> MemoryRecord:
            return led.save(
                text, kind=kind, supersedes=supersedes, expires_at=expires, conflict_group=group, request_id=request_id
            )

        try:
            record = save()
        except BudgetExceeded:
            # A full scope: refuse as a serving process does, where consolidation's budget hook schedules a run
            # and says so. The hook is loaded only now, so a pin that fits pays for no consolidation import.
            with_consolidation(led)
            record = save()
    if as_json:
        emit_json(record)
        return
    replaced = f" (replaces {', '.join(record.supersedes)})" if record.supersedes else ""
    print_message(f"Pinned {record.id}{replaced}.", style="green")


def with_consolidation(led: Ledger) -> None:
    """Give ``led`` consolidation's hooks (a full scope gets its run, and the refusal says so), as ``serve`` does."""
    from consolidation import ConsolidationService

    ConsolidationService(led)


def _change(
    record_id: str, change: Callable[[Ledger, str], MemoryRecord], done: str, as_json: bool, url: str | None
) -> None:
    """Run ``change`` on one record; print it (``--json``) or ``done`` (``{id}`` filled in), in green."""
    with cli_ledger(url) as led:
        record = change(led, record_id)
    if as_json:
        emit_json(record)
    else:
        print_message(done.format(id=record.id), style="green")


def unpin(record_id: RecordIdArg, as_json: Json = False, database_url: DbUrl = None) -> None:
    """Forget a record: a tombstone that erases its body and its earlier revisions' bodies."""
    done = "Forgot {id}; its text (and that of its earlier revisions) is erased."
    _change(record_id, lambda led, rid: led.delete(rid), done, as_json, database_url)


def accept(record_id: RecordIdArg, as_json: Json = False, database_url: DbUrl = None) -> None:
    """Accept a proposal: it becomes active now, closing what it supersedes."""
    _change(record_id, lambda led, rid: led.accept(rid), "Accepted {id}; it is active now.", as_json, database_url)


def reject(record_id: RecordIdArg, as_json: Json = False, database_url: DbUrl = None) -> None:
    """Reject a proposal; it never applies."""
    _change(record_id, lambda led, rid: led.reject(rid), "Rejected {id}.", as_json, database_url)


def sweep(
    now: Annotated[
        datetime | None,
        typer.Option(
            "--now",
            parser=parse_instant,
            metavar="INSTANT",
            help=f"Expire what was due at this past instant (not later than now): {InstantHelp}.",
        ),
    ] = None,
    as_json: Json = False,
    database_url: DbUrl = None,
) -> None:
    """Expire every record whose expiry has passed (idempotent; run it from cron)."""
    with cli_ledger(database_url) as led:
        at = led.now(now)
        if (at - led.now()).total_seconds() > SWEEP_SKEW_S:
            # A later instant would expire records that still apply now: `pins` would drop them while
            # `as-of now` still lists them, and no later sweep could undo it.
            raise typer.BadParameter(
                f"{format_rfc3339(at)} is later than now ({format_rfc3339(led.now())}): the sweep expires only "
                f"what is already due; give an instant that has passed, or omit --now",
                param_hint="'--now'",
            )
        with progress("Sweeping expired records") as advance:
            expired = led.sweep_expired(at, progress=advance)
    if as_json:
        emit_json({"expired": expired, "now": format_rfc3339(at)})
    else:
        print_message(f"Expired {expired} record{'s' if expired != 1 else ''} as of {format_rfc3339(at)}.")


def budget(
    positional_scope: ScopePositional = None,
    set_to: Annotated[
        int | None,
        typer.Option(
            "--set", min=0, max=1_000_000, metavar="N", help="New max_records (never evicts).", show_default=False
        ),
    ] = None,
    as_json: Json = False,
    scope: Scope = None,
    database_url: DbUrl = None,
) -> None:
    """Show a scope's budget and what it holds, or change it with --set."""
    with cli_ledger(database_url) as led:
        key = pick_scope(positional_scope, scope, default=led.scope_key)
        usage = led.budget(key) if set_to is None else led.set_budget(key, set_to)
    if as_json:
        emit_json(usage)
        return
    print_message(
        f"{usage.scope_key} holds {usage.held} of {usage.max_records} "
        f"({usage.active} active, {usage.proposed} proposed)."
    )


# ---------------------------------------------------------------------- reads
def pins(
    as_json: Json = False,
    limit: Annotated[
        int | None,
        typer.Option("--limit", min=1, max=1000, metavar="N", help="At most N pins, oldest first.", show_default=False),
    ] = None,
    cursor: Annotated[
        str | None,
        typer.Option("--cursor", metavar="CURSOR", help="Continue after a previous page.", show_default=False),
    ] = None,
    scope: Scope = None,
    database_url: DbUrl = None,
) -> None:
    """List the active pins of a scope (--limit and --cursor page through many)."""
    with cli_ledger(database_url) as led:
        key = scope or led.scope_key
        if limit is None and cursor is None:
            records, next_cursor = led.list(key), None
        else:
            page = led.list_page(key, limit=limit, cursor=cursor)
            records, next_cursor = page.records, page.next_cursor
    if as_json and (limit is not None or cursor is not None):
        emit_json({"scopeKey": key, "records": records, "nextCursor": next_cursor})
        return
    print_records(records, as_json=as_json, title=f"Pins in {key}", empty=f"No pins in {key}.")
    if next_cursor is not None:
        print_message(f"More pins follow: memledger pins --limit {limit} --cursor {next_cursor}")


def history(record_id: RecordIdArg, as_json: Json = False, database_url: DbUrl = None) -> None:
    """Show a record's whole revision chain, oldest first."""
    with cli_ledger(database_url) as led:
        records = led.history(record_id)
    print_records(records, as_json=as_json, title=f"History of {record_id}", empty="No history.", detail=True)


def as_of(
    instant: Annotated[
        datetime, typer.Argument(parser=parse_instant, metavar="INSTANT", help=InstantHelp, show_default=False)
    ],
    as_json: Json = False,
    scope: Scope = None,
    database_url: DbUrl = None,
) -> None:
    """List the records that applied at an instant."""
    with cli_ledger(database_url) as led:
        key = scope or led.scope_key
        records = led.list_as_of(key, instant)
    when = format_rfc3339(instant)
    print_records(records, as_json=as_json, title=f"{key} as of {when}", empty=f"Nothing applied in {key} at {when}.")


def search(
    query: Annotated[str, typer.Argument(help="Words to look for, on one line.", show_default=False)],
    as_json: Json = False,
    limit: Annotated[int, typer.Option("--limit", min=1, max=200, help="At most this many results.")] = 20,
    scope: Scope = None,
    database_url: DbUrl = None,
) -> None:
    """Full-text search over the active pins, best match first."""
    with cli_ledger(database_url) as led:
        key = scope or led.scope_key
        records = led.search(key, check_line(query, "query"), limit=limit)
    print_records(records, as_json=as_json, title=f"Matches in {key}", empty="No match.")


def proposals(as_json: Json = False, scope: Scope = None, database_url: DbUrl = None) -> None:
    """List the proposals waiting for accept or reject."""
    with cli_ledger(database_url) as led:
        key = scope or led.scope_key
        records = led.proposals(key)
        # What accepting each would close: a merge proposal is read against the pins it replaces.
        replaced = {rid for record in records for rid in record.supersedes} if not as_json else set()
        replaces = {rid: led.get(rid) for rid in sorted(replaced)}  # the account's own ids: they exist
    print_records(
        records,
        as_json=as_json,
        title=f"Proposals in {key}",
        empty=f"No proposals waiting in {key}.",
        replaces=replaces,
    )


# ---------------------------------------------------------------------- db
db_app = typer.Typer(no_args_is_help=True, help="Database schema and upkeep: upgrade, compact, check, rebuild-index.")


@db_app.command("upgrade")
def db_upgrade(database_url: DbUrl = None) -> None:
    """Migrate the database to the head revision (safe to repeat)."""
    url = database_url_from_env(database_url)
    with cli_errors():
        engine = make_engine(url, sqlite_synchronous=sqlite_synchronous_from_env())
        try:
            upgrade(engine)
            revision = current_revision(engine)
            problem = check_search_index(engine, thorough=False)
        finally:
            engine.dispose()
    head = " (head)" if revision == head_revision() else ""
    print_message(f"{safe_url(url)} is at revision {revision}{head}.", style="green")
    if problem is not None:  # the schema is up to date; the index is another matter, said but not failed
        print_message(f"Warning: {problem}", style="yellow")


@db_app.command("compact")
def db_compact(database_url: DbUrl = None, as_json: Json = False) -> None:
    """Rewrite the ledger's tables so erased bodies leave the database files, then check the full-text index."""
    from ledger import compact

    url = database_url_from_env(database_url)
    with cli_errors():
        engine = make_engine(url, sqlite_synchronous=sqlite_synchronous_from_env())
        try:
            report = compact(engine)
        finally:
            engine.dispose()
    if as_json:
        emit_json(report.to_json())
        if report.search_index is not None:
            raise typer.Exit(1)
        return
    print_message(
        f"{safe_url(url)}: {len(report.tables)} tables rewritten, {report.bytes_before:,} -> "
        f"{report.bytes_after:,} bytes{', checkpointed' if report.checkpoint else ''}.",
        style="green",
    )
    for note in report.notes:
        print_message(note)
    if report.search_index is not None:
        fail(report.search_index, reason="search_index_damaged")


@db_app.command("check")
def db_check(database_url: DbUrl = None, as_json: Json = False) -> None:
    """Check the full-text index against the records (exit 1 when it is damaged); safe while the service runs."""
    url = database_url_from_env(database_url)
    with cli_errors():
        engine = make_engine(url)
        try:
            problem = check_search_index(engine)
        finally:
            engine.dispose()
    if as_json:
        emit_json({"searchIndex": problem or "ok"})
        if problem is not None:
            raise typer.Exit(1)
        return
    if problem is not None:
        fail(problem, reason="search_index_damaged")
    print_message(f"{safe_url(url)}: the full-text index is sound.", style="green")


@db_app.command("rebuild-index")
def db_rebuild_index(database_url: DbUrl = None) -> None:
    """Build the full-text index again from the records (repairs a damaged one); safe while the service runs."""
    from ledger import rebuild_search_index

    url = database_url_from_env(database_url)
    with cli_errors():
        engine = make_engine(url)
        try:
            rebuild_search_index(engine)
        finally:
            engine.dispose()
    print_message(f"{safe_url(url)}: the full-text index was rebuilt from the records and checked.", style="green")


# ---------------------------------------------------------------------- registration
_COMMANDS: tuple[tuple[str, Callable[..., None]], ...] = (
    ("pin", pin),
    ("pins", pins),
    ("unpin", unpin),
    ("history", history),
    ("as-of", as_of),
    ("search", search),
    ("sweep", sweep),
    ("proposals", proposals),
    ("accept", accept),
    ("reject", reject),
    ("budget", budget),
)


def register(app: typer.Typer) -> None:
    """Attach the ledger commands and the ``db`` group to the top-level app."""
    for name, command in _COMMANDS:
        app.command(name)(command)
    app.add_typer(db_app, name="db")
