"""Builders shared by the file-ledger tests (entries in the reference memory-ledger format)."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

AS_OF = date(2025, 3, 1)
SCOPE = "project:acme/widgets"
FIXTURES = Path(__file__).parent / "fixtures"
FACT = "Production deploys of acme/widgets go to eu-west-1."
_OMIT = "<omit>"


def entry(
    *,
    fact: str | None = FACT,
    kind: str = "user-said",
    ref: str | None = "https://tracker.example/ACME-42",
    level: str = "project",
    sref: str | None = "acme/widgets",
    conf: str = "0.95",
    created: str = "2025-01-10",
    expires: str | None = "2025-12-31",
    review: str | None = None,
    sup: str | None = None,
    auth: str | None = "true",
    synthetic: str | None = None,
    body: str = "\n## Evidence notes\n\nThe release ticket names the region.\n",
) -> str:
    """The text of an entry; by default a valid, authorizing one for acme/widgets.

    ``fact``/``ref``/``auth`` None leave the field out; ``sup`` None writes ``superseded-by: null``.
    """
    lines = ["---"]
    if fact is not None:
        lines.append(f"fact: {json.dumps(fact)}")
    lines += ["source:", f"  kind: {kind}"]
    if ref is not None:
        lines.append(f"  reference: {json.dumps(ref)}")
    lines += ["scope:", f"  level: {level}"]
    if sref is not None:
        lines.append(f"  reference: {json.dumps(sref)}")
    lines += [f"confidence: {conf}", f"created: {created}"]
    if expires is not None:
        lines.append(f"expires: {expires}")
    if review is not None:
        lines.append(f"review-by: {review}")
    lines.append(f"superseded-by: {json.dumps(sup) if sup is not None else 'null'}")
    if auth is not None:
        lines.append(f"may-this-authorize-action: {auth}")
    if synthetic is not None:
        lines.append(f"synthetic: {synthetic}")
    lines.append("---")
    return "\n".join(lines) + "\n" + body


def write_dir(directory: Path, files: dict[str, str]) -> Path:
    """Write ``files`` (relative path → text) under ``directory``; subdirectories are created."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return directory
