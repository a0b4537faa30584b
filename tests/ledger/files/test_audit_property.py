"""Random entry directories, audited, against a small model of the rules of docs/file-ledger.md."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.files import audit_directory
from tests.ledger.files.helpers import AS_OF, SCOPE, entry, write_dir


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
    day = (AS_OF + timedelta(days=s.offset_days)).isoformat()
    sup = None if s.sup is None else s.sup if isinstance(s.sup, str) else name(s.sup % count)
    text = entry(
        fact=f"Fact number {i} about acme/widgets.",
        kind=s.kind,
        ref="from context" if s.placeholder else f"https://tracker.example/ACME-{i}",
        level="global" if s.level == "global" else "project",
        sref=None if s.level == "global" else "acme/widgets" if s.level == "mine" else "acme/gadgets",
        conf="2" if s.corruption == "bad-confidence" else s.conf,
        created="2025-01-01",
        expires=day if s.horizon == "expires" else None,
        review=day if s.horizon == "review" else None,
        sup=sup,
        auth=("true" if s.auth else "false")
        + ("\nmay-this-authorize-action: true" if s.corruption == "dup-key" else ""),
    )
    if s.corruption == "unknown-key":
        text = text.replace("confidence:", "reviewby: 2025-01-01\nconfidence:")
    return text


def model(items: list[Spec]) -> tuple[set[tuple[str, str]], set[str]]:
    """The expected (file, rule) findings and candidate files, from docs/file-ledger.md (not from the code)."""
    count = len(items)
    findings: set[tuple[str, str]] = set()
    valid: dict[str, Spec] = {}
    for i, s in enumerate(items):
        n = name(i)
        bad_auth = s.auth and (
            s.kind == "inferred" or s.level == "global" or float(s.conf) < 0.9 or s.horizon == "review"
        )
        if s.corruption == "dup-key":
            findings.add((n, "invalid"))
            continue
        if s.corruption in ("bad-confidence", "unknown-key") or bad_auth:
            findings.add((n, "invalid"))
        if bad_auth and s.level == "global":
            findings.add((n, "out-of-scope"))  # an authorizing global entry: its scope declaration is invalid
        if s.placeholder:
            findings.add((n, "missing-source"))
        if s.corruption is None and not s.placeholder and not bad_auth:
            valid[n] = s
    links: dict[str, str] = {}
    for n, s in valid.items():
        if s.level == "other":
            findings.add((n, "out-of-scope"))
        if s.offset_days < 0:
            findings.add((n, "expired" if s.horizon == "expires" else "review-overdue"))
        if s.sup is not None:
            links[n] = s.sup if isinstance(s.sup, str) else name(s.sup % count)
    # Each chain starts at a root (a superseded entry no other superseded entry links to), or, for a cycle no
    # root leads into, at its first member; a broken chain is reported on its start.
    targeted = {t for t in links.values() if t in valid}
    starts = [n for n in links if n not in targeted]
    reached: set[str] = set()
    for n in starts:
        current, seen = n, [n]
        while current in links and links[current] in valid and links[current] not in seen:
            current = links[current]
            seen.append(current)
        reached.update(seen)
    for n in sorted(links):
        if n not in reached:  # on a cycle no root reaches: start it at its first member
            loop = [n]
            while links[loop[-1]] not in loop:
                loop.append(links[loop[-1]])
            reached.update(loop)
            starts.append(min(loop))
    for n in starts:
        current, seen = n, [n]
        while current in links:
            target = links[current]
            if target not in valid:
                findings.add((n, "chain-missing-target"))
                break
            if target in seen:
                findings.add((n, "chain-cycle"))
                break
            seen.append(target)
            current = target
    flagged = {f for f, r in findings if r in ("expired", "review-overdue", "out-of-scope")}
    candidates = {n for n, s in valid.items() if s.auth and n not in links and n not in flagged}
    return findings, candidates


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(specs, min_size=1, max_size=8))
def test_audit_matches_a_model_of_the_rules(items: list[Spec]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = write_dir(Path(tmp), {name(i): render(i, s, len(items)) for i, s in enumerate(items)})
        report = audit_directory(directory, scope=SCOPE, as_of=AS_OF)
    want_findings, want_candidates = model(items)
    assert {(f.file, f.rule) for f in report.findings} == want_findings
    assert {c.entry.name for c in report.candidates} == want_candidates
    # Each broken chain once; every superseded entry is on a listed chain; a candidate is never superseded.
    assert len(report.broken_chains) == sum(f.rule.startswith("chain-") for f in report.findings)
    on_chains = {i for c in report.chains.chains for i in c.ids}
    assert set(report.superseded) <= on_chains
    assert len({c.root for c in report.chains.chains}) == len(report.chains.chains)
    for c in report.candidates:
        assert c.entry.authorize and c.entry.superseded_by is None
