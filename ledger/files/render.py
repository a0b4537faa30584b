"""Text and JSON output of ``validate``, ``audit`` and ``audit --explain``.

Everything here is a pure function of its input; the command line only prints.
The reference tool's Markdown report is :mod:`ledger.files.markdown`, SARIF
:mod:`ledger.files.sarif`, graphs :mod:`ledger.files.graph`.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ledger.files.audit import AuditReport, Candidate, Finding, Notice
from ledger.files.explain import Explanation
from ledger.files.model import ELIGIBILITY_NOTICE, RULE_IDS, Problem

REVIEW_HEADING = "Action-authorizing review"


@dataclass(frozen=True, slots=True)
class FileResult:
    """The validation result of one file argument: its problems, or why it could not be read."""

    file: str
    problems: list[Problem]
    error: str | None = None

    @property
    def valid(self) -> bool:
        return self.error is None and not self.problems


# --------------------------------------------------------------------------- validate


def problem_line(p: Problem) -> str:
    """``file:line: field: rule (check): message; fix: hint``."""
    return f"{p.file}:{p.line}: {p.field}: {p.rule} ({p.check}): {p.message.rstrip('.')}; fix: {p.hint}"


def validate_text(results: Sequence[FileResult]) -> str:
    lines: list[str] = []
    for r in results:
        if r.error is not None:
            lines.append(f"{r.file}: unreadable: {r.error}")
        elif r.valid:
            lines.append(f"{r.file}: valid")
        else:
            lines.extend(problem_line(p) for p in r.problems)
    valid = sum(r.valid for r in results)
    unreadable = sum(r.error is not None for r in results)
    summary = f"{len(results)} file(s): {valid} valid, {len(results) - valid - unreadable} invalid"
    lines.append(summary + (f", {unreadable} unreadable" if unreadable else ""))
    return "\n".join(lines)


def validate_json(results: Sequence[FileResult]) -> str:
    files = [
        {
            "file": r.file,
            "valid": r.valid,
            **({"error": r.error} if r.error is not None else {}),
            "problems": [_problem_dict(p) for p in r.problems],
        }
        for r in results
    ]
    return json.dumps({"valid": all(r.valid for r in results), "files": files}, indent=2, ensure_ascii=False)


def _problem_dict(p: Problem) -> dict[str, Any]:
    return {
        "file": p.file,
        "line": p.line,
        "field": p.field,
        "rule": p.rule,
        "check": p.check,
        "message": p.message,
        "hint": p.hint,
    }


# --------------------------------------------------------------------------- audit


def _header(report: AuditReport) -> str:
    context = f"trust context {report.context}" if report.context else "no trust context (structural checks only)"
    return f"Audit of {report.directory_text} in {context} as of {report.as_of.isoformat()}"


def audit_text(report: AuditReport) -> str:
    findings, candidates = report.findings, report.candidates
    in_files = len({f.file for f in findings})
    lines = [
        _header(report),
        f"{len(report.entries)} entries: {len(findings)} finding(s) in {in_files} of them, "
        f"{len(candidates)} candidate(s). Result: {'REVIEW REQUIRED' if report.blocking else 'PASS'}",
        "",
    ]
    if findings:
        lines.append("Findings (each blocks; none hides another entry's candidacy):")
        for f in findings:
            lines.append(f"  {f.file}:{f.line}: {f.rule}{f' ({f.check})' if f.check else ''}: {f.message}")
            lines.append(f"      fix: {f.hint}")
        lines.append("")
    if report.chains.chains:
        lines.append("Supersession chains:")
        lines.extend(
            f"  {' → '.join(c.ids)}" + (f"  (broken: {c.broken})" if c.broken else "") for c in report.chains.chains
        )
        lines.append("")
    if report.notices:
        lines.append("Warnings (coming due soon):")
        lines.extend(f"  {n.file}:{n.line}: {n.kind}: {n.message}" for n in report.notices)
        lines.append("")
    lines.append(f"{REVIEW_HEADING} ({len(candidates)})")
    lines.append(f"  {ELIGIBILITY_NOTICE}")
    if not candidates:
        lines.append("  No current, in-scope entry is eligible to authorize action.")
    for c in candidates:
        lines.append("")
        lines.extend(_candidate_lines(c))
    return "\n".join(lines)


def _candidate_lines(c: Candidate) -> list[str]:
    e = c.entry
    head = f"  {e.name}" + (f"  (supersedes {', '.join(c.predecessors)})" if c.predecessors else "")
    return [
        head,
        f"    fact:       {e.fact}",
        f"    source:     {e.source_kind}: {e.source_reference}  <- re-read this before acting",
        f"    confidence: {e.confidence:g}; created {e.created}; expires {e.expires}",
    ]


def audit_counts(report: AuditReport) -> dict[str, int]:
    """The Summary table's counts, by row label (docs/file-ledger.md)."""
    return {
        "Entries scanned": len(report.entries),
        "Invalid entries": len(report.invalid),
        "Expired entries": len(report.expired),
        "Review overdue": len(report.overdue),
        "Missing sources": len(report.missing_sources),
        "Scope violations": len(report.scope_violations),
        "Superseded entries": len(report.superseded),
        "Broken supersession chains": len(report.broken_chains),
        "Action-eligible entries": len(report.candidates),
    }


def audit_json(report: AuditReport) -> str:
    by_rule = Counter(f.rule for f in report.findings)
    doc = {
        "directory": report.directory_text,
        "scope": report.context,
        "as_of": report.as_of.isoformat(),
        "now": report.as_of.isoformat(),
        "result": "REVIEW REQUIRED" if report.blocking else "PASS",
        "notice": ELIGIBILITY_NOTICE,
        "summary": {
            "entries": len(report.entries),
            "findings": len(report.findings),
            "candidates": len(report.candidates),
            "by_rule": {rule: by_rule[rule] for rule in RULE_IDS if by_rule[rule]},
            "counts": audit_counts(report),
        },
        "candidates": [_candidate_dict(c) for c in report.candidates],
        "findings": [_finding_dict(f) for f in report.findings],
        "chains": [{"entries": list(c.ids), "broken": c.broken, "target": c.target} for c in report.chains.chains],
        "warnings": [_notice_dict(n) for n in report.notices],
    }
    return json.dumps(doc, indent=2, ensure_ascii=False)


def _candidate_dict(c: Candidate) -> dict[str, Any]:
    e = c.entry
    return {
        "file": e.name,
        "fact": e.fact,
        "source": {"kind": str(e.source_kind), "reference": e.source_reference},
        "scope": {"level": str(e.scope_level), "reference": e.scope_reference},
        "confidence": e.confidence,
        "created": e.created.text if e.created else None,
        "expires": e.expires.text if e.expires else None,
        "synthetic": e.synthetic,
        "supersedes": list(c.predecessors),
    }


def _finding_dict(f: Finding) -> dict[str, Any]:
    return {
        "file": f.file,
        "rule": f.rule,
        "message": f.message,
        "hint": f.hint,
        "line": f.line,
        "field": f.field,
        "check": f.check,
    }


def _notice_dict(n: Notice) -> dict[str, Any]:
    return {"file": n.file, "kind": n.kind, "message": n.message, "line": n.line, "due": n.due.text}


# --------------------------------------------------------------------------- explain


def explain_text(x: Explanation, report: AuditReport) -> str:
    lines = [f"Authorization criteria for {x.entry.name} ({report.scope}, as of {report.as_of.isoformat()}):"]
    for c in x.checks:
        lines.append(f"  [{'pass' if c.passed else 'FAIL'}] {c.id}: {c.label} ({c.detail})")
    if x.eligible:
        lines.append("Result: eligible to consider.")
        lines.append(ELIGIBILITY_NOTICE)
        lines.append(f"Re-read: {x.entry.source_reference}")
    else:
        lines.append("Result: not eligible to consider for authorizing an action.")
    return "\n".join(lines)


def explain_json(x: Explanation, report: AuditReport) -> str:
    doc = {
        "file": x.entry.name,
        "scope": report.context,
        "as_of": report.as_of.isoformat(),
        "eligible": x.eligible,
        "notice": ELIGIBILITY_NOTICE,
        "criteria": [{"id": c.id, "label": c.label, "passed": c.passed, "detail": c.detail} for c in x.checks],
    }
    return json.dumps(doc, indent=2, ensure_ascii=False)
