"""``memledger files …``: memory entries kept as markdown files (see ``docs/file-ledger.md``).

``new``, ``validate``, ``audit``, ``export`` and ``import``. The logic lives in
:mod:`ledger.files`; this module parses options, shows a progress bar on a
terminal for large directories, prints, and picks the exit status:

* ``validate``: 0 every file valid, 1 a file is invalid, 2 usage or an unreadable file;
* ``audit``: 0 no findings, 1 findings, 2 usage (with ``--explain``: 0 eligible, 1 not);
* ``export`` / ``import``: 0 done, 1 the ledger refused (import: an eligible entry was refused), 2 usage.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Annotated

import typer

from ledger.files.audit import AuditReport, AuditUsageError, audit_directory, entry_files, parse_project_scope
from ledger.files.dates import DateError, format_instant, parse_now
from ledger.files.entry import EntryUnreadable, read_entry, validate
from ledger.files.exchange import DEFAULT_REVIEW_DAYS, ExportResult, ImportResult, export_scope, import_directory
from ledger.files.explain import explain
from ledger.files.graph import graph_dot, graph_mermaid
from ledger.files.render import (
    FileResult,
    audit_json,
    audit_text,
    explain_json,
    explain_text,
    validate_json,
    validate_text,
)
from ledger.files.sarif import audit_sarif
from worker.cli_ledger import DbUrl, cli_ledger
from worker.output import print_error, progress

app = typer.Typer(no_args_is_help=True)

PROGRESS_MIN_FILES = 200
TEMPLATE = "memory-entry.md"


class TextOrJson(StrEnum):
    text = "text"
    json = "json"


class AuditFormat(StrEnum):
    text = "text"
    json = "json"
    sarif = "sarif"


class GraphFormat(StrEnum):
    dot = "dot"
    mermaid = "mermaid"


def _parse_now(value: str) -> datetime:
    try:
        return parse_now(value)
    except DateError as exc:
        raise typer.BadParameter(f"{exc.message}: use YYYY-MM-DD or an instant such as 2025-06-30T09:00:00Z") from exc


NowOpt = Annotated[
    datetime | None,
    typer.Option(
        "--now",
        parser=_parse_now,
        metavar="DATE",
        help="The instant to judge at: YYYY-MM-DD (00:00 UTC) or RFC 3339. Default: the current instant.",
        show_default=False,
    ),
]


def _now(value: datetime | None) -> datetime:
    return value if value is not None else datetime.now(UTC)


def _usage(message: str) -> typer.Exit:
    print_error(message)
    return typer.Exit(2)


def _emit(text: str) -> None:
    typer.echo(text)


# --------------------------------------------------------------------------- new


@app.command("new")
def new(
    name: Annotated[str, typer.Argument(help="File name of the new entry (.md is added if missing).")],
    directory: Annotated[Path, typer.Option("--dir", help="Directory to create it in.")] = Path("memories"),
    now: NowOpt = None,
) -> None:
    """Create a new entry from the memory-entry.md template (created: set to today)."""
    file_name = name if name.endswith(".md") else f"{name}.md"
    if Path(file_name).name != file_name or file_name.startswith(".") or ".." in file_name:
        raise _usage(f"{name!r} is not a plain file name: give a name such as deploy-region")
    target = directory / file_name
    if target.exists():
        raise _usage(f"{target} already exists; pick another name")
    template = resources.files("ledger.files").joinpath("templates", TEMPLATE).read_text(encoding="utf-8")
    text = template.replace("created: YYYY-MM-DD", f"created: {_now(now).date().isoformat()}", 1)
    directory.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    _emit(f"Created {target}: fill in every <...>, write the fact, then run memledger files validate {target}")


# --------------------------------------------------------------------------- validate


def _validate_paths(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for path in paths:
        if path.is_dir():
            out.extend(entry_files(path))
        else:
            out.append(path)
    return out


@app.command("validate")
def validate_cmd(
    files: Annotated[
        list[Path], typer.Argument(metavar="FILE...", help="Entry files (a directory means its *.md files).")
    ],
    now: NowOpt = None,
    fmt: Annotated[TextOrJson, typer.Option("--format", help="Output format.")] = TextOrJson.text,
) -> None:
    """Check entries against every rule of the format: one line per failure, with field, rule id and fix."""
    at = _now(now)
    results: list[FileResult] = []
    for path in _validate_paths(files):
        try:
            entry = read_entry(path, name=str(path))
        except EntryUnreadable as exc:
            results.append(FileResult(str(path), [], exc.reason))
            continue
        results.append(FileResult(str(path), validate(entry, now=at)))
    _emit(validate_json(results) if fmt is TextOrJson.json else validate_text(results))
    if any(r.error is not None for r in results):
        raise typer.Exit(2)
    if not all(r.valid for r in results):
        raise typer.Exit(1)


# --------------------------------------------------------------------------- audit


def _run_audit(directory: Path, scope: str, at: datetime, warn_within: int | None) -> AuditReport:
    files = entry_files(directory)
    if len(files) < PROGRESS_MIN_FILES:
        return audit_directory(directory, scope=scope, now=at, warn_within_days=warn_within)
    with progress("Auditing entries", total=len(files)) as advance:
        return audit_directory(
            directory, scope=scope, now=at, warn_within_days=warn_within, on_entry=lambda: advance(1)
        )


@app.command("audit")
def audit_cmd(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="Directory of entries (*.md, not recursive).")],
    scope: Annotated[str, typer.Option("--scope", help="project:REF, the project to audit for.")],
    now: NowOpt = None,
    fmt: Annotated[AuditFormat, typer.Option("--format", help="Output format.")] = AuditFormat.text,
    warn_within: Annotated[
        int | None,
        typer.Option("--warn-within", min=0, metavar="DAYS", help="Warn of entries expiring or due within DAYS."),
    ] = None,
    graph: Annotated[GraphFormat | None, typer.Option("--graph", help="Draw the supersession chains.")] = None,
    explain_file: Annotated[
        str | None, typer.Option("--explain", metavar="FILE", help="Show each authorization criterion for FILE.")
    ] = None,
) -> None:
    """Reject unusable entries and list the chain heads eligible to consider under "Action-authorizing review"."""
    if graph is not None and explain_file is not None:
        raise _usage("--graph and --explain cannot be combined")
    try:
        parse_project_scope(scope)
        report = _run_audit(directory, scope, _now(now), warn_within)
    except AuditUsageError as exc:
        raise _usage(str(exc)) from exc
    if explain_file is not None:
        _explain(report, explain_file, fmt)
        return
    if graph is not None:
        _emit(graph_dot(report) if graph is GraphFormat.dot else graph_mermaid(report))
    elif fmt is AuditFormat.json:
        _emit(audit_json(report))
    elif fmt is AuditFormat.sarif:
        _emit(audit_sarif(report))
    else:
        _emit(audit_text(report))
    if report.findings:
        raise typer.Exit(1)


def _explain(report: AuditReport, file: str, fmt: AuditFormat) -> None:
    name = Path(file).name
    if name not in report.entries:
        raise _usage(f"{file!r} is not an entry of {report.directory}")
    x = explain(report, name)
    _emit(explain_json(x, report) if fmt is AuditFormat.json else explain_text(x, report))
    if not x.eligible:
        raise typer.Exit(1)


# --------------------------------------------------------------------------- export / import


@app.command("export")
def export_cmd(
    directory: Annotated[
        Path, typer.Argument(metavar="DIR", help="Directory to write the entries to (created if missing).")
    ],
    scope: Annotated[
        str | None, typer.Option("--scope", help="Scope key to export (default: the account scope).")
    ] = None,
    now: NowOpt = None,
    review_days: Annotated[
        int, typer.Option("--review-days", min=1, help="review-by for records without an expiry: now + DAYS.")
    ] = DEFAULT_REVIEW_DAYS,
    fmt: Annotated[TextOrJson, typer.Option("--format", help="Output format.")] = TextOrJson.text,
    database_url: DbUrl = None,
) -> None:
    """Write a scope's records (history included, erased bodies never) as entries, chains as superseded-by."""
    with cli_ledger(database_url) as led:
        key = scope or led.scope_key
        total = len(led.records(key))
        with progress("Exporting records", total=total) as advance:
            result = export_scope(
                led, key, directory, now=_now(now), review_days=review_days, on_record=lambda: advance(1)
            )
    _emit(_export_json(result) if fmt is TextOrJson.json else _export_text(result))


def _export_text(r: ExportResult) -> str:
    lines = [f"Exported {len(r.written)} record(s) of {r.scope_key} to {r.directory} ({len(r.skipped)} skipped)."]
    lines.extend(f"  skipped {s.name}: {s.reason}" for s in r.skipped)
    return "\n".join(lines)


def _export_json(r: ExportResult) -> str:
    doc = {
        "directory": str(r.directory),
        "scope": r.scope_key,
        "written": r.written,
        "skipped": [{"record": s.name, "reason": s.reason} for s in r.skipped],
    }
    return json.dumps(doc, indent=2, ensure_ascii=False)


@app.command("import")
def import_cmd(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="Directory of entries to import.")],
    scope: Annotated[str, typer.Option("--scope", help="project:REF: import the entries in this project's scope.")],
    now: NowOpt = None,
    fmt: Annotated[TextOrJson, typer.Option("--format", help="Output format.")] = TextOrJson.text,
    database_url: DbUrl = None,
) -> None:
    """Propose the valid, in-scope, current entries into the account scope (never active; idempotent)."""
    try:
        parse_project_scope(scope)
        files = entry_files(directory)
    except AuditUsageError as exc:
        raise _usage(str(exc)) from exc
    at = _now(now)
    with cli_ledger(database_url) as led, progress("Importing entries", total=len(files)) as advance:
        result = import_directory(led, directory, scope=scope, now=at, on_entry=lambda: advance(1))
    _emit(_import_json(result, at) if fmt is TextOrJson.json else _import_text(result, at))
    if result.refused:
        raise typer.Exit(1)


def _import_text(r: ImportResult, at: datetime) -> str:
    lines = [f"Import of {r.directory} ({r.scope}) into {r.scope_key} as of {format_instant(at)}:"]
    lines.extend(
        f"  {'already ' if i.already else 'proposed'}  {i.name} -> {i.record_id}"
        + (" (imported earlier)" if i.already else "")
        for i in r.imported
    )
    lines.extend(f"  refused   {s.name}: {s.reason}" for s in r.refused)
    lines.extend(f"  skipped   {s.name}: {s.reason}" for s in r.not_eligible)
    new = sum(not i.already for i in r.imported)
    lines.append(
        f"{new} proposed, {len(r.imported) - new} already imported, {len(r.refused)} refused, "
        f"{len(r.not_eligible)} not eligible. Proposals wait for `memledger accept ID` or `memledger reject ID`."
    )
    return "\n".join(lines)


def _import_json(r: ImportResult, at: datetime) -> str:
    doc = {
        "directory": str(r.directory),
        "scope": r.scope,
        "into": r.scope_key,
        "now": format_instant(at),
        "imported": [{"file": i.name, "record": i.record_id, "already": i.already} for i in r.imported],
        "refused": [{"file": s.name, "reason": s.reason} for s in r.refused],
        "not_eligible": [{"file": s.name, "reason": s.reason} for s in r.not_eligible],
    }
    return json.dumps(doc, indent=2, ensure_ascii=False)
