"""What a value must look like to count as a secret, for :mod:`ledger.screening`'s rules.

The advice each refusal gives, the cheap shape tests every layer shares (a long token, an
Artifactory hint), the value tests (placeholders, references to a store, harmless shapes,
prose words, the entropy rule) and :func:`judge`, which decides whether a value stated after
a password / PIN / key word is a secret (docs/screening.md says how).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Final

# What the user should do instead, by family of credential.
ADVICE_KEY = (
    'Store a reference to where the key lives (for example "my Anthropic key is in 1Password under'
    " 'anthropic-prod'\"), not the key itself."
)
ADVICE_PASSWORD = (
    'Store where the password is kept (for example "my wifi password is in 1Password"), not the password itself.'
)
ADVICE_PIN = 'Store where the code is kept (for example "the door code is in the shared vault"), not the code itself.'
ADVICE_URL = (
    "Save the connection string without its password (for example postgres://app@db.internal:5432/app)"
    " or with a placeholder such as ${DB_PASSWORD}."
)
ADVICE_PRIVATE_KEY = (
    "Store where the key file or vault entry is (for example ~/.ssh/id_ed25519), never the key material."
)


@dataclass(frozen=True, slots=True)
class Finding:
    detail: str
    advice: str


_LONG_TOKEN: Final = 16
_ARTIFACTORY_HINT: Final = re.compile(r"A(?:KC|P[\dA-F])[A-Za-z0-9]{8}")


def has_long_token(text: str) -> bool:
    return max(map(len, text.split()), default=0) >= _LONG_TOKEN


def has_artifactory_hint(text: str) -> bool:
    return ("AP" in text or "AKC" in text) and _ARTIFACTORY_HINT.search(text) is not None


# --------------------------------------------------------------------------- value tests


def entropy(text: str) -> float:
    """Shannon entropy in bits per character."""
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in Counter(text).values())


def char_classes(text: str) -> int:
    """How many of lower case, upper case, digits and other characters ``text`` uses."""
    return (
        any(c.islower() for c in text)
        + any(c.isupper() for c in text)
        + any(c.isdigit() for c in text)
        + any(not c.isalnum() for c in text)
    )


_PLACEHOLDER: Final = re.compile(
    r"""(?ix)
    <[^<>]*> | \[[^\[\]]*\] | \{\{?[^{}]*\}?\} | \$\{?[A-Za-z_][\w.]*\}? | %[A-Za-z_]\w*% | \$\([^)]*\)
    | ([^\d])\1{2,}                         # ****, xxxx, .... (0000 is a real PIN)
    | (?:x{3,}|\*+|\.{2,}|…)[\w.*…-]*
    | (?:your|my|the)[_-]\w+ | your\w*
    | redacted | hidden | omitted | elided | removed | masked | placeholder | example | dummy | sample
    | none | null | nil | undefined | true | false | yes | no | on | off | empty | blank | unset | n/?a | tbd | todo
    | password | passwd | pass | secret | token | key | apikey | api_key | pin | changeit
    | (?:os\.(?:environ|getenv)|process\.env|System\.getenv|getenv|ENV|env)\b\S*   # read from the environment
    """
)
REFERENCE: Final = re.compile(
    r"(?i)1password|bitwarden|lastpass|keepass(?:xc)?|dashlane|keychain|vault|op://|doppler|"
    r"aws-?secrets-?manager|secrets?-?manager|\.env|env(?:ironment)?(?:-?var(?:iable)?)?s?"
)
# A password manager or vault named at the start of a value, whatever ending the language adds
# ("1Password'de", "Bitwardenissa", "KeePassban"): where the secret is, not the secret.
_STORE_NAME: Final = re.compile(
    r"1\s?password|bitwarden|lastpass|keepass|dashlane|keychain|vault|proton\s?pass|enpass|op://"
)


def mentions_store(value: str) -> bool:
    return _STORE_NAME.search(value.lower()) is not None


STRUCTURED: Final = re.compile(
    r"""(?x)
    v?\d+(?:\.\d+)+(?:[-+][\w.]+)?                        # version 1.2.3, v2.0.1-rc1
    | \d{1,4}(?:[-/.:]\d{1,4}){1,3}(?:[T\s]?\d{1,2}(?::\d{2}){1,2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?  # dates, times
    | \d{1,3}(?:\.\d{1,3}){3}(?::\d{1,5})?(?:/\d{1,2})?  # IPv4[:port][/cidr]
    | :\d{1,5}                                            # a port
    | 0x[0-9A-Fa-f]+                                      # a hex literal (GPG key ids are public)
    | [^@\s]+@[^@\s]+\.[A-Za-z]{2,}                       # e-mail address
    | (?:/|~/|\./|\.\./|[A-Za-z]:\\)\S*                  # file path
    | \w+://\S* | www\.\S+                                # URL (credentials are handled by their own rule)
    | \$?[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+                    # an environment variable's name
    """
)
# Plain words that follow "password is" in prose rather than being the password.
_PROSE_WORDS_TEXT = """
    a an the my your our their his her its this that these those it what which where who why how here there
    in on at for to from by with without under over inside behind below above near somewhere elsewhere
    not never always still now then also too just only very really quite so
    required mandatory optional wrong incorrect correct right weak strong long short secure insecure safe unsafe
    good bad fine ok okay same different new old valid invalid expired blank empty missing unknown forgotten lost
    saved stored hashed encrypted encoded hidden private personal unique random complex complicated simple easy
    hard temporary permanent ready set reset changed sensitive case known shared attached enough sufficient
    mine yours ours theirs one two three four five six seven eight nine ten twelve sixteen twenty
    managed rotated generated written kept synced memorised memorized unchanged
    something anything whatever another stronger longer better safer simpler harder easier
"""
PROSE_WORDS: Final = frozenset(_PROSE_WORDS_TEXT.split())
_PROSE_SUFFIX: Final = re.compile(r"(?i)(?:ed|ing|ly|able|ible|ive|ous|ful|less|ent|ant|ary|ory|ness|ment|tion)$")
_WORDISH: Final = re.compile(r"[A-Za-z][a-z]*(?:['\u2019][a-z]+)?|[A-Z]+|[a-z]+(?:[-_][a-z]+)+")
SLUG: Final = re.compile(r"[a-z0-9]{1,12}(?:[-_.:/][a-z0-9]{1,12})+")
_HEX_OR_UUID: Final = re.compile(r"(?i)[0-9a-f]{16,}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_DIGIT_GROUPS: Final = re.compile(r"\d{1,6}(?:[-\s]\d{1,6}){1,4}")
_VERSION: Final = re.compile(r"v?\d+(?:\.\d+)+")
_TRAILING_PUNCT: Final = re.compile(r"[.,;:!?)\]]+$")
_CLAUSE_BREAK: Final = re.compile(
    r"\s*(?:$|\n|[.;!?,)(\u2013\u2014]|\s-\s|\b(?:and|but|so|or|then|because)\b)", re.IGNORECASE
)


def is_placeholder(value: str) -> bool:
    return _PLACEHOLDER.fullmatch(value) is not None


# Source code on the right of "password =": a call, an index or an attribute (form["password"],
# getpass(), settings.db.password), not a literal.
_CODE_EXPRESSION: Final = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*\s*[\[(].*|[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")


def is_code_expression(value: str) -> bool:
    return _CODE_EXPRESSION.fullmatch(value) is not None


def _plain(value: str) -> bool:
    """True for values that are not secrets whatever keyword precedes them."""
    return (
        is_placeholder(value)
        or REFERENCE.fullmatch(value) is not None
        or STRUCTURED.fullmatch(value) is not None
        or _CODE_EXPRESSION.fullmatch(value) is not None
    )


def keyish(value: str, min_len: int) -> bool:
    """The entropy rule: long enough, mixed character classes, not a word, slug or known shape."""
    if len(value) < min_len or _WORDISH.fullmatch(value) or SLUG.fullmatch(value) or _plain(value):
        return False
    if char_classes(value) < 2:
        return False
    # Short passwords have all-distinct characters (entropy == log2(len)); long keys must look random.
    floor = min(3.0, math.log2(len(value)) - 0.5)
    return entropy(value) >= floor


def prose_word(value: str) -> bool:
    low = value.lower()
    return low in PROSE_WORDS or _PROSE_SUFFIX.search(low) is not None


# --------------------------------------------------------------------------- judging a stated value

PW, PIN, KEY = "password", "pin", "key"
DETAILS: Final = {
    (PW, "sentence"): Finding("password stated in a sentence", ADVICE_PASSWORD),
    (PIN, "sentence"): Finding("PIN or access code stated in a sentence", ADVICE_PIN),
    (KEY, "sentence"): Finding("API key, token or secret stated in a sentence", ADVICE_KEY),
    (PW, "assignment"): Finding("password in an assignment", ADVICE_PASSWORD),
    (PIN, "assignment"): Finding("PIN or access code in an assignment", ADVICE_PIN),
    (KEY, "assignment"): Finding("API key, token or secret in an assignment", ADVICE_KEY),
}


def _split_value(raw: str, text: str, end: int) -> tuple[str, bool, bool]:
    """Return (value, quoted, ends_clause) for a value token that ends at ``end`` in ``text``."""
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'`":
        return raw[1:-1].strip(), True, True
    value = _TRAILING_PUNCT.sub("", raw)
    return value, False, value != raw or _CLAUSE_BREAK.match(text, end) is not None


def judge(raw: str, family: str, mode: str, text: str = "", end: int = 0) -> bool:
    """Decide whether ``raw``, stated after a ``family`` keyword with a ``mode`` connector, is a secret.

    ``mode`` is ``assign`` (``=``, ``:=``: any real value counts), ``colon`` or ``verb`` (prose: a
    plain word or a number counts only when it ends the clause) or ``bare`` (no connector: only a
    strongly key-shaped value counts). A quoted value is always judged as an assignment. ``text``
    and ``end`` locate what follows the value, to tell whether it ends its clause.
    """
    value, quoted, clause_end = _split_value(raw, text, end)
    if not value or is_placeholder(value) or REFERENCE.fullmatch(value) or _STORE_NAME.match(value.lower()):
        return False
    if not quoted and _CODE_EXPRESSION.fullmatch(value):
        return False
    if family == PIN and _VERSION.fullmatch(value):  # "pin numpy to 1.26.4": a version, not a code
        return False
    if mode == "bare" and not quoted:  # "wifi password Tr0ub4dor&3", "card PIN 4821."
        if family == PIN:  # "pin lodash@4.17.21", "pin react 18": the verb, not a code
            return value.isdigit() and clause_end and 4 <= len(value) <= 10
        return keyish(value, 8) and any(c.isdigit() for c in value) and any(c.isalpha() for c in value)
    strict = quoted or mode == "assign"
    ended = strict or clause_end
    if family == PIN:  # codes also come as 12-34-56 or 8f2a1-0b3c9
        if value.isdigit() or _DIGIT_GROUPS.fullmatch(value):
            return ended and 3 <= len(value) <= 24
        grouped = SLUG.fullmatch(value) is not None and any(c.isdigit() for c in value)
        return (grouped or keyish(value, 3)) and (ended or len(value) >= 6)
    if STRUCTURED.fullmatch(value):
        return False
    if family == KEY:
        if strict:
            return keyish(value, 8) or _HEX_OR_UUID.fullmatch(value) is not None
        return keyish(value, 12)
    if value.isdigit():
        return ended and 4 <= len(value) <= 16
    if keyish(value, 4):
        return ended or len(value) >= 8
    if " " in value:  # a quoted passphrase
        return quoted and len(value) >= 8
    return ended and len(value) >= 3 and not prose_word(value)
