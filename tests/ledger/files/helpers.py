"""Builders shared by the file-ledger tests."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

NOW = datetime(2025, 3, 1, tzinfo=UTC)
SCOPE = "project:acme/widgets"
FIXTURES = Path(__file__).parent / "fixtures"


def entry(
    *,
    kind: str = "user-said",
    ref: str = "https://tracker.example/ACME-42",
    level: str = "project",
    sref: str | None = "acme/widgets",
    conf: str = "0.95",
    created: str = "2025-01-10",
    expires: str | None = "2025-12-31",
    review: str | None = None,
    sup: str | None = None,
    auth: str | None = "true",
    body: str = "Production deploys of acme/widgets go to eu-west-1.",
) -> str:
    """The text of an entry; by default a valid, authorizing one for acme/widgets."""
    lines = ["---", "source:", f"  kind: {kind}", f"  reference: {ref}", "scope:", f"  level: {level}"]
    if sref is not None:
        lines.append(f"  reference: {sref}")
    lines += [f"confidence: {conf}", f"created: {created}"]
    if expires is not None:
        lines.append(f"expires: {expires}")
    if review is not None:
        lines.append(f"review-by: {review}")
    if sup is not None:
        lines.append(f"superseded-by: {sup}")
    if auth is not None:
        lines.append(f"may-this-authorize-action: {auth}")
    lines += ["---", body]
    return "\n".join(lines) + "\n"


def write_dir(directory: Path, files: dict[str, str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text, encoding="utf-8")
    return directory
