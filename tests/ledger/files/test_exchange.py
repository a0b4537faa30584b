"""Export a ledger scope as entries and import entries as proposals, including the round trip."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ledger import Ledger, Provenance, Status, open_ledger
from ledger.files import audit_directory, read_entry, validate
from ledger.files.exchange import SOURCE_KIND_OF, export_scope, import_directory, import_key
from ledger.files.model import SourceKind
from tests.ledger.files.helpers import entry, write_dir
from worker.cli import app

T0 = datetime(2025, 1, 10, 9, tzinfo=UTC)
LATER = T0 + timedelta(days=3)
SCOPE = "project:acme/widgets"


@pytest.fixture
def make_ledger(tmp_path: Path) -> Iterator[object]:
    opened: list[Ledger] = []

    def make(name: str = "ledger") -> Ledger:
        led = open_ledger(f"sqlite:///{tmp_path / name}.db", account="local")
        opened.append(led)
        return led

    yield make
    for led in opened:
        led.close()


@pytest.fixture
def populated(make_ledger: object) -> Ledger:
    led: Ledger = make_ledger()  # type: ignore[operator]
    first = led.save("I prefer metric units", now=T0)
    led.save("I prefer metric units in every document", supersedes=first.id, now=T0 + timedelta(hours=1))
    led.save("My deploy region is eu-west-1", expires_at=T0 + timedelta(days=300), now=T0)
    led.save("The office wifi is called acme-guest", expires_at=T0 + timedelta(days=1), now=T0)
    gone = led.save("A pin I will forget", now=T0)
    led.delete(gone.id, now=T0 + timedelta(hours=2))
    led.propose("The user likes green tea", kind="preference", confidence_bps=7000, rationale="said twice", now=T0)
    rejected = led.propose("The user likes coffee", kind="preference", confidence_bps=6000, rationale="r", now=T0)
    led.reject(rejected.id, now=T0)
    led.sweep_expired(T0 + timedelta(days=2))
    return led


def test_provenance_mapping_covers_every_provenance() -> None:
    assert set(SOURCE_KIND_OF) == set(Provenance)
    assert SOURCE_KIND_OF[Provenance.USER_EXPLICIT] is SourceKind.USER_SAID


def test_export_writes_valid_entries_with_history_and_no_erased_body(populated: Ledger, tmp_path: Path) -> None:
    out = tmp_path / "export"
    result = export_scope(populated, populated.scope_key, out, now=LATER)
    assert len(result.written) == 4  # 2 revisions + the region + the expired wifi pin
    reasons = sorted(s.reason for s in result.skipped)
    assert reasons == [
        "a pending proposal: it never applied",
        "a rejected proposal: it never applied",
        "its body was erased",
    ]
    texts = "".join(p.read_text() for p in out.iterdir())
    assert "A pin I will forget" not in texts
    for path in out.iterdir():
        assert validate(read_entry(path), now=LATER) == [], path.read_text()
    superseded = [r for r in populated.records(populated.scope_key) if r.status == Status.SUPERSEDED]
    [old] = superseded
    old_entry = read_entry(out / f"{old.id}.md")
    assert old_entry.superseded_by == f"{old.superseded_by}.md"
    assert old_entry.source_reference == f"memledger:account:local/{old.id}"


def test_export_is_repeatable(populated: Ledger, tmp_path: Path) -> None:
    out = tmp_path / "export"
    export_scope(populated, populated.scope_key, out, now=LATER)
    before = {p.name: p.read_text() for p in out.iterdir()}
    export_scope(populated, populated.scope_key, out, now=LATER)
    assert {p.name: p.read_text() for p in out.iterdir()} == before


def test_round_trip_export_validate_audit_import(populated: Ledger, make_ledger: object, tmp_path: Path) -> None:
    # Given an exported scope
    out = tmp_path / "export"
    export_scope(populated, populated.scope_key, out, now=LATER)
    # When it is audited, the only finding is the pin that expired; nothing may authorize an action
    report = audit_directory(out, scope=SCOPE, now=LATER)
    assert {f.rule for f in report.findings} == {"expired"}
    assert report.candidates == []
    # And it is imported into a fresh ledger
    fresh: Ledger = make_ledger("fresh")  # type: ignore[operator]
    result = import_directory(fresh, out, scope=SCOPE, now=LATER)
    # Then the current chain heads arrive as proposals, never as active records
    bodies = sorted(r.body or "" for r in fresh.proposals(fresh.scope_key, now=LATER))
    assert bodies == ["I prefer metric units in every document", "My deploy region is eu-west-1"]
    assert fresh.list(fresh.scope_key, now=LATER) == []
    assert all(r.provenance == Provenance.MODEL_PROPOSAL for r in fresh.records(fresh.scope_key))
    assert len(result.not_eligible) == 2  # the superseded revision and the expired pin
    region = next(r for r in fresh.records(fresh.scope_key) if "region" in (r.body or ""))
    assert region.expires_at == T0 + timedelta(days=300)
    assert region.confidence_bps == 10_000


def test_import_twice_adds_nothing(make_ledger: object, tmp_path: Path) -> None:
    led: Ledger = make_ledger()  # type: ignore[operator]
    directory = write_dir(tmp_path / "m", {"a.md": entry(), "b.md": entry(body="Staging deploys go to eu-west-2.")})
    first = import_directory(led, directory, scope=SCOPE, now=LATER)
    second = import_directory(led, directory, scope=SCOPE, now=LATER)
    assert [i.already for i in first.imported] == [False, False]
    assert [i.already for i in second.imported] == [True, True]
    assert len(led.records(led.scope_key)) == 2


def test_rejected_import_does_not_come_back(make_ledger: object, tmp_path: Path) -> None:
    led: Ledger = make_ledger()  # type: ignore[operator]
    directory = write_dir(tmp_path / "m", {"a.md": entry()})
    [imported] = import_directory(led, directory, scope=SCOPE, now=LATER).imported
    led.reject(imported.record_id, now=LATER)
    assert import_directory(led, directory, scope=SCOPE, now=LATER).imported[0].already


def test_import_skips_what_is_not_valid_in_scope_and_current(make_ledger: object, tmp_path: Path) -> None:
    led: Ledger = make_ledger()  # type: ignore[operator]
    files = {
        "ok.md": entry(),
        "other.md": entry(sref="acme/gadgets", body="Gadgets deploy to us-east-1."),
        "stale.md": entry(expires="2025-01-12", body="Deploys are frozen this week."),
        "broken.md": entry(conf="7", body="Deploys are broken."),
        "old.md": entry(sup="ok.md", body="Deploys went to eu-west-2."),
        "global.md": entry(level="global", sref=None, auth="false", body="The company prefers metric units."),
    }
    result = import_directory(led, write_dir(tmp_path / "m", files), scope=SCOPE, now=LATER)
    assert sorted(i.name for i in result.imported) == ["global.md", "ok.md"]
    assert sorted(s.name for s in result.not_eligible) == ["broken.md", "old.md", "other.md", "stale.md"]


def test_import_within_the_budget_reports_each_refusal(make_ledger: object, tmp_path: Path) -> None:
    led: Ledger = make_ledger()  # type: ignore[operator]
    led.set_budget(led.scope_key, 2, now=T0)
    files = {f"e{i}.md": entry(body=f"Service {i} deploys to eu-west-1.") for i in range(4)}
    result = import_directory(led, write_dir(tmp_path / "m", files), scope=SCOPE, now=LATER)
    assert len(result.imported) == 2
    assert [s.name for s in result.refused] == ["e2.md", "e3.md"]
    assert all("budget" in s.reason for s in result.refused)
    assert len(led.records(led.scope_key)) == 2


def test_import_key_is_bounded() -> None:
    assert import_key("a.md", "fact").startswith("file:a.md#")
    assert len(import_key("x" * 300 + ".md", "fact")) <= 200


def test_cli_export_and_import(populated: Ledger, tmp_path: Path) -> None:
    runner = CliRunner()
    db = str(populated.engine.url)
    out = tmp_path / "cli-export"
    result = runner.invoke(
        app, ["files", "export", str(out), "--scope", "account:local", "--now", "2025-01-13", "--database-url", db]
    )
    assert result.exit_code == 0, result.output
    assert "Exported 4 record(s) of account:local" in result.output
    fresh = f"sqlite:///{tmp_path / 'fresh-cli.db'}"
    args = ["files", "import", str(out), "--scope", SCOPE, "--now", "2025-01-13", "--database-url", fresh]
    first = runner.invoke(app, [*args, "--format", "json"])
    assert first.exit_code == 0, first.output
    assert len(json.loads(first.output)["imported"]) == 2
    second = runner.invoke(app, args)
    assert second.exit_code == 0 and "0 proposed, 2 already imported" in second.output
    assert (
        runner.invoke(app, ["files", "import", str(out), "--scope", "account:local", "--database-url", fresh]).exit_code
        == 2
    )
