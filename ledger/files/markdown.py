"""``audit --format markdown``: the reference memory-ledger tool's report, line for line (docs/file-ledger.md).

CI steps and agent instructions written for the reference (``Result: **PASS**``,
the "Action-authorizing review" section) read this report unchanged. Every fixed
sentence below is part of that contract; lists keep the order of the sorted entry
ids, expired entries before overdue ones. The report ends with one newline.
"""

from __future__ import annotations

from collections.abc import Iterable

from ledger.files.audit import NO_CONTEXT, AuditReport
from ledger.files.chains import CYCLE
from ledger.files.render import audit_counts

NONE = "- None."
NO_CANDIDATE = "- No current, in-scope entry is eligible to authorize action."
CANDIDATE = (
    "is structurally eligible, current, and in scope. "
    "Re-read its source before acting; the flag is not standing permission."
)


def _code(text: str) -> str:
    return f"`{text}`"


def _bullets(items: Iterable[str]) -> list[str]:
    lines = [f"- {item}" for item in items]
    return lines or [NONE]


def _section(title: str, items: Iterable[str]) -> list[str]:
    return [f"## {title}", "", *_bullets(items), ""]


def audit_markdown(report: AuditReport) -> str:
    """The Markdown audit report (docs/file-ledger.md)."""
    context = _code(report.context) if report.context is not None else NO_CONTEXT
    lines = [
        "# Memory ledger audit",
        "",
        f"- Directory: {_code(report.directory_text)}",
        f"- As of: {_code(report.as_of.isoformat())}",
        f"- Trust context: {context}",
        f"- Result: **{'REVIEW REQUIRED' if report.blocking else 'PASS'}**",
        "",
        "## Summary",
        "",
        "| Check | Count |",
        "| --- | ---: |",
        *(f"| {label} | {count} |" for label, count in audit_counts(report).items()),
        "",
    ]
    messages = {name: "; ".join(p.message for p in report.entries[name].problems) for name in report.invalid}
    lines += _section("Invalid entries", (f"{_code(name)}: {messages[name]}" for name in report.invalid))
    stale = [
        *(
            f"{_code(x.id)} expired after {_code(x.detail)}; do not trust it or let it authorize action."
            for x in report.expired
        ),
        *(
            f"{_code(x.id)} was due for review after {_code(x.detail)}; re-verify before trusting it."
            for x in report.overdue
        ),
    ]
    lines += _section("Expired or overdue", stale)
    missing = (f"{_code(name)} has no concrete, retrievable source reference." for name in report.missing_sources)
    lines += _section("Missing sources", missing)
    lines += _section("Scope violations", (f"{_code(x.id)}: {x.detail}." for x in report.scope_violations))
    lines += _section("Supersession chains", (" → ".join(map(_code, c.ids)) for c in report.chains.chains))
    broken = (
        f"{_code(c.root)}: cycle returns to {_code(c.target or '')}."
        if c.broken == CYCLE
        else f"{_code(c.root)}: target {_code(c.target or '')} does not exist."
        for c in report.broken_chains
    )
    lines += _section("Broken supersession chains", broken)
    lines += ["## Action-authorizing review", ""]
    lines += [f"- {_code(c.entry.name)} {CANDIDATE}" for c in report.candidates] or [NO_CANDIDATE]
    return "\n".join(lines) + "\n"
