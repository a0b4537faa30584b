"""The list of the longest test files that `make test` starts first names files that exist."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import LONGEST_FILES_FIRST


def test_the_longest_files_first_are_test_files_of_this_suite() -> None:
    root = Path(__file__).resolve().parent.parent
    missing = [path for path in LONGEST_FILES_FIRST if not (root / path).is_file()]
    assert missing == [], f"moved or renamed: update LONGEST_FILES_FIRST in tests/conftest.py ({missing})"
    assert len(set(LONGEST_FILES_FIRST)) == len(LONGEST_FILES_FIRST)
