"""Auditing a directory of entries for one project: findings, and candidates to consider.

For every ``*.md`` file of the directory (not recursive; ``README.md`` and dot
files are skipped) the audit reports, with the rule ids of SPEC 9:

* ``invalid`` / ``missing-source`` — every validation problem (see :mod:`ledger.files.entry`);
* ``out-of-scope`` — a project entry whose ``scope.reference`` is not exactly the audited one
  (a global entry is in every project's scope);
* ``expired`` / ``review-overdue`` — a *live* entry (no ``superseded-by``) whose horizon is at
  or before ``now``; a superseded entry's horizon no longer matters;
* ``chain-missing-target`` — on the entry whose ``superseded-by`` names an absent file;
* ``chain-cycle`` — on every member of a loop of ``superseded-by`` links.

A candidate is a chain head (no ``superseded-by``) with ``may-this-authorize-action:
true`` and no finding of its own: valid (so it meets every authorization criterion),
in scope, current. Findings on other entries, including its predecessors, do not
hide it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from ledger.files.chains import Chains, resolve_chains
from ledger.files.entry import EntryUnreadable, read_entry, validate
from ledger.files.model import (
    CHAIN_CYCLE,
    CHAIN_MISSING_TARGET,
    EXPIRED,
    EXPIRES_SOON,
    INVALID,
    OUT_OF_SCOPE,
    REVIEW_DUE_SOON,
    REVIEW_OVERDUE,
    Entry,
    Problem,
    ScopeLevel,
    When,
)

PROJECT_PREFIX = "project:"


class AuditUsageError(ValueError):
    """The audit was asked something it cannot do (bad scope, not a directory)."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One reason an entry is rejected. ``check`` is the validation sub-rule, when there is one."""

    file: str
    rule: str
    message: str
    hint: str
    line: int
    field: str
    check: str | None = None


@dataclass(frozen=True, slots=True)
class Notice:
    """A ``--warn-within`` warning: a live entry whose horizon comes soon."""

    file: str
    kind: str
    message: str
    line: int
    due: When


@dataclass(frozen=True, slots=True)
class Candidate:
    """A chain head eligible to *consider* for authorizing an action (never standing permission)."""

    entry: Entry
    predecessors: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class AuditReport:
    directory: Path
    scope_reference: str
    now: datetime
    entries: dict[str, Entry]
    findings: list[Finding]
    candidates: list[Candidate]
    notices: list[Notice]
    chains: Chains

    @property
    def scope(self) -> str:
        return PROJECT_PREFIX + self.scope_reference

    def findings_for(self, name: str) -> list[Finding]:
        return [f for f in self.findings if f.file == name]


def parse_project_scope(scope: str) -> str:
    """The REF of ``project:REF``. Raises :class:`AuditUsageError` for anything else."""
    if not scope.startswith(PROJECT_PREFIX) or not scope[len(PROJECT_PREFIX) :].strip():
        raise AuditUsageError(f"--scope must be project:REF (e.g. project:acme/widgets), not {scope!r}")
    ref = scope[len(PROJECT_PREFIX) :]
    if ref != ref.strip():
        raise AuditUsageError(f"--scope {scope!r} has spaces around the project reference")
    return ref


def entry_files(directory: Path) -> list[Path]:
    """The entry files of ``directory``, sorted by name. Raises :class:`AuditUsageError` if it is not one."""
    if not directory.is_dir():
        raise AuditUsageError(f"{directory} is not a directory")
    return sorted(
        (p for p in directory.iterdir() if _is_entry_name(p.name) and not p.is_dir()),
        key=lambda p: p.name,
    )


def _is_entry_name(name: str) -> bool:
    return name.endswith(".md") and not name.startswith(".") and name.lower() != "readme.md"


def load_entries(files: Iterable[Path], *, on_entry: Callable[[], None] | None = None) -> dict[str, Entry]:
    """Parse every file; an unreadable one becomes an entry with an ``unreadable`` problem."""
    entries: dict[str, Entry] = {}
    for path in files:
        try:
            entries[path.name] = read_entry(path)
        except EntryUnreadable as exc:
            entries[path.name] = _unreadable(path, exc.reason)
        if on_entry is not None:
            on_entry()
    return entries


def _unreadable(path: Path, reason: str) -> Entry:
    msg = f"cannot read the file: {reason}"
    problem = Problem(path.name, "file", "unreadable", INVALID, msg, "check that the file is readable", 1)
    return Entry(path.name, path, "", False, problems=(problem,))


def audit_directory(
    directory: Path,
    *,
    scope: str,
    now: datetime,
    warn_within_days: int | None = None,
    on_entry: Callable[[], None] | None = None,
) -> AuditReport:
    """Audit every entry of ``directory`` for ``scope`` (``project:REF``) as of ``now``.

    Raises :class:`AuditUsageError` for a bad scope or a path that is not a directory.
    """
    ref = parse_project_scope(scope)
    entries = load_entries(entry_files(directory), on_entry=on_entry)
    return audit_entries(entries, directory=directory, scope_reference=ref, now=now, warn_within_days=warn_within_days)


def audit_entries(
    entries: dict[str, Entry],
    *,
    directory: Path,
    scope_reference: str,
    now: datetime,
    warn_within_days: int | None = None,
) -> AuditReport:
    """Audit already parsed ``entries`` (name → entry); see :func:`audit_directory`."""
    links = {name: e.superseded_by for name, e in entries.items() if e.superseded_by is not None}
    chains = resolve_chains(entries, links)
    findings: list[Finding] = []
    notices: list[Notice] = []
    for entry in entries.values():
        findings.extend(_entry_findings(entry, scope_reference, now))
        findings.extend(_chain_findings(entry, chains))
        if warn_within_days is not None and entry.superseded_by is None:
            notices.extend(_notices(entry, now, now + timedelta(days=warn_within_days)))
    findings.sort(key=lambda f: (f.file, f.line))
    flagged = {f.file for f in findings}
    candidates = [
        Candidate(e, tuple(chains.predecessors(name)))
        for name, e in entries.items()
        if e.trusted and e.authorize and e.superseded_by is None and name not in flagged
    ]
    return AuditReport(directory, scope_reference, now, entries, findings, candidates, notices, chains)


def _entry_findings(entry: Entry, ref: str, now: datetime) -> list[Finding]:
    found = [Finding(p.file, p.rule, p.message, p.hint, p.line, p.field, p.check) for p in validate(entry, now=now)]
    if entry.scope_level is ScopeLevel.PROJECT and entry.scope_reference not in (None, ref):
        found.append(
            Finding(
                entry.name,
                OUT_OF_SCOPE,
                f"scoped to project {entry.scope_reference!r}, not the audited {ref!r}",
                f"audit it with --scope project:{entry.scope_reference}, or keep it with that project's entries",
                entry.line_of("scope.reference"),
                "scope.reference",
            )
        )
    if entry.superseded_by is None:
        if entry.expires is not None and entry.expires.instant <= now:
            found.append(
                Finding(
                    entry.name,
                    EXPIRED,
                    f"expired at {entry.expires}",
                    "confirm the fact and write a new entry that supersedes this one, or delete it",
                    entry.line_of("expires"),
                    "expires",
                )
            )
        if entry.review_by is not None and entry.review_by.instant <= now:
            found.append(
                Finding(
                    entry.name,
                    REVIEW_OVERDUE,
                    f"review was due by {entry.review_by}",
                    "re-read the source, then move review-by forward or supersede the entry",
                    entry.line_of("review-by"),
                    "review-by",
                )
            )
    return found


def _chain_findings(entry: Entry, chains: Chains) -> list[Finding]:
    name = entry.name
    line = entry.line_of("superseded-by")
    if name in chains.missing:
        target = chains.missing[name]
        return [
            Finding(
                name,
                CHAIN_MISSING_TARGET,
                f"superseded-by names {target!r}, which is not in this directory",
                "restore the replacing entry, or correct the file name",
                line,
                "superseded-by",
            )
        ]
    if name in chains.cycle_of:
        cycle = chains.cycle_of[name]
        loop = " → ".join((*cycle, cycle[0]))
        return [
            Finding(
                name,
                CHAIN_CYCLE,
                f"the superseded-by chain loops: {loop}",
                "remove superseded-by from the entry that is really the newest",
                line,
                "superseded-by",
            )
        ]
    return []


def _notices(entry: Entry, now: datetime, until: datetime) -> list[Notice]:
    out: list[Notice] = []
    if entry.expires is not None and now < entry.expires.instant <= until:
        line = entry.line_of("expires")
        out.append(Notice(entry.name, EXPIRES_SOON, f"expires at {entry.expires}", line, entry.expires))
    if entry.review_by is not None and now < entry.review_by.instant <= until:
        line = entry.line_of("review-by")
        out.append(Notice(entry.name, REVIEW_DUE_SOON, f"review due by {entry.review_by}", line, entry.review_by))
    return out
