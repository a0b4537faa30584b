"""Random entry directories, audited, against a small reference model of the rules."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.files import audit_directory
from tests.ledger.files.helpers import NOW, SCOPE, entry, write_dir


@dataclass(frozen=True)
class Spec:
    kind: str
    placeholder: bool
    level: str  # "mine", "other", "global"
    conf: str
    horizon: str  # "expires" or "review"
    offset_days: int
    sup: int | str | None  # index of another entry, a missing name, or None
    auth: bool
    corruption: str | None  # None, "dup-key", "bad-confidence", "unknown-key"


specs = st.builds(
    Spec,
    kind=st.sampled_from(["user-said", "observed", "inferred"]),
    placeholder=st.booleans(),
    level=st.sampled_from(["mine", "mine", "other", "global"]),
    conf=st.sampled_from(["0.5", "0.9", "0.95"]),
    horizon=st.sampled_from(["expires", "expires", "review"]),
    offset_days=st.integers(-20, 40),
    sup=st.one_of(st.none(), st.none(), st.integers(0, 7), st.just("gone.md")),
    auth=st.booleans(),
    corruption=st.sampled_from([None, None, None, None, "dup-key", "bad-confidence", "unknown-key"]),
)


def name(i: int) -> str:
    return f"e{i}.md"


def render(i: int, s: Spec, count: int) -> str:
    date = (NOW + timedelta(days=s.offset_days)).date().isoformat()
    sup = None if s.sup is None else s.sup if isinstance(s.sup, str) else name(s.sup % count)
    text = entry(
        kind=s.kind,
        ref="from context" if s.placeholder else f"https://tracker.example/ACME-{i}",
        level="global" if s.level == "global" else "project",
        sref=None if s.level == "global" else "acme/widgets" if s.level == "mine" else "acme/gadgets",
        conf="2" if s.corruption == "bad-confidence" else s.conf,
        created="2025-01-01",
        expires=date if s.horizon == "expires" else None,
        review=date if s.horizon == "review" else None,
        sup=sup,
        auth=("true" if s.auth else "false")
        + ("\nmay-this-authorize-action: true" if s.corruption == "dup-key" else ""),
        body=f"Fact number {i} about acme/widgets.",
    )
    if s.corruption == "unknown-key":
        text = text.replace("confidence:", "reviewby: 2025-01-01\nconfidence:")
    return text


def model(items: list[Spec]) -> tuple[set[tuple[str, str]], set[str]]:
    """The expected (file, rule) findings and candidate files, from the rules as the docs state them."""
    count = len(items)
    findings: set[tuple[str, str]] = set()
    links: dict[str, str] = {}
    for i, s in enumerate(items):
        n = name(i)
        if s.corruption == "dup-key":
            findings.add((n, "invalid"))
            continue
        if s.corruption in ("bad-confidence", "unknown-key"):
            findings.add((n, "invalid"))
        if s.placeholder:
            findings.add((n, "missing-source"))
        if s.auth and (
            s.kind == "inferred" or s.level == "global" or float(s.conf) < 0.9 or s.placeholder or s.horizon == "review"
        ):
            findings.add((n, "invalid"))
        if s.level == "other":
            findings.add((n, "out-of-scope"))
        if s.sup is None and s.offset_days <= 0:
            findings.add((n, "expired" if s.horizon == "expires" else "review-overdue"))
        if s.sup is not None:
            links[n] = s.sup if isinstance(s.sup, str) else name(s.sup % count)
    present = {name(i) for i in range(count)}
    for n, target in links.items():
        if target not in present:
            findings.add((n, "chain-missing-target"))
        current, steps = target, 0
        while current in links and current != n and steps <= count:
            current, steps = links[current], steps + 1
        if current == n:
            findings.add((n, "chain-cycle"))
    flagged = {f for f, _ in findings}
    candidates = {
        name(i)
        for i, s in enumerate(items)
        if s.auth and s.sup is None and s.corruption != "dup-key" and name(i) not in flagged
    }
    return findings, candidates


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(specs, min_size=1, max_size=8))
def test_audit_matches_the_reference_model(items: list[Spec]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = write_dir(Path(tmp), {name(i): render(i, s, len(items)) for i, s in enumerate(items)})
        report = audit_directory(directory, scope=SCOPE, now=NOW)
    want_findings, want_candidates = model(items)
    assert {(f.file, f.rule) for f in report.findings} == want_findings
    assert {c.entry.name for c in report.candidates} == want_candidates
    # A candidate never has a finding of its own, and is always a flagged chain head.
    for c in report.candidates:
        assert not report.findings_for(c.entry.name)
        assert c.entry.authorize and c.entry.superseded_by is None
