"""``memledger files …`` through Typer's runner: output and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import worker.output
from tests.ledger.files.helpers import FIXTURES, entry, write_dir
from worker.cli import app

runner = CliRunner()
NOW = ["--now", "2025-03-01"]


def run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["files", *args])
    return result.exit_code, result.output


def test_validate_exit_codes(tmp_path: Path) -> None:
    good, bad = FIXTURES / "valid" / "authorizing.md", FIXTURES / "invalid" / "date-naive.md"
    assert run("validate", str(good), *NOW)[0] == 0
    code, out = run("validate", str(good), str(bad), *NOW)
    assert code == 1
    assert f"{bad}:10: expires: invalid (date-naive):" in out
    assert "fix:" in out
    assert run("validate", str(good), str(tmp_path / "missing.md"), *NOW)[0] == 2
    assert run("validate", *NOW)[0] == 2
    assert run("validate", str(good), "--now", "12:30")[0] == 2


def test_validate_json(tmp_path: Path) -> None:
    code, out = run("validate", str(FIXTURES / "invalid" / "horizon-both.md"), *NOW, "--format", "json")
    assert code == 1
    doc = json.loads(out)
    assert doc["valid"] is False
    assert doc["files"][0]["problems"][0]["check"] == "horizon-both"


def test_validate_a_directory(tmp_path: Path) -> None:
    write_dir(tmp_path, {"a.md": entry(), "b.md": entry(conf="2")})
    code, out = run("validate", str(tmp_path), *NOW)
    assert code == 1 and "a.md: valid" in out and "b.md:8: confidence" in out


def test_audit_exit_codes(tmp_path: Path) -> None:
    clean = write_dir(tmp_path / "clean", {"a.md": entry()})
    assert run("audit", str(clean), "--scope", "project:acme/widgets", *NOW)[0] == 0
    dirty = write_dir(tmp_path / "dirty", {"a.md": entry(), "b.md": entry(expires="2025-02-01")})
    code, out = run("audit", str(dirty), "--scope", "project:acme/widgets", *NOW)
    assert code == 1
    assert "Action-authorizing review (1)" in out and "a.md" in out
    assert run("audit", str(dirty), "--scope", "acme/widgets", *NOW)[0] == 2
    assert run("audit", str(tmp_path / "nope"), "--scope", "project:acme/widgets", *NOW)[0] == 2
    assert run("audit", str(dirty), *NOW)[0] == 2
    assert run("audit", str(dirty), "--scope", "project:acme/widgets", "--format", "xml", *NOW)[0] == 2


def test_audit_json_contract(tmp_path: Path) -> None:
    scenario = FIXTURES / "dirs" / "unrelated-finding"
    code, out = run(
        "audit", str(scenario), "--scope", "project:acme/widgets", "--now", "2025-03-01", "--format", "json"
    )
    assert code == 1
    doc = json.loads(out)
    assert [c["file"] for c in doc["candidates"]] == ["sound.md"]
    assert {(f["file"], f["rule"]) for f in doc["findings"]} >= {
        ("stale.md", "expired"),
        ("elsewhere.md", "out-of-scope"),
    }


@pytest.mark.parametrize(("fmt", "marker"), [("dot", "digraph"), ("mermaid", "flowchart LR")])
def test_audit_graph(fmt: str, marker: str) -> None:
    code, out = run(
        "audit", str(FIXTURES / "dirs" / "cycle-2"), "--scope", "project:acme/widgets", *NOW, "--graph", fmt
    )
    assert code == 1 and out.startswith(marker)


def test_audit_sarif() -> None:
    code, out = run(
        "audit",
        str(FIXTURES / "dirs" / "dangling-target"),
        "--scope",
        "project:acme/widgets",
        *NOW,
        "--format",
        "sarif",
    )
    assert code == 1
    assert json.loads(out)["runs"][0]["results"][0]["ruleId"] == "chain-missing-target"


def test_audit_explain() -> None:
    directory = str(FIXTURES / "dirs" / "unrelated-finding")
    code, out = run("audit", directory, "--scope", "project:acme/widgets", *NOW, "--explain", "sound.md")
    assert code == 0 and "Result: eligible to consider." in out
    code, out = run("audit", directory, "--scope", "project:acme/widgets", *NOW, "--explain", "stale.md")
    assert code == 1 and "[FAIL] current" in out
    assert run("audit", directory, "--scope", "project:acme/widgets", *NOW, "--explain", "nope.md")[0] == 2
    assert run("audit", directory, "--scope", "project:acme/widgets", *NOW, "--explain", "x", "--graph", "dot")[0] == 2


def test_audit_warn_within(tmp_path: Path) -> None:
    write_dir(tmp_path, {"a.md": entry(expires="2025-03-05")})
    code, out = run("audit", str(tmp_path), "--scope", "project:acme/widgets", *NOW, "--warn-within", "7")
    assert code == 0 and "a.md:10: expires-soon" in out
    assert run("audit", str(tmp_path), "--scope", "project:acme/widgets", *NOW, "--warn-within", "-1")[0] == 2


def test_new_copies_the_template(tmp_path: Path) -> None:
    code, out = run("new", "deploy-region", "--dir", str(tmp_path / "memories"), *NOW)
    assert code == 0
    created = tmp_path / "memories" / "deploy-region.md"
    text = created.read_text()
    assert "created: 2025-03-01" in text and "may-this-authorize-action: false" in text
    # Unfilled, it is invalid, and says what to fill in.
    code, out = run("validate", str(created), *NOW)
    assert code == 1
    assert "source-reference-placeholder" in out and "body-empty" in out
    assert run("new", "deploy-region", "--dir", str(tmp_path / "memories"))[0] == 2
    assert run("new", "../escape", "--dir", str(tmp_path / "memories"))[0] == 2


def test_progress_bar_on_a_terminal_keeps_the_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker.output, "is_terminal", lambda: True)
    write_dir(tmp_path, {f"e{i:03d}.md": entry(body=f"Service {i} deploys to eu-west-1.") for i in range(210)})
    code, out = run("audit", str(tmp_path), "--scope", "project:acme/widgets", *NOW)
    assert code == 0
    assert "Action-authorizing review (210)" in out
