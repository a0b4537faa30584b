"""``python -m tools.protocol_doc [--check]``: write (or check) docs/protocol.md and the pages showing answers."""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

from tools.protocol_doc.render import generated_pages

DOCS_DIR = Path(__file__).resolve().parents[2] / "docs"
DEFAULT_OUTPUT = DOCS_DIR / "protocol.md"
DESCRIPTION = "Write docs/protocol.md, the protocol reference, from the protocol's method table."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.protocol_doc", description=DESCRIPTION)
    parser.add_argument("--check", action="store_true", help="exit 1 when a page is stale; write nothing")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="where the reference goes")
    parser.add_argument("--docs-dir", type=Path, default=DOCS_DIR, help="pages whose example answers to fill in")
    args = parser.parse_args(argv)
    pages = generated_pages(args.output, args.docs_dir)
    if args.check:
        stale = 0
        for page, text in pages.items():
            found = page.read_text(encoding="utf-8") if page.exists() else ""
            if found != text:
                stale += 1
                print(f"{page} is stale: run python -m tools.protocol_doc", file=sys.stderr)
                print(_first_lines_of_diff(found, text, page), file=sys.stderr)
        return 1 if stale else 0
    for page, text in pages.items():
        page.write_text(text, encoding="utf-8")
        print(f"wrote {page}")
    return 0


def _first_lines_of_diff(found: str, wanted: str, page: Path, most: int = 40) -> str:
    """What differs, as a unified diff (at most ``most`` lines)."""
    lines = list(
        difflib.unified_diff(
            found.splitlines(), wanted.splitlines(), f"{page} (as it is)", f"{page} (generated)", lineterm=""
        )
    )
    return "\n".join(lines[:most] + ([f"... {len(lines) - most} more lines"] if len(lines) > most else []))
