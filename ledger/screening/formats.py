"""Key formats for :mod:`ledger.screening`: current provider key shapes and connection strings.

One alternation of named groups, run only when one of the formats' literal prefixes is
present; generic prefixes (``sk-``, ``hf_``, ``Bearer``) must be followed by something
random-looking. docs/screening.md lists the formats.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

from ledger.screening.values import (
    ADVICE_KEY,
    ADVICE_PRIVATE_KEY,
    ADVICE_URL,
    SLUG,
    Finding,
    char_classes,
    entropy,
    is_placeholder,
)

# --------------------------------------------------------------------------- key formats


def _random_tail(match: str) -> bool:
    """A generic prefix (``sk-``, ``npm_``, ``Bearer``) must be followed by something random-looking."""
    tail = re.split(r"[\s_-]", match, maxsplit=1)[-1] if " " not in match else match.split()[-1]
    return char_classes(tail) >= 2 and entropy(tail) >= 3.0 and not SLUG.fullmatch(tail)


_Validator = Callable[[str], bool]

# (detail, advice, pattern, validator). Order matters where prefixes overlap (sk-ant- before sk-).
_FORMATS: Final[tuple[tuple[str, str, str, _Validator | None], ...]] = (
    ("Anthropic API key", ADVICE_KEY, r"\bsk-ant-[A-Za-z0-9_\-]{20,}", None),
    ("OpenAI API key", ADVICE_KEY, r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}", _random_tail),
    ("GitHub token", ADVICE_KEY, r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})", None),
    ("GitLab token", ADVICE_KEY, r"\bgl(?:pat|dt|ft|soat|rt|cbt|ptt|oas|imt|agent)-[A-Za-z0-9_\-]{20,}", None),
    ("Slack token", ADVICE_KEY, r"\b(?:xox[abposre]-[A-Za-z0-9\-]{12,}|xapp-\d-[A-Za-z0-9\-]{10,})", None),
    ("Slack webhook URL", ADVICE_KEY, r"https://hooks\.slack\.com/(?:services|workflows)/[A-Za-z0-9_/]{20,}", None),
    ("AWS access key ID", ADVICE_KEY, r"\b(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}\b", None),
    ("Google API key", ADVICE_KEY, r"\bAIza[0-9A-Za-z_\-]{35}(?![0-9A-Za-z_\-])", None),
    ("Google OAuth credential", ADVICE_KEY, r"\b(?:ya29\.[0-9A-Za-z_\-]{20,}|GOCSPX-[0-9A-Za-z_\-]{20,})", None),
    ("JSON Web Token", ADVICE_KEY, r"\beyJ[A-Za-z0-9_\-]{10,}\.eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]*", None),
    (
        "private key block",
        ADVICE_PRIVATE_KEY,
        r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|PuTTY-User-Key-File-\d",
        None,
    ),
    ("Stripe secret key", ADVICE_KEY, r"\b(?:[sr]k_(?:live|test)_[0-9A-Za-z]{16,}|whsec_[A-Za-z0-9]{20,})", None),
    ("npm token", ADVICE_KEY, r"\bnpm_[A-Za-z0-9]{36}\b", None),
    ("PyPI token", ADVICE_KEY, r"\bpypi-AgE[A-Za-z0-9_\-]{50,}", None),
    ("Hugging Face token", ADVICE_KEY, r"\bhf_[A-Za-z0-9]{30,}\b", _random_tail),
    ("SendGrid API key", ADVICE_KEY, r"\bSG\.[A-Za-z0-9_\-]{16,}\.[A-Za-z0-9_\-]{16,}", None),
    ("DigitalOcean token", ADVICE_KEY, r"\bdo[por]_v1_[a-f0-9]{64}\b", None),
    ("memledger API token", ADVICE_KEY, r"\bmlt_[A-Za-z0-9_\-]{43}(?![A-Za-z0-9_\-])", None),
    ("Shopify token", ADVICE_KEY, r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}\b", None),
    ("Notion token", ADVICE_KEY, r"\b(?:secret_[A-Za-z0-9]{43}|ntn_[A-Za-z0-9]{46})(?![A-Za-z0-9])", _random_tail),
    (
        "HTTP authorization header",
        ADVICE_KEY,
        r"(?i:\bauthorization\s*[:=]\s*(?:bearer|basic|token|digest)\s+|\bbearer\s+)[A-Za-z0-9\-._~+/]{16,}=*",
        _random_tail,
    ),
)
_FORMAT_RE: Final = re.compile("|".join(f"(?P<f{i}>{pattern})" for i, (_, _, pattern, _) in enumerate(_FORMATS)))
# A literal every format above needs (lower-cased); the big alternation only runs when one is present.
_FORMAT_HINT: Final = re.compile(
    r"sk-|gh[pousr]_|github_pat_|gl(?:pat|dt|ft|soat|rt|cbt|ptt|oas|imt|agent)-|xox|xapp-|hooks\.slack"
    r"|akia|asia|abia|acca|a3t|aiza|ya29\.|gocspx-|eyj|private key|putty-user|k_live_|k_test_|whsec_"
    r"|npm_|pypi-|hf_|sg\.|_v1_|shp|bearer|authorization|mlt_|secret_|ntn_"
)
# Where a key pasted in pieces may start ("sk-ant- api03- AbCd…", "AKIA… …" across lines).
KEY_START: Final = re.compile(
    r"(?<![A-Za-z0-9])(?:sk-|[sr]k_(?:live|test)_|gh[pousr]_|github_pat_|glpat-|xox[abposre]-|xapp-|AKIA|ASIA"
    r"|AIza|ya29\.|GOCSPX-|npm_|pypi-|hf_|secret_|ntn_|whsec_|mlt_|eyJ)"
)
_FIRST_PIECE: Final = re.compile(r"[A-Za-z0-9_\-.]+")
_NEXT_PIECE: Final = re.compile(r"(?:\s{1,6}-?\s{0,6}|-\s{1,6})([A-Za-z0-9_\-.]{2,})")
_MAX_PIECES: Final = 16
_MATERIAL: Final = re.compile(r".*\d|.+[A-Z]|.*[-_]$", re.DOTALL)

# scheme://user:password@host — the password part must not be empty or a placeholder.
_URL_CREDENTIALS: Final = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@?#]*:(?P<pw>[^\s@/?#]+)@[^\s@]")


def _format_of(candidate: str, *, whole: bool) -> Finding | None:
    matches = [_FORMAT_RE.match(candidate)] if whole else _FORMAT_RE.finditer(candidate)
    for m in matches:
        if m is None:
            continue
        detail, advice, _, validator = _FORMATS[int(str(m.lastgroup)[1:])]
        if validator is None or validator(m.group()):
            return Finding(detail, advice)
    return None


def _joined_pieces(text: str, start: int) -> list[str]:
    """The pieces of a key pasted with spaces, hyphens or line breaks inside it, from ``start`` on.

    A following piece joins only while it looks like key material (a digit, a capital inside it,
    or a trailing ``-``/``_`` as in ``api03-``): a prose word ends the key ("sk-learn is ...").
    """
    first = _FIRST_PIECE.match(text, start)
    if first is None:
        return []
    pieces, end = [first.group()], first.end()
    while len(pieces) < _MAX_PIECES:
        nxt = _NEXT_PIECE.match(text, end)
        if nxt is None or not _MATERIAL.match(nxt.group(1)):
            break
        pieces.append(nxt.group(1))
        end = nxt.end()
    return pieces


def broken_key_rule(text: str) -> Finding | None:
    """A key of a known format cut by spaces, hyphens or line breaks: its pieces joined, then checked."""
    for start in KEY_START.finditer(text):
        pieces = _joined_pieces(text, start.start())
        if not pieces or (len(pieces) == 1 and "-" not in pieces[0][len(start.group()) :]):
            continue  # one unbroken token: the whole-text check has seen it
        joined = "".join(pieces)
        rest = joined[len(start.group()) :]
        if char_classes(rest) < 2 or entropy(rest) < 3.0:
            continue
        for candidate in (joined, start.group() + rest.replace("-", "")):
            finding = _format_of(candidate, whole=True)
            if finding is not None:
                return Finding(f"{finding.detail}, split into pieces", finding.advice)
    return None


def format_rule(text: str, low: str) -> Finding | None:
    """A key of a known format, whole or pasted in pieces, or a connection string with a password."""
    if _FORMAT_HINT.search(low):
        finding = _format_of(text, whole=False) or broken_key_rule(text)
        if finding is not None:
            return finding
    if "://" in text and "@" in text:
        for m in _URL_CREDENTIALS.finditer(text):
            if not is_placeholder(m.group("pw")):
                return Finding("connection string with a password", ADVICE_URL)
    return None
