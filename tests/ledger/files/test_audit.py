"""The auditor: every rule id, chains, candidates and the scenarios under fixtures/dirs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ledger.files import audit_directory
from ledger.files.audit import AuditUsageError, entry_files
from ledger.files.dates import parse_now
from ledger.files.model import RULE_IDS
from tests.ledger.files.helpers import FIXTURES, NOW, SCOPE, entry, write_dir

SCENARIOS = sorted(p for p in (FIXTURES / "dirs").iterdir() if p.is_dir())


def rules_by_file(directory: Path, **kwargs: object) -> tuple[dict[str, set[str]], list[str]]:
    report = audit_directory(directory, scope=str(kwargs.pop("scope", SCOPE)), now=NOW, **kwargs)  # type: ignore[arg-type]
    found: dict[str, set[str]] = {}
    for f in report.findings:
        found.setdefault(f.file, set()).add(f.rule)
    return found, [c.entry.name for c in report.candidates]


@pytest.mark.parametrize("directory", SCENARIOS, ids=lambda p: p.name)
def test_scenario(directory: Path) -> None:
    expected = json.loads((directory / "expected.json").read_text())
    report = audit_directory(directory, scope=expected["scope"], now=parse_now(expected["now"]))
    assert sorted(c.entry.name for c in report.candidates) == expected["candidates"]
    assert sorted({(f.file, f.rule) for f in report.findings}) == sorted(tuple(x) for x in expected["findings"])


def test_scenarios_cover_chains_one_to_five_and_cycles_one_to_three() -> None:
    names = {p.name for p in SCENARIOS}
    assert {f"chain-{n}" for n in range(1, 6)} <= names
    assert {f"cycle-{n}" for n in range(1, 4)} <= names
    assert {"shared-target", "dangling-target", "unrelated-finding"} <= names


# ------------------------------------------------------------------ one test per rule id, both ways


def test_every_rule_id_is_tested_here() -> None:
    tested = {"invalid", "missing-source", "out-of-scope", "expired", "review-overdue"}
    tested |= {"chain-missing-target", "chain-cycle"}
    assert tested == set(RULE_IDS)


def test_invalid(tmp_path: Path) -> None:
    write_dir(tmp_path, {"bad.md": entry(conf="2"), "good.md": entry()})
    found, candidates = rules_by_file(tmp_path)
    assert found == {"bad.md": {"invalid"}}
    assert candidates == ["good.md"]


def test_missing_source(tmp_path: Path) -> None:
    write_dir(tmp_path, {"bad.md": entry(ref="from context", auth="false"), "good.md": entry(auth="false")})
    found, _ = rules_by_file(tmp_path)
    assert found == {"bad.md": {"missing-source"}}


def test_out_of_scope(tmp_path: Path) -> None:
    write_dir(
        tmp_path,
        {
            "other.md": entry(sref="acme/gadgets"),
            "mine.md": entry(),
            "all.md": entry(level="global", sref=None, auth="false"),
        },
    )
    found, candidates = rules_by_file(tmp_path)
    assert found == {"other.md": {"out-of-scope"}}
    assert candidates == ["mine.md"]
    # Scope references compare exactly: case and prefixes matter.
    found, _ = rules_by_file(tmp_path, scope="project:Acme/Widgets")
    assert found == {"other.md": {"out-of-scope"}, "mine.md": {"out-of-scope"}}


def test_expired_at_the_instant_of_expiry(tmp_path: Path) -> None:
    write_dir(tmp_path, {"today.md": entry(expires="2025-03-01"), "tomorrow.md": entry(expires="2025-03-02")})
    found, candidates = rules_by_file(tmp_path)
    assert found == {"today.md": {"expired"}}
    assert candidates == ["tomorrow.md"]


def test_review_overdue(tmp_path: Path) -> None:
    files = {
        "due.md": entry(expires=None, review="2025-03-01", auth="false"),
        "later.md": entry(expires=None, review="2025-03-02", auth="false"),
    }
    found, _ = rules_by_file(write_dir(tmp_path, files))
    assert found == {"due.md": {"review-overdue"}}


def test_chain_missing_target(tmp_path: Path) -> None:
    write_dir(
        tmp_path, {"a.md": entry(sup="b.md"), "b.md": entry(sup="nope.md"), "ok.md": entry(sup="c.md"), "c.md": entry()}
    )
    found, candidates = rules_by_file(tmp_path)
    assert found == {"b.md": {"chain-missing-target"}}
    assert candidates == ["c.md"]


def test_chain_cycle(tmp_path: Path) -> None:
    write_dir(tmp_path, {"a.md": entry(sup="b.md"), "b.md": entry(sup="a.md"), "c.md": entry(sup="c.md")})
    found, candidates = rules_by_file(tmp_path)
    assert found == {"a.md": {"chain-cycle"}, "b.md": {"chain-cycle"}, "c.md": {"chain-cycle"}}
    assert candidates == []


# ------------------------------------------------------------------ candidates


def test_candidate_lists_its_predecessors_and_source(tmp_path: Path) -> None:
    write_dir(tmp_path, {"v1.md": entry(sup="v2.md"), "v2.md": entry(sup="v3.md"), "v3.md": entry()})
    report = audit_directory(tmp_path, scope=SCOPE, now=NOW)
    [candidate] = report.candidates
    assert candidate.entry.name == "v3.md"
    assert candidate.predecessors == ("v1.md", "v2.md")
    assert candidate.entry.source_reference == "https://tracker.example/ACME-42"


def test_superseded_entry_is_never_a_candidate_even_if_flagged(tmp_path: Path) -> None:
    write_dir(tmp_path, {"old.md": entry(sup="new.md"), "new.md": entry(auth="false")})
    found, candidates = rules_by_file(tmp_path)
    assert found == {} and candidates == []


def test_unflagged_and_global_entries_are_not_candidates(tmp_path: Path) -> None:
    write_dir(tmp_path, {"a.md": entry(auth="false"), "g.md": entry(level="global", sref=None, auth="false")})
    assert rules_by_file(tmp_path) == ({}, [])


def test_warn_within_notices_do_not_count_as_findings(tmp_path: Path) -> None:
    files = {
        "soon.md": entry(expires="2025-03-10"),
        "review.md": entry(expires=None, review="2025-03-05", auth="false"),
        "far.md": entry(expires="2025-12-31"),
        "old.md": entry(expires="2025-03-03", sup="far.md"),
    }
    report = audit_directory(write_dir(tmp_path, files), scope=SCOPE, now=NOW, warn_within_days=14)
    assert report.findings == []
    assert sorted((n.file, n.kind) for n in report.notices) == [
        ("review.md", "review-due-soon"),
        ("soon.md", "expires-soon"),
    ]


def test_findings_point_at_the_offending_line(tmp_path: Path) -> None:
    write_dir(tmp_path, {"x.md": entry(expires="2025-02-01", sref="acme/gadgets")})
    report = audit_directory(tmp_path, scope=SCOPE, now=NOW)
    lines = {f.rule: f.line for f in report.findings}
    assert lines == {"expired": 10, "out-of-scope": 7}


# ------------------------------------------------------------------ the directory


def test_only_markdown_entries_are_read(tmp_path: Path) -> None:
    write_dir(tmp_path, {"a.md": entry(), "README.md": "# Memories\n", "notes.txt": "x", ".hidden.md": "x"})
    (tmp_path / "sub.md").mkdir()
    (tmp_path / "sub.md" / "inner.md").write_text(entry())
    assert [p.name for p in entry_files(tmp_path)] == ["a.md"]


@pytest.mark.skipif(os.name != "posix", reason="symlinks")
def test_unreadable_entry_is_an_invalid_finding(tmp_path: Path) -> None:
    (tmp_path / "broken.md").symlink_to(tmp_path / "nowhere.md")
    found, _ = rules_by_file(tmp_path)
    assert found == {"broken.md": {"invalid"}}


@pytest.mark.parametrize("scope", ["acme/widgets", "account:local", "project:", "project: acme", ""])
def test_bad_scope_is_a_usage_error(tmp_path: Path, scope: str) -> None:
    with pytest.raises(AuditUsageError):
        audit_directory(tmp_path, scope=scope, now=NOW)


def test_missing_directory_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(AuditUsageError):
        audit_directory(tmp_path / "nope", scope=SCOPE, now=NOW)
