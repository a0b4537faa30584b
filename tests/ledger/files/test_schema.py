"""The JSON Schema (draft 2020-12) and the template: one contract with the validator."""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from ledger.files import parse_entry, read_entry, validate
from ledger.files.fields import is_placeholder_reference
from ledger.files.frontmatter import load_front_matter
from tests.ledger.files.helpers import FIXTURES

TEMPLATES = resources.files("ledger.files").joinpath("templates")
SCHEMA = json.loads(TEMPLATES.joinpath("memory-entry.schema.json").read_text(encoding="utf-8"))
TEMPLATE = TEMPLATES.joinpath("memory-entry.md").read_text(encoding="utf-8")
VALIDATOR = Draft202012Validator(SCHEMA, format_checker=Draft202012Validator.FORMAT_CHECKER)
# Fixtures whose problem the schema cannot state (a relation between fields, or the validator's own screening).
BEYOND_SCHEMA = {
    "horizon-before-created",  # expires/review-by earlier than created
    "body-credential",  # the body is not front matter
    "fact-credential",
    "fact-too-long",
    "source-reference-placeholder",  # phrases like "from context", beyond the reference's prefixes
}


def front_matter(text: str) -> Any:
    lines = text.removeprefix("\ufeff").replace("\r\n", "\n").split("\n")
    close = next(i for i in range(1, len(lines)) if lines[i] in ("---", "..."))
    return load_front_matter("\n".join(lines[1:close])).data


def errors(data: Any) -> list[str]:
    return [e.message for e in VALIDATOR.iter_errors(data)]


def filled(template: str) -> str:
    """The template with every placeholder replaced, as a person following it would."""
    values = iter(
        [
            "Run the tests with make test.",
            "repo:github.com/acme/widgets@4f1c2e9:Makefile#L12",
            "github.com/acme/widgets",
        ]
    )
    text = re.sub(r'"<[^<>\n]*>"', lambda _m: json.dumps(next(values)), template)
    return text.replace('created: "YYYY-MM-DD"', 'created: "2026-07-14"').replace(
        'expires: "YYYY-MM-DD"', 'expires: "2026-10-14"'
    )


def test_schema_is_a_valid_draft_2020_12_schema() -> None:
    Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert SCHEMA["properties"]["source"]["properties"]["kind"]["enum"] == ["user-said", "observed", "inferred"]
    assert set(SCHEMA["required"]) == {"fact", "source", "scope", "confidence", "created", "may-this-authorize-action"}


def test_template_with_its_placeholders_replaced_is_valid_for_both() -> None:
    text = filled(TEMPLATE)
    assert '"<' not in text and 'YYYY-MM-DD"' not in text
    assert validate(parse_entry(text.encode(), name="new.md")) == []
    assert errors(front_matter(text)) == []


def test_template_as_shipped_is_invalid_for_both() -> None:
    assert validate(parse_entry(TEMPLATE.encode(), name="new.md"))
    assert errors(front_matter(TEMPLATE))


def test_template_lists_fact_first_and_defaults_to_no_authority() -> None:
    data = front_matter(TEMPLATE)
    assert next(iter(data)) == "fact"
    assert data["superseded-by"] is None and data["may-this-authorize-action"] is False


@pytest.mark.parametrize(
    "path",
    sorted((FIXTURES / "valid").iterdir())
    + sorted((FIXTURES / "reference-examples" / "examples" / "memories").iterdir()),
    ids=lambda p: p.name,
)
def test_every_valid_fixture_satisfies_the_schema(path: Path) -> None:
    assert errors(front_matter(path.read_text(encoding="utf-8"))) == []


def _schema_can_see(path: Path) -> bool:
    check = path.stem.split("--")[0]
    untrusted = check.startswith(("front-matter", "yaml-", "not-utf8"))
    return not untrusted and check not in BEYOND_SCHEMA


SCHEMA_VISIBLE = [p for p in sorted((FIXTURES / "invalid").iterdir()) if _schema_can_see(p)]


def test_most_invalid_fixtures_are_schema_visible() -> None:
    assert len(SCHEMA_VISIBLE) >= 40


@pytest.mark.parametrize("path", SCHEMA_VISIBLE, ids=lambda p: p.name)
def test_invalid_fixtures_the_schema_can_see_fail_it(path: Path) -> None:
    assert read_entry(path).trusted
    assert errors(front_matter(path.read_text(encoding="utf-8"))), path.stem


@pytest.mark.parametrize(
    ("ref", "placeholder"),
    [
        ("TODO", True),
        ("todo: find it", True),
        ("TBD", True),
        ("unknown", True),
        ("None", True),
        ("n/a", True),
        ("Replace me", True),
        ("example chat", True),
        ("<url>", True),
        ("{{ticket}}", True),
        ("https://x.example/<the id>", True),
        ("https://tracker.example/ACME-42", False),
        ("mail:<CAF12@mail.example.com>", False),
        ("synthetic-conversation:2026-07-10#message-12", False),
    ],
)
def test_schema_and_validator_agree_on_placeholder_references(ref: str, placeholder: bool) -> None:
    data = front_matter((FIXTURES / "valid" / "authorizing.md").read_text(encoding="utf-8"))
    data["source"]["reference"] = ref
    assert bool(errors(data)) is placeholder
    assert is_placeholder_reference(ref) is placeholder
