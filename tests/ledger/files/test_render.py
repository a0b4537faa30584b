"""Output formats: JSON with the public rule ids, SARIF 2.1.0, graphs, explain."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger.files import audit_directory
from ledger.files.audit import AuditReport
from ledger.files.explain import explain
from ledger.files.graph import graph_dot, graph_mermaid, graph_nodes
from ledger.files.model import ELIGIBILITY_NOTICE, RULE_IDS
from ledger.files.render import REVIEW_HEADING, audit_json, audit_text, explain_json, explain_text
from ledger.files.sarif import audit_sarif
from tests.ledger.files.helpers import AS_OF, SCOPE, entry, write_dir


@pytest.fixture
def report(tmp_path: Path) -> AuditReport:
    files = {
        "old.md": entry(sup="head.md", fact="Deploys go to eu-west-2."),
        "head.md": entry(),
        "stale.md": entry(expires="2025-02-01", fact="Deploys are frozen in January."),
        "loop.md": entry(sup="loop.md", fact="Deploys loop."),
        "dangling.md": entry(sup="gone.md", fact="Deploys dangle."),
        "bad.md": entry(ref="from context", fact="Deploys are bad."),
    }
    directory = write_dir(tmp_path / "memories", files)
    return audit_directory(directory, scope=SCOPE, as_of=AS_OF, warn_within_days=400)


def test_json_has_the_spec_9_shape(report: AuditReport) -> None:
    doc = json.loads(audit_json(report))
    assert [c["file"] for c in doc["candidates"]] == ["head.md"]
    assert doc["candidates"][0]["source"] == {"kind": "user-said", "reference": "https://tracker.example/ACME-42"}
    assert doc["candidates"][0]["supersedes"] == ["old.md"]
    assert all({"file", "rule", "message"} <= set(f) for f in doc["findings"])
    assert {f["rule"] for f in doc["findings"]} <= set(RULE_IDS)
    assert doc["notice"] == ELIGIBILITY_NOTICE
    assert doc["as_of"] == "2025-03-01" and doc["scope"] == SCOPE and doc["result"] == "REVIEW REQUIRED"
    assert doc["candidates"][0]["fact"] == "Production deploys of acme/widgets go to eu-west-1."
    assert doc["summary"]["counts"]["Broken supersession chains"] == 2


def test_text_lists_candidates_under_the_heading_with_their_source(report: AuditReport) -> None:
    text = audit_text(report)
    review = text[text.index(REVIEW_HEADING) :]
    assert "head.md" in review and "https://tracker.example/ACME-42" in review
    assert "never standing permission" in review
    assert "stale.md" not in review
    assert "stale.md:11: expired" in text
    assert "Result: REVIEW REQUIRED" in text and "old.md → head.md" in text


def test_sarif_is_2_1_0_with_stable_rule_ids_and_lines(report: AuditReport) -> None:
    doc = json.loads(audit_sarif(report))
    assert doc["version"] == "2.1.0"
    run = doc["runs"][0]
    rules = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert rules[: len(RULE_IDS)] == list(RULE_IDS)
    for result in run["results"]:
        assert rules[result["ruleIndex"]] == result["ruleId"]
        region = result["locations"][0]["physicalLocation"]["region"]
        assert region["startLine"] >= 1
    by_rule = {r["ruleId"]: r for r in run["results"]}
    assert by_rule["expired"]["locations"][0]["physicalLocation"]["region"]["startLine"] == 11
    assert by_rule["chain-cycle"]["locations"][0]["physicalLocation"]["region"]["startLine"] == 12
    uri = by_rule["expired"]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert uri.endswith("memories/stale.md")
    assert run["properties"]["candidates"] == [
        {"file": "head.md", "sourceReference": "https://tracker.example/ACME-42"}
    ]


def test_graph_classes(report: AuditReport) -> None:
    nodes, edges = graph_nodes(report)
    classes = {n.name: n.cls for n in nodes}
    assert classes == {
        "bad.md": "invalid",
        "dangling.md": "superseded",
        "head.md": "candidate",
        "loop.md": "cycle",
        "old.md": "superseded",
        "stale.md": "stale-head",
        "gone.md": "missing",
    }
    assert ("old.md", "head.md", False) in edges and ("loop.md", "loop.md", True) in edges


def test_dot_and_mermaid_render_every_node(report: AuditReport) -> None:
    dot, mermaid = graph_dot(report), graph_mermaid(report)
    assert dot.startswith("digraph") and dot.rstrip().endswith("}")
    assert mermaid.startswith("flowchart LR")
    for name in ("head.md", "gone.md", "loop.md", "stale.md"):
        assert name in dot and name in mermaid
    assert "expired head" in dot


def test_explain_candidate_passes_every_criterion(report: AuditReport) -> None:
    x = explain(report, "head.md")
    assert x.eligible and all(c.passed for c in x.checks)
    assert "Re-read: https://tracker.example/ACME-42" in explain_text(x, report)


def test_explain_shows_each_failure(report: AuditReport) -> None:
    x = explain(report, "stale.md")
    failed = {c.id for c in x.checks if not c.passed}
    assert failed == {"current", "no-findings"}
    doc = json.loads(explain_json(explain(report, "bad.md"), report))
    assert doc["eligible"] is False
    assert {c["id"] for c in doc["criteria"] if not c["passed"]} == {
        "valid",
        "source-reference",
        "no-findings",
    }
    assert {c.id for c in explain(report, "old.md").checks if not c.passed} == {"not-superseded"}


def test_graph_link_to_an_invalid_entry_points_at_that_entry(tmp_path: Path) -> None:
    files = {"a.md": entry(sup="b.md"), "b.md": entry(conf="5")}
    report = audit_directory(write_dir(tmp_path / "g", files), scope=SCOPE, as_of=AS_OF)
    nodes, edges = graph_nodes(report)
    assert sorted((n.name, n.cls) for n in nodes) == [("a.md", "superseded"), ("b.md", "invalid")]
    assert edges == [("a.md", "b.md", True)]
    assert graph_dot(report).count("[label=") == 2


def test_text_header_names_the_trust_context(tmp_path: Path) -> None:
    directory = write_dir(tmp_path / "h", {"a.md": entry()})
    plain = audit_text(audit_directory(directory, scope=None, as_of=AS_OF, directory_text="h"))
    scoped = audit_text(audit_directory(directory, scope="global", as_of=AS_OF, directory_text="h"))
    assert plain.startswith("Audit of h in no trust context (structural checks only) as of 2025-03-01\n")
    assert scoped.startswith("Audit of h in trust context global as of 2025-03-01\n")
    assert "Result: PASS" in plain and "Result: REVIEW REQUIRED" in scoped
