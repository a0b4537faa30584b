"""``memledger files …`` through Typer's runner: output, exit codes, every usage error; and lazy imports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import worker.cli.output
from tests.ledger.files.helpers import FIXTURES, SCOPE, entry, write_dir
from worker.cli import app

runner = CliRunner()
AS_OF = ["--as-of", "2025-03-01"]


def run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["files", *args])
    return result.exit_code, result.output


# --------------------------------------------------------------------------- validate


def test_validate_exit_codes(tmp_path: Path) -> None:
    good, bad = FIXTURES / "valid" / "authorizing.md", FIXTURES / "invalid" / "date-format--naive.md"
    assert run("validate", str(good))[0] == 0
    code, out = run("validate", str(good), str(bad))
    assert code == 1
    assert f"{bad}:11: expires: invalid (date-format):" in out
    assert "fix:" in out
    assert run("validate", str(good), str(tmp_path / "missing.md"))[0] == 2
    assert run("validate")[0] == 2


def test_validate_json(tmp_path: Path) -> None:
    code, out = run("validate", str(FIXTURES / "invalid" / "horizon-both.md"), "--format", "json")
    assert code == 1
    doc = json.loads(out)
    assert doc["valid"] is False
    assert doc["files"][0]["problems"][0]["check"] == "horizon-both"


def test_validate_a_directory_recursively(tmp_path: Path) -> None:
    write_dir(tmp_path, {"a.md": entry(), "sub/b.md": entry(conf="2")})
    code, out = run("validate", str(tmp_path))
    assert code == 1 and "a.md: valid" in out and "b.md:9: confidence" in out


# --------------------------------------------------------------------------- audit


def test_audit_exit_codes_and_usage_errors(tmp_path: Path) -> None:
    clean = write_dir(tmp_path / "clean", {"a.md": entry()})
    assert run("audit", str(clean), "--scope", SCOPE, *AS_OF)[0] == 0
    assert run("audit", str(clean), "--scope", "global", *AS_OF)[0] == 1  # a project entry in global context
    assert run("audit", str(clean), *AS_OF)[0] == 0  # no context: structural checks only
    dirty = write_dir(tmp_path / "dirty", {"a.md": entry(), "b.md": entry(expires="2025-02-01")})
    code, out = run("audit", str(dirty), "--scope", SCOPE, *AS_OF)
    assert code == 1
    assert "Action-authorizing review (1)" in out and "a.md" in out
    for bad in (
        ["--scope", "acme/widgets"],
        ["--scope", "project:"],
        ["--as-of", "2025-02-30"],
        ["--as-of", "2025-03-01T00:00:00Z"],
        ["--now", "soon"],
        ["--as-of", "2025-03-01", "--now", "2025-03-01"],
        ["--format", "xml"],
        ["--warn-within", "-1"],
        ["--unknown"],
    ):
        code, _ = run("audit", str(dirty), *bad)
        assert code == 2, bad
    assert run("audit", str(tmp_path / "nope"), "--scope", SCOPE, *AS_OF)[0] == 2


def test_audit_defaults_to_the_memories_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_dir(tmp_path / "memories", {"a.md": entry()})
    monkeypatch.chdir(tmp_path)
    code, out = run("audit", "--scope", SCOPE, *AS_OF, "--format", "markdown")
    assert code == 0 and "- Directory: `memories`\n" in out and "- Result: **PASS**\n" in out


def test_now_takes_an_instant_and_uses_its_utc_day(tmp_path: Path) -> None:
    write_dir(tmp_path, {"a.md": entry(expires="2025-03-01")})
    assert run("audit", str(tmp_path), "--scope", SCOPE, "--now", "2025-03-01T23:59:59Z")[0] == 0
    assert run("audit", str(tmp_path), "--scope", SCOPE, "--now", "2025-03-02T00:30:00+02:00")[0] == 0
    assert run("audit", str(tmp_path), "--scope", SCOPE, "--now", "2025-03-02T00:00:00Z")[0] == 1


def test_output_writes_the_report_and_refuses_an_unwritable_path(tmp_path: Path) -> None:
    write_dir(tmp_path / "m", {"a.md": entry()})
    out = tmp_path / "report.json"
    code, printed = run(
        "audit", str(tmp_path / "m"), "--scope", SCOPE, *AS_OF, "--format", "json", "--output", str(out)
    )
    assert code == 0 and json.loads(out.read_text()) == json.loads(printed)
    code, _ = run("audit", str(tmp_path / "m"), *AS_OF, "--output", str(tmp_path / "no-such-dir" / "r.md"))
    assert code == 2


@pytest.mark.parametrize("dangling", [False, True])
def test_output_never_writes_through_a_symbolic_link(tmp_path: Path, dangling: bool) -> None:
    # Given --output naming a link, to a file elsewhere or to nothing yet
    write_dir(tmp_path / "m", {"a.md": entry()})
    target = tmp_path / "elsewhere" / "precious.txt"
    target.parent.mkdir()
    if not dangling:
        target.write_text("keep me\n")
    link = tmp_path / "report.md"
    link.symlink_to(target)
    for command in (["audit", str(tmp_path / "m"), "--scope", SCOPE, *AS_OF], ["schema"]):
        # When the report is written there
        code, out = run(*command, "--output", str(link))
        # Then it is a usage error that says why, and the link's target is untouched (or still absent)
        assert code == 2 and "symbolic link" in out and "Traceback" not in out, out
        assert (target.read_text() == "keep me\n") if not dangling else not target.exists()
        assert link.is_symlink()


def test_new_never_writes_through_a_symbolic_link(tmp_path: Path) -> None:
    memories = tmp_path / "memories"
    memories.mkdir()
    target = tmp_path / "elsewhere.md"
    (memories / "deploy-region.md").symlink_to(target)  # dangling: exists() is False
    code, out = run("new", "deploy-region", "--dir", str(memories))
    assert code == 2 and "symbolic link" in out and not target.exists()


def test_audit_json_contract(tmp_path: Path) -> None:
    files = {"sound.md": entry(), "stale.md": entry(expires="2025-02-01"), "elsewhere.md": entry(sref="acme")}
    code, out = run("audit", str(write_dir(tmp_path, files)), "--scope", SCOPE, *AS_OF, "--format", "json")
    assert code == 1
    doc = json.loads(out)
    assert [c["file"] for c in doc["candidates"]] == ["sound.md"]
    assert {(f["file"], f["rule"]) for f in doc["findings"]} == {
        ("stale.md", "expired"),
        ("elsewhere.md", "out-of-scope"),
    }
    assert all(isinstance(f["message"], str) and f["message"] for f in doc["findings"])


@pytest.mark.parametrize(("fmt", "marker"), [("dot", "digraph"), ("mermaid", "flowchart LR")])
def test_audit_graph(tmp_path: Path, fmt: str, marker: str) -> None:
    write_dir(tmp_path, {"a.md": entry(sup="b.md"), "b.md": entry(sup="a.md")})
    code, out = run("audit", str(tmp_path), "--scope", SCOPE, *AS_OF, "--graph", fmt)
    assert code == 1 and out.startswith(marker) and "a.md" in out


def test_audit_sarif(tmp_path: Path) -> None:
    write_dir(tmp_path, {"a.md": entry(sup="gone.md")})
    code, out = run("audit", str(tmp_path), "--scope", SCOPE, *AS_OF, "--format", "sarif")
    assert code == 1
    assert json.loads(out)["runs"][0]["results"][0]["ruleId"] == "chain-missing-target"


def test_audit_explain(tmp_path: Path) -> None:
    directory = str(write_dir(tmp_path, {"sound.md": entry(), "sub/stale.md": entry(expires="2025-02-01")}))
    code, out = run("audit", directory, "--scope", SCOPE, *AS_OF, "--explain", "sound.md")
    assert code == 0 and "Result: eligible to consider." in out
    code, out = run("audit", directory, "--scope", SCOPE, *AS_OF, "--explain", "sub/stale.md")
    assert code == 1 and "[FAIL] current" in out
    assert run("audit", directory, "--scope", SCOPE, *AS_OF, "--explain", "stale.md")[0] == 1  # unique basename
    assert run("audit", directory, "--scope", SCOPE, *AS_OF, "--explain", "nope.md")[0] == 2
    assert run("audit", directory, "--scope", SCOPE, *AS_OF, "--explain", "x", "--graph", "dot")[0] == 2


def test_audit_warn_within(tmp_path: Path) -> None:
    write_dir(tmp_path, {"a.md": entry(expires="2025-03-05")})
    code, out = run("audit", str(tmp_path), "--scope", SCOPE, *AS_OF, "--warn-within", "7")
    assert code == 0 and "a.md:11: expires-soon" in out


def test_progress_bar_on_a_terminal_keeps_the_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker.cli.output, "is_terminal", lambda: True)
    write_dir(tmp_path, {f"e{i:03d}.md": entry(fact=f"Service {i} deploys to eu-west-1.") for i in range(210)})
    code, out = run("audit", str(tmp_path), "--scope", SCOPE, *AS_OF)
    assert code == 0
    assert "Action-authorizing review (210)" in out


# --------------------------------------------------------------------------- new / schema


def test_new_writes_the_template(tmp_path: Path) -> None:
    code, out = run("new", "deploy-region", "--dir", str(tmp_path / "memories"), "--now", "2025-03-01")
    assert code == 0
    created = tmp_path / "memories" / "deploy-region.md"
    text = created.read_text()
    front = text.split("---\n")[1]
    keys = [line.split(":")[0] for line in front.splitlines() if line and not line.startswith(("#", " "))]
    assert keys[0] == "fact"
    assert 'created: "2025-03-01"' in text
    assert "superseded-by: null" in text and "may-this-authorize-action: false" in text
    # Unfilled, it is invalid and says what to fill in.
    code, out = run("validate", str(created))
    assert code == 1
    assert "fact-placeholder" in out and "source-reference-placeholder" in out and "date-format" in out
    assert run("new", "deploy-region", "--dir", str(tmp_path / "memories"))[0] == 2
    assert run("new", "../escape", "--dir", str(tmp_path / "memories"))[0] == 2


def test_new_without_a_name_prints_the_template() -> None:
    code, out = run("new", "--now", "2025-03-01")
    assert code == 0 and out.startswith("---\n") and 'created: "2025-03-01"' in out


def test_schema_prints_draft_2020_12(tmp_path: Path) -> None:
    code, out = run("schema", "--output", str(tmp_path / "schema.json"))
    assert code == 0
    doc = json.loads(out)
    assert doc["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert json.loads((tmp_path / "schema.json").read_text()) == doc


def test_files_commands_do_not_import_the_worker_stack(tmp_path: Path) -> None:
    # `memledger files …` is what CI runs on every push: it must not pay for the SDK, the queue or the servers.
    write_dir(tmp_path, {"a.md": entry()})
    code = (
        "import sys\n"
        "from worker import cli\n"
        f"sys.argv = ['memledger', 'files', 'audit', {str(tmp_path)!r}, '--as-of', '2025-03-01']\n"
        "try:\n"
        "    cli.main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = sorted(m for m in ('anthropic', 'dramatiq', 'redis', 'consolidation', 'uvicorn', 'starlette', 'mcp')\n"
        "               if m in sys.modules)\n"
        "print('HEAVY', heavy)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert "HEAVY []" in proc.stdout, proc.stdout + proc.stderr
    assert "Action-authorizing review (1)" in proc.stdout


def test_empty_directory_passes_with_exit_0(tmp_path: Path) -> None:
    code, out = run("audit", str(tmp_path), "--scope", "global", *AS_OF, "--format", "markdown")
    assert code == 0
    assert "- Result: **PASS**\n" in out and "| Entries scanned | 0 |" in out


def test_reference_cases_through_the_command_line(tmp_path: Path) -> None:
    # A missing source and a wrong project: invalid + missing source + a scope violation naming the audit context.
    missing = entry(fact="Missing source", auth="false").replace(
        'source:\n  kind: user-said\n  reference: "https://tracker.example/ACME-42"\n', ""
    )
    write_dir(
        tmp_path, {"missing-source.md": missing, "wrong-scope.md": entry(fact="Wrong scope", sref="project:other")}
    )
    code, out = run("audit", str(tmp_path), "--scope", "project:expected", *AS_OF, "--format", "markdown")
    assert code == 1
    assert "| Invalid entries | 1 |\n| Expired entries | 0 |\n| Review overdue | 0 |\n| Missing sources | 1 |" in out
    assert "- `wrong-scope.md`: scope is `project:other`, audit context is `expected`.\n" in out
    assert "- `missing-source.md` has no concrete, retrievable source reference.\n" in out
