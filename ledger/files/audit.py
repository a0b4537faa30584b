"""Auditing a directory of entries in a trust context, as the reference memory-ledger tool does.

Every ``*.md`` file under the directory is an entry (recursively, sorted level by
level by name; an entry's id is its path relative to the directory, ``/``
separated). The trust context is ``global`` (only global entries are trusted),
``project:REF`` (global entries and project entries whose ``scope.reference`` is
exactly REF) or None (structural checks only: every valid entry is in scope).

The audit sorts entries into the reference's lists (docs/file-ledger.md):

* *invalid*: entries with a validation problem; *missing sources*: those whose problems
  concern ``source``; *scope violations*: invalid entries with a scope problem, then
  valid entries outside the trust context;
* *expired* / *review overdue*: valid entries whose ``expires`` / ``review-by`` day is
  before the audit date (on the day itself an entry still holds);
* *chains*: see :mod:`ledger.files.chains`; each broken chain once;
* *candidates* ("Action-authorizing review"): valid entries with
  ``may-this-authorize-action: true`` that are not expired, overdue, out of scope or
  superseded. A finding elsewhere never hides a sound candidate.

Each listing is also a :class:`Finding` with a public rule id (:mod:`ledger.files.model`), for JSON and SARIF.
Anything in those lists blocks (the audit's exit status is 1).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path

from ledger.errors import AuditUsageError, EntryUnreadable
from ledger.files.chains import CYCLE, Chain, Chains, resolve_chains
from ledger.files.dates import midnight
from ledger.files.entry import read_entry
from ledger.files.model import (
    CHAIN_CYCLE,
    CHAIN_MISSING_TARGET,
    EXPIRED,
    EXPIRES_SOON,
    INVALID,
    MISSING_SOURCE,
    OUT_OF_SCOPE,
    REVIEW_DUE_SOON,
    REVIEW_OVERDUE,
    Entry,
    Problem,
    ScopeLevel,
    When,
)

PROJECT_PREFIX = "project:"
GLOBAL = "global"
NO_CONTEXT = "not supplied (structural scope checks only)"
SCOPE_INVALID = "scope declaration is invalid"
GLOBAL_CONTEXT_REFUSES_PROJECT = "project-scoped entry cannot be trusted in global context"


@dataclass(frozen=True, slots=True)
class Finding:
    """One reason an entry blocks. ``check`` is the validation sub-rule, when there is one."""

    file: str
    rule: str
    message: str
    hint: str
    line: int
    field: str
    check: str | None = None


@dataclass(frozen=True, slots=True)
class Notice:
    """A ``--warn-within`` warning: a current entry whose horizon comes soon."""

    file: str
    kind: str
    message: str
    line: int
    due: When


@dataclass(frozen=True, slots=True)
class Candidate:
    """An entry eligible to *consider* for authorizing an action (never standing permission)."""

    entry: Entry
    predecessors: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Listed:
    """An entry id in one of the report's lists, with the date or reason shown beside it."""

    id: str
    detail: str


@dataclass(frozen=True, slots=True)
class AuditReport:
    """The audit of one directory: the reference's lists, the findings, and the candidates."""

    directory: Path
    directory_text: str
    context: str | None
    as_of: date
    entries: dict[str, Entry]
    invalid: list[str]
    missing_sources: list[str]
    expired: list[Listed]
    overdue: list[Listed]
    scope_violations: list[Listed]
    chains: Chains
    findings: list[Finding]
    candidates: list[Candidate]
    notices: list[Notice]

    @property
    def now(self) -> datetime:
        """00:00 UTC of the audit date."""
        return midnight(self.as_of)

    @property
    def scope(self) -> str:
        """The trust context as text: ``global``, ``project:REF`` or ``none``."""
        return self.context or "none"

    @property
    def scope_reference(self) -> str | None:
        """REF of a ``project:REF`` context."""
        if self.context is not None and self.context.startswith(PROJECT_PREFIX):
            return self.context[len(PROJECT_PREFIX) :]
        return None

    @property
    def superseded(self) -> tuple[str, ...]:
        return self.chains.superseded

    @property
    def broken_chains(self) -> tuple[Chain, ...]:
        return self.chains.broken

    @property
    def blocking(self) -> bool:
        """True when anything blocks: an invalid, expired, overdue, missing-source or out-of-scope entry, or a
        broken chain."""
        return bool(self.findings)

    def findings_for(self, name: str) -> list[Finding]:
        return [f for f in self.findings if f.file == name]


def parse_context(scope: str | None) -> str | None:
    """Check ``--scope``: None, ``global`` or ``project:REF``. Raises :class:`AuditUsageError` otherwise."""
    if scope is None or scope == GLOBAL:
        return scope
    if not scope.startswith(PROJECT_PREFIX):
        raise AuditUsageError(f"--scope must be `global` or `project:REF` (e.g. project:acme/widgets), not {scope!r}")
    ref = scope[len(PROJECT_PREFIX) :]
    if not ref.strip():
        raise AuditUsageError("--scope project reference cannot be empty: give project:REF")
    if ref != ref.strip():
        raise AuditUsageError(f"--scope {scope!r} has spaces around the project reference")
    return scope


def entry_files(directory: Path) -> list[Path]:
    """Every ``*.md`` file and every symbolic link under ``directory``, recursively, sorted by name at each level.

    Nothing under ``directory`` is followed through a symbolic link: a link (to a file,
    a directory, or nothing) is listed as it is, and :func:`~ledger.files.entry.read_entry`
    makes it an invalid entry without opening its target. ``directory`` itself may be a
    link (the caller named it). Raises :class:`AuditUsageError` when ``directory`` is not
    a directory.
    """
    if not directory.is_dir():
        raise AuditUsageError(f"{directory} is not a directory")
    out: list[Path] = []
    _collect(directory, out)
    return out


def _collect(directory: Path, out: list[Path]) -> None:
    try:
        children = sorted(os.scandir(directory), key=lambda d: d.name)
    except OSError as exc:
        raise AuditUsageError(f"cannot read the directory {directory}: {exc.strerror or exc}") from exc
    for child in children:
        path = directory / child.name
        if child.is_symlink():
            out.append(path)  # whatever it points to: reported, never followed
        elif child.is_dir(follow_symlinks=False):
            _collect(path, out)
        elif child.name.endswith(".md") and child.is_file(follow_symlinks=False):
            out.append(path)


def entry_id(root: Path, path: Path) -> str:
    """The id of the entry at ``path``: its path relative to ``root``, ``/`` separated."""
    return path.relative_to(root).as_posix()


def load_entries(root: Path, files: Iterable[Path], *, on_entry: Callable[[], None] | None = None) -> dict[str, Entry]:
    """Parse every file (by id); an unreadable one becomes an entry with an ``unreadable`` problem."""
    entries: dict[str, Entry] = {}
    for path in files:
        name = entry_id(root, path)
        try:
            entries[name] = read_entry(path, name=name)
        except EntryUnreadable as exc:
            entries[name] = _unreadable(path, name, exc.reason)
        if on_entry is not None:
            on_entry()
    return entries


def _unreadable(path: Path, name: str, reason: str) -> Entry:
    msg = f"cannot read the file: {reason}"
    problem = Problem(name, "file", "unreadable", INVALID, msg, "check that the file is readable", 1)
    return Entry(name, path, "", False, problems=(problem,))


def audit_directory(
    directory: Path,
    *,
    scope: str | None,
    as_of: date,
    directory_text: str | None = None,
    warn_within_days: int | None = None,
    on_entry: Callable[[], None] | None = None,
) -> AuditReport:
    """Audit every entry under ``directory`` in trust context ``scope`` as of the day ``as_of``.

    ``directory_text`` is the directory as the user gave it (the Markdown report shows it).
    Raises :class:`AuditUsageError` for a bad scope or a path that is not a directory.
    """
    context = parse_context(scope)
    entries = load_entries(directory, entry_files(directory), on_entry=on_entry)
    return audit_entries(
        entries,
        directory=directory,
        directory_text=str(directory) if directory_text is None else directory_text,
        context=context,
        as_of=as_of,
        warn_within_days=warn_within_days,
    )


def scope_violation(entry: Entry, context: str | None) -> str | None:
    """Why a valid ``entry`` cannot be trusted in ``context``, or None."""
    if context is None or entry.scope_level is not ScopeLevel.PROJECT:
        return None
    if context == GLOBAL:
        return GLOBAL_CONTEXT_REFUSES_PROJECT
    expected = context[len(PROJECT_PREFIX) :]
    if entry.scope_reference != expected:
        return f"scope is `{entry.scope_reference}`, audit context is `{expected}`"
    return None


def is_scope_problem(p: Problem) -> bool:
    """True for a validation problem that is about the scope declaration (a scope violation in the report)."""
    return p.field == "scope" or p.field.startswith("scope.") or p.check == "authorize-not-project"


def audit_entries(
    entries: dict[str, Entry],
    *,
    directory: Path,
    directory_text: str,
    context: str | None,
    as_of: date,
    warn_within_days: int | None = None,
) -> AuditReport:
    """Audit already parsed ``entries`` (id → entry, in sorted order); see :func:`audit_directory`."""
    lists = _Lists()
    valid: dict[str, Entry] = {}
    for name, entry in entries.items():
        if entry.problems:
            lists.add_invalid(entry)
        else:
            valid[name] = entry
    for entry in valid.values():
        lists.add_horizons(entry, as_of)
        reason = scope_violation(entry, context)
        if reason is not None:
            lists.add_scope(entry, reason)
    chains = resolve_chains({name: e.superseded_by for name, e in valid.items()})
    for chain in chains.broken:
        lists.add_broken(entries[chain.root], chain)
    blocked = {x.id for x in (*lists.expired, *lists.overdue, *lists.scope)} | set(chains.superseded)
    candidates = [
        Candidate(e, tuple(chains.predecessors(name)))
        for name, e in valid.items()
        if e.authorize and name not in blocked
    ]
    notices = [] if warn_within_days is None else _upcoming(valid, chains, as_of, warn_within_days)
    order = {name: i for i, name in enumerate(entries)}
    findings = sorted(lists.findings, key=lambda f: (order.get(f.file, len(order)), f.line))
    return AuditReport(
        directory=directory,
        directory_text=directory_text,
        context=context,
        as_of=as_of,
        entries=entries,
        invalid=lists.invalid,
        missing_sources=lists.missing,
        expired=lists.expired,
        overdue=lists.overdue,
        scope_violations=lists.scope,
        chains=chains,
        findings=findings,
        candidates=candidates,
        notices=notices,
    )


def _upcoming(valid: dict[str, Entry], chains: Chains, as_of: date, within_days: int) -> list[Notice]:
    """The notices of what comes due within ``within_days`` of ``as_of``, for every entry still at a chain's head."""
    until = as_of + timedelta(days=within_days)
    return [
        notice for name, e in valid.items() if name not in chains.superseded for notice in _notices(e, as_of, until)
    ]


@dataclass(slots=True)
class _Lists:
    """The lists of the report, filled entry by entry, each addition also a finding."""

    invalid: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    expired: list[Listed] = field(default_factory=list)
    overdue: list[Listed] = field(default_factory=list)
    scope: list[Listed] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    def add_invalid(self, entry: Entry) -> None:
        self.invalid.append(entry.name)
        self.findings.extend(
            Finding(p.file, p.rule, p.message, p.hint, p.line, p.field, p.check) for p in entry.problems
        )
        if any(p.rule == MISSING_SOURCE for p in entry.problems):
            self.missing.append(entry.name)
        scope_problem = next((p for p in entry.problems if is_scope_problem(p)), None)
        if scope_problem is not None:
            self.scope.append(Listed(entry.name, SCOPE_INVALID))
            hint = "fix the scope fields (see the invalid finding on the same line)"
            self.findings.append(
                Finding(entry.name, OUT_OF_SCOPE, SCOPE_INVALID, hint, scope_problem.line, "scope", "scope-invalid")
            )

    def add_horizons(self, entry: Entry, as_of: date) -> None:
        if entry.expires is not None and as_of > entry.expires.day:
            self.expired.append(Listed(entry.name, entry.expires.text))
            msg = f"expired after {entry.expires}; do not trust it or let it authorize action"
            hint = "confirm the fact and write a new entry that supersedes this one, or delete it"
            self.findings.append(Finding(entry.name, EXPIRED, msg, hint, entry.line_of("expires"), "expires"))
        if entry.review_by is not None and as_of > entry.review_by.day:
            self.overdue.append(Listed(entry.name, entry.review_by.text))
            msg = f"was due for review after {entry.review_by}; re-verify before trusting it"
            hint = "re-read the source, then move review-by forward or supersede the entry"
            self.findings.append(
                Finding(entry.name, REVIEW_OVERDUE, msg, hint, entry.line_of("review-by"), "review-by")
            )

    def add_scope(self, entry: Entry, reason: str) -> None:
        self.scope.append(Listed(entry.name, reason))
        if entry.scope_reference is not None and reason != GLOBAL_CONTEXT_REFUSES_PROJECT:
            hint = f"audit it with --scope project:{entry.scope_reference}, or keep it with that project's entries"
        else:
            hint = "audit it with --scope project:REF for its project"
        line = entry.line_of("scope.reference" if entry.scope_reference is not None else "scope.level")
        self.findings.append(Finding(entry.name, OUT_OF_SCOPE, reason, hint, line, "scope"))

    def add_broken(self, root: Entry, chain: Chain) -> None:
        path = " → ".join(chain.ids)
        line = root.line_of("superseded-by")
        if chain.broken == CYCLE:
            msg = f"cycle returns to `{chain.target}` ({path})"
            hint = "remove superseded-by (write null) on the entry that is really the newest"
            self.findings.append(Finding(root.name, CHAIN_CYCLE, msg, hint, line, "superseded-by"))
        else:
            msg = f"target `{chain.target}` does not exist ({path})"
            hint = "restore the replacing entry, fix it if it is invalid, or correct the file name"
            self.findings.append(Finding(root.name, CHAIN_MISSING_TARGET, msg, hint, line, "superseded-by"))


def _notices(entry: Entry, as_of: date, until: date) -> list[Notice]:
    out: list[Notice] = []
    if entry.expires is not None and as_of <= entry.expires.day <= until:
        line = entry.line_of("expires")
        out.append(
            Notice(entry.name, EXPIRES_SOON, f"holds through {entry.expires}, then expires", line, entry.expires)
        )
    if entry.review_by is not None and as_of <= entry.review_by.day <= until:
        line = entry.line_of("review-by")
        out.append(Notice(entry.name, REVIEW_DUE_SOON, f"review due by {entry.review_by}", line, entry.review_by))
    return out
