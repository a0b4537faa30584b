"""The file ledger never follows a symbolic link: audit, validate, export and import, library and CLI.

Under the audited directory: ``link.md`` points to a valid, action-authorizing entry outside it,
``passwd.md`` to ``/etc/passwd``, ``dangling.md`` to nothing, and ``shared`` (a directory link)
to the outside directory. Each is an invalid entry with the ``symbolic-link`` check, is never a
candidate, is never imported, and its target is never opened: every ``open`` of a link's path
(seen through an audit hook) must carry ``O_NOFOLLOW``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ledger import open_ledger
from ledger.files import audit_directory, read_entry, validate
from ledger.files.entry import SYMBOLIC_LINK
from ledger.files.exchange import export_scope, import_directory
from ledger.files.markdown import audit_markdown
from tests.ledger.files.helpers import AS_OF, FACT, SCOPE, entry, write_dir
from worker.cli import app

SECRET_FACT = "The deploy key for acme/widgets is kept in vault path ops/deploy"
LINKS = ["dangling.md", "link.md", "passwd.md", "shared"]

_opens: list[tuple[str, int | None]] = []
_recording: list[bool] = [False]


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if _recording[0] and event == "open" and isinstance(args[0], str | bytes | os.PathLike):
        _opens.append((os.fsdecode(args[0]), args[2] if isinstance(args[2], int) else None))


sys.addaudithook(_hook)


@pytest.fixture
def opens() -> Iterator[list[tuple[str, int | None]]]:
    """Every file path opened while the test runs, with its os-level flags."""
    _opens.clear()
    _recording[0] = True
    yield _opens
    _recording[0] = False


def no_link_followed(opens: list[tuple[str, int | None]], memories: Path) -> None:
    for path, flags in opens:
        if Path(path).is_symlink():
            assert flags is not None and flags & os.O_NOFOLLOW, f"{path} was opened without O_NOFOLLOW"
        assert not path.startswith(str(memories.parent / "outside")) and path != "/etc/passwd", path


@pytest.fixture
def memories(tmp_path: Path) -> Path:
    outside = write_dir(tmp_path / "outside", {"secret.md": entry(fact=SECRET_FACT)})
    directory = write_dir(tmp_path / "memories", {"a.md": entry()})
    (directory / "link.md").symlink_to(Path("..") / "outside" / "secret.md")
    (directory / "passwd.md").symlink_to("/etc/passwd")
    (directory / "dangling.md").symlink_to(directory / "missing.md")
    (directory / "shared").symlink_to(outside, target_is_directory=True)
    return directory


def link_problems(report: Any) -> dict[str, str]:
    return {
        name: problem.message
        for name, e in report.entries.items()
        for problem in e.problems
        if problem.check == SYMBOLIC_LINK
    }


def test_audit_reports_every_link_as_invalid_and_reads_none(memories: Path, opens: list[Any]) -> None:
    report = audit_directory(memories, scope=SCOPE, as_of=AS_OF)
    assert list(report.entries) == ["a.md", *LINKS]  # the directory link is not entered
    assert sorted(link_problems(report)) == LINKS and report.invalid == LINKS
    assert [c.entry.name for c in report.candidates] == ["a.md"]
    assert report.blocking
    assert "symbolic link" in link_problems(report)["link.md"]
    markdown = audit_markdown(report)
    assert SECRET_FACT not in markdown and "root:" not in markdown
    review = markdown.split("## Action-authorizing review", 1)[1]
    assert "`a.md`" in review and "link.md" not in review and "secret.md" not in review
    assert "- `link.md`: the entry is a symbolic link" in markdown
    no_link_followed(opens, memories)


def test_read_entry_and_validate_refuse_a_link(memories: Path, opens: list[Any]) -> None:
    for name in LINKS:
        got = read_entry(memories / name, name=name)
        problems = validate(got)
        assert [p.check for p in problems] == [SYMBOLIC_LINK], name
        assert got.fact is None and got.digest == ""
    no_link_followed(opens, memories)


def test_import_never_proposes_a_link(memories: Path, tmp_path: Path, opens: list[Any]) -> None:
    led = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}", account="local")
    try:
        result = import_directory(led, memories, scope=SCOPE, as_of=AS_OF, now=datetime(2025, 3, 1, tzinfo=UTC))
        assert [i.name for i in result.imported] == ["a.md"]
        skipped = {s.name: s.reason for s in result.not_eligible}
        assert sorted(skipped) == LINKS and all("symbolic link" in r for r in skipped.values())
        assert [r.body for r in led.records(led.scope_key)] == [FACT]
    finally:
        led.close()
    no_link_followed(opens, memories)


def test_export_never_writes_through_a_link(tmp_path: Path) -> None:
    led = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}", account="local")
    try:
        pin = led.save("I prefer metric units")
        other = led.save("My deploy region is eu-west-1")
        victim = tmp_path / "victim.txt"
        victim.write_text("precious\n")
        out = tmp_path / "out"
        out.mkdir()
        (out / f"{pin.id}.md").symlink_to(victim)
        result = export_scope(led, led.scope_key, out, now=datetime.now(UTC))
    finally:
        led.close()
    assert victim.read_text() == "precious\n" and (out / f"{pin.id}.md").is_symlink()
    assert result.written == [f"{other.id}.md"]
    assert [(s.name, s.reason) for s in result.skipped] == [
        (pin.id, f"{pin.id}.md is a symbolic link: not written through")
    ]


# --------------------------------------------------------------------------- the command line
runner = CliRunner()
AS_OF_ARGS = ["--as-of", AS_OF.isoformat()]


def test_cli_validate_refuses_a_link_with_a_clear_message(memories: Path) -> None:
    for name in LINKS:
        result = runner.invoke(app, ["files", "validate", str(memories / name)])
        assert result.exit_code == 1, result.output
        assert f"{memories / name}:1: file: invalid (symbolic-link): the entry is a symbolic link" in result.output
        assert "memledger never follows links" in result.output and "fix:" in result.output
        assert SECRET_FACT not in result.output and "root:" not in result.output
    whole = runner.invoke(app, ["files", "validate", str(memories), "--format", "json"])
    assert whole.exit_code == 1
    files = {Path(f["file"]).name: f for f in json.loads(whole.output)["files"]}
    assert files["a.md"]["valid"] is True
    assert all(files[name]["problems"][0]["check"] == SYMBOLIC_LINK for name in LINKS)


def test_cli_audit_lists_links_as_invalid_never_for_review(memories: Path) -> None:
    md = runner.invoke(app, ["files", "audit", str(memories), "--scope", SCOPE, "--format", "markdown", *AS_OF_ARGS])
    assert md.exit_code == 1 and "**REVIEW REQUIRED**" in md.output
    review = md.output.split("## Action-authorizing review", 1)[1]
    assert "link.md" not in review and SECRET_FACT not in md.output
    as_json = runner.invoke(app, ["files", "audit", str(memories), "--scope", SCOPE, "--format", "json", *AS_OF_ARGS])
    doc = json.loads(as_json.output)
    assert [c["file"] for c in doc["candidates"]] == ["a.md"]
    assert sorted(f["file"] for f in doc["findings"] if f["rule"] == "invalid") == LINKS


def test_cli_import_and_export_leave_links_alone(memories: Path, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    imported = runner.invoke(
        app, ["files", "import", str(memories), "--scope", SCOPE, "--now", "2025-03-01", "--database-url", db,
              "--format", "json"],
    )  # fmt: skip
    assert imported.exit_code == 0, imported.output
    doc = json.loads(imported.output)
    assert [i["file"] for i in doc["imported"]] == ["a.md"]
    assert sorted(s["file"] for s in doc["notEligible"]) == LINKS
    led = open_ledger(db, account="local")
    try:
        assert SECRET_FACT not in {r.body for r in led.records(led.scope_key)}
    finally:
        led.close()
    (tmp_path / "export").mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    led = open_ledger(db, account="local")
    try:
        pin_id = led.save("I prefer metric units").id
    finally:
        led.close()
    (tmp_path / "export" / f"{pin_id}.md").symlink_to(victim)
    exported = runner.invoke(app, ["files", "export", str(tmp_path / "export"), "--database-url", db])
    assert exported.exit_code == 0, exported.output
    assert f"skipped {pin_id}: {pin_id}.md is a symbolic link: not written through" in exported.output
    assert victim.read_text() == "precious\n"
