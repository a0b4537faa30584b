"""Output helpers shared by every ``memledger`` command: JSON, Rich tables, errors, progress.

Streams are looked up when called (never captured at import), so a test runner
that swaps ``sys.stdout``/``sys.stderr`` sees everything. Record bodies are user
text: they are always rendered as plain :class:`rich.text.Text`, never as markup.

>>> emit_json([record])                 # camelCase, RFC 3339: the protocol's serializer
>>> print_table(records_table(records, title="Pins"))
>>> fail("no memory record 'mem_x'")    # red on stderr, exit status 1
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from enum import StrEnum
from typing import Any, NoReturn

import typer
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ledger import MemoryRecord, escape_line_breaks, show_controls

ERASED = "[erased]"
PIPE_WIDTH = 200


class Format(StrEnum):
    """``--format`` of the commands that print a report: a table, or one JSON object."""

    TEXT = "text"
    JSON = "json"


def is_terminal() -> bool:
    """True when stdout is an interactive terminal (progress bars and colour only then)."""
    isatty = getattr(sys.stdout, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except ValueError:  # a closed stream
        return False


def stdout_console() -> Console:
    """A Rich console on the current ``sys.stdout``; wide when piped, so tables are not squeezed to 80 columns."""
    return Console(file=sys.stdout, highlight=False, width=None if is_terminal() else PIPE_WIDTH)


def stderr_console() -> Console:
    """A Rich console on the current ``sys.stderr``."""
    return Console(file=sys.stderr, highlight=False)


# Keys whose values are maps keyed by data (reasons, outcomes), not field names: left as they are.
DATA_KEYED = frozenset({"refusals", "runsByOutcome", "byReason", "counts"})


def camel(name: str) -> str:
    """``scope_key`` -> ``scopeKey`` (already camelCase names are unchanged)."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def camel_keys(value: Any) -> Any:
    """A JSON value with every object key in camelCase, except inside maps keyed by data (:data:`DATA_KEYED`)."""
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            name = camel(str(key))
            out[name] = dict(item) if name in DATA_KEYED and isinstance(item, Mapping) else camel_keys(item)
        return out
    if isinstance(value, list | tuple):
        return [camel_keys(item) for item in value]
    return value


def emit_json(obj: Any) -> None:
    """Print ``obj`` as indented JSON on stdout: the protocol's forms (records, usage, instants, enums), and
    every field name in camelCase, as the protocol (maps keyed by data, like refusal reasons, are left as
    they are)."""
    from ledger.protocol import to_jsonable  # the protocol's methods load with it: only for --json

    typer.echo(json.dumps(camel_keys(to_jsonable(obj)), indent=2, ensure_ascii=False))


def print_table(table: Table) -> None:
    """Print a Rich table on stdout."""
    stdout_console().print(table)


def print_message(message: str, *, style: str | None = None) -> None:
    """Print one line of plain text (never interpreted as markup) on stdout."""
    stdout_console().print(Text(message, style=style or ""), soft_wrap=True)


def print_error(message: str) -> None:
    """Print ``message`` in red on stderr (plain text, never markup)."""
    stderr_console().print(Text(message, style="bold red"), soft_wrap=True)


def print_warning(message: str) -> None:
    """Print ``message`` in yellow on stderr (plain text): worth reading, not a failure (stdout stays for --json)."""
    stderr_console().print(Text(message, style="yellow"), soft_wrap=True)


_JSON_ERRORS: ContextVar[bool] = ContextVar("memledger_json_errors", default=False)


@contextmanager
def json_errors() -> Iterator[None]:
    """Within the block, :func:`fail` writes its error as JSON on stderr (the command was given ``--json``)."""
    token = _JSON_ERRORS.set(True)
    try:
        yield
    finally:
        _JSON_ERRORS.reset(token)


def json_errors_on() -> bool:
    """True inside :func:`json_errors`: the command was given ``--json`` (or ``--format json``)."""
    return _JSON_ERRORS.get()


def emit_json_error(message: str, *, reason: str | None = None, code: int = 1) -> None:
    """``{"error": {"message", "reason", "exitCode"}}`` as one line on stderr."""
    error = {"message": message, "reason": reason or ("usage" if code == 2 else "failed"), "exitCode": code}
    sys.stderr.write(escape_line_breaks(json.dumps({"error": error}, ensure_ascii=False)) + "\n")
    sys.stderr.flush()


def fail(message: str, *, code: int = 1, reason: str | None = None) -> NoReturn:
    """Print ``message`` as an error and exit with ``code`` (1: the operation was refused or failed).

    Under ``--json`` the error is a JSON object on stderr instead (:func:`emit_json_error`).
    """
    if _JSON_ERRORS.get():
        emit_json_error(message, reason=reason, code=code)
    else:
        print_error(message)
    raise typer.Exit(code)


def instant_text(value: datetime | None) -> str:
    """A compact UTC rendering for tables, to the second (``2026-01-01 09:30:00``); empty for None.

    Tables are for reading; ``--json`` carries the exact instants.
    """
    return "" if value is None else value.strftime("%Y-%m-%d %H:%M:%S")


def body_text(record: MemoryRecord) -> Text:
    """The body as plain text, or a dim ``[erased]`` when it was forgotten."""
    if record.body is None:
        return Text(ERASED, style="dim italic")
    return Text(record.body)


def _interval_text(record: MemoryRecord) -> Text:
    end = record.effective_end()
    if record.valid_to is not None and record.valid_to == record.valid_from:
        return Text(f"never ({instant_text(record.valid_from)})", style="dim")
    return Text(f"{instant_text(record.valid_from)} → {instant_text(end) if end else 'now'}")


def records_table(
    records: Sequence[MemoryRecord],
    *,
    title: str | None = None,
    detail: bool = False,
    replaces: Mapping[str, MemoryRecord] | None = None,
) -> Table:
    """A table of records: id, kind, body, since, and expires/group when any record has one.

    ``detail`` (for histories) shows status and the validity interval instead of since/expires.
    ``replaces`` (for proposals: the records they supersede, by id) adds a column with what each
    closes when accepted, id and body. Bodies are plain text, never markup; an erased body shows
    as ``[erased]``.
    """
    table = Table(title=title, expand=False, box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("ID", no_wrap=True, style="cyan", min_width=12)
    if detail:
        table.add_column("Status", no_wrap=True)
    table.add_column("Kind", no_wrap=True)
    table.add_column("Body", overflow="fold", min_width=12, ratio=1)
    table.add_column("Valid (UTC)" if detail else "Since (UTC)")
    expiring = not detail and any(r.expires_at is not None for r in records)
    grouped = any(r.conflict_group is not None for r in records)
    if expiring:
        table.add_column("Expires (UTC)")
    if grouped:
        table.add_column("Group", overflow="fold")
    replacing = replaces is not None and any(r.supersedes for r in records)
    if replacing:
        table.add_column("Replaces (closed on accept)", overflow="fold", min_width=12, ratio=1)
    for r in records:
        cells: list[Text] = [Text(r.id)]
        if detail:
            cells.append(Text(r.status.value))
        cells += [Text(r.kind.value), body_text(r)]
        cells.append(_interval_text(r) if detail else Text(instant_text(r.valid_from)))
        if expiring:
            cells.append(Text(instant_text(r.expires_at)))
        if grouped:
            cells.append(Text(show_controls(r.conflict_group or "")))
        if replacing:
            cells.append(_replaced_text(r, replaces or {}))
        table.add_row(*cells)
    return table


def _replaced_text(record: MemoryRecord, replaces: Mapping[str, MemoryRecord]) -> Text:
    text = Text()
    for n, rid in enumerate(record.supersedes):
        old = replaces.get(rid)
        text.append(("\n" if n else "") + rid + ": ", style="cyan")
        text.append_text(body_text(old) if old is not None else Text("[not found]", style="dim italic"))
    return text


def print_records(
    records: Sequence[MemoryRecord],
    *,
    as_json: bool,
    title: str,
    empty: str,
    detail: bool = False,
    replaces: Mapping[str, MemoryRecord] | None = None,
) -> None:
    """``--json``: a JSON list of records; otherwise a table, or ``empty`` when there is nothing to show.
    ``replaces``: as :func:`records_table`."""
    if as_json:
        emit_json(list(records))
    elif not records:
        print_message(empty, style="dim")
    else:
        print_table(records_table(records, title=title, detail=detail, replaces=replaces))


@contextmanager
def progress(description: str, *, total: int | None = None) -> Iterator[Callable[[int], None]]:
    """Yield ``advance(n)``; a Rich progress bar shows on a terminal, nothing otherwise (pipes, cron, tests)."""
    if not is_terminal():
        yield lambda _n: None
        return
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn  # terminals only

    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=stdout_console(), transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task, n)
