"""The file ledger: memory entries kept as markdown files with YAML front matter.

>>> from ledger.files import read_entry, validate, audit_directory
>>> problems = validate(read_entry(path))                     # [] when valid
>>> report = audit_directory(directory, scope="project:acme/widgets", as_of=date(2026, 7, 14))
>>> [c.entry.name for c in report.candidates], [(f.file, f.rule) for f in report.findings]
>>> audit_markdown(report)                                     # the reference tool's report

The format and the audit are those of the reference memory-ledger tool (docs/file-ledger.md).

Modules: :mod:`~ledger.files.frontmatter` (strict YAML), :mod:`~ledger.files.dates`,
:mod:`~ledger.files.fields` and :mod:`~ledger.files.body` (the rules),
:mod:`~ledger.files.entry` (read + validate), :mod:`~ledger.files.chains`,
:mod:`~ledger.files.audit`, :mod:`~ledger.files.explain`, output in
:mod:`~ledger.files.render`, :mod:`~ledger.files.markdown`, :mod:`~ledger.files.sarif`
and :mod:`~ledger.files.graph`, the JSON Schema and template in ``templates/``,
and :mod:`~ledger.files.exchange` (export to / import from the database ledger).
"""

from __future__ import annotations

from ledger.errors import AuditUsageError, EntryUnreadable
from ledger.files.audit import (
    AuditReport,
    Candidate,
    Finding,
    audit_directory,
    entry_files,
    parse_context,
)
from ledger.files.entry import parse_entry, read_entry, validate
from ledger.files.markdown import audit_markdown
from ledger.files.model import RULE_IDS, Entry, Problem, ScopeLevel, SourceKind

__all__ = [
    "RULE_IDS",
    "AuditReport",
    "AuditUsageError",
    "Candidate",
    "Entry",
    "EntryUnreadable",
    "Finding",
    "Problem",
    "ScopeLevel",
    "SourceKind",
    "audit_directory",
    "audit_markdown",
    "entry_files",
    "parse_context",
    "parse_entry",
    "read_entry",
    "validate",
]
