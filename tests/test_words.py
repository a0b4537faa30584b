"""The repository cites no document its readers do not have.

Code, comments, help, tests, docs and deploy files give a reason in plain words or link the
page of ``docs/`` that gives it; they never point at the design document or the tracker it was
built from (its section numbers, numbered tickets, the task given to a session, the system the
design was taken from). Every tracked text file is read; binary files are skipped.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import tool_missing

ROOT = Path(__file__).resolve().parents[1]

# Each alternative starts at a word boundary, so this definition does not match itself.
OUTSIDE = re.compile(
    r"\bSPEC\b"
    r"|(?i:\bissue \d+|\bissue #|\bthe brief\b|\bthe issue\b|\bseed system\b|\bthe seeds?\b"
    r"|\bthe design (?:is silent|comes from|describes)|\bthe design's\b)"
)


def tracked_text() -> dict[str, str]:
    """Every tracked file that reads as UTF-8 text without NUL bytes, by path."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        tool_missing("not a git checkout: the tracked files cannot be listed")
    texts: dict[str, str] = {}
    for name in listed.decode().split("\0"):
        path = ROOT / name
        if not name or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data:
            continue
        try:
            texts[name] = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
    return texts


def hits(text: str) -> list[tuple[int, str]]:
    """The lines (1-based number, stripped text) that cite an outside document."""
    return [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1) if OUTSIDE.search(line)]


@pytest.fixture(scope="module")
def texts() -> dict[str, str]:
    return tracked_text()


def test_the_pattern_finds_what_it_is_meant_to_find() -> None:
    # Split literals: this file is scanned too, and its examples must not count as hits.
    cited = ["(SP" + "EC 3.7)", "see iss" + "ue 9 part 9", "Iss" + "ue 10, item 5", "as the bri" + "ef says"]
    cited += ["like the se" + "ed does", "as the system the des" + "ign comes from does", "iss" + "ue #12"]
    cited += ["where the des" + "ign is silent"]
    plain = ["to issue a token", "the spec of a pod", "the issues it raised", "spec.name", "a random seed"]
    assert [c for c in cited if not OUTSIDE.search(c)] == []
    assert [p for p in plain if OUTSIDE.search(p)] == []


def test_no_tracked_file_cites_an_outside_document(texts: dict[str, str]) -> None:
    found = [f"{name}:{n}: {line}" for name, text in sorted(texts.items()) for n, line in hits(text)]
    assert not found, "cite docs/ or say the reason in plain words:\n" + "\n".join(found)
