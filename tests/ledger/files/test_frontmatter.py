"""The strict front-matter loader: YAML that PyYAML's safe_load would read surprisingly is refused or kept as text."""

from __future__ import annotations

import pytest

from ledger.files.frontmatter import load_front_matter


def checks(text: str) -> list[str]:
    return [p.check for p in load_front_matter(text).problems]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("a: 12:30", "12:30"),  # YAML 1.1 sexagesimal 750
        ("a: 190:20:30", "190:20:30"),
        ("a: 2025-01-10", "2025-01-10"),  # YAML 1.1 timestamp
        ("a: yes", "yes"),  # YAML 1.1 bool
        ("a: on", "on"),
        ("a: .nan", ".nan"),
        ("a: .inf", ".inf"),
        ("a: 0x1F", "0x1F"),
        ("a: 1_000", "1_000"),
        ("a: '0.5'", "0.5"),
    ],
)
def test_scalars_yaml_11_would_type_stay_text(text: str, value: str) -> None:
    loaded = load_front_matter(text)
    assert loaded.problems == []
    assert loaded.data == {"a": value}


@pytest.mark.parametrize(
    ("text", "value"),
    [("a: true", True), ("a: False", False), ("a: 7", 7), ("a: -0.25", -0.25), ("a: 1e3", 1000.0), ("a:", None)],
)
def test_core_schema_scalars_are_typed(text: str, value: object) -> None:
    assert load_front_matter(text).data == {"a": value}


def test_duplicate_top_level_key_is_reported_with_both_lines() -> None:
    loaded = load_front_matter("a: false\nb: 1\na: true\n", first_line=2)
    [problem] = loaded.problems
    assert problem.check == "yaml-duplicate-key"
    assert problem.key == "a"
    assert problem.line == 4
    assert "first on line 2" in problem.message


def test_duplicate_nested_key_is_reported() -> None:
    loaded = load_front_matter("s:\n  k: 1\n  k: 2\n")
    assert [(p.check, p.key) for p in loaded.problems] == [("yaml-duplicate-key", "s.k")]


def test_every_duplicate_is_reported() -> None:
    assert checks("a: 1\na: 2\nb: 1\nb: 2\n") == ["yaml-duplicate-key", "yaml-duplicate-key"]


def test_aliases_and_merge_keys_are_refused() -> None:
    assert checks("x: &a 1\ny: *a\n") == ["yaml-alias"]
    assert "yaml-alias" in checks("b: &b {k: 1}\ns:\n  <<: *b\n")


def test_explicit_tags_are_refused() -> None:
    assert checks("a: !!timestamp 2025-01-10\n") == ["yaml-tag"]
    assert checks("a: !!binary aGVsbG8=\n") == ["yaml-tag"]
    assert checks("a: !!set {x: null}\n") == ["yaml-tag"]


def test_python_tags_never_build_objects() -> None:
    loaded = load_front_matter("a: !!python/object/apply:os.system ['echo hi']\n")
    assert loaded.problems and loaded.data == {"a": None}


def test_non_text_keys_are_refused() -> None:
    assert checks("1: x\n") == ["yaml-non-text-key"]
    assert checks("true: x\n") == ["yaml-non-text-key"]
    assert checks("? [a, b]\n: x\n") == ["yaml-non-text-key"]


def test_syntax_error_has_a_line() -> None:
    loaded = load_front_matter("a: 1\nb: [x\n", first_line=2)
    [problem] = loaded.problems
    assert problem.check == "yaml-syntax"
    assert problem.line >= 3


def test_second_document_is_a_syntax_error() -> None:
    assert checks("a: 1\n---\nb: 2\n") == ["yaml-syntax"]


def test_key_lines_are_recorded_in_file_lines() -> None:
    loaded = load_front_matter("source:\n  kind: observed\nconfidence: 1\n", first_line=2)
    assert loaded.lines == {"source": 2, "source.kind": 3, "confidence": 4}
