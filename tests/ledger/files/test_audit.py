"""The audit: trust contexts, whole-day horizons, chains, candidates, and the reference's test cases."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.files import AuditReport, AuditUsageError, audit_directory
from ledger.files.model import RULE_IDS
from tests.ledger.files.helpers import AS_OF, SCOPE, entry, write_dir


def audit(directory: Path, scope: str | None = SCOPE, as_of: date = AS_OF) -> AuditReport:
    return audit_directory(directory, scope=scope, as_of=as_of)


def rules(report: AuditReport) -> set[tuple[str, str]]:
    return {(f.file, f.rule) for f in report.findings}


def candidates(report: AuditReport) -> list[str]:
    return [c.entry.name for c in report.candidates]


def test_every_rule_id_is_produced_here(tmp_path: Path) -> None:
    files = {
        "bad.md": entry(conf="2"),
        "nosrc.md": entry(ref="from context", auth="false"),
        "other.md": entry(sref="acme/gadgets"),
        "old.md": entry(expires="2025-02-01"),
        "due.md": entry(expires=None, review="2025-02-01", auth="false"),
        "dangling.md": entry(sup="gone.md"),
        "loop.md": entry(sup="loop.md"),
    }
    found = {rule for _, rule in rules(audit(write_dir(tmp_path, files)))}
    assert found == set(RULE_IDS)


# --------------------------------------------------------------------------- the reference's own audit test cases


def test_missing_source_and_wrong_project_scope(tmp_path: Path) -> None:
    missing = entry(fact="Missing source", auth="false").replace(
        'source:\n  kind: user-said\n  reference: "https://tracker.example/ACME-42"\n', ""
    )
    files = {"missing-source.md": missing, "wrong-scope.md": entry(fact="Wrong scope", sref="project:other")}
    report = audit(write_dir(tmp_path, files), scope="project:expected")
    assert report.invalid == ["missing-source.md"]
    assert report.missing_sources == ["missing-source.md"]
    [violation] = report.scope_violations
    assert violation.id == "wrong-scope.md"
    assert "audit context" in violation.detail
    assert violation.detail == "scope is `project:other`, audit context is `expected`"


def test_two_entry_cycle_is_reported_once_with_both_entries_superseded(tmp_path: Path) -> None:
    files = {"a.md": entry(fact="A", sup="b.md"), "b.md": entry(fact="B", sup="a.md")}
    report = audit(write_dir(tmp_path, files))
    assert report.superseded == ("a.md", "b.md")
    assert [c.ids for c in report.chains.chains] == [("a.md", "b.md", "a.md")]
    [broken] = report.broken_chains
    assert broken.broken == "cycle" and broken.root == "a.md" and broken.target == "a.md"
    assert [f.rule for f in report.findings] == ["chain-cycle"]
    assert report.candidates == []


def test_empty_directory_passes(tmp_path: Path) -> None:
    report = audit(tmp_path, scope="global")
    assert report.entries == {} and report.invalid == [] and report.broken_chains == ()
    assert not report.blocking


# --------------------------------------------------------------------------- trust contexts


def test_global_context_trusts_only_global_entries(tmp_path: Path) -> None:
    files = {
        "g.md": entry(level="global", sref=None, auth="false"),
        "p.md": entry(),
    }
    report = audit(write_dir(tmp_path, files), scope="global")
    assert [(x.id, x.detail) for x in report.scope_violations] == [
        ("p.md", "project-scoped entry cannot be trusted in global context")
    ]
    assert candidates(report) == [] and report.blocking


def test_project_context_trusts_global_entries_and_its_own_project(tmp_path: Path) -> None:
    files = {"g.md": entry(level="global", sref=None, auth="false"), "p.md": entry(), "q.md": entry(sref="acme")}
    report = audit(write_dir(tmp_path, files))
    assert [x.id for x in report.scope_violations] == ["q.md"]
    assert candidates(report) == ["p.md"]


def test_project_reference_is_compared_exactly(tmp_path: Path) -> None:
    report = audit(write_dir(tmp_path, {"p.md": entry(sref="Acme/Widgets")}))
    assert rules(report) == {("p.md", "out-of-scope")}


def test_no_context_means_structural_checks_only(tmp_path: Path) -> None:
    files = {"p.md": entry(), "q.md": entry(sref="acme/gadgets"), "bad.md": entry(sref=None)}
    report = audit(write_dir(tmp_path, files), scope=None)
    assert candidates(report) == ["p.md", "q.md"]
    assert [(x.id, x.detail) for x in report.scope_violations] == [("bad.md", "scope declaration is invalid")]


def test_invalid_scope_declarations_are_scope_violations(tmp_path: Path) -> None:
    files = {
        "a-no-ref.md": entry(sref=None),
        "b-global-ref.md": entry(level="global", auth="false"),
        "c-global-authorizing.md": entry(level="global", sref=None),
        "d-bad-conf.md": entry(conf="7"),
    }
    report = audit(write_dir(tmp_path, files))
    assert report.invalid == sorted(files)
    assert [x.id for x in report.scope_violations] == ["a-no-ref.md", "b-global-ref.md", "c-global-authorizing.md"]
    assert all(x.detail == "scope declaration is invalid" for x in report.scope_violations)


@pytest.mark.parametrize("scope", ["acme/widgets", "project:", "project:  ", "project: acme", "local", "GLOBAL"])
def test_bad_scope_is_a_usage_error(tmp_path: Path, scope: str) -> None:
    with pytest.raises(AuditUsageError):
        audit(tmp_path, scope=scope)


def test_missing_directory_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(AuditUsageError):
        audit(tmp_path / "nope")


# --------------------------------------------------------------------------- whole-day horizons


@pytest.mark.parametrize(
    ("as_of", "expired"), [(date(2025, 6, 29), False), (date(2025, 6, 30), False), (date(2025, 7, 1), True)]
)
def test_expires_holds_on_its_own_day(tmp_path: Path, as_of: date, expired: bool) -> None:
    report = audit(write_dir(tmp_path, {"e.md": entry(created="2025-06-01", expires="2025-06-30")}), as_of=as_of)
    assert [x.id for x in report.expired] == (["e.md"] if expired else [])
    assert candidates(report) == ([] if expired else ["e.md"])
    assert report.blocking is expired


@pytest.mark.parametrize(("as_of", "overdue"), [(date(2025, 9, 30), False), (date(2025, 10, 1), True)])
def test_review_by_holds_on_its_own_day(tmp_path: Path, as_of: date, overdue: bool) -> None:
    text = entry(expires=None, review="2025-09-30", auth="false")
    report = audit(write_dir(tmp_path, {"r.md": text}), as_of=as_of)
    assert [(x.id, x.detail) for x in report.overdue] == ([("r.md", "2025-09-30")] if overdue else [])
    assert report.blocking is overdue


def test_expired_and_overdue_count_valid_entries_only_superseded_included(tmp_path: Path) -> None:
    files = {
        "a-old.md": entry(expires="2025-02-01", sup="b-new.md", auth="false"),
        "b-new.md": entry(),
        "c-invalid-old.md": entry(expires="2025-02-01", conf="3"),
    }
    report = audit(write_dir(tmp_path, files))
    assert [x.id for x in report.expired] == ["a-old.md"]
    assert candidates(report) == ["b-new.md"]


def test_created_after_the_audit_date_is_still_valid(tmp_path: Path) -> None:
    report = audit(write_dir(tmp_path, {"e.md": entry(created="2025-06-01")}))
    assert report.invalid == [] and candidates(report) == ["e.md"]


# --------------------------------------------------------------------------- chains


def test_chain_is_listed_once_root_to_head(tmp_path: Path) -> None:
    files = {"v1.md": entry(sup="v2.md"), "v2.md": entry(sup="v3.md"), "v3.md": entry()}
    report = audit(write_dir(tmp_path, files))
    assert [c.ids for c in report.chains.chains] == [("v1.md", "v2.md", "v3.md")]
    assert report.superseded == ("v1.md", "v2.md")
    assert candidates(report) == ["v3.md"]
    assert report.candidates[0].predecessors == ("v1.md", "v2.md")
    assert not report.blocking


def test_merging_chains_are_listed_per_root(tmp_path: Path) -> None:
    files = {"a.md": entry(sup="h.md"), "b.md": entry(sup="m.md"), "m.md": entry(sup="h.md"), "h.md": entry()}
    report = audit(write_dir(tmp_path, files))
    assert [c.ids for c in report.chains.chains] == [("a.md", "h.md"), ("b.md", "m.md", "h.md")]


def test_missing_target_is_one_broken_chain(tmp_path: Path) -> None:
    files = {"a.md": entry(sup="b.md"), "b.md": entry(sup="gone.md")}
    report = audit(write_dir(tmp_path, files))
    [chain] = report.chains.chains
    assert chain.ids == ("a.md", "b.md") and chain.broken == "missing" and chain.target == "gone.md"
    assert rules(report) == {("a.md", "chain-missing-target")}


def test_cycle_entered_from_a_lead_in_is_reported_once(tmp_path: Path) -> None:
    files = {"x.md": entry(sup="a.md"), "a.md": entry(sup="b.md"), "b.md": entry(sup="c.md"), "c.md": entry(sup="a.md")}
    report = audit(write_dir(tmp_path, files))
    assert [(c.ids, c.target) for c in report.broken_chains] == [(("x.md", "a.md", "b.md", "c.md", "a.md"), "a.md")]
    assert [f.file for f in report.findings] == ["x.md"]
    assert set(report.chains.cycle_of) == {"a.md", "b.md", "c.md"}


def test_self_cycle(tmp_path: Path) -> None:
    report = audit(write_dir(tmp_path, {"a.md": entry(sup="a.md")}))
    assert [(c.ids, c.broken) for c in report.chains.chains] == [(("a.md", "a.md"), "cycle")]


def test_link_to_an_invalid_entry_finds_no_target(tmp_path: Path) -> None:
    files = {"a.md": entry(sup="b.md"), "b.md": entry(conf="9")}
    report = audit(write_dir(tmp_path, files))
    assert rules(report) == {("a.md", "chain-missing-target"), ("b.md", "invalid")}


def test_ids_are_relative_paths_and_links_resolve_by_id_or_unique_basename(tmp_path: Path) -> None:
    files = {
        "a.md": entry(sup="new.md"),
        "team/new.md": entry(),
        "z/old.md": entry(sup="x.md"),
        "z/x.md": entry(),
        "dup/x.md": entry(),
    }
    report = audit(write_dir(tmp_path, files))
    assert list(report.entries) == ["a.md", "dup/x.md", "team/new.md", "z/old.md", "z/x.md"]
    # new.md is one basename: it resolves; x.md is two: the link finds no target.
    assert [(c.ids, c.broken) for c in report.chains.chains] == [
        (("a.md", "team/new.md"), None),
        (("z/old.md",), "missing"),
    ]
    assert "team/new.md" in candidates(report)


def test_every_markdown_file_is_an_entry(tmp_path: Path) -> None:
    write_dir(tmp_path, {"a.md": entry(), "notes.txt": "not an entry", "README.md": "# About\n", ".hidden.md": entry()})
    report = audit(tmp_path)
    assert list(report.entries) == [".hidden.md", "README.md", "a.md"]
    assert report.invalid == ["README.md"]


def test_a_dangling_symlink_is_an_invalid_entry(tmp_path: Path) -> None:
    write_dir(tmp_path, {"a.md": entry()})
    (tmp_path / "b.md").symlink_to(tmp_path / "missing-target.md")
    report = audit(tmp_path)
    assert ("b.md", "invalid") in rules(report)  # links are never followed: reported (tests/ledger/files/test_links.py)
    assert list(report.entries) == ["a.md", "b.md"]


# --------------------------------------------------------------------------- candidates


def test_a_finding_elsewhere_never_hides_a_sound_candidate(tmp_path: Path) -> None:
    files = {"bad.md": entry(conf="2"), "good.md": entry(), "old.md": entry(sup="good.md", expires="2025-01-20")}
    report = audit(write_dir(tmp_path, files))
    assert candidates(report) == ["good.md"]
    assert report.blocking


def test_superseded_unflagged_and_global_entries_are_not_candidates(tmp_path: Path) -> None:
    files = {
        "a.md": entry(sup="b.md"),
        "b.md": entry(auth="false"),
        "g.md": entry(level="global", sref=None, auth="false"),
    }
    report = audit(write_dir(tmp_path, files))
    assert candidates(report) == [] and not report.blocking


def test_broken_chain_root_is_still_superseded(tmp_path: Path) -> None:
    report = audit(write_dir(tmp_path, {"a.md": entry(sup="gone.md")}))
    assert candidates(report) == [] and report.superseded == ("a.md",)


def test_warn_within_notices_do_not_block(tmp_path: Path) -> None:
    files = {
        "soon.md": entry(expires="2025-03-05"),
        "today.md": entry(expires="2025-03-01"),
        "later.md": entry(expires="2025-12-31"),
    }
    report = audit_directory(write_dir(tmp_path, files), scope=SCOPE, as_of=AS_OF, warn_within_days=7)
    assert [(n.file, n.kind) for n in report.notices] == [("soon.md", "expires-soon"), ("today.md", "expires-soon")]
    assert not report.blocking


def test_findings_point_at_the_offending_line(tmp_path: Path) -> None:
    report = audit(write_dir(tmp_path, {"a.md": entry(conf="2"), "b.md": entry(expires="2025-02-01")}))
    lines = {(f.file, f.field): f.line for f in report.findings}
    assert lines[("a.md", "confidence")] == 9
    assert lines[("b.md", "expires")] == 11


# Random entry directories, audited, against a small model of the rules of docs/file-ledger.md.
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
