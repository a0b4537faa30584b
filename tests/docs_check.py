"""What ``tests/test_docs.py`` reads in the documentation: code blocks, ``memledger`` command lines, links.

The pages are ``README.md``, ``deploy/README.md`` and ``docs/*.md``. Conventions they keep (docs/cli.md):

* a ```` ```python ```` block runs as written, on its own, in an empty directory (top-level ``await`` as in
  ``python -m asyncio``); an excerpt that is not meant to run is fenced ```` ```python excerpt ````;
* every ``memledger …`` line of a ``sh``/``bash``/``console`` block (a ``console`` block's ``$`` lines, a
  ``yaml`` block's ``run:`` lines) is a command line that parses: its command exists and takes those options
  and values; a synopsis with ``[optional]`` parts goes in a block without a language;
* a ``memledger …`` in inline code names commands that exist;
* a relative link leads to a file (and a ``#section`` of a page to one of its headings), and a path of the
  repository in inline code (``tests/…py``) names a file that exists.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^(?P<indent>\s*)(?P<ticks>`{3,})(?P<info>[^`]*)$")
SHELL_BLOCKS = {"sh", "bash", "shell", "console"}
OPERATORS = {";", "&", "&&", "|", "||", "(", ")", "<", ">", ">>", "$("}
REPO_PATH = re.compile(
    r"^(?:tests|ledger|consolidation|worker|tools|deploy|docs)/[\w./-]+\.(?:py|md|ya?ml|toml|sh|json)$"
)


def pages() -> list[Path]:
    return [ROOT / "README.md", ROOT / "deploy" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    info: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def language(self) -> str:
        return self.info.split()[0].lower() if self.info.split() else ""


def blocks(page: Path) -> list[Block]:
    found, lines = [], page.read_text(encoding="utf-8").splitlines()
    opened: tuple[int, str, str] | None = None
    body: list[str] = []
    for number, line in enumerate(lines, 1):
        match = FENCE.match(line)
        if opened is None and match:
            opened, body = (number, match["ticks"], match["info"].strip()), []
        elif opened is not None and match and match["ticks"] == opened[1] and not match["info"].strip():
            found.append(Block(page, opened[0], opened[2], "\n".join(body) + "\n"))
            opened = None
        elif opened is not None:
            body.append(line)
    return found


def prose(page: Path) -> str:
    """The page without its code blocks (links and inline code are read from this)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    kept, inside = [], False
    for line in lines:
        if FENCE.match(line):
            inside = not inside
            kept.append("")
        else:
            kept.append("" if inside else line)
    return "\n".join(kept)


def python_snippets() -> list[Block]:
    return [b for page in pages() for b in blocks(page) if b.language == "python" and "excerpt" not in b.info.split()]


# ---------------------------------------------------------------------------------------------- command lines
def command_lines() -> list[tuple[str, list[str]]]:
    """``(where, argv after memledger)`` for every ``memledger`` command line of the pages' shell blocks."""
    found = []
    for page in pages():
        for block in blocks(page):
            for offset, line in _shell_lines(block):
                for argv in memledger_commands(line):
                    found.append((f"{block.where}+{offset}", argv))
    return found


def _shell_lines(block: Block) -> Iterator[tuple[int, str]]:
    joined, start = "", 0
    for offset, raw in enumerate(block.text.splitlines(), 1):
        line = raw.strip()
        if block.language == "console":
            if not line.startswith("$ ") and not joined:
                continue
            line = line.removeprefix("$ ")
        elif block.language == "yaml":
            match = re.match(r"-?\s*run:\s*(.*)", line)
            if match is None:
                continue
            line = match.group(1)
        elif block.language not in SHELL_BLOCKS:
            return
        start = start or offset
        if line.endswith("\\"):
            joined += line[:-1] + " "
            continue
        yield start, joined + line
        joined, start = "", 0


def memledger_commands(line: str) -> list[list[str]]:
    """The argument lists of every ``memledger`` run by the shell ``line`` (at a command's position: first
    word, after an operator, ``$(``, ``--`` or environment assignments; inside ``sh -c '…'`` too)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        tokens = list(lexer)
    except ValueError:
        return []
    found: list[list[str]] = []
    at_command = True
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token in OPERATORS or token.endswith("$") or token == "--":
            at_command = True
        elif at_command and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", token):
            pass  # an environment assignment before the command
        elif at_command and Path(token).name == "memledger":
            argv = []
            i += 1
            while i < len(tokens) and tokens[i] not in OPERATORS:
                argv.append(tokens[i])
                i += 1
            found.append(argv)
            at_command = True
            continue
        else:
            if " " in token and "memledger" in token:  # sh -c 'set -a; …; memledger db upgrade'
                found.extend(memledger_commands(token))
            at_command = False
        i += 1
    return found


def inline_commands() -> list[tuple[str, list[str]]]:
    """``(page, command words)`` for every ``memledger …`` in inline code: the words up to the first option,
    placeholder or argument-like word (``a|b`` lists alternatives)."""
    found = []
    for page in pages():
        for span in re.findall(r"`((?:\.venv/bin/)?memledger [^`]+)`", prose(page)):
            words = []
            for word in span.split()[1:]:
                word = word.rstrip(":,.;")
                if not re.fullmatch(r"[a-z][a-z-]*(\|[a-z][a-z-]*)*", word):
                    break
                words.append(word)
            if words:
                found.append((str(page.relative_to(ROOT)), words))
    return found


# ---------------------------------------------------------------------------------------------- links
def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"`|\*\*|\*|_(?=\W)|(?<=\W)_", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for line in prose(page).splitlines():
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*$", line)
        if match is None:
            continue
        slug = github_slug(match.group(1))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def broken_links() -> list[str]:
    broken = []
    for page in pages():
        text = prose(page)
        text = re.sub(r"`[^`\n]*`", "", text)  # links in inline code are text
        for target in re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", text):
            if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):
                continue  # https:, mailto: ...
            path_text, _, anchor = target.partition("#")
            path = (page.parent / path_text).resolve() if path_text else page
            where = f"{page.relative_to(ROOT)}: ({target})"
            if not path.exists():
                broken.append(f"{where}: no such file")
            elif anchor and path.suffix == ".md" and anchor not in anchors(path):
                broken.append(f"{where}: no heading #{anchor} in {path.relative_to(ROOT)}")
    return broken


def missing_paths() -> list[str]:
    missing = []
    for page in pages():
        for span in re.findall(r"`([^`\s]+)`", prose(page)):
            path = span.split("::")[0]
            if REPO_PATH.match(path) and not (ROOT / path).exists():
                missing.append(f"{page.relative_to(ROOT)}: {span}")
    return missing
