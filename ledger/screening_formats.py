"""Key formats for :mod:`ledger.screening`: current provider key shapes and connection strings.

One alternation of named groups, run only when one of the formats' literal prefixes is
present; generic prefixes (``sk-``, ``hf_``, ``Bearer``) must be followed by something
random-looking. docs/screening.md lists the formats.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

from ledger.screening_values import (
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
    r"|npm_|pypi-|hf_|sg\.|_v1_|shp|bearer|authorization|mlt_"
)

# scheme://user:password@host — the password part must not be empty or a placeholder.
_URL_CREDENTIALS: Final = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@?#]*:(?P<pw>[^\s@/?#]+)@[^\s@]")


def format_rule(text: str, low: str) -> Finding | None:
    if _FORMAT_HINT.search(low):
        for m in _FORMAT_RE.finditer(text):
            detail, advice, _, validator = _FORMATS[int(str(m.lastgroup)[1:])]
            if validator is None or validator(m.group()):
                return Finding(detail, advice)
    if "://" in text and "@" in text:
        for m in _URL_CREDENTIALS.finditer(text):
            if not is_placeholder(m.group("pw")):
                return Finding("connection string with a password", ADVICE_URL)
    return None
