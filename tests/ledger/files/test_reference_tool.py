"""Differential check against the reference memory-ledger tool itself, when a checkout of it is at hand.

``MEMLEDGER_REFERENCE_TOOL`` names a checkout of ``runsagents/memory-ledger`` (by default
``../shared/reference/memory-ledger`` beside the project's root, where CI keeps it), and ``node``
20+ must be on the PATH: random directories are audited by both tools and the verdicts must agree —
exit status and the Markdown report, line for line, except the wording of invalid entries' messages
and the order of chains (memledger lists chains in id order; see docs/file-ledger.md). Without the
tool the test is skipped locally and fails in CI: the reference's code is not part of this repository.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
from datetime import date
from pathlib import Path

import pytest

from ledger.files import audit_directory, audit_markdown
from tests.conftest import tool_missing

ROOT = Path(__file__).resolve().parents[3]
REFERENCE = os.environ.get("MEMLEDGER_REFERENCE_TOOL") or str(ROOT.parent / "shared" / "reference" / "memory-ledger")
# Random directories audited by both tools: 30 in `make test` (a node process each, 0.4 s of CPU here),
# 300 in `make soak`.
DIRECTORIES = 30
SOAK_DIRECTORIES = 300


@pytest.fixture(autouse=True)
def _reference_tool() -> None:
    script = Path(REFERENCE) / "scripts" / "audit-ledger.mjs"
    if not script.is_file():
        tool_missing(f"no reference tool at {REFERENCE}: set MEMLEDGER_REFERENCE_TOOL to a checkout of it")
    if shutil.which("node") is None:
        tool_missing("node (20+) is not on the PATH: apt-get install nodejs")


MUTATIONS: list[tuple[str, object]] = [
    ("fact", ""),
    ("fact", 3),
    ("source.reference", "TODO"),
    ("source.reference", "n/a later"),
    ("source.reference", "<x>"),
    ("source.reference", "exampled:ok"),
    ("source.kind", "guessed"),
    ("-source", None),
    ("scope.reference", "TBD"),
    ("scope.level", "team"),
    ("-scope", None),
    ("confidence", 2),
    ("confidence", "high"),
    ("created", "2026-02-30"),
    ("created", "2026-08-01"),
    ("-created", None),
    ("both", None),
    ("-horizon", None),
    ("may-this-authorize-action", "yes"),
    ("-may-this-authorize-action", None),
    ("synthetic", "no"),
    ("notes", "x"),
    ("source.extra", 1),
    ("superseded-by", "sub/x.md"),
    ("superseded-by", ""),
    ("auth-global", None),
    ("auth-review", None),
    ("auth-low", None),
    ("auth-inferred", None),
    ("dup", None),
]


def _value(x: object) -> str:
    if isinstance(x, bool):
        return str(x).lower()
    return "null" if x is None else json.dumps(x) if isinstance(x, str) else str(x)


def _mutate(f: dict[str, object], key: str, value: object) -> None:
    if key == "both":
        f["expires"], f["review-by"] = "2026-09-01", "2026-09-02"
    elif key == "-horizon":
        f.pop("expires", None)
        f.pop("review-by", None)
    elif key == "auth-global":
        f["scope"], f["may-this-authorize-action"] = {"level": "global"}, True
    elif key == "auth-review":
        f.pop("expires", None)
        f["review-by"], f["may-this-authorize-action"] = "2026-09-01", True
    elif key == "auth-low":
        f["confidence"], f["may-this-authorize-action"] = 0.8, True
    elif key == "auth-inferred":
        f["source"] = {**f["source"], "kind": "inferred"}  # type: ignore[dict-item]
        f["may-this-authorize-action"] = True
    elif key.startswith("-"):
        f.pop(key[1:], None)
    elif "." in key:
        parent, child = key.split(".")
        f[parent] = {**f.get(parent, {}), child: value}  # type: ignore[dict-item]
    else:
        f[key] = value


def random_entry(rng: random.Random, names: list[str]) -> str:
    """A reference-format entry: valid, or with one random flaw (kept within the reference's YAML subset)."""
    level = rng.choice(["project", "project", "project", "global"])
    auth = level == "project" and rng.random() < 0.5
    scope: dict[str, object] = {"level": level}
    if level == "project":
        scope["reference"] = rng.choice(["acme/widgets"] * 4 + ["acme/gadgets"])
    f: dict[str, object] = {
        "fact": "Deploys go to eu-west-1.",
        "source": {
            "kind": rng.choice(["user-said", "observed"] + ([] if auth else ["inferred"])),
            "reference": rng.choice(["ticket:ACME-1", "https://x.example/1"]),
        },
        "scope": scope,
        "confidence": rng.choice([1, 0.95, 0.9] + ([] if auth else [0.5])),
        "created": rng.choice(["2026-06-01", "2026-07-01", "2026-04-01"]),
    }
    day = rng.choice(["2026-06-30", "2026-07-13", "2026-07-14", "2026-07-15", "2026-09-01"])
    f["expires" if auth or rng.random() < 0.5 else "review-by"] = day
    f["superseded-by"] = rng.choice([*names, "gone.md"]) if rng.random() < 0.4 else None
    f["may-this-authorize-action"] = auth
    if rng.random() < 0.3:
        f["synthetic"] = True
    duplicate = False
    if rng.random() < 0.35:
        key, value = rng.choice(MUTATIONS)
        duplicate = key == "dup"
        if not duplicate:
            _mutate(f, key, value)
    lines = ["---"]
    for key, value in f.items():
        if isinstance(value, dict):
            lines.append(f"{key}:")
            lines += [f"  {k}: {_value(v)}" for k, v in value.items()]
        else:
            lines.append(f"{key}: {_value(value)}")
    if duplicate:
        lines.insert(2, lines[1])
    return "\n".join([*lines, "---", "", "> Notes.", ""])


def comparable(report: str) -> str:
    """The report without the wording of invalid entries' messages, chains in a fixed order."""
    out, section = [], ""
    for line in report.split("\n"):
        if line.startswith("## "):
            section = line
        if section == "## Invalid entries" and line.startswith("- `"):
            line = line.split("`: ", 1)[0] + "`"
        out.append(line)
    text = "\n".join(out)
    for title in ("## Supersession chains", "## Broken supersession chains"):
        m = re.search(rf"({re.escape(title)}\n\n)((?:- .*\n)+)", text)
        if m:
            text = text[: m.start(2)] + "".join(sorted(m.group(2).splitlines(True))) + text[m.end(2) :]
    return text


def test_verdicts_and_reports_agree_with_the_reference_tool(tmp_path: Path) -> None:
    agree_with_the_reference(tmp_path, range(DIRECTORIES))


@pytest.mark.soak
def test_verdicts_and_reports_agree_with_the_reference_tool_soak(tmp_path: Path) -> None:
    agree_with_the_reference(tmp_path, range(DIRECTORIES, SOAK_DIRECTORIES))


def agree_with_the_reference(tmp_path: Path, seeds: range) -> None:
    script = str((Path(REFERENCE) / "scripts" / "audit-ledger.mjs").resolve())
    for seed in seeds:
        # Given a random directory of entries (ids in lower case: both tools sort them the same)
        rng = random.Random(seed)
        root = tmp_path / f"d{seed}"
        names = [rng.choice(["", "sub/", "team/"]) + f"e{i}.md" for i in range(rng.randint(0, 7))]
        (root / "m").mkdir(parents=True)
        for name in names:
            path = root / "m" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(random_entry(rng, [Path(n).name for n in names]), encoding="utf-8")
        scope = rng.choice(["-", "global", "project:acme/widgets"])
        # When both tools audit it as of the same day in the same trust context
        context = [] if scope == "-" else ["--scope", scope]
        ref = subprocess.run(
            ["node", script, "m", "--as-of", "2026-07-14", *context],  # its command line, as a user runs it
            cwd=root,
            capture_output=True,
            text=True,
            check=False,
        )
        report = audit_directory(
            root / "m", scope=None if scope == "-" else scope, as_of=date(2026, 7, 14), directory_text="m"
        )
        # Then they agree (the command line's exit status is 1 exactly when the report blocks)
        assert ref.stderr == "", ref.stderr
        ours = (int(report.blocking), comparable(audit_markdown(report)))
        printed = ref.stdout.removesuffix("\n")  # console.log's own line end after the report
        assert ours == (ref.returncode, comparable(printed)), seed
