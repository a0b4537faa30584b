"""Export a ledger scope as entry files, and import entry files as proposals.

Export writes one ``<record id>.md`` per record that ever applied (active,
superseded, expired) and still has its body: erased bodies are never written,
proposals and rejected proposals are not memories and are skipped. Provenance
maps to ``source.kind`` by :data:`SOURCE_KIND_OF`; a supersession becomes
``superseded-by: <successor id>.md``. Every written entry is parsed and validated
before it is written, so export only ever writes valid entries.

Import audits the directory for ``project:REF`` and proposes, into the ledger's
bound account scope, every chain head with no finding (valid, in scope, current).
It never saves an active record. Each proposal carries ``source_session_id``
``file:<name>#<first 16 hex of the sha256 of its fact>``; an entry whose key is already
on any record of the scope (in any status, rejected included) is skipped, so
importing the same directory twice adds nothing.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from ledger.core import Ledger
from ledger.errors import BudgetExceeded, LedgerError
from ledger.files.audit import Finding, audit_directory
from ledger.files.dates import format_instant
from ledger.files.entry import parse_entry, validate
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


def record_reference(record: MemoryRecord) -> str:
    """The source reference an exported entry carries: where to re-read the record."""
    return f"memledger:{record.scope_key}/{record.id}"


def entry_text(record: MemoryRecord, *, successor: str | None, now: datetime, review_days: int) -> str:
    """The entry file for ``record`` (whose body must not be erased)."""
    if record.body is None:
        raise ValueError(f"record {record.id} has no body to export")
    conf = record.confidence_bps / 10_000 if record.confidence_bps is not None else None
    if conf is None:
        conf = 1.0 if record.provenance == Provenance.USER_EXPLICIT else 0.5
    if record.expires_at is not None:
        horizon = f"expires: {json.dumps(format_instant(record.expires_at))}"
    else:
        horizon = f"review-by: {(now + timedelta(days=review_days)).date().isoformat()}"
    lines = [
        "---",
        "source:",
        f"  kind: {SOURCE_KIND_OF[record.provenance]}",
        f"  reference: {json.dumps(record_reference(record))}",
        "scope:",
        "  level: global",
        f"confidence: {conf:g}",
        f"created: {json.dumps(format_instant(record.created_at))}",
        horizon,
        *([f"superseded-by: {json.dumps(successor + '.md')}"] if successor else []),
        "may-this-authorize-action: false",
        "---",
        # A blank line inside a body reads as a second paragraph: fold it into one line break.
        re.sub(r"\n[ \t]*(?:\n[ \t]*)+", "\n", record.body.strip()),
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

    Existing files of the same name are overwritten; other files are left alone.
    Raises :class:`~ledger.errors.LedgerError` (bad scope) and :class:`OSError` (cannot write).
    """
    result = ExportResult(directory, scope_key)
    texts: dict[str, str] = {}
    # Newest first, so a successor is decided before its predecessors.
    for record in reversed(led.records(scope_key)):
        reason = _export_refusal(record, texts)
        if reason is None:
            successor = record.superseded_by if record.status == Status.SUPERSEDED else None
            text = entry_text(record, successor=successor, now=now, review_days=review_days)
            reason = _invalid_reason(text, record.id, now)
            if reason is None:
                texts[record.id] = text
        if reason is not None:
            result.skipped.append(Skipped(record.id, reason))
        if on_record is not None:
            on_record()
    directory.mkdir(parents=True, exist_ok=True)
    for record_id in sorted(texts):
        (directory / f"{record_id}.md").write_text(texts[record_id], encoding="utf-8")
        result.written.append(f"{record_id}.md")
    result.skipped.reverse()
    return result


def _export_refusal(record: MemoryRecord, exported: dict[str, str]) -> str | None:
    if record.erased or record.body is None:
        return "its body was erased"
    if record.status not in _EXPORTED_STATUSES or record.valid_to == record.valid_from:
        what = "a pending proposal" if record.status == Status.PROPOSED else f"a {record.status} proposal"
        return f"{what}: it never applied"
    if record.status == Status.SUPERSEDED and record.superseded_by not in exported:
        return f"its successor {record.superseded_by} is not exported"
    return None


def _invalid_reason(text: str, record_id: str, now: datetime) -> str | None:
    problems = validate(parse_entry(text.encode("utf-8"), name=f"{record_id}.md"), now=now)
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


def import_key(name: str, fact: str) -> str:
    """The ``source_session_id`` that marks a proposal as imported: the file name and its fact's digest.

    The digest covers the fact only, so a re-export that moves ``review-by`` forward
    does not make the same fact importable again; an edited fact is a new proposal.
    """
    digest = hashlib.sha256(fact.encode("utf-8")).hexdigest()[:16]
    key = f"file:{name}#{digest}"
    if len(key) > _SESSION_KEY_LIMIT:
        key = f"file:sha256:{hashlib.sha256(name.encode()).hexdigest()[:32]}#{digest}"
    return key


def import_directory(
    led: Ledger,
    directory: Path,
    *,
    scope: str,
    now: datetime,
    on_entry: Callable[[], None] | None = None,
) -> ImportResult:
    """Propose every valid, in-scope, current chain head of ``directory`` into the ledger's account scope.

    Refusals by the ledger (budget, screening) are reported per entry; the scope is
    never changed by a refused entry. Idempotent: see the module docstring.
    Raises :class:`~ledger.files.audit.AuditUsageError` for a bad scope or directory.
    """
    report = audit_directory(directory, scope=scope, now=now, on_entry=on_entry)
    result = ImportResult(directory, report.scope, led.scope_key)
    known = {r.source_session_id: r.id for r in led.records(led.scope_key) if r.source_session_id}
    for name, entry in report.entries.items():
        reasons = _not_eligible(report.findings_for(name), entry.superseded_by)
        if reasons:
            result.not_eligible.append(Skipped(name, reasons))
            continue
        key = import_key(name, entry.body)
        if key in known:
            result.imported.append(Imported(name, known[key], already=True))
            continue
        outcome = _propose(led, entry, key, now)
        if isinstance(outcome, Skipped):
            result.refused.append(outcome)
        else:
            known[key] = outcome.record_id
            result.imported.append(outcome)
    return result


def _propose(led: Ledger, entry: Entry, key: str, now: datetime) -> Imported | Skipped:
    """Propose one eligible entry; a refusal by the ledger comes back as :class:`Skipped` with its reason."""
    conf = entry.confidence if entry.confidence is not None else 0.0
    scope = f"{entry.scope_level} {entry.scope_reference or ''}".rstrip()
    rationale = f"Imported from {entry.name} ({entry.source_kind} source: {entry.source_reference}; scope {scope})"
    try:
        record = led.propose(
            entry.body,
            confidence_bps=round(conf * 10_000),
            rationale=rationale[:2000],
            source_session_id=key,
            expires_at=entry.expires.instant if entry.expires else None,
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
