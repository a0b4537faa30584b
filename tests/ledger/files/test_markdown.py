"""``--format markdown``: the reference tool's report, byte for byte, through the real command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ledger.files import audit_directory, audit_markdown
from tests.ledger.files.helpers import AS_OF, FIXTURES, SCOPE, entry, write_dir

REFERENCE = FIXTURES / "reference"
EXAMPLES = FIXTURES / "reference-examples"
MEMLEDGER = str(Path(sys.executable).with_name("memledger"))


def memledger(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMLEDGER_")}
    return subprocess.run([MEMLEDGER, "files", *args], cwd=cwd, capture_output=True, text=True, env=env, check=False)


@pytest.mark.parametrize(
    ("root", "directory", "scope"),
    [
        (REFERENCE, "memories", "project:github.com/acme/widgets"),
        (EXAMPLES, "examples/memories", "project:github.com/runsagents/memory-ledger"),
    ],
    ids=["our-fixture", "reference-examples"],
)
def test_markdown_report_matches_the_golden_file_byte_for_byte(
    root: Path, directory: str, scope: str, tmp_path: Path
) -> None:
    # Given a directory in the reference's format and its expected report (relative path, as a CI step gives it)
    golden = (root / "audit-report.md").read_bytes()
    out = tmp_path / "report.md"
    # When it is audited as of the fixture's date
    run = memledger(
        "audit",
        directory,
        "--as-of",
        "2026-07-14",
        "--scope",
        scope,
        "--format",
        "markdown",
        "--output",
        str(out),
        cwd=root,
    )
    # Then stdout and --output are the golden report, and the exit status says review is required
    assert run.returncode == 1, run.stderr
    assert run.stderr == ""
    assert run.stdout.encode() == golden
    assert out.read_bytes() == golden


def test_json_verdicts_agree_with_the_markdown_report() -> None:
    run = memledger(
        "audit",
        "memories",
        "--now",
        "2026-07-14",
        "--scope",
        "project:github.com/acme/widgets",
        "--format",
        "json",
        cwd=REFERENCE,
    )
    assert run.returncode == 1, run.stderr
    doc = json.loads(run.stdout)
    assert [c["file"] for c in doc["candidates"]] == ["04-current-test-command.md"]
    assert [(f["file"], f["rule"]) for f in doc["findings"]] == [("02-expired-publish-approval.md", "expired")]
    assert all(f["message"] for f in doc["findings"])
    assert doc["result"] == "REVIEW REQUIRED"
    assert doc["summary"]["counts"]["Superseded entries"] == 1
    assert doc["chains"] == [
        {"entries": ["03-old-test-command.md", "04-current-test-command.md"], "broken": None, "target": None}
    ]


def test_the_day_after_expiry_the_report_changes_and_before_it_passes(tmp_path: Path) -> None:
    # Given the fixture without its expired approval
    for name in ("01-reply-style.md", "03-old-test-command.md", "04-current-test-command.md"):
        (tmp_path / name).write_bytes((REFERENCE / "memories" / name).read_bytes())
    scope = "project:github.com/acme/widgets"
    # When it is audited on the last day its entries hold, it passes; the day after, the review-by is overdue
    ok = memledger("audit", ".", "--as-of", "2026-10-09", "--scope", scope, "--format", "markdown", cwd=tmp_path)
    late = memledger("audit", ".", "--as-of", "2026-10-10", "--scope", scope, "--format", "markdown", cwd=tmp_path)
    assert ok.returncode == 0 and "- Result: **PASS**\n" in ok.stdout
    assert late.returncode == 1 and "- Result: **REVIEW REQUIRED**\n" in late.stdout
    assert "- `01-reply-style.md` was due for review after `2026-10-09`; re-verify before trusting it.\n" in late.stdout


def test_empty_report_without_a_trust_context(tmp_path: Path) -> None:
    report = audit_directory(tmp_path, scope=None, as_of=AS_OF, directory_text="memories")
    assert audit_markdown(report) == (
        "# Memory ledger audit\n"
        "\n"
        "- Directory: `memories`\n"
        "- As of: `2025-03-01`\n"
        "- Trust context: not supplied (structural scope checks only)\n"
        "- Result: **PASS**\n"
        "\n"
        "## Summary\n"
        "\n"
        "| Check | Count |\n"
        "| --- | ---: |\n"
        "| Entries scanned | 0 |\n"
        "| Invalid entries | 0 |\n"
        "| Expired entries | 0 |\n"
        "| Review overdue | 0 |\n"
        "| Missing sources | 0 |\n"
        "| Scope violations | 0 |\n"
        "| Superseded entries | 0 |\n"
        "| Broken supersession chains | 0 |\n"
        "| Action-eligible entries | 0 |\n"
        "\n"
        "## Invalid entries\n\n- None.\n\n"
        "## Expired or overdue\n\n- None.\n\n"
        "## Missing sources\n\n- None.\n\n"
        "## Scope violations\n\n- None.\n\n"
        "## Supersession chains\n\n- None.\n\n"
        "## Broken supersession chains\n\n- None.\n\n"
        "## Action-authorizing review\n\n"
        "- No current, in-scope entry is eligible to authorize action.\n"
    )


def test_every_section_lists_in_sorted_id_order(tmp_path: Path) -> None:
    files = {
        "a-nosrc.md": entry(ref="TODO", auth="false"),
        "b-due.md": entry(expires=None, review="2025-02-01", auth="false"),
        "c-old.md": entry(expires="2025-02-10"),
        "d-other.md": entry(sref="acme/gadgets"),
        "e-global.md": entry(level="global", sref=None),
        "f-loop.md": entry(sup="g-loop.md"),
        "g-loop.md": entry(sup="f-loop.md"),
        "h-dangling.md": entry(sup="gone.md"),
        "i-good.md": entry(),
    }
    report = audit_directory(write_dir(tmp_path, files), scope=SCOPE, as_of=AS_OF, directory_text="m")
    text = audit_markdown(report)
    sections = dict(part.split("\n\n", 1) for part in text.split("\n## ")[1:])
    assert sections["Invalid entries"] == (
        "- `a-nosrc.md`: source.reference 'TODO' is a placeholder, not a source anyone can re-read\n"
        "- `e-global.md`: only a project-scoped entry with an exact scope.reference can authorize an action\n"
    )
    assert sections["Expired or overdue"] == (
        "- `c-old.md` expired after `2025-02-10`; do not trust it or let it authorize action.\n"
        "- `b-due.md` was due for review after `2025-02-01`; re-verify before trusting it.\n"
    )
    assert sections["Missing sources"] == "- `a-nosrc.md` has no concrete, retrievable source reference.\n"
    assert sections["Scope violations"] == (
        "- `e-global.md`: scope declaration is invalid.\n"
        "- `d-other.md`: scope is `acme/gadgets`, audit context is `acme/widgets`.\n"
    )
    # docs/file-ledger.md (lists in sorted id order) over the reference, which lists a cycle no root leads into last.
    assert sections["Supersession chains"] == ("- `f-loop.md` → `g-loop.md` → `f-loop.md`\n- `h-dangling.md`\n")
    assert sections["Broken supersession chains"] == (
        "- `f-loop.md`: cycle returns to `f-loop.md`.\n- `h-dangling.md`: target `gone.md` does not exist.\n"
    )
    assert sections["Action-authorizing review"] == (
        "- `i-good.md` is structurally eligible, current, and in scope. "
        "Re-read its source before acting; the flag is not standing permission.\n"
    )
    assert "| Superseded entries | 3 |" in sections["Summary"]
    assert "| Invalid entries | 2 |" in sections["Summary"] and "| Scope violations | 2 |" in sections["Summary"]


def test_invalid_entry_messages_are_joined_by_semicolons(tmp_path: Path) -> None:
    files = {"x.md": entry(conf="2", created="12:30")}
    report = audit_directory(write_dir(tmp_path, files), scope=SCOPE, as_of=AS_OF)
    line = next(x for x in audit_markdown(report).splitlines() if x.startswith("- `x.md`: "))
    assert line == "- `x.md`: confidence 2 is outside 0 to 1; created: '12:30' is a time of day (YYYY-MM-DD expected)"
