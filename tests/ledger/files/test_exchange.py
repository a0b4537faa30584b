"""Export a ledger scope as entries and import entries as proposals, including the round trip."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from ledger import Ledger, LedgerError, Provenance, Status, open_ledger
from ledger.files import audit_directory, read_entry, validate
from ledger.files.exchange import SOURCE_KIND_OF, entry_text, export_scope, import_directory, import_key
from ledger.files.model import SourceKind
from tests.ledger.files.helpers import entry, write_dir
from worker.cli import app

T0 = datetime(2025, 1, 10, 9, tzinfo=UTC)
LATER = T0 + timedelta(days=3)
LATER_DAY = LATER.date()
SCOPE = "project:acme/widgets"


@pytest.fixture
def make_sqlite_ledger(tmp_path: Path) -> Iterator[object]:
    opened: list[Ledger] = []

    def make(name: str = "ledger") -> Ledger:
        led = open_ledger(f"sqlite:///{tmp_path / name}.db", account="local")
        opened.append(led)
        return led

    yield make
    for led in opened:
        led.close()


@pytest.fixture
def populated(make_sqlite_ledger: object) -> Ledger:
    led: Ledger = make_sqlite_ledger()  # type: ignore[operator]
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
        assert validate(read_entry(path)) == [], path.read_text()
    superseded = [r for r in populated.records(populated.scope_key) if r.status == Status.SUPERSEDED]
    [old] = superseded
    old_entry = read_entry(out / f"{old.id}.md")
    assert old_entry.superseded_by == f"{old.superseded_by}.md"
    assert old_entry.source_reference == f"memledger:account:local/{old.id}"
    assert old_entry.fact == old.body and old_entry.created is not None
    assert old_entry.created.text == "2025-01-10"
    region = next(r for r in populated.records(populated.scope_key) if "region" in (r.body or ""))
    region_entry = read_entry(out / f"{region.id}.md")
    # expires_at 2025-11-06T09:00Z holds part of 6 November: the entry claims only the whole days up to the 5th.
    assert region_entry.expires is not None and region_entry.expires.text == "2025-11-05"


def test_export_is_repeatable(populated: Ledger, tmp_path: Path) -> None:
    out = tmp_path / "export"
    export_scope(populated, populated.scope_key, out, now=LATER)
    before = {p.name: p.read_text() for p in out.iterdir()}
    export_scope(populated, populated.scope_key, out, now=LATER)
    assert {p.name: p.read_text() for p in out.iterdir()} == before


def test_export_after_a_forget_removes_the_files_an_earlier_export_wrote_for_the_chain(
    make_sqlite_ledger: object, tmp_path: Path
) -> None:
    # Given an exported chain (a pin and its edit), and another tool's file under the name of a third pin
    led: Ledger = make_sqlite_ledger()  # type: ignore[operator]
    first = led.save("my quillwort trellis plan", now=T0)
    edited = led.save("my quillwort trellis plan, revised", supersedes=first.id, now=T0 + timedelta(hours=1))
    other = led.save("a pin another tool also wrote about", now=T0)
    out = tmp_path / "export"
    export_scope(led, led.scope_key, out, now=LATER)
    (out / f"{other.id}.md").write_text(entry(fact="quillwort notes of my own", ref="notes/quillwort"))
    # When the edit is forgotten (its whole chain erased) and the scope exported again into the same directory
    led.delete(edited.id, now=T0 + timedelta(hours=2))
    led.delete(other.id, now=T0 + timedelta(hours=2))
    result = export_scope(led, led.scope_key, out, now=LATER)
    # Then the chain's files are gone, and the file another tool wrote is left alone
    assert all("trellis" not in p.read_text() for p in out.iterdir())
    assert sorted(p.name for p in out.iterdir()) == [f"{other.id}.md"]
    assert sorted(result.removed) == sorted([f"{first.id}.md", f"{edited.id}.md"])


def test_round_trip_export_validate_audit_import(populated: Ledger, make_sqlite_ledger: object, tmp_path: Path) -> None:
    # Given an exported scope
    out = tmp_path / "export"
    export_scope(populated, populated.scope_key, out, now=LATER)
    # When it is audited, the only finding is the pin that expired; nothing may authorize an action
    report = audit_directory(out, scope=SCOPE, as_of=LATER_DAY)
    assert {f.rule for f in report.findings} == {"expired"}
    assert report.candidates == []
    # And it is imported into a fresh ledger
    fresh: Ledger = make_sqlite_ledger("fresh")  # type: ignore[operator]
    result = import_directory(fresh, out, scope=SCOPE, as_of=LATER_DAY, now=LATER)
    # Then the current chain heads arrive as proposals, never as active records
    bodies = sorted(r.body or "" for r in fresh.proposals(fresh.scope_key, now=LATER))
    assert bodies == ["I prefer metric units in every document", "My deploy region is eu-west-1"]
    assert fresh.list(fresh.scope_key, now=LATER) == []
    assert all(r.provenance == Provenance.MODEL_PROPOSAL for r in fresh.records(fresh.scope_key))
    assert len(result.not_eligible) == 2  # the superseded revision and the expired pin
    region = next(r for r in fresh.records(fresh.scope_key) if "region" in (r.body or ""))
    # 2025-11-06T09:00Z → expires: 2025-11-05 → 2025-11-06T00:00Z: shortened by less than a day, never lengthened
    assert region.expires_at == datetime(2025, 11, 6, tzinfo=UTC)
    assert region.confidence_bps == 10_000


def test_import_twice_adds_nothing(make_sqlite_ledger: object, tmp_path: Path) -> None:
    led: Ledger = make_sqlite_ledger()  # type: ignore[operator]
    directory = write_dir(tmp_path / "m", {"a.md": entry(), "b.md": entry(fact="Staging deploys go to eu-west-2.")})
    first = import_directory(led, directory, scope=SCOPE, as_of=LATER_DAY, now=LATER)
    second = import_directory(led, directory, scope=SCOPE, as_of=LATER_DAY, now=LATER)
    assert [i.already for i in first.imported] == [False, False]
    assert [i.already for i in second.imported] == [True, True]
    assert len(led.records(led.scope_key)) == 2


def test_rejected_import_does_not_come_back(make_sqlite_ledger: object, tmp_path: Path) -> None:
    led: Ledger = make_sqlite_ledger()  # type: ignore[operator]
    directory = write_dir(tmp_path / "m", {"a.md": entry()})
    [imported] = import_directory(led, directory, scope=SCOPE, as_of=LATER_DAY, now=LATER).imported
    led.reject(imported.record_id, now=LATER)
    assert import_directory(led, directory, scope=SCOPE, as_of=LATER_DAY, now=LATER).imported[0].already


def test_forgetting_an_imported_pin_erases_its_import_key(led: Ledger, tmp_path: Path) -> None:
    # Given an entry imported and accepted: its key names the file and holds a digest of the fact
    directory = write_dir(tmp_path / "m", {"quillwort-vault.md": entry(fact="The quillwort vault opens on Fridays.")})
    [imported] = import_directory(led, directory, scope=SCOPE, as_of=LATER_DAY, now=LATER).imported
    key = import_key("quillwort-vault.md", "The quillwort vault opens on Fridays.")
    assert led.accept(imported.record_id, now=LATER).source_session_id == key
    # When it is forgotten
    led.delete(imported.record_id, now=LATER + timedelta(hours=1))
    # Then no read hands back the file's name or the digest to test a guess of the fact against
    seen = [led.get(imported.record_id), *led.history(imported.record_id), *led.list_as_of(led.scope_key, LATER)]
    assert [r.source_session_id for r in seen] == [None] * len(seen)
    # And nothing remembers the import: the file is proposed again
    again = import_directory(led, directory, scope=SCOPE, as_of=LATER_DAY, now=LATER + timedelta(hours=2))
    assert [i.already for i in again.imported] == [False]


def test_forgetting_a_pin_keeps_a_session_id_that_is_no_import_key(led: Ledger) -> None:
    # Given pins saved from conversations whose session ids only look like an import key's start
    sessions = ["File:chat-42", "FILE:notes", "files:1", "s-1"]
    pins = [led.save(f"The quillwort vault opens on day {n}.", source_session_id=s) for n, s in enumerate(sessions)]
    # When they are forgotten
    for pin in pins:
        led.delete(pin.id)
    # Then each keeps its session id (only an entry file's import key, "file:...", goes with the body)
    assert [led.get(p.id).source_session_id for p in pins] == sessions


def test_import_skips_what_is_not_valid_in_scope_and_current(make_sqlite_ledger: object, tmp_path: Path) -> None:
    led: Ledger = make_sqlite_ledger()  # type: ignore[operator]
    files = {
        "ok.md": entry(),
        "other.md": entry(sref="acme/gadgets", fact="Gadgets deploy to us-east-1."),
        "stale.md": entry(expires="2025-01-12", fact="Deploys are frozen this week."),
        "broken.md": entry(conf="7", fact="Deploys are broken."),
        "old.md": entry(sup="ok.md", fact="Deploys went to eu-west-2."),
        "global.md": entry(level="global", sref=None, auth="false", fact="The company prefers metric units."),
    }
    result = import_directory(led, write_dir(tmp_path / "m", files), scope=SCOPE, as_of=LATER_DAY, now=LATER)
    assert sorted(i.name for i in result.imported) == ["global.md", "ok.md"]
    assert sorted(s.name for s in result.not_eligible) == ["broken.md", "old.md", "other.md", "stale.md"]


def test_import_within_the_budget_reports_each_refusal(make_sqlite_ledger: object, tmp_path: Path) -> None:
    led: Ledger = make_sqlite_ledger()  # type: ignore[operator]
    led.set_budget(led.scope_key, 2, now=T0)
    files = {f"e{i}.md": entry(fact=f"Service {i} deploys to eu-west-1.") for i in range(4)}
    result = import_directory(led, write_dir(tmp_path / "m", files), scope=SCOPE, as_of=LATER_DAY, now=LATER)
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
    assert second.exit_code == 0 and "0 proposed, 2 already imported, 0 duplicate(s) skipped" in second.output
    assert (
        runner.invoke(app, ["files", "import", str(out), "--scope", "account:local", "--database-url", fresh]).exit_code
        == 2
    )


# --------------------------------------------------------------------------- whole days, duplicates, round trips


def test_export_then_import_into_the_same_account_proposes_no_duplicate(populated: Ledger, tmp_path: Path) -> None:
    # Given a scope exported to files
    out = tmp_path / "export"
    export_scope(populated, populated.scope_key, out, now=LATER)
    before = len(populated.records(populated.scope_key))
    # When the files are imported back into the same account
    result = import_directory(populated, out, scope=SCOPE, as_of=LATER_DAY, now=LATER)
    # Then every current fact is reported as already active, and nothing is proposed
    assert result.imported == [] and result.refused == []
    assert len(result.duplicates) == 2
    assert all("already active in account:local" in s.reason for s in result.duplicates)
    assert len(populated.records(populated.scope_key)) == before


def test_duplicate_facts_are_compared_without_case_or_whitespace(make_sqlite_ledger: object, tmp_path: Path) -> None:
    led: Ledger = make_sqlite_ledger()  # type: ignore[operator]
    active = led.save("Production deploys of acme/widgets go to eu-west-1.", now=T0)
    pending = led.propose("The team prefers metric units.", now=T0)
    files = {
        "a.md": entry(fact="  production DEPLOYS of acme/widgets\n go to   eu-west-1. "),
        "b.md": entry(fact="THE TEAM prefers metric units.", auth="false"),
        "c.md": entry(fact="Staging deploys go to eu-west-2."),
    }
    result = import_directory(led, write_dir(tmp_path / "m", files), scope=SCOPE, as_of=LATER_DAY, now=LATER)
    assert [(s.name, s.reason) for s in result.duplicates] == [
        ("a.md", f"the same fact is already active in account:local as {active.id}"),
        ("b.md", f"the same fact is already proposed in account:local as {pending.id}"),
    ]
    assert [i.name for i in result.imported] == ["c.md"]
    code = CliRunner().invoke(
        app,
        [
            "files",
            "import",
            str(tmp_path / "m"),
            "--scope",
            SCOPE,
            "--as-of",
            "2025-03-01",
            "--database-url",
            str(led.engine.url),
        ],
    )
    assert code.exit_code == 0
    assert re.search(r"duplicate +1  the same fact is already active in \S+ as mem_\w+  \(a\.md\)", code.output)


def test_two_entries_with_one_fact_are_proposed_once(make_sqlite_ledger: object, tmp_path: Path) -> None:
    led: Ledger = make_sqlite_ledger()  # type: ignore[operator]
    files = {"a.md": entry(), "b.md": entry()}
    result = import_directory(led, write_dir(tmp_path / "m", files), scope=SCOPE, as_of=LATER_DAY, now=LATER)
    assert [i.name for i in result.imported] == ["a.md"] and [s.name for s in result.duplicates] == ["b.md"]


@pytest.mark.parametrize(("as_of", "imported"), [(date(2025, 6, 30), True), (date(2025, 7, 1), False)])
def test_import_boundary_the_expires_day_itself_holds(
    make_sqlite_ledger: object, tmp_path: Path, as_of: date, imported: bool
) -> None:
    led: Ledger = make_sqlite_ledger()  # type: ignore[operator]
    directory = write_dir(tmp_path / "m", {"a.md": entry(expires="2025-06-30")})
    at = datetime(as_of.year, as_of.month, as_of.day, 12, tzinfo=UTC)
    result = import_directory(led, directory, scope=SCOPE, as_of=as_of, now=at)
    if imported:
        [record] = led.records(led.scope_key)
        assert record.expires_at == datetime(2025, 7, 1, tzinfo=UTC)  # D + 1 day at 00:00 UTC
    else:
        assert led.records(led.scope_key) == []
        assert result.not_eligible[0].reason.startswith("expired: expired after 2025-06-30")


@pytest.mark.parametrize(("as_of", "eligible"), [(date(2025, 9, 30), True), (date(2025, 10, 1), False)])
def test_import_boundary_review_by(make_sqlite_ledger: object, tmp_path: Path, as_of: date, eligible: bool) -> None:
    led: Ledger = make_sqlite_ledger()  # type: ignore[operator]
    directory = write_dir(tmp_path / "m", {"a.md": entry(expires=None, review="2025-09-30", auth="false")})
    result = import_directory(led, directory, scope=SCOPE, as_of=as_of, now=datetime(2025, 9, 1, tzinfo=UTC))
    assert bool(result.imported) is eligible
    if eligible:
        assert led.records(led.scope_key)[0].expires_at is None  # review-by has no database equivalent


def test_midnight_expiry_round_trips_exactly(make_sqlite_ledger: object, tmp_path: Path) -> None:
    # Given a record that expires at 00:00 UTC on 1 July
    led: Ledger = make_sqlite_ledger()  # type: ignore[operator]
    record = led.save("The freeze lasts through June.", expires_at=datetime(2025, 7, 1, tzinfo=UTC), now=T0)
    # When it is exported, the entry says it holds through 30 June
    out = tmp_path / "export"
    export_scope(led, led.scope_key, out, now=LATER)
    e = read_entry(out / f"{record.id}.md")
    assert e.expires is not None and e.expires.text == "2025-06-30"
    # And an audit agrees: 30 June holds, 1 July does not
    assert not audit_directory(out, scope="global", as_of=date(2025, 6, 30)).blocking
    assert audit_directory(out, scope="global", as_of=date(2025, 7, 1)).expired[0].id == f"{record.id}.md"
    # Then importing it into a fresh ledger gives back the same expires_at
    fresh: Ledger = make_sqlite_ledger("fresh")  # type: ignore[operator]
    import_directory(fresh, out, scope="global", as_of=LATER_DAY, now=LATER)
    [back] = fresh.records(fresh.scope_key)
    assert back.expires_at == record.expires_at and back.body == record.body


def test_export_of_a_same_day_expiry_never_claims_a_day_before_created(
    make_sqlite_ledger: object, tmp_path: Path
) -> None:
    led: Ledger = make_sqlite_ledger()  # type: ignore[operator]
    record = led.save("A short-lived pin.", expires_at=T0 + timedelta(hours=2), now=T0)
    e = read_entry_text(entry_text(record, successor=None, now=LATER, review_days=90))
    assert e.created is not None and e.expires is not None
    assert e.expires.text == e.created.text == "2025-01-10"
    assert validate(e) == []


def test_export_without_expiry_sets_review_by(make_sqlite_ledger: object, tmp_path: Path) -> None:
    led: Ledger = make_sqlite_ledger()  # type: ignore[operator]
    record = led.save("I prefer metric units", now=T0)
    e = read_entry_text(entry_text(record, successor=None, now=LATER, review_days=30))
    assert e.expires is None and e.review_by is not None and e.review_by.text == "2025-02-12"
    assert e.superseded_by is None and e.authorize is False and e.synthetic is False


def read_entry_text(text: str):  # type: ignore[no-untyped-def]
    from ledger.files import parse_entry

    return parse_entry(text.encode("utf-8"), name="x.md")


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.text(
        alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
        min_size=1,
        max_size=200,
    ).filter(lambda t: t.strip())
)
def test_any_storable_body_is_written_as_a_fact_that_reads_back_unchanged(
    make_sqlite_ledger: object, body: str
) -> None:
    led: Ledger = make_sqlite_ledger("prop")  # type: ignore[operator]
    try:
        record = led.save(body, now=T0)
    except LedgerError:
        return  # the ledger refuses it (control characters, credentials): nothing to export
    e = read_entry_text(entry_text(record, successor=None, now=LATER, review_days=90))
    assert validate(e) == [] or any(p.check == "fact-credential" for p in e.problems)
    if e.fact is not None:
        assert e.fact == record.body


def test_an_import_prints_one_line_per_reason_with_its_count_not_one_per_entry(
    make_sqlite_ledger: object, tmp_path: Path
) -> None:
    # Given a scope that holds 2 records and 12 eligible entries with distinct facts
    led: Ledger = make_sqlite_ledger()  # type: ignore[operator]
    led.set_budget(led.scope_key, 2)
    files = {f"e{n:02}.md": entry(fact=f"The release region is region-{n}.") for n in range(12)}
    args = ["files", "import", str(write_dir(tmp_path / "m", files)), "--scope", SCOPE, "--now", "2025-01-13"]
    result = CliRunner().invoke(app, [*args, "--database-url", str(led.engine.url)])
    # Then the 10 refusals are one line with their count and a few of their files
    assert result.exit_code == 1
    refused = [line for line in result.output.splitlines() if line.lstrip().startswith("refused")]
    assert len(refused) == 1, result.output
    assert re.match(r"\s+refused\s+10  budget: .*\(e02\.md, e03\.md, e04\.md and 7 more\)$", refused[0]), refused
    assert re.search(r"proposed\s+2  waiting for accept or reject  \(e00\.md, e01\.md\)", result.output)
    assert "2 proposed, 0 already imported, 0 duplicate(s) skipped, 10 refused" in result.output
