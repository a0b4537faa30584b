"""Lines that stay lines: the characters ``str.splitlines()`` breaks on, and JSON text that has none.

A client reading one JSON message per line may split with ``str.splitlines()``, which breaks
on U+0085 (NEL), U+2028 and U+2029 as well as on ``\\n`` and ``\\r``. ``json.dumps`` with
``ensure_ascii=False`` escapes the C0 controls but leaves those three raw, so a record
body holding one would cut the line in two. :func:`escape_line_breaks` writes them (and
the other C1 controls) as ``\\u`` escapes; the JSON still decodes to the same value.
"""

from __future__ import annotations

import re
from typing import Final

LINE_BREAKS: Final = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
"""Every character ``str.splitlines()`` breaks a line on."""

_ESCAPES: Final = {code: f"\\u{code:04x}" for code in (*range(0x7F, 0xA0), 0x2028, 0x2029)}


def escape_line_breaks(json_text: str) -> str:
    """``json_text`` with U+2028, U+2029 and the C1 controls (U+0085 among them) as ``\\u`` escapes.

    Only for JSON text: those characters can only stand inside a JSON string there, where the
    escape means the same character. JSON already escapes every other character in
    :data:`LINE_BREAKS`, so the result has no character ``str.splitlines()`` breaks on except
    the ones the caller adds between messages.
    """
    if json_text.isascii():
        return json_text
    return json_text.translate(_ESCAPES)


CONTROL_CHARACTERS: Final = re.compile(r"[\x00-\x1f\x7f-\x9f]")
"""C0, DEL and C1: what a value shown on one line of a terminal or a log must not hold raw."""


def show_controls(text: str) -> str:
    """``text`` with each of :data:`CONTROL_CHARACTERS` as its ``\\uXXXX`` escape: a value stored before such
    characters were refused (a conflict group with an ESC or a tab) never reaches a terminal raw."""
    return CONTROL_CHARACTERS.sub(lambda found: f"\\u{ord(found.group()):04x}", text)
