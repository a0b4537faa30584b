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

from typing import TYPE_CHECKING

from ledger.errors import AuditUsageError, DateError, EntryUnreadable
from ledger.files.audit import (
    AuditReport,
    Candidate,
    Finding,
    audit_directory,
    entry_files,
    parse_context,
)
from ledger.files.entry import parse_entry, read_entry, validate, write_no_follow
from ledger.files.explain import explain  # eager: the module's name is the function's
from ledger.files.markdown import audit_markdown
from ledger.files.model import RULE_IDS, Entry, Problem, ScopeLevel, SourceKind
from ledger.lazy import loader

if TYPE_CHECKING:
    from ledger.files.dates import parse_day, parse_now
    from ledger.files.exchange import DEFAULT_REVIEW_DAYS, ExportResult, ImportResult, export_scope, import_directory
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

# These load on first use: the command line's output formats and the exchange with the database ledger.
_WHERE = {
    "parse_day": "ledger.files.dates",
    "parse_now": "ledger.files.dates",
    "DEFAULT_REVIEW_DAYS": "ledger.files.exchange",
    "ExportResult": "ledger.files.exchange",
    "ImportResult": "ledger.files.exchange",
    "export_scope": "ledger.files.exchange",
    "import_directory": "ledger.files.exchange",
    "graph_dot": "ledger.files.graph",
    "graph_mermaid": "ledger.files.graph",
    "FileResult": "ledger.files.render",
    "audit_json": "ledger.files.render",
    "audit_text": "ledger.files.render",
    "explain_json": "ledger.files.render",
    "explain_text": "ledger.files.render",
    "validate_json": "ledger.files.render",
    "validate_text": "ledger.files.render",
    "audit_sarif": "ledger.files.sarif",
}

__all__ = [
    "DEFAULT_REVIEW_DAYS",
    "RULE_IDS",
    "AuditReport",
    "AuditUsageError",
    "Candidate",
    "DateError",
    "Entry",
    "EntryUnreadable",
    "ExportResult",
    "FileResult",
    "Finding",
    "ImportResult",
    "Problem",
    "ScopeLevel",
    "SourceKind",
    "audit_directory",
    "audit_json",
    "audit_markdown",
    "audit_sarif",
    "audit_text",
    "entry_files",
    "explain",
    "explain_json",
    "explain_text",
    "export_scope",
    "graph_dot",
    "graph_mermaid",
    "import_directory",
    "parse_context",
    "parse_day",
    "parse_entry",
    "parse_now",
    "read_entry",
    "validate",
    "validate_json",
    "validate_text",
    "write_no_follow",
]


__getattr__ = loader(__name__, globals(), _WHERE)
