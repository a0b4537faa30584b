"""Validation: every fixture under valid/ passes, every fixture under invalid/ fails with the check in its name."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.files import parse_entry, read_entry, validate
from ledger.files.fields import PLACEHOLDER_REFERENCES, is_placeholder_reference
from ledger.files.model import MISSING_SOURCE, SourceKind
from tests.ledger.files.helpers import FIXTURES, NOW, entry

VALID = sorted((FIXTURES / "valid").iterdir())
INVALID = sorted((FIXTURES / "invalid").iterdir())
MISSING_SOURCE_CHECKS = {"source-reference-missing", "source-reference-placeholder"}


def problems_of(text: str, name: str = "e.md") -> list[tuple[str, str, str]]:
    return [(p.field, p.check, p.rule) for p in validate(parse_entry(text.encode(), name=name), now=NOW)]


def test_fixture_sets_are_not_empty() -> None:
    assert len(VALID) >= 10 and len(INVALID) >= 50


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.name)
def test_valid_fixture(path: Path) -> None:
    assert validate(read_entry(path), now=NOW) == []


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.name)
def test_invalid_fixture(path: Path) -> None:
    expected = path.stem.split("--")[0]
    problems = validate(read_entry(path), now=NOW)
    assert expected in {p.check for p in problems}
    for p in problems:
        assert p.file == path.name
        assert p.line >= 1
        assert p.hint and p.message
        assert p.rule == (MISSING_SOURCE if p.check in MISSING_SOURCE_CHECKS else "invalid") or p.check == "wrong-type"


def test_duplicate_authorize_key_leaves_nothing_trusted() -> None:
    e = read_entry(FIXTURES / "invalid" / "yaml-duplicate-key.md")
    assert not e.trusted
    assert e.authorize is False and e.source_kind is None


def test_valid_entry_fields_are_typed() -> None:
    e = read_entry(FIXTURES / "valid" / "authorizing.md")
    assert e.trusted and e.authorize
    assert e.source_kind is SourceKind.USER_SAID
    assert e.scope_reference == "acme/widgets"
    assert e.confidence == 0.95
    assert e.expires is not None and e.expires.text == "2025-12-31"
    assert e.body == "Production deploys of acme/widgets go to eu-west-1."
    assert e.line_of("source.kind") == 3 and e.line_of("expires") == 10


def test_unknown_key_hints_the_right_spelling() -> None:
    text = entry(expires=None, auth="false").replace("---\nProduction", "review_by: 2025-09-30\n---\nProduction")
    [problem] = [p for p in validate(parse_entry(text.encode(), name="e.md"), now=NOW) if p.check == "unknown-key"]
    assert "did you mean 'review-by'?" in problem.hint
    assert problem.line == 11


def test_each_failure_names_file_field_rule_and_fix() -> None:
    text = entry(conf="1.5", created="12:30", ref="from context", auth="false")
    found = problems_of(text)
    assert ("confidence", "confidence-range", "invalid") in found
    assert ("created", "date-format", "invalid") in found
    assert ("source.reference", "source-reference-placeholder", MISSING_SOURCE) in found


@pytest.mark.parametrize("ref", [*sorted(PLACEHOLDER_REFERENCES), "From Context.", "see above!", "<url>", "-", "?"])
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
        ({"ref": "n/a"}, "authorize-source"),
        ({"expires": None, "review": "2025-06-30"}, "authorize-no-expires"),
    ],
)
def test_authorization_criteria_each_fail_alone(overrides: dict[str, str | None], check: str) -> None:
    found = {c for _, c, _ in problems_of(entry(**overrides))}  # type: ignore[arg-type]
    assert check in found
    # The same entry without the flag is fine (apart from the placeholder, which is its own problem).
    unflagged = {c for _, c, _ in problems_of(entry(auth="false", **overrides))}  # type: ignore[arg-type]
    assert not any(c.startswith("authorize-") for c in unflagged)


def test_confidence_exactly_point_nine_may_authorize() -> None:
    assert problems_of(entry(conf="0.9")) == []


def test_horizon_must_be_after_created_even_for_datetimes() -> None:
    found = problems_of(entry(created="2025-01-10T10:00:00Z", expires="2025-01-10T09:00:00Z"))
    assert ("expires", "horizon-before-created", "invalid") in found


def test_created_later_today_is_not_in_the_future() -> None:
    assert problems_of(entry(created="2025-03-01T23:00:00Z")) == []
    assert ("created", "created-in-future", "invalid") in problems_of(entry(created="2025-03-02T00:00:00Z"))


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.md"
    path.write_bytes(entry(body="Caf\xe9 deploys go to eu-west-1.").encode("latin-1"))
    [problem] = validate(read_entry(path), now=NOW)
    assert problem.check == "not-utf8" and problem.rule == "invalid"


def test_bom_and_crlf_are_accepted() -> None:
    text = "\ufeff" + entry().replace("\n", "\r\n")
    assert problems_of(text) == []


def test_single_list_item_is_one_fact() -> None:
    assert problems_of(entry(body="- Production deploys of acme/widgets go to eu-west-1.")) == []


def test_credential_hidden_in_a_comment_is_refused() -> None:
    body = "<!-- token: ghp_0123456789abcdefghijABCDEFGHIJ012345 -->\nDeploys go to eu-west-1."
    assert ("body", "body-credential", "invalid") in problems_of(entry(body=body))


def test_credential_message_never_contains_the_secret() -> None:
    secret = "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcd"
    problems = validate(parse_entry(entry(body=f"The key is {secret}").encode(), name="e.md"), now=NOW)
    assert problems and all(secret not in p.message for p in problems)
