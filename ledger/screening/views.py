"""What a person would see in a body, for the screener (:mod:`ledger.screening`).

A credential can hide from patterns in ways a reader never notices: an invisible
character inside the key (U+200B, U+200C, U+2060, U+00AD, U+FEFF ...), full-width or other
compatibility forms, a Cyrillic or Greek letter inside a Latin word ("pаssword" with a
Cyrillic а), or the whole key wrapped in base64 or hex. :func:`normalised` undoes the
first three (NFKC, strip every invisible character, fold look-alike letters in mixed-script
words to Latin with ``confusable-homoglyphs``); :func:`decoded_runs` decodes base64 and hex
runs long enough to hold a key, when they decode to text.

The views are only screened, never stored: a body that passes is kept as it was sent.
"""

from __future__ import annotations

import base64
import binascii
import re
import unicodedata
from collections.abc import Iterator
from functools import lru_cache
from typing import Final

# Every format character (category Cf, Unicode 14): zero-width spaces and joiners, word joiner, soft
# hyphen, BOM, bidi controls, invisible operators, tag characters. Written out: computing it at import
# costs a second (tests/ledger/test_screening.py checks the list against unicodedata).
FORMAT_CHARS_CLASS: Final = (
    "\U000000ad\U00000600-\U00000605\U0000061c\U000006dd\U0000070f\U00000890-\U00000891\U000008e2\U0000180e"
    "\U0000200b-\U0000200f\U0000202a-\U0000202e\U00002060-\U00002064\U00002066-\U0000206f\U0000feff"
    "\U0000fff9-\U0000fffb\U000110bd\U000110cd\U00013430-\U00013438\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f"
)
# Every character drawn as nothing: the format characters, the rest of Unicode's default-ignorable code
# points (combining grapheme joiner U+034F, Hangul fillers, Khmer inherent vowels, Mongolian variation
# selectors, variation selectors U+FE00-FE0F and U+E0100-E01EF, the unassigned ignorables) and the blank
# Braille pattern U+2800, which is not ignorable but shows no dot.
INVISIBLE_CHARS_CLASS: Final = (
    FORMAT_CHARS_CLASS + "\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u2065\u2800\u3164\ufe00-\ufe0f"
    "\uffa0\ufff0-\ufff8\U000e0000-\U000e0fff"
)
INVISIBLE: Final = re.compile(f"[{INVISIBLE_CHARS_CLASS}]")
# Scripts whose letters are drawn like Latin ones: Greek, Cyrillic, Armenian, Cherokee, Coptic.
_LOOKALIKE_SCRIPTS: Final = (
    "\u0370-\u03ff\u0400-\u052f\u0530-\u058f\u13a0-\u13ff\u1f00-\u1fff\u2c80-\u2cff\ua640-\ua69f"
)
# A word (from its start, so the search stays linear) holding both a Latin letter and a look-alike one.
_MIXED_WORD: Final = re.compile(rf"(?<!\w)(?=\w*[A-Za-z])(?=\w*[{_LOOKALIKE_SCRIPTS}])\w+")
_NON_ASCII_LETTER: Final = re.compile(f"[{_LOOKALIKE_SCRIPTS}]")
# Long enough to hold the shortest key worth finding once decoded (16 characters -> 24 of base64).
_BASE64_RUN: Final = re.compile(r"[A-Za-z0-9+/_-]{24,}={0,2}")
_HEX_RUN: Final = re.compile(r"(?:[0-9A-Fa-f]{2}){16,}")
_MIN_DECODED_CHARS: Final = 12
MAX_RUNS: Final = 8  # a body is at most a few thousand characters; this bounds the work


@lru_cache(maxsize=4096)
def ascii_lookalike(char: str, *, letters_only: bool = True) -> str:
    """The ASCII letter ``char`` is drawn like (with ``letters_only=False``, else any printable ASCII
    character it is drawn like, a letter first), or ``char`` itself. Uses ``confusable-homoglyphs``."""
    from confusable_homoglyphs import confusables  # deferred: loads a large table once

    found = confusables.is_confusable(char, greedy=True, preferred_aliases=["latin"])
    if not found:
        return char
    glyphs = [str(g["c"]) for g in found[0]["homoglyphs"]]
    drawn = [c for c in glyphs if len(c) == 1 and c.isascii() and c.isprintable() and not c.isspace()]
    letters = [c for c in drawn if c.isalpha()]
    return (letters or ([] if letters_only else drawn) or [char])[0]


def _fold_word(match: re.Match[str]) -> str:
    return _NON_ASCII_LETTER.sub(lambda m: ascii_lookalike(m.group()), match.group())


def normalised(text: str) -> str:
    """``text`` as it reads: NFKC, no invisible characters, look-alike letters in mixed-script words folded.

    A word wholly in another script ("пароль", "パスワード") is left as it is: only a word that mixes
    Latin letters with others is folded, which is what a disguised keyword or key looks like.
    """
    if text.isascii():
        return text
    view = INVISIBLE.sub("", unicodedata.normalize("NFKC", text))
    if _NON_ASCII_LETTER.search(view) is None:
        return view
    return _MIXED_WORD.sub(_fold_word, view)


def _as_text(raw: bytes) -> str | None:
    """Decoded bytes, when they are UTF-8 text a person could read (else None)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if len(text) < _MIN_DECODED_CHARS:
        return None
    printable = sum(c.isprintable() or c in "\n\t" for c in text)
    return text if printable >= 0.95 * len(text) else None


def _base64(run: str) -> bytes | None:
    padded = run.rstrip("=") + "=" * (-len(run.rstrip("=")) % 4)
    altchars = b"-_" if ("-" in run or "_" in run) else None
    try:
        return base64.b64decode(padded, altchars=altchars, validate=True)
    except (binascii.Error, ValueError):
        return None


def decodes_to_text(token: str) -> bool:
    """True when ``token`` is base64 of readable text (its decoded view is screened instead)."""
    raw = _base64(token)
    return raw is not None and _as_text(raw) is not None


def decoded_runs(text: str) -> Iterator[str]:
    """The text hidden in base64 and hex runs of ``text`` (at most :data:`MAX_RUNS` of each)."""
    for n, m in enumerate(_HEX_RUN.finditer(text)):
        if n >= MAX_RUNS:
            break
        decoded = _as_text(bytes.fromhex(m.group()))
        if decoded is not None:
            yield decoded
    for n, m in enumerate(_BASE64_RUN.finditer(text)):
        if n >= MAX_RUNS:
            break
        raw = _base64(m.group())
        decoded = None if raw is None else _as_text(raw)
        if decoded is not None:
            yield decoded
