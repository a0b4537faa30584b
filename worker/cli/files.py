"""``memledger files …``: memory entries kept as markdown files (see ``docs/file-ledger.md``).

``new``, ``schema``, ``validate``, ``audit``, ``export`` and ``import``. The logic lives in
:mod:`ledger.files`; this module parses options, shows a progress bar on a
terminal for large directories, prints, and picks the exit status:

* ``validate``: 0 every file valid, 1 a file is invalid, 2 usage or an unreadable file;
* ``audit``: 0 nothing blocks, 1 something does, 2 usage (with ``--explain``: 0 eligible, 1 not);
* ``export`` / ``import``: 0 done, 1 the ledger refused (import: an eligible entry was refused), 2 usage.

Imports stay light: nothing here loads the model SDK or the job queue, and the
database commands import their ledger plumbing only when they run.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Annotated

import typer

from ledger.errors import AuditUsageError, DateError, EntryUnreadable
from ledger.files import (
    DEFAULT_REVIEW_DAYS,
    AuditReport,
    ExportResult,
    FileResult,
    ImportResult,
    audit_directory,
    audit_json,
    audit_markdown,
    audit_sarif,
    audit_text,
    entry_files,
    explain,
    explain_json,
    explain_text,
    export_scope,
    graph_dot,
    graph_mermaid,
    import_directory,
    parse_context,
    parse_day,
    parse_now,
    read_entry,
    validate,
    validate_json,
    validate_text,
    write_no_follow,
)
from worker.cli.output import emit_json_error, json_errors_on, print_error, progress

app = typer.Typer(no_args_is_help=True)

PROGRESS_MIN_FILES = 200
TEMPLATE = "memory-entry.md"
SCHEMA = "memory-entry.schema.json"


class TextOrJson(StrEnum):
    text = "text"
    json = "json"


class AuditFormat(StrEnum):
    text = "text"
    json = "json"
    markdown = "markdown"
    sarif = "sarif"


class GraphFormat(StrEnum):
    dot = "dot"
    mermaid = "mermaid"


def _parse_now(value: str) -> datetime:
    try:
        return parse_now(value)
    except DateError as exc:
        raise typer.BadParameter(f"{exc.message}: use YYYY-MM-DD or an instant such as 2026-06-30T09:00:00Z") from exc


def _parse_as_of(value: str) -> date:
    try:
        return parse_day(value.strip())
    except DateError as exc:
        raise typer.BadParameter("--as-of must be a real date in YYYY-MM-DD form") from exc


NowOpt = Annotated[
    datetime | None,
    typer.Option(
        "--now",
        parser=_parse_now,
        metavar="DATE",
        help="The audit date: YYYY-MM-DD, or an RFC 3339 instant (its UTC day). Default: today (UTC).",
        show_default=False,
    ),
]
AsOfOpt = Annotated[
    date | None,
    typer.Option(
        "--as-of",
        parser=_parse_as_of,
        metavar="YYYY-MM-DD",
        help="The audit date (the reference tool's flag). Default: today (UTC).",
        show_default=False,
    ),
]
ScopeOpt = Annotated[
    str | None,
    typer.Option(
        "--scope",
        metavar="global|project:REF",
        help="Trust context: global entries only, or global ones plus project REF's. None: structural checks only.",
        show_default=False,
    ),
]
OutputOpt = Annotated[
    Path | None,
    typer.Option("--output", metavar="FILE", help="Also write the report to FILE.", show_default=False),
]
DbUrl = Annotated[
    str | None,
    typer.Option(
        "--database-url", help="Database URL (default: $MEMLEDGER_DATABASE_URL or ./memledger.db).", show_default=False
    ),
]


def _audit_day(as_of: date | None, now: datetime | None) -> date:
    if as_of is not None and now is not None:
        raise _usage("give the audit date once: --as-of or --now, not both")
    if as_of is not None:
        return as_of
    return (now or datetime.now(UTC)).astimezone(UTC).date()


def _check_ledger_scope(value: str | None) -> str | None:
    # The ledger's scope validation, shared by every command (imported late: the file commands
    # stay light to start).
    from worker.cli.conventions import check_scope_option

    return check_scope_option(value)


def _usage(message: str) -> typer.Exit:
    """A usage error (exit status 2): red text, or a JSON error on stderr under ``--format json``."""
    if json_errors_on():
        emit_json_error(message, reason="usage", code=2)
    else:
        print_error(message)
    return typer.Exit(2)


def _emit(text: str, output: Path | None = None) -> None:
    """With ``output``, write ``text`` there (never through a symbolic link: a usage error, nothing written or
    printed); then print it (adding a final newline only when it has none)."""
    if output is not None:
        try:
            written = write_no_follow(output, text if text.endswith("\n") else text + "\n")
        except OSError as exc:
            raise _usage(f"cannot write --output {output}: {exc.strerror or exc}") from exc
        if not written:
            raise _usage(
                f"--output {output} is a symbolic link; memledger never writes through links: "
                "give the path of a regular file (or remove the link)"
            )
    typer.echo(text, nl=not text.endswith("\n"))


def _resource(name: str) -> str:
    return resources.files("ledger.files").joinpath("templates", name).read_text(encoding="utf-8")


# --------------------------------------------------------------------------- new / schema


@app.command("new")
def new(
    name: Annotated[
        str | None, typer.Argument(help="File name of the new entry (.md is added). Omit it to print the template.")
    ] = None,
    directory: Annotated[Path, typer.Option("--dir", help="Directory to create it in.")] = Path("memories"),
    now: NowOpt = None,
) -> None:
    """Write the memory-entry template (fact first, superseded-by: null, may-this-authorize-action: false)."""
    today = (now or datetime.now(UTC)).astimezone(UTC).date()
    text = _resource(TEMPLATE).replace('created: "YYYY-MM-DD"', f'created: "{today.isoformat()}"', 1)
    if name is None:
        _emit(text)
        return
    file_name = name if name.endswith(".md") else f"{name}.md"
    if Path(file_name).name != file_name or file_name.startswith(".") or ".." in file_name:
        raise _usage(f"{name!r} is not a plain file name: give a name such as deploy-region")
    target = directory / file_name
    if target.exists() or target.is_symlink():
        what = "is a symbolic link (memledger never writes through links)" if target.is_symlink() else "already exists"
        raise _usage(f"{target} {what}; pick another name")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        written = write_no_follow(target, text, exclusive=True)
    except OSError as exc:
        raise _usage(f"cannot write {target}: {exc.strerror or exc}") from exc
    if not written:
        raise _usage(f"{target} is a symbolic link (memledger never writes through links); pick another name")
    _emit(f"Created {target}: replace every <...> and YYYY-MM-DD, then run memledger files validate {target}")


@app.command("schema")
def schema_cmd(output: OutputOpt = None) -> None:
    """Print the entry's JSON Schema (draft 2020-12): the same contract as `files validate`."""
    _emit(_resource(SCHEMA), output)


# --------------------------------------------------------------------------- validate


def _validate_paths(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for path in paths:
        if path.is_dir() and not path.is_symlink():  # a link is refused as an entry, never followed
            out.extend(entry_files(path))
        else:
            out.append(path)
    return out


@app.command("validate")
def validate_cmd(
    files: Annotated[
        list[Path], typer.Argument(metavar="FILE...", help="Entry files (a directory means every *.md under it).")
    ],
    fmt: Annotated[TextOrJson, typer.Option("--format", help="Output format.")] = TextOrJson.text,
) -> None:
    """Check entries against every rule of the format: one line per failure, with field, rule id and fix."""
    results: list[FileResult] = []
    try:
        paths = _validate_paths(files)
    except AuditUsageError as exc:
        raise _usage(str(exc)) from exc
    for path in paths:
        try:
            entry = read_entry(path, name=str(path))
        except EntryUnreadable as exc:
            results.append(FileResult(str(path), [], exc.reason))
            continue
        results.append(FileResult(str(path), validate(entry)))
    _emit(validate_json(results) if fmt is TextOrJson.json else validate_text(results))
    if any(r.error is not None for r in results):
        raise typer.Exit(2)
    if not all(r.valid for r in results):
        raise typer.Exit(1)


# --------------------------------------------------------------------------- audit


def _run_audit(directory: Path, text: str, scope: str | None, day: date, warn_within: int | None) -> AuditReport:
    files = entry_files(directory)
    if len(files) < PROGRESS_MIN_FILES:
        return audit_directory(directory, scope=scope, as_of=day, directory_text=text, warn_within_days=warn_within)
    with progress("Auditing entries", total=len(files)) as advance:
        return audit_directory(
            directory,
            scope=scope,
            as_of=day,
            directory_text=text,
            warn_within_days=warn_within,
            on_entry=lambda: advance(1),
        )


@app.command("audit")
def audit_cmd(
    directory: Annotated[
        str, typer.Argument(metavar="DIR", help="Directory of entries (every *.md under it, recursively).")
    ] = "memories",
    scope: ScopeOpt = None,
    as_of: AsOfOpt = None,
    now: NowOpt = None,
    fmt: Annotated[AuditFormat, typer.Option("--format", help="Output format.")] = AuditFormat.text,
    output: OutputOpt = None,
    warn_within: Annotated[
        int | None,
        typer.Option("--warn-within", min=0, metavar="DAYS", help="Warn of entries expiring or due within DAYS."),
    ] = None,
    graph: Annotated[GraphFormat | None, typer.Option("--graph", help="Draw the supersession chains.")] = None,
    explain_file: Annotated[
        str | None, typer.Option("--explain", metavar="FILE", help="Show each authorization criterion for FILE.")
    ] = None,
) -> None:
    """Report invalid, stale, unsourced, out-of-scope and superseded entries; list the "Action-authorizing review"."""
    if graph is not None and explain_file is not None:
        raise _usage("--graph and --explain cannot be combined")
    day = _audit_day(as_of, now)
    try:
        parse_context(scope)
        report = _run_audit(Path(directory), directory, scope, day, warn_within)
    except AuditUsageError as exc:
        raise _usage(str(exc)) from exc
    if explain_file is not None:
        _explain(report, explain_file, fmt, output)
        return
    if graph is not None:
        _emit(graph_dot(report) if graph is GraphFormat.dot else graph_mermaid(report), output)
    else:
        _emit(_render(report, fmt), output)
    if report.blocking:
        raise typer.Exit(1)


def _render(report: AuditReport, fmt: AuditFormat) -> str:
    if fmt is AuditFormat.json:
        return audit_json(report)
    if fmt is AuditFormat.markdown:
        return audit_markdown(report)
    if fmt is AuditFormat.sarif:
        return audit_sarif(report)
    return audit_text(report)


def _explain(report: AuditReport, file: str, fmt: AuditFormat, output: Path | None) -> None:
    name = file
    if name not in report.entries:
        matches = [n for n in report.entries if Path(n).name == Path(file).name]
        if len(matches) != 1:
            raise _usage(f"{file!r} is not an entry of {report.directory_text} (give its id, e.g. a/b.md)")
        name = matches[0]
    x = explain(report, name)
    _emit(explain_json(x, report) if fmt is AuditFormat.json else explain_text(x, report), output)
    if not x.eligible:
        raise typer.Exit(1)


# --------------------------------------------------------------------------- export / import


@app.command("export")
def export_cmd(
    directory: Annotated[
        Path, typer.Argument(metavar="DIR", help="Directory to write the entries to (created if missing).")
    ],
    scope: Annotated[
        str | None,
        typer.Option(
            "--scope",
            help="Scope key to export, e.g. account:local (default: the bound account's scope).",
            show_default=False,
            callback=_check_ledger_scope,
        ),
    ] = None,
    now: NowOpt = None,
    review_days: Annotated[
        int, typer.Option("--review-days", min=1, help="review-by for records without an expiry: today + DAYS.")
    ] = DEFAULT_REVIEW_DAYS,
    fmt: Annotated[TextOrJson, typer.Option("--format", help="Output format.")] = TextOrJson.text,
    database_url: DbUrl = None,
) -> None:
    """Write a scope's records (history included, erased bodies never) as entries, chains as superseded-by."""
    from worker.cli.ledger import cli_ledger

    with cli_ledger(database_url) as led:
        key = scope or led.scope_key
        total = len(led.records(key))
        with progress("Exporting records", total=total) as advance:
            result = export_scope(
                led, key, directory, now=now or datetime.now(UTC), review_days=review_days, on_record=lambda: advance(1)
            )
    _emit(_export_json(result) if fmt is TextOrJson.json else _export_text(result))


def _export_text(r: ExportResult) -> str:
    lines = [f"Exported {len(r.written)} record(s) of {r.scope_key} to {r.directory} ({len(r.skipped)} skipped)."]
    lines.extend(f"  skipped {s.name}: {s.reason}" for s in r.skipped)
    lines.extend(f"  removed {name}: an earlier export's file of a record forgotten since" for name in r.removed)
    return "\n".join(lines)


def _export_json(r: ExportResult) -> str:
    doc = {
        "directory": str(r.directory),
        "scope": r.scope_key,
        "written": r.written,
        "skipped": [{"record": s.name, "reason": s.reason} for s in r.skipped],
        "removed": r.removed,
    }
    return json.dumps(doc, indent=2, ensure_ascii=False)


@app.command("import")
def import_cmd(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="Directory of entries to import.")],
    scope: Annotated[
        str,
        typer.Option("--scope", metavar="global|project:REF", help="Trust context: import only entries trusted in it."),
    ],
    as_of: AsOfOpt = None,
    now: NowOpt = None,
    fmt: Annotated[TextOrJson, typer.Option("--format", help="Output format.")] = TextOrJson.text,
    database_url: DbUrl = None,
) -> None:
    """Propose the valid, current, in-scope entries into the account scope (never active; idempotent; no duplicates)."""
    day = _audit_day(as_of, now)
    try:
        parse_context(scope)
        files = entry_files(directory)
    except AuditUsageError as exc:
        raise _usage(str(exc)) from exc
    from worker.cli.ledger import cli_ledger

    with cli_ledger(database_url) as led, progress("Importing entries", total=len(files)) as advance:
        result = import_directory(led, directory, scope=scope, as_of=day, now=now, on_entry=lambda: advance(1))
    _emit(_import_json(result, day) if fmt is TextOrJson.json else _import_text(result, day))
    if result.refused:
        raise typer.Exit(1)


EXAMPLES = 3  # files named per line of the import summary; --format json names every one


def _files(names: list[str]) -> str:
    shown = ", ".join(names[:EXAMPLES])
    more = len(names) - EXAMPLES
    return f"({shown}{f' and {more:,} more' if more > 0 else ''})"


def _reason_key(outcome: str, reason: str) -> str:
    """What entries are counted together by: a refusal's reason code, a duplicate's state, a skip's reasons."""
    if outcome == "refused":
        return reason.split(":", 1)[0]
    if outcome == "duplicate":
        return reason.split(" in ", 1)[0]
    return reason


def _import_text(r: ImportResult, day: date) -> str:
    """One line per outcome and reason, with its count and a few of its files (10,000 entries read in a screen)."""
    lines = [f"Import of {r.directory} (trust context {r.scope}) into {r.scope_key} as of {day.isoformat()}:"]
    groups: dict[tuple[str, str], tuple[str, list[str]]] = {}
    for item in r.imported:
        outcome = "already" if item.already else "proposed"
        label = "imported earlier" if item.already else "waiting for accept or reject"
        groups.setdefault((outcome, ""), (label, []))[1].append(item.name)
    for outcome, skips in (("duplicate", r.duplicates), ("refused", r.refused), ("skipped", r.not_eligible)):
        for skip in skips:
            groups.setdefault((outcome, _reason_key(outcome, skip.reason)), (skip.reason, []))[1].append(skip.name)
    width = max((len(f"{len(names):,}") for _, names in groups.values()), default=1)
    for (outcome, _key), (reason, names) in groups.items():
        lines.append(f"  {outcome:<9} {len(names):>{width},}  {reason}  {_files(names)}")
    new = sum(not i.already for i in r.imported)
    lines.append(
        f"{new} proposed, {len(r.imported) - new} already imported, {len(r.duplicates)} duplicate(s) skipped, "
        f"{len(r.refused)} refused, {len(r.not_eligible)} not eligible. "
        "Proposals wait for `memledger accept ID` or `memledger reject ID` (`memledger proposals` lists them); "
        "--format json names every file."
    )
    return "\n".join(lines)


def _import_json(r: ImportResult, day: date) -> str:
    doc = {
        "directory": str(r.directory),
        "scope": r.scope,
        "into": r.scope_key,
        "asOf": day.isoformat(),
        "imported": [{"file": i.name, "record": i.record_id, "already": i.already} for i in r.imported],
        "duplicates": [{"file": s.name, "reason": s.reason} for s in r.duplicates],
        "refused": [{"file": s.name, "reason": s.reason} for s in r.refused],
        "notEligible": [{"file": s.name, "reason": s.reason} for s in r.not_eligible],
    }
    return json.dumps(doc, indent=2, ensure_ascii=False)


def register(root: typer.Typer) -> None:
    """Attach the ``files`` group to the top-level app."""
    root.add_typer(
        app, name="files", help="Memory entries kept as markdown files: new, schema, validate, audit, export, import."
    )
