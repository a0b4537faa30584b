"""Validation: every fixture under valid/ passes, every fixture under invalid/ fails with the check in its name,
and the reference tool's own validation test cases, re-expressed."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.files import parse_entry, read_entry, validate
from ledger.files.fields import PLACEHOLDER_REFERENCES, is_placeholder_reference
from ledger.files.model import MISSING_SOURCE, SourceKind
from tests.ledger.files.helpers import FACT, FIXTURES, entry

VALID = sorted((FIXTURES / "valid").iterdir())
INVALID = sorted((FIXTURES / "invalid").iterdir())
EXAMPLES = sorted((FIXTURES / "reference-examples" / "examples" / "memories").iterdir())
# Problems about the source itself: the "Missing sources" of the report.
MISSING_SOURCE_CHECKS = {"source-reference-missing", "source-reference-placeholder"}


def problems_of(text: str, name: str = "e.md") -> list[tuple[str, str, str]]:
    return [(p.field, p.check, p.rule) for p in validate(parse_entry(text.encode(), name=name))]


def messages_of(text: str) -> list[str]:
    return [p.message for p in validate(parse_entry(text.encode(), name="e.md"))]


def test_fixture_sets_are_not_empty() -> None:
    assert len(VALID) >= 15 and len(INVALID) >= 70 and len(EXAMPLES) == 4


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.name)
def test_valid_fixture(path: Path) -> None:
    assert validate(read_entry(path)) == []


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.name)
def test_invalid_fixture(path: Path) -> None:
    expected = path.stem.split("--")[0]
    problems = validate(read_entry(path))
    assert expected in {p.check for p in problems}
    for p in problems:
        assert p.file == path.name
        assert p.line >= 1
        assert p.hint and p.message
        if p.check in MISSING_SOURCE_CHECKS:
            assert p.rule == MISSING_SOURCE


# --------------------------------------------------------------------------- the reference's own test cases


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_all_reference_examples_are_valid_and_synthetic(path: Path) -> None:
    e = read_entry(path)
    assert validate(e) == []
    assert e.synthetic is True
    assert e.fact and e.body.strip()  # the fact is in the front matter; the body is free notes


def test_authorizing_entry_that_is_inferred_low_global_and_review_by_gets_four_distinct_errors() -> None:
    text = entry(
        kind="inferred",
        ref="analysis:session-7#inference-2",
        level="global",
        sref=None,
        conf="0.8",
        created="2026-07-14",
        expires=None,
        review="2026-08-14",
    )
    found = [c for _, c, _ in problems_of(text)]
    assert sorted(found) == sorted(
        ["authorize-inferred", "authorize-low-confidence", "authorize-not-project", "authorize-no-expires"]
    )
    assert len(set(messages_of(text))) == 4


def test_duplicate_fact_is_refused_not_last_one_wins() -> None:
    text = entry().replace(f'fact: "{FACT}"\n', 'fact: "first"\nfact: "second"\n')
    e = parse_entry(text.encode(), name="e.md")
    assert ("fact", "yaml-duplicate-key", "invalid") in problems_of(text)
    assert not e.trusted and e.fact is None  # nothing is read from it, neither value


def test_todo_reference_and_two_horizons_are_refused() -> None:
    text = entry(ref="TODO", auth="false", created="2026-07-14", expires="2026-08-14", review="2026-09-14")
    found = problems_of(text)
    assert ("source.reference", "source-reference-placeholder", MISSING_SOURCE) in found
    assert ("review-by", "horizon-both", "invalid") in found


def test_missing_source_is_invalid_and_a_missing_source() -> None:
    text = entry().replace('source:\n  kind: user-said\n  reference: "https://tracker.example/ACME-42"\n', "")
    assert problems_of(text) == [("source", "missing-field", MISSING_SOURCE)]


# --------------------------------------------------------------------------- the entry format


def test_valid_entry_fields_are_typed() -> None:
    e = read_entry(FIXTURES / "valid" / "authorizing.md")
    assert e.trusted and e.authorize and not e.synthetic
    assert e.fact == FACT
    assert e.source_kind is SourceKind.USER_SAID
    assert e.scope_reference == "acme/widgets"
    assert e.confidence == 0.95
    assert e.expires is not None and e.expires.text == "2025-12-31"
    assert e.line_of("fact") == 2 and e.line_of("source.kind") == 4 and e.line_of("expires") == 11


def test_body_is_free_markdown_never_the_fact() -> None:
    body = "\n## Context\n\nOne paragraph.\n\nAnother paragraph.\n\n- a list\n- of notes\n"
    e = parse_entry(entry(body=body).encode(), name="e.md")
    assert validate(e) == [] and e.fact == FACT and e.body == body


@pytest.mark.parametrize("level", ["top", "source", "scope"])
def test_unknown_fields_are_refused_at_every_level(level: str) -> None:
    text = {
        "top": entry().replace("confidence:", "note: x\nconfidence:"),
        "source": entry().replace("  kind: user-said\n", "  kind: user-said\n  url: x\n"),
        "scope": entry().replace("  level: project\n", "  level: project\n  team: x\n"),
    }[level]
    assert "unknown-key" in {c for _, c, _ in problems_of(text)}


def test_nesting_is_one_level_deep() -> None:
    text = entry().replace('  reference: "https://tracker.example/ACME-42"\n', "  reference:\n    url: x\n")
    assert ("source.reference", "wrong-type", MISSING_SOURCE) in problems_of(text)


def test_authorize_flag_is_required() -> None:
    assert problems_of(entry(auth=None)) == [("may-this-authorize-action", "missing-field", "invalid")]


def test_fact_is_required_first_field() -> None:
    assert problems_of(entry(fact=None)) == [("fact", "missing-field", "invalid")]


@pytest.mark.parametrize(
    ("created", "horizon", "ok"), [("2025-01-10", "2025-01-10", True), ("2025-01-10", "2025-01-09", False)]
)
def test_horizon_may_be_the_created_day_but_not_before(created: str, horizon: str, ok: bool) -> None:
    for kwargs in ({"expires": horizon}, {"expires": None, "review": horizon, "auth": "false"}):
        found = problems_of(entry(created=created, **kwargs))  # type: ignore[arg-type]
        assert (found == []) is ok, found


@pytest.mark.parametrize("value", ["2025-06-30T09:00:00Z", "2025-06-30 09:00", "20250630", "2025-02-30", "12:30"])
def test_dates_are_whole_days(value: str) -> None:
    assert {c for f, c, _ in problems_of(entry(expires=value)) if f == "expires"} & {"date-format", "date-impossible"}


def test_synthetic_is_an_optional_boolean() -> None:
    assert problems_of(entry(synthetic="true")) == []
    assert problems_of(entry(synthetic="false")) == []
    assert problems_of(entry(synthetic='"yes"')) == [("synthetic", "wrong-type", "invalid")]
    assert problems_of(entry(synthetic="null")) == [("synthetic", "wrong-type", "invalid")]


@pytest.mark.parametrize(("sup", "ok"), [("v2.md", True), ("v2", True), ("sub/v2.md", False), ("a\\b.md", False)])
def test_superseded_by_is_a_name_in_the_same_directory(sup: str, ok: bool) -> None:
    assert (problems_of(entry(sup=sup)) == []) is ok


def test_unknown_key_hints_the_right_spelling() -> None:
    text = entry(expires=None, auth="false").replace("superseded-by:", "review_by: 2025-09-30\nsuperseded-by:")
    [problem] = [p for p in validate(parse_entry(text.encode(), name="e.md")) if p.check == "unknown-key"]
    assert "did you mean 'review-by'?" in problem.hint
    assert problem.line == 11


def test_each_failure_names_file_field_rule_and_fix() -> None:
    text = entry(conf="1.5", created="12:30", ref="from context", auth="false")
    found = problems_of(text)
    assert ("confidence", "confidence-range", "invalid") in found
    assert ("created", "date-format", "invalid") in found
    assert ("source.reference", "source-reference-placeholder", MISSING_SOURCE) in found


@pytest.mark.parametrize(
    "ref",
    [
        *sorted(PLACEHOLDER_REFERENCES),
        "From Context.",
        "see above!",
        "<url>",
        "-",
        "?",
        "TODO",
        "todo: link",
        "TBD later",
        "Unknown source",
        "None yet",
        "N/A",
        "replace me",
        "Example chat",
        "{{ticket}}",
        "https://x.example/<the ticket id>",
    ],
)
def test_placeholder_references(ref: str) -> None:
    assert is_placeholder_reference(ref)


@pytest.mark.parametrize(
    "ref",
    [
        "https://tracker.example/ACME-42",
        "ACME-42",
        "git:acme/widgets@4f1c2e9:deploy/region.tf",
        "slack://C024BE91L/p1700000000",
        "context.md@4f1c2e9",
        "mail:<CAF12ab34@mail.example.com>",
        "synthetic-conversation:2026-07-10#message-12",
        "conversation 2025-01-10 with Dana (meeting notes in docs/notes/2025-01-10.md)",
    ],
)
def test_concrete_references(ref: str) -> None:
    assert not is_placeholder_reference(ref)


@pytest.mark.parametrize(
    ("overrides", "check"),
    [
        ({"kind": "inferred"}, "authorize-inferred"),
        ({"level": "global", "sref": None}, "authorize-not-project"),
        ({"conf": "0.89"}, "authorize-low-confidence"),
        ({"expires": None, "review": "2025-06-30"}, "authorize-no-expires"),
    ],
)
def test_authorization_criteria_each_fail_alone(overrides: dict[str, str | None], check: str) -> None:
    assert [c for _, c, _ in problems_of(entry(**overrides))] == [check]  # type: ignore[arg-type]
    assert problems_of(entry(auth="false", **overrides)) == []  # type: ignore[arg-type]


def test_placeholder_source_on_an_authorizing_entry_is_reported_once() -> None:
    assert problems_of(entry(ref="n/a")) == [("source.reference", "source-reference-placeholder", MISSING_SOURCE)]


def test_confidence_exactly_point_nine_may_authorize() -> None:
    assert problems_of(entry(conf="0.9")) == []


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.md"
    path.write_bytes(entry(body="Caf\xe9 notes.").encode("latin-1"))
    [problem] = validate(read_entry(path))
    assert problem.check == "not-utf8" and problem.rule == "invalid"


def test_bom_and_crlf_are_accepted() -> None:
    text = "\ufeff" + entry().replace("\n", "\r\n")
    assert problems_of(text) == []


def test_credential_hidden_in_a_body_comment_is_refused() -> None:
    body = "<!-- token: ghp_0123456789abcdefghijABCDEFGHIJ012345 -->\nDeploy notes."
    assert ("body", "body-credential", "invalid") in problems_of(entry(body=body))


def test_credential_message_never_contains_the_secret() -> None:
    secret = "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcd"
    for text in (entry(body=f"The key is {secret}"), entry(fact=f"The key is {secret}")):
        problems = validate(parse_entry(text.encode(), name="e.md"))
        assert problems and all(secret not in p.message for p in problems)


def test_a_null_horizon_is_still_a_horizon() -> None:
    found = problems_of(
        entry(expires=None, review="2025-09-30", auth="false").replace("created:", "expires: null\ncreated:")
    )
    assert ("review-by", "horizon-both", "invalid") in found
    assert ("expires", "date-format", "invalid") in found


def test_a_global_entry_has_no_reference_not_even_null() -> None:
    found = problems_of(
        entry(level="global", sref=None, auth="false").replace(
            "  level: global\n", "  level: global\n  reference: null\n"
        )
    )
    assert found == [("scope.reference", "scope-reference-on-global", "invalid")]
