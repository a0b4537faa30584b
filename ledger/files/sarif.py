"""SARIF 2.1.0 output of an audit, for code-scanning tools.

Rule ids are the stable public ones (``invalid`` … ``chain-cycle``) in a fixed
order, so ``ruleIndex`` never changes, followed by the two warning ids of
``--warn-within``. Each result points at the front-matter line of the offending
key; the validation sub-rule is in ``properties.check``. Candidates are listed in
``runs[0].properties.candidates`` (they are not problems).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ledger.files.audit import AuditReport, Finding, Notice
from ledger.files.model import ELIGIBILITY_NOTICE, RULE_IDS, WARNING_IDS

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
TOOL_NAME = "memledger-files"

RULE_TEXT: dict[str, tuple[str, str]] = {
    "invalid": ("InvalidEntry", "The entry breaks a rule of the memory-entry format."),
    "missing-source": ("MissingSource", "source.reference is absent or a placeholder such as 'from context'."),
    "out-of-scope": ("OutOfScope", "The entry cannot be trusted in the audit's trust context."),
    "expired": ("Expired", "The audit date is after the entry's expires date."),
    "review-overdue": ("ReviewOverdue", "The audit date is after the entry's review-by date."),
    "chain-missing-target": ("ChainMissingTarget", "A superseded-by chain names an entry that does not exist."),
    "chain-cycle": ("ChainCycle", "A superseded-by chain returns to an entry it already passed."),
    "expires-soon": ("ExpiresSoon", "The entry expires within the --warn-within window."),
    "review-due-soon": ("ReviewDueSoon", "The entry is due for review within the --warn-within window."),
}
_ALL_IDS = (*RULE_IDS, *WARNING_IDS)
_INDEX = {rule: i for i, rule in enumerate(_ALL_IDS)}


def _rules() -> list[dict[str, Any]]:
    return [
        {
            "id": rule,
            "name": RULE_TEXT[rule][0],
            "shortDescription": {"text": RULE_TEXT[rule][1]},
            "defaultConfiguration": {"level": "error" if rule in RULE_IDS else "warning"},
            "help": {"text": "See docs/file-ledger.md, section Validation."},
        }
        for rule in _ALL_IDS
    ]


def _location(report: AuditReport, name: str, line: int) -> dict[str, Any]:
    directory = report.directory
    if directory.is_absolute():
        artifact = {"uri": (directory / name).as_uri()}
    else:
        artifact = {"uri": (Path(directory) / name).as_posix(), "uriBaseId": "%SRCROOT%"}
    return {"physicalLocation": {"artifactLocation": artifact, "region": {"startLine": max(1, line)}}}


def _fingerprint(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:32]


def _finding_result(report: AuditReport, f: Finding) -> dict[str, Any]:
    return {
        "ruleId": f.rule,
        "ruleIndex": _INDEX[f.rule],
        "level": "error",
        "message": {"text": f"{f.field}: {f.message}. Fix: {f.hint}"},
        "locations": [_location(report, f.file, f.line)],
        "partialFingerprints": {"memledgerFinding/v1": _fingerprint(f.file, f.rule, f.check or "", f.field)},
        "properties": {"field": f.field, "check": f.check},
    }


def _notice_result(report: AuditReport, n: Notice) -> dict[str, Any]:
    return {
        "ruleId": n.kind,
        "ruleIndex": _INDEX[n.kind],
        "level": "warning",
        "message": {"text": n.message},
        "locations": [_location(report, n.file, n.line)],
        "partialFingerprints": {"memledgerFinding/v1": _fingerprint(n.file, n.kind)},
    }


def audit_sarif(report: AuditReport, *, version: str = "0.1.0") -> str:
    """The audit as a SARIF 2.1.0 log (one run)."""
    results = [_finding_result(report, f) for f in report.findings]
    results.extend(_notice_result(report, n) for n in report.notices)
    run: dict[str, Any] = {
        "tool": {"driver": {"name": TOOL_NAME, "version": version, "rules": _rules()}},
        "results": results,
        "properties": {
            "scope": report.context,
            "asOf": report.as_of.isoformat(),
            "notice": ELIGIBILITY_NOTICE,
            "candidates": [
                {"file": c.entry.name, "sourceReference": c.entry.source_reference} for c in report.candidates
            ],
        },
    }
    return json.dumps({"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}, indent=2, ensure_ascii=False)
