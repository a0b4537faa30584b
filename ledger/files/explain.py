"""``audit --explain FILE``: every authorization criterion of one entry, pass or fail.

The criteria are those a candidate must meet (see :mod:`ledger.files.audit`): the
static ones of :func:`ledger.files.fields.authorization_criteria`, plus validity,
the flag itself, scope, currency and the entry's place in its chain.
"""

from __future__ import annotations

from dataclasses import dataclass

from ledger.files.audit import AuditReport, Finding
from ledger.files.fields import authorization_criteria
from ledger.files.model import CHAIN_CYCLE, CHAIN_MISSING_TARGET, EXPIRED, INVALID, MISSING_SOURCE, Entry


@dataclass(frozen=True, slots=True)
class Check:
    """One criterion for one entry: ``id``, what it requires, whether it passed, and what was seen."""

    id: str
    label: str
    passed: bool
    detail: str


@dataclass(frozen=True, slots=True)
class Explanation:
    entry: Entry
    checks: list[Check]
    eligible: bool


_STATIC_IDS = {
    "authorize-inferred": "source-kind",
    "authorize-not-project": "project-scope",
    "authorize-low-confidence": "confidence",
    "authorize-source": "source-reference",
    "authorize-no-expires": "explicit-expires",
}


def explain(report: AuditReport, name: str) -> Explanation:
    """Explain entry ``name`` of ``report``. Raises :class:`KeyError` when it is not in the report."""
    entry = report.entries[name]
    own = report.findings_for(name)
    own_rules = {f.rule for f in own}
    checks = [
        Check(
            "valid",
            "the entry is valid (every rule of the format)",
            not (own_rules & {INVALID, MISSING_SOURCE}),
            _first(own, {INVALID, MISSING_SOURCE}) or "no validation problem",
        ),
        Check("flagged", "may-this-authorize-action is true", entry.authorize, str(entry.authorize).lower()),
    ]
    details = {
        "source-kind": str(entry.source_kind or "missing"),
        "source-reference": entry.source_reference or "missing",
        "project-scope": str(entry.scope_level or "missing"),
        "confidence": "missing" if entry.confidence is None else f"{entry.confidence:g}",
        "explicit-expires": str(entry.expires) if entry.expires else "review-by only" if entry.review_by else "none",
    }
    for c in authorization_criteria(entry):
        cid = _STATIC_IDS[c.check]
        checks.append(Check(cid, c.label, c.passed, details[cid]))
    checks.extend(_context_checks(report, entry, own_rules))
    eligible = any(c.entry.name == name for c in report.candidates)
    return Explanation(entry, checks, eligible)


def _context_checks(report: AuditReport, entry: Entry, own_rules: set[str]) -> list[Check]:
    ref = entry.scope_reference
    in_scope = entry.scope_level is not None and (ref is None or ref == report.scope_reference)
    path = report.chains.path_from(entry.name)
    if entry.superseded_by is None:
        chain = "no superseded-by"
    elif CHAIN_MISSING_TARGET in own_rules or CHAIN_CYCLE in own_rules:
        chain = "broken: " + " → ".join(path)
    else:
        chain = "superseded: " + " → ".join(path)
    horizon = entry.horizon
    return [
        Check("in-scope", f"scope is the audited project {report.scope_reference!r}", in_scope, ref or "global"),
        Check(
            "current",
            "not expired and not overdue for review at now",
            horizon is not None and horizon.instant > report.now and EXPIRED not in own_rules,
            f"{'expires' if entry.expires else 'review-by'} {horizon}" if horizon else "no horizon",
        ),
        Check("chain-head", "end of its chain (not superseded)", entry.superseded_by is None, chain),
        Check("no-findings", "no finding of its own", not own_rules, ", ".join(sorted(own_rules)) or "none"),
    ]


def _first(findings: list[Finding], rules: set[str]) -> str | None:
    return next((f"{f.field}: {f.message}" for f in findings if f.rule in rules), None)
