"""Export a ledger scope as entry files, and import entry files as proposals.

Both use the entry format of the reference memory-ledger tool (docs/file-ledger.md) and the
ledger's public API only (``records``, ``list``, ``proposals``, ``propose``).

Export writes one ``<record id>.md`` per record that ever applied (active,
superseded, expired) and still has its body: erased bodies are never written, and the
file an earlier export wrote for a record forgotten since is removed (the file whose
``source.reference`` names that record); proposals and rejected proposals are not
memories and are skipped. ``fact`` is the
record's body; provenance maps to ``source.kind`` by :data:`SOURCE_KIND_OF`; a
supersession becomes ``superseded-by: <successor id>.md``; ``expires_at`` becomes
``expires``, the last day the record holds (``expires_at`` = that day + 1 at 00:00
UTC). Every written entry is parsed and validated before it is written, so export
only ever writes valid entries.

Import audits the directory in a trust context and proposes, into the ledger's
bound account scope, every valid entry that is current, in the context and not
superseded (``expires: D`` → ``expires_at`` = D + 1 day, 00:00 UTC). It never saves
an active record. Each proposal carries ``source_session_id``
``file:<name>#<first 16 hex of the sha256 of its fact>``; an entry whose key is already
on any record of the scope (in any status, rejected included) is skipped, so
importing the same directory twice adds nothing (forgetting a record erases its key with
its body, so its file is proposed again); so is an entry whose fact is
already active or proposed in the scope (export then import proposes no duplicate).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from ledger.core import Ledger
from ledger.erasure import IMPORT_KEY_PREFIX
from ledger.errors import BudgetExceeded, EntryUnreadable, LedgerError
from ledger.files.audit import Finding, audit_directory
from ledger.files.dates import expires_at_of, expires_day_of, format_instant
from ledger.files.entry import parse_entry, read_entry, validate, write_no_follow
from ledger.files.model import Entry, SourceKind
from ledger.models import MemoryRecord, Provenance, Status

SOURCE_KIND_OF: dict[Provenance, SourceKind] = {
    Provenance.USER_EXPLICIT: SourceKind.USER_SAID,
    Provenance.MODEL_PROPOSAL: SourceKind.INFERRED,
    Provenance.MODEL_CONSOLIDATION: SourceKind.INFERRED,
}
DEFAULT_REVIEW_DAYS = 90
_EXPORTED_STATUSES = frozenset({Status.ACTIVE, Status.SUPERSEDED, Status.EXPIRED})
_SESSION_KEY_LIMIT = 200


# --------------------------------------------------------------------------- export


@dataclass(frozen=True, slots=True)
class Skipped:
    """A record or entry left out, and why."""

    name: str
    reason: str


@dataclass(slots=True)
class ExportResult:
    directory: Path
    scope_key: str
    written: list[str] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    # Files an earlier export wrote for records whose body has been erased since.
    removed: list[str] = field(default_factory=list)


def record_reference(record: MemoryRecord) -> str:
    """The source reference an exported entry carries: where to re-read the record."""
    return f"memledger:{record.scope_key}/{record.id}"


def yaml_string(text: str) -> str:
    """``text`` as a one-line YAML double-quoted scalar (also what the reference tool's parser reads: JSON)."""
    quoted = json.dumps(text, ensure_ascii=False)
    # Line and paragraph separators and the BOM are line breaks or refused inside YAML quotes: escape them.
    return quoted.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029").replace("\ufeff", "\\ufeff")


def entry_text(record: MemoryRecord, *, successor: str | None, now: datetime, review_days: int) -> str:
    """The entry file for ``record`` (whose body must not be erased), in the reference tool's format.

    ``fact`` is the record's body; ``expires`` is the last day the record holds
    (:func:`~ledger.files.dates.expires_day_of`, never before ``created``); a record
    without an expiry gets ``review-by`` = the export day + ``review_days``.
    """
    if record.body is None:
        raise ValueError(f"record {record.id} has no body to export")
    conf = record.confidence_bps / 10_000 if record.confidence_bps is not None else None
    if conf is None:
        conf = 1.0 if record.provenance == Provenance.USER_EXPLICIT else 0.5
    created = record.created_at.astimezone(UTC).date()
    if record.expires_at is not None:
        horizon = f"expires: {yaml_string(max(created, expires_day_of(record.expires_at)).isoformat())}"
    else:
        review = max(created, (now.astimezone(UTC) + timedelta(days=review_days)).date())
        horizon = f"review-by: {yaml_string(review.isoformat())}"
    until = "now" if record.valid_to is None else format_instant(record.valid_to)
    lines = [
        "---",
        f"fact: {yaml_string(record.body.strip())}",
        "source:",
        f"  kind: {SOURCE_KIND_OF[record.provenance]}",
        f"  reference: {yaml_string(record_reference(record))}",
        "scope:",
        "  level: global",
        f"confidence: {conf:g}",
        f"created: {yaml_string(created.isoformat())}",
        horizon,
        f"superseded-by: {yaml_string(successor + '.md') if successor else 'null'}",
        "may-this-authorize-action: false",
        "---",
        "",
        f"Exported from memledger record `{record.id}` ({record.status}, {record.kind}), "
        f"valid from {format_instant(record.valid_from)} to {until}"
        + (f"; expires_at {format_instant(record.expires_at)}." if record.expires_at is not None else "."),
        "",
    ]
    return "\n".join(lines)


def export_scope(
    led: Ledger,
    scope_key: str,
    directory: Path,
    *,
    now: datetime,
    review_days: int = DEFAULT_REVIEW_DAYS,
    on_record: Callable[[], None] | None = None,
) -> ExportResult:
    """Write the records of ``scope_key`` that ever applied, with their history, as entries in ``directory``.

    Existing files of the same name are overwritten; other files are left alone, except the file an
    earlier export wrote for a record whose body has been erased since (named ``<id>.md`` and whose
    ``source.reference`` names that record), which is removed: a forgotten body leaves the export too. A
    symbolic link where a file would go is never written through (nor replaced, nor removed): that record
    is skipped with the reason. Raises :class:`~ledger.errors.LedgerError` (bad scope) and
    :class:`OSError` (cannot write).
    """
    result = ExportResult(directory, scope_key)
    texts: dict[str, str] = {}
    records = led.records(scope_key)
    # Newest first, so a successor is decided before its predecessors.
    for record in reversed(records):
        reason = _export_refusal(record, texts)
        if reason is None:
            successor = record.superseded_by if record.status == Status.SUPERSEDED else None
            text = entry_text(record, successor=successor, now=now, review_days=review_days)
            reason = _invalid_reason(text, record.id)
            if reason is None:
                texts[record.id] = text
        if reason is not None:
            result.skipped.append(Skipped(record.id, reason))
        if on_record is not None:
            on_record()
    directory.mkdir(parents=True, exist_ok=True)
    in_the_way: list[Skipped] = []
    for record_id in sorted(texts):
        if write_no_follow(directory / f"{record_id}.md", texts[record_id]):
            result.written.append(f"{record_id}.md")
        else:
            in_the_way.append(Skipped(record_id, f"{record_id}.md is a symbolic link: not written through"))
    result.skipped.reverse()
    result.skipped.extend(in_the_way)
    result.removed = _remove_erased(directory, [r for r in records if r.erased or r.body is None])
    return result


def _remove_erased(directory: Path, erased: Sequence[MemoryRecord]) -> list[str]:
    """Remove the files an earlier export wrote for the ``erased`` records; their names. A link is never removed
    (its entry names no record), nor a file another tool wrote under such a name."""
    removed = []
    for record in erased:
        path = directory / f"{record.id}.md"
        try:
            found = read_entry(path)
        except EntryUnreadable:
            continue  # no such file (or not a regular one): nothing an export wrote
        if found.source_reference == record_reference(record):
            path.unlink()
            removed.append(path.name)
    return removed


def _export_refusal(record: MemoryRecord, exported: dict[str, str]) -> str | None:
    if record.erased or record.body is None:
        return "its body was erased"
    if record.status not in _EXPORTED_STATUSES or record.valid_to == record.valid_from:
        what = "a pending proposal" if record.status == Status.PROPOSED else f"a {record.status} proposal"
        return f"{what}: it never applied"
    if record.status == Status.SUPERSEDED and record.superseded_by not in exported:
        return f"its successor {record.superseded_by} is not exported"
    return None


def _invalid_reason(text: str, record_id: str) -> str | None:
    problems = validate(parse_entry(text.encode("utf-8"), name=f"{record_id}.md"))
    if not problems:
        return None
    return "cannot be written as a valid entry: " + "; ".join(f"{p.check}: {p.message}" for p in problems)


# --------------------------------------------------------------------------- import


@dataclass(frozen=True, slots=True)
class Imported:
    """An entry brought in as a proposal (``already`` when an earlier import brought it)."""

    name: str
    record_id: str
    already: bool = False


@dataclass(slots=True)
class ImportResult:
    directory: Path
    scope: str
    scope_key: str
    imported: list[Imported] = field(default_factory=list)
    not_eligible: list[Skipped] = field(default_factory=list)
    refused: list[Skipped] = field(default_factory=list)
    duplicates: list[Skipped] = field(default_factory=list)


def import_key(name: str, fact: str) -> str:
    """The ``source_session_id`` that marks a proposal as imported: the file name and its fact's digest.

    The digest covers the fact only, so a re-export that moves ``review-by`` forward
    does not make the same fact importable again; an edited fact is a new proposal.
    """
    digest = hashlib.sha256(fact.encode("utf-8")).hexdigest()[:16]
    key = f"{IMPORT_KEY_PREFIX}{name}#{digest}"
    if len(key) > _SESSION_KEY_LIMIT:
        key = f"{IMPORT_KEY_PREFIX}sha256:{hashlib.sha256(name.encode()).hexdigest()[:32]}#{digest}"
    return key


def normalized_fact(text: str) -> str:
    """The form in which two facts are the same: case-folded, whitespace collapsed."""
    return " ".join(text.split()).casefold()


def import_directory(
    led: Ledger,
    directory: Path,
    *,
    scope: str | None,
    as_of: date,
    now: datetime | None = None,
    on_entry: Callable[[], None] | None = None,
) -> ImportResult:
    """Propose every valid, current, in-scope, unsuperseded entry of ``directory`` into the ledger's account scope.

    The audit runs in trust context ``scope`` as of ``as_of``; proposals are written at
    ``now`` (default: the ledger's clock). An entry whose fact is already active or
    already proposed in the scope (compared case- and whitespace-insensitively) is
    skipped as a duplicate. Refusals by the ledger (budget, screening) are reported
    per entry; a refused entry changes nothing. Idempotent: see the module docstring.
    Raises :class:`~ledger.files.audit.AuditUsageError` for a bad scope or directory.
    """
    report = audit_directory(directory, scope=scope, as_of=as_of, on_entry=on_entry)
    result = ImportResult(directory, report.scope, led.scope_key)
    key_scope = led.scope_key
    known = {r.source_session_id: r.id for r in led.records(key_scope) if r.source_session_id}
    held = {normalized_fact(r.body or ""): ("active", r.id) for r in led.list(key_scope, now=now)}
    for r in led.proposals(key_scope, now=now):
        held.setdefault(normalized_fact(r.body or ""), ("proposed", r.id))
    by_file: dict[str, list[Finding]] = {}
    for f in report.findings:
        by_file.setdefault(f.file, []).append(f)
    for name, entry in report.entries.items():
        reasons = _not_eligible(by_file.get(name, []), entry.superseded_by)
        if reasons or entry.fact is None:
            result.not_eligible.append(Skipped(name, reasons or "no fact"))
            continue
        key = import_key(name, entry.fact)
        if key in known:
            result.imported.append(Imported(name, known[key], already=True))
            continue
        same = held.get(normalized_fact(entry.fact))
        if same is not None:
            result.duplicates.append(Skipped(name, f"the same fact is already {same[0]} in {key_scope} as {same[1]}"))
            continue
        outcome = _propose(led, entry, key, now)
        if isinstance(outcome, Skipped):
            result.refused.append(outcome)
        else:
            known[key] = outcome.record_id
            held[normalized_fact(entry.fact)] = ("proposed", outcome.record_id)
            result.imported.append(outcome)
    return result


def _propose(led: Ledger, entry: Entry, key: str, now: datetime | None) -> Imported | Skipped:
    """Propose one eligible entry; a refusal by the ledger comes back as :class:`Skipped` with its reason."""
    conf = entry.confidence if entry.confidence is not None else 0.0
    scope = f"{entry.scope_level} {entry.scope_reference or ''}".rstrip()
    rationale = f"Imported from {entry.name} ({entry.source_kind} source: {entry.source_reference}; scope {scope})"
    try:
        record = led.propose(
            entry.fact or "",
            confidence_bps=round(conf * 10_000),
            rationale=rationale[:2000],
            source_session_id=key,
            expires_at=expires_at_of(entry.expires.day) if entry.expires else None,
            now=now,
        )
    except BudgetExceeded as exc:
        return Skipped(entry.name, f"budget: {exc.message}")
    except LedgerError as exc:
        return Skipped(entry.name, f"{exc.reason}: {exc.message}")
    return Imported(entry.name, record.id)


def _not_eligible(findings: Sequence[Finding], superseded_by: str | None) -> str:
    first: dict[str, str] = {}
    for f in findings:
        first.setdefault(f.rule, f"{f.rule}: {f.message}")
    if first:
        return "; ".join(first.values())
    if superseded_by is not None:
        return f"superseded by {superseded_by}"
    return ""
