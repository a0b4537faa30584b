"""Reading a memory entry file and validating it.

An entry is ``---``, YAML front matter, ``---`` (or ``...``), then a free Markdown
body (context and evidence notes; the auditor never reads it as the fact)::

    ---
    fact: "Production deploys of acme/widgets go to eu-west-1."
    source:
      kind: user-said
      reference: "https://tracker.example/ACME-42"
    scope:
      level: project
      reference: "acme/widgets"
    confidence: 0.95
    created: "2025-01-10"
    expires: "2025-12-31"
    superseded-by: null
    may-this-authorize-action: true
    ---

    ## Evidence notes
    The release ticket names the region.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import os
import stat
from pathlib import Path

from ledger.errors import EntryUnreadable
from ledger.files.body import check_body
from ledger.files.fields import Collector, read_fields
from ledger.files.frontmatter import load_front_matter
from ledger.files.model import INVALID, Entry, Problem

_OPEN = "---"
_CLOSE = ("---", "...")


SYMBOLIC_LINK = "symbolic-link"


def read_entry(path: Path, *, name: str | None = None) -> Entry:
    """Read and parse the entry at ``path``; a symbolic link is never followed.

    A link (to a file, a directory or nothing) is an invalid entry with the
    ``symbolic-link`` problem, and its target is never opened: the file is opened
    with ``O_NOFOLLOW``, so a link swapped in after a directory listing is caught too.
    Raises :class:`EntryUnreadable` when the file cannot be read (missing, a directory,
    not a regular file, no permission); every problem with its content is reported in
    :attr:`Entry.problems` instead.
    """
    name = name or path.name
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == errno.ELOOP or path.is_symlink():
            return link_entry(path, name)
        raise EntryUnreadable(path, exc.strerror or type(exc).__name__) from exc
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise EntryUnreadable(path, "not a regular file")
        try:
            data = handle.read()
        except OSError as exc:
            raise EntryUnreadable(path, exc.strerror or type(exc).__name__) from exc
    return parse_entry(data, name=name, path=path)


def write_no_follow(path: Path, text: str, *, exclusive: bool = False) -> bool:
    """Write ``text`` (UTF-8) to ``path`` unless ``path`` is a symbolic link: False then, nothing written anywhere.

    Opened with ``O_NOFOLLOW``, so a link (to a file, or dangling) put there at any moment is
    never written through. ``exclusive``: refuse a file that exists (``FileExistsError``).

    Raises:
        OSError: the file cannot be written (no permission, no directory, exists with ``exclusive``).
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    flags |= os.O_EXCL if exclusive else os.O_TRUNC
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP or path.is_symlink():
            return False
        raise
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    return True


def link_entry(path: Path, name: str) -> Entry:
    """The invalid entry a symbolic link is: its own problem, nothing of its target read."""
    message = "the entry is a symbolic link; memledger never follows links, so its target was not read"
    hint = "replace the link with the entry file itself, or check the file it points to by its own path"
    problem = Problem(name, "file", SYMBOLIC_LINK, INVALID, message, hint, 1)
    return Entry(name, path, "", False, problems=(problem,))


def parse_entry(data: bytes, *, name: str, path: Path | None = None) -> Entry:
    """Parse entry ``data``; never raises on bad content (problems are in the result)."""
    digest = hashlib.sha256(data).hexdigest()
    where = path or Path(name)
    out = Collector(name, {})
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        out.add("file", "not-utf8", f"the file is not UTF-8 text (byte {exc.start})", "save it as UTF-8", line=1)
        return Entry(name, where, digest, False, problems=tuple(out.problems))
    text = text.removeprefix("\ufeff")
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].rstrip() != _OPEN:
        msg = "the file does not start with a '---' front-matter line"
        out.add("front-matter", "front-matter-missing", msg, "start from memory-entry.md (memledger files new)", line=1)
        return Entry(name, where, digest, False, problems=tuple(out.problems))
    close = next((i for i in range(1, len(lines)) if lines[i].rstrip() in _CLOSE), None)
    if close is None:
        msg = "the front matter is never closed"
        out.add("front-matter", "front-matter-unclosed", msg, "end the front matter with a '---' line", line=1)
        return Entry(name, where, digest, False, problems=tuple(out.problems))
    return _parse_parts(name, where, digest, "".join(lines[1:close]), "".join(lines[close + 1 :]), close + 2)


_ENTRY_FIELDS = frozenset(field.name for field in dataclasses.fields(Entry))


def _parse_parts(name: str, path: Path, digest: str, yaml_text: str, raw_body: str, body_line: int) -> Entry:
    loaded = load_front_matter(yaml_text, first_line=2)
    out = Collector(name, loaded.lines)
    if loaded.problems:
        # The front matter cannot be trusted: report why, read no field from it.
        for p in loaded.problems:
            out.add(p.key, p.check, p.message, p.hint, line=p.line)
        body = check_body(raw_body, body_line, out)
        return Entry(
            name,
            path,
            digest,
            False,
            body=body,
            body_line=body_line,
            lines=loaded.lines,
            problems=_sorted(out.problems),
        )
    f = read_fields(loaded.data, out)
    body = check_body(raw_body, body_line, out)
    # Every typed field the entry keeps comes from Fields under the same name.
    typed = {field.name: getattr(f, field.name) for field in dataclasses.fields(f) if field.name in _ENTRY_FIELDS}
    return Entry(
        name,
        path,
        digest,
        True,
        **typed,
        body=body,
        body_line=body_line,
        lines=loaded.lines,
        problems=_sorted(out.problems),
    )


def _sorted(problems: list[Problem]) -> tuple[Problem, ...]:
    return tuple(sorted(problems, key=lambda p: p.line))


def validate(entry: Entry) -> list[Problem]:
    """Every problem of ``entry``, in file-line order (``[]`` when it is valid).

    No rule depends on the audit date: the date only decides expired and overdue,
    which are audit findings, not validity.
    """
    return list(entry.problems)
