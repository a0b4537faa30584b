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
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from ledger.models import MemoryRecord
from ledger.protocol import to_jsonable

ERASED = "[erased]"


def is_terminal() -> bool:
    """True when stdout is an interactive terminal (progress bars and colour only then)."""
    isatty = getattr(sys.stdout, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except ValueError:  # a closed stream
        return False


def stdout_console() -> Console:
    """A Rich console on the current ``sys.stdout``."""
    return Console(file=sys.stdout, highlight=False)


def stderr_console() -> Console:
    """A Rich console on the current ``sys.stderr``."""
    return Console(file=sys.stderr, highlight=False)


def emit_json(obj: Any) -> None:
    """Print ``obj`` as indented JSON on stdout; records, usage, instants and enums use the protocol's forms."""
    typer.echo(json.dumps(to_jsonable(obj), indent=2, ensure_ascii=False))


def print_table(table: Table) -> None:
    """Print a Rich table on stdout."""
    stdout_console().print(table)


def print_message(message: str, *, style: str | None = None) -> None:
    """Print one line of plain text (never interpreted as markup) on stdout."""
    stdout_console().print(Text(message, style=style or ""))


def print_error(message: str) -> None:
    """Print ``message`` in red on stderr (plain text, never markup)."""
    stderr_console().print(Text(message, style="bold red"))


def fail(message: str, *, code: int = 1) -> NoReturn:
    """Print ``message`` as an error and exit with ``code`` (1: the operation was refused or failed)."""
    print_error(message)
    raise typer.Exit(code)


def instant_text(value: datetime | None) -> str:
    """A compact, unambiguous UTC rendering for tables (``2026-01-01 09:30:00Z``); empty for None."""
    if value is None:
        return ""
    text = value.strftime("%Y-%m-%d %H:%M:%S")
    if value.microsecond:
        text += f".{value.microsecond:06d}"
    return text + "Z"


def body_text(record: MemoryRecord) -> Text:
    """The body as plain text, or a dim ``[erased]`` when it was forgotten."""
    if record.body is None:
        return Text(ERASED, style="dim italic")
    return Text(record.body)


def records_table(records: Sequence[MemoryRecord], *, title: str | None = None, detail: bool = False) -> Table:
    """A table of records: id, kind, body, since, expires, group; ``detail`` adds status, end and links."""
    table = Table(title=title, show_lines=False, expand=False)
    table.add_column("ID", no_wrap=True, style="cyan")
    if detail:
        table.add_column("Status", no_wrap=True)
    table.add_column("Kind", no_wrap=True)
    table.add_column("Body", overflow="fold")
    table.add_column("Since", no_wrap=True)
    if detail:
        table.add_column("Until", no_wrap=True)
        table.add_column("Superseded by", no_wrap=True)
    table.add_column("Expires", no_wrap=True)
    table.add_column("Group", no_wrap=True)
    for r in records:
        cells: list[str | Text] = [Text(r.id)]
        if detail:
            cells.append(Text(r.status.value))
        cells += [Text(r.kind.value), body_text(r), Text(instant_text(r.valid_from))]
        if detail:
            cells += [Text(instant_text(r.valid_to)), Text(r.superseded_by or "")]
        cells += [Text(instant_text(r.expires_at)), Text(r.conflict_group or "")]
        table.add_row(*cells)
    return table


def print_records(
    records: Sequence[MemoryRecord], *, as_json: bool, title: str, empty: str, detail: bool = False
) -> None:
    """``--json``: a JSON list of records; otherwise a table, or ``empty`` when there is nothing to show."""
    if as_json:
        emit_json(list(records))
    elif not records:
        print_message(empty, style="dim")
    else:
        print_table(records_table(records, title=title, detail=detail))


@contextmanager
def progress(description: str, *, total: int | None = None) -> Iterator[Callable[[int], None]]:
    """Yield ``advance(n)``; a Rich progress bar shows on a terminal, nothing otherwise (pipes, cron, tests)."""
    if not is_terminal():
        yield lambda _n: None
        return
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
