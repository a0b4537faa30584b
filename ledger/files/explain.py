"""``audit --explain FILE``: every authorization criterion of one entry, pass or fail.

The criteria are those a candidate must meet (see :mod:`ledger.files.audit`): the
static ones of :func:`ledger.files.fields.authorization_criteria`, plus validity,
the flag itself, scope, currency and the entry's place in its chain.
"""

from __future__ import annotations

from dataclasses import dataclass

from ledger.files.audit import AuditReport, Finding, is_scope_problem, scope_violation
from ledger.files.fields import authorization_criteria
from ledger.files.model import CHAIN_CYCLE, CHAIN_MISSING_TARGET, INVALID, MISSING_SOURCE, Entry


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
    scope_problem = next((p for p in entry.problems if is_scope_problem(p)), None)
    reason = scope_problem.message if scope_problem is not None else scope_violation(entry, report.context)
    in_scope = entry.trusted and reason is None
    if report.context is None:
        scope_label = "in scope (no trust context: structural checks only)"
    else:
        scope_label = f"trusted in context {report.context}"
    path = report.chains.path_from(entry.name)
    if entry.superseded_by is None:
        chain = "superseded-by: null"
    elif CHAIN_MISSING_TARGET in own_rules or CHAIN_CYCLE in own_rules or entry.name in report.chains.cycle_of:
        chain = "broken: " + " → ".join(path)
    else:
        chain = "superseded: " + " → ".join(path)
    horizon = entry.horizon
    current = horizon is not None and horizon.day >= report.as_of
    return [
        Check("in-scope", scope_label, in_scope, reason or (entry.scope_reference or str(entry.scope_level or "?"))),
        Check(
            "current",
            "not expired and not overdue for review on the audit date (the date itself still holds)",
            current,
            f"{'expires' if entry.expires else 'review-by'} {horizon}" if horizon else "no horizon",
        ),
        Check("not-superseded", "not superseded (superseded-by: null)", entry.superseded_by is None, chain),
        Check("no-findings", "no finding of its own", not own_rules, ", ".join(sorted(own_rules)) or "none"),
    ]


def _first(findings: list[Finding], rules: set[str]) -> str | None:
    return next((f"{f.field}: {f.message}" for f in findings if f.rule in rules), None)
