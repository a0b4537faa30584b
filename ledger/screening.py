"""Body screening: what a record body must look like before any write path stores it.

:func:`screen_body` is called by every write path (save, propose, slash commands,
consolidation). It returns the body to store, stripped of leading and trailing
whitespace, or raises :class:`~ledger.errors.BodyRejected` with a ``why`` of
``not_text``, ``empty``, ``too_long`` or ``credential``.

Credential screening has three layers, cheapest first:

1. A *prefilter*: one precompiled pattern over the lower-cased body plus a longest-token
   check. A body with no trigger word (``key``, ``token``, ``password``, ``BEGIN``,
   ``://`` ...) and no token of 16+ characters is accepted at once; that is the common
   case and costs a couple of microseconds (docs/screening.md has the measurements).
2. Our own patterns for current key formats (Anthropic, OpenAI, GitHub, Slack, AWS,
   Google, GitLab, Stripe, npm, PyPI, JWTs, private key blocks, connection strings
   with a password) and a keyword rule with an entropy test for values stated after
   ``password`` / ``PIN`` / ``api key`` / ``token`` / ``secret`` in a sentence or an
   assignment.
3. detect-secrets' specific detectors (never its high-entropy plugins, which flag
   ordinary words), each run only on the lines where it could match.

Thread safety: the detectors are used through ``analyze_string``, which only runs
compiled regular expressions; ``analyze_line`` is avoided because it reads
detect-secrets' global settings singleton. The detectors are built once, lazily,
under a lock, so importing this module stays cheap.

Nothing here logs or returns the body or any part of it: ``BodyRejected.detail``
names the kind of credential, never its value.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final, Protocol

from ledger.errors import BodyRejected
from ledger.screening_languages import CJK_NEXT, INTL_PROSE, INTL_SENTENCE
from ledger.screening_views import decoded_runs, normalised

__all__ = ["MAX_BODY_CHARS", "find_credential", "screen_body"]

MAX_BODY_CHARS: Final = 2000

log = logging.getLogger(__name__)

# What the user should do instead, by family of credential.
_ADVICE_KEY = (
    'Store a reference to where the key lives (for example "my Anthropic key is in 1Password under'
    " 'anthropic-prod'\"), not the key itself."
)
_ADVICE_PASSWORD = (
    'Store where the password is kept (for example "my wifi password is in 1Password"), not the password itself.'
)
_ADVICE_PIN = 'Store where the code is kept (for example "the door code is in the shared vault"), not the code itself.'
_ADVICE_URL = (
    "Save the connection string without its password (for example postgres://app@db.internal:5432/app)"
    " or with a placeholder such as ${DB_PASSWORD}."
)
_ADVICE_PRIVATE_KEY = (
    "Store where the key file or vault entry is (for example ~/.ssh/id_ed25519), never the key material."
)


@dataclass(frozen=True, slots=True)
class _Finding:
    detail: str
    advice: str


# --------------------------------------------------------------------------- prefilter
# Everything a later layer can flag contains one of these keywords (searched in the lower-cased
# text, which is several times faster than a case-insensitive pattern) or a long token: every
# key format and every detect-secrets detector we run needs one of the two, except Artifactory's
# short formats, which get their own hint.
# Every branch starts with a literal so the regex engine can skip ahead (a leading \b costs 10x).
_TRIGGER: Final = re.compile(
    r"p(?:ass(?:w|phrase|code|\b|_)|wd|ins?\b|in_?code|rivate|utty)|secret|token|key|co(?:des?\b|mbination)|cv[vc]"
    r"|cred|auth|be(?:arer|gin)|contrase|://"
    r"|kennwort|mot de passe|mdp|clave|senha|palavra|parola|wachtwoord|пароль|密码|密碼|口令|パスワード|暗証"
)
_LONG_TOKEN: Final = 16
_ARTIFACTORY_HINT: Final = re.compile(r"A(?:KC|P[\dA-F])[A-Za-z0-9]{8}")
# A body longer than _WHOLE_TEXT_CHARS is cut into lines and sentences before the keyword and
# detect-secrets layers, so it only pays for the sentences that have a trigger. None of the
# secrets we look for contains a line break or "<punctuation><space>"; key blocks, which span
# lines, are found by the key-format layer, which always sees the whole body.
_SENTENCE_BREAK: Final = re.compile(r"\n|(?<=[.!?;])\s+")
_WHOLE_TEXT_CHARS: Final = 400


def _has_long_token(text: str) -> bool:
    return max(map(len, text.split()), default=0) >= _LONG_TOKEN


def _has_artifactory_hint(text: str) -> bool:
    return ("AP" in text or "AKC" in text) and _ARTIFACTORY_HINT.search(text) is not None


def _is_candidate(text: str, low: str) -> bool:
    """The cheap gate: False means no later layer could flag ``text``."""
    return _TRIGGER.search(low) is not None or _has_long_token(text) or _has_artifactory_hint(text)


# --------------------------------------------------------------------------- value tests


def _entropy(text: str) -> float:
    """Shannon entropy in bits per character."""
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in Counter(text).values())


def _classes(text: str) -> int:
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
    """
)
_REFERENCE: Final = re.compile(
    r"(?i)1password|bitwarden|lastpass|keepass(?:xc)?|dashlane|keychain|vault|op://|doppler|"
    r"aws-?secrets-?manager|secrets?-?manager|\.env|env(?:ironment)?(?:-?var(?:iable)?)?s?"
)
_STRUCTURED: Final = re.compile(
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
_PROSE_WORDS: Final = frozenset(_PROSE_WORDS_TEXT.split())
_PROSE_SUFFIX: Final = re.compile(r"(?i)(?:ed|ing|ly|able|ible|ive|ous|ful|less|ent|ant|ary|ory|ness|ment|tion)$")
_WORDISH: Final = re.compile(r"[A-Za-z][a-z]*(?:['\u2019][a-z]+)?|[A-Z]+|[a-z]+(?:[-_][a-z]+)+")
_SLUG: Final = re.compile(r"[a-z0-9]{1,12}(?:[-_.:/][a-z0-9]{1,12})+")
_HEX_OR_UUID: Final = re.compile(r"(?i)[0-9a-f]{16,}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_DIGIT_GROUPS: Final = re.compile(r"\d{1,6}(?:[-\s]\d{1,6}){1,4}")
_TRAILING_PUNCT: Final = re.compile(r"[.,;:!?)\]]+$")
_CLAUSE_BREAK: Final = re.compile(
    r"\s*(?:$|\n|[.;!?,)(\u2013\u2014]|\s-\s|\b(?:and|but|so|or|then|because)\b)", re.IGNORECASE
)


def _is_placeholder(value: str) -> bool:
    return _PLACEHOLDER.fullmatch(value) is not None


def _plain(value: str) -> bool:
    """True for values that are not secrets whatever keyword precedes them."""
    return _is_placeholder(value) or _REFERENCE.fullmatch(value) is not None or _STRUCTURED.fullmatch(value) is not None


def _keyish(value: str, min_len: int) -> bool:
    """The entropy rule: long enough, mixed character classes, not a word, slug or known shape."""
    if len(value) < min_len or _WORDISH.fullmatch(value) or _SLUG.fullmatch(value) or _plain(value):
        return False
    if _classes(value) < 2:
        return False
    # Short passwords have all-distinct characters (entropy == log2(len)); long keys must look random.
    floor = min(3.0, math.log2(len(value)) - 0.5)
    return _entropy(value) >= floor


def _prose_word(value: str) -> bool:
    low = value.lower()
    return low in _PROSE_WORDS or _PROSE_SUFFIX.search(low) is not None


# --------------------------------------------------------------------------- keyword rule

_PW, _PIN, _KEY = "password", "pin", "key"

_KW_PASSWORD = r"pass(?:word|wd|phrase)s?|pass[\s-]phrase|pwd|wi-?fi\s+(?:pass|key)|network\s+key"
_KW_PIN = (
    r"pins?(?:\s*(?:code|number))?|passcodes?|combination|cvv|cvc"
    r"|(?:door|gate|alarm|lock|garage|safe|security|access|entry|unlock|login|otp|verification|2fa|mfa|backup|recovery"
    r"|one-time)\s+codes?"
)
_KW_KEY = (
    r"(?:api|access|secret|private|license|licence|signing|encryption|master|client|app|service|auth|ssh|gpg|pgp"
    r"|deploy|product|activation|serial|admin)[\s_-]?keys?|apikey|keys?"
    r"|(?:access|refresh|auth|bearer|api|session|bot|personal\s+access)[\s_-]?tokens?|tokens?"
    r"|(?:client|app|api|shared|webhook|signing|jwt|session)[\s_-]?secrets?|secrets?|credentials?|creds"
)
_KEYWORD: Final = re.compile(
    rf"(?<![\w-])(?:(?P<{_PW}>{_KW_PASSWORD})|(?P<{_PIN}>{_KW_PIN})|(?P<{_KEY}>{_KW_KEY}))(?![\w-])", re.IGNORECASE
)
_NOT_SECRET_BEFORE: Final = re.compile(
    r"(?i)(?:public|publishable|host|primary|foreign|sort|partition|idempotency)\s*$"
)
_MAX_VALUE: Final = 200  # longer values are judged on their first 200 characters
# What may follow a keyword in prose: an optional "for the router", a connector, the value.
_PROSE_TAIL: Final = re.compile(
    r"""(?ix)
    (?:\s+(?:for|to|on|of|at|in)\s+(?:(?:the|my|our|this|that|his|her|their|a|an)\s+)?[\w.'-]+
       (?:\s+(?!(?:is|was|are|were|equals|reads|set|changed)\b)[\w.'-]+)?)?
    (?P<conn> \s*(?::=|=>|==?)\s*
            | \s*:\s*
            | ['\u2019]s\s+
            | \s+(?:is|was|are|were|equals|reads)(?:\s+(?:now|still|currently|just|set\s+to|changed\s+to))?\s*:?\s+
            | \s+(?:set\s+to|changed\s+to|to)\s+
            | \s+ )
    (?P<val>"[^"\n]{1,200}"|'[^'\n]{1,200}'|`[^`\n]{1,200}`|\S{1,200})
    """
)
# A keyword ending an identifier, then an assignment: DB_PASSWORD=..., "api_key": "...", dbPassword := ...
# The identifier's left edge is checked in Python (_ends_identifier): a lookbehind or a lazy prefix
# here makes the search quadratic on long dotted tokens.
_ASSIGNMENT: Final = re.compile(
    rf"(?i:(?P<{_PW}>pass(?:word|wd|phrase|code)?|pwd)|(?P<{_PIN}>pin(?:_?code)?)"
    rf"|(?P<{_KEY}>(?:secret|access|private|api|auth)?[_\-]?key|apikey|secret|token|auth|credentials?|creds))"
    r"(?:\[\d*\])?[\"'\]]{0,2}[ \t]*(?P<op>:=|=>|==?|:)(?P<sp>[ \t]*)"
    rf"(?P<val>\"[^\"\n]{{0,{_MAX_VALUE}}}\"|'[^'\n]{{0,{_MAX_VALUE}}}'|`[^`\n]{{0,{_MAX_VALUE}}}`"
    rf"|[^\s;,&'\"]{{1,{_MAX_VALUE}}})"
)


def _ends_identifier(text: str, start: int) -> bool:
    """True when the keyword at ``start`` begins a word or an identifier part (db_password, dbPassword)."""
    if start == 0:
        return True
    before = text[start - 1]
    return not before.isalnum() or (before.islower() and text[start].isupper())


_DETAILS: Final = {
    (_PW, "sentence"): _Finding("password stated in a sentence", _ADVICE_PASSWORD),
    (_PIN, "sentence"): _Finding("PIN or access code stated in a sentence", _ADVICE_PIN),
    (_KEY, "sentence"): _Finding("API key, token or secret stated in a sentence", _ADVICE_KEY),
    (_PW, "assignment"): _Finding("password in an assignment", _ADVICE_PASSWORD),
    (_PIN, "assignment"): _Finding("PIN or access code in an assignment", _ADVICE_PIN),
    (_KEY, "assignment"): _Finding("API key, token or secret in an assignment", _ADVICE_KEY),
}


def _split_value(raw: str, text: str, end: int) -> tuple[str, bool, bool]:
    """Return (value, quoted, ends_clause) for a value token that ends at ``end`` in ``text``."""
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'`":
        return raw[1:-1].strip(), True, True
    value = _TRAILING_PUNCT.sub("", raw)
    return value, False, value != raw or _CLAUSE_BREAK.match(text, end) is not None


def _judge(raw: str, family: str, mode: str, text: str = "", end: int = 0) -> bool:
    """Decide whether ``raw``, stated after a ``family`` keyword with a ``mode`` connector, is a secret.

    ``mode`` is ``assign`` (``=``, ``:=``: any real value counts), ``colon`` or ``verb`` (prose: a
    plain word or a number counts only when it ends the clause) or ``bare`` (no connector: only a
    strongly key-shaped value counts). A quoted value is always judged as an assignment. ``text``
    and ``end`` locate what follows the value, to tell whether it ends its clause.
    """
    value, quoted, clause_end = _split_value(raw, text, end)
    if not value or _is_placeholder(value) or _REFERENCE.fullmatch(value):
        return False
    if mode == "bare" and not quoted:  # "wifi password Tr0ub4dor&3", "card PIN 4821."
        if family == _PIN and value.isdigit():
            return clause_end and 4 <= len(value) <= 10
        return _keyish(value, 8) and any(c.isdigit() for c in value) and any(c.isalpha() for c in value)
    strict = quoted or mode == "assign"
    ended = strict or clause_end
    if family == _PIN:  # codes also come as 12-34-56 or 8f2a1-0b3c9
        if value.isdigit() or _DIGIT_GROUPS.fullmatch(value):
            return ended and 3 <= len(value) <= 24
        grouped = _SLUG.fullmatch(value) is not None and any(c.isdigit() for c in value)
        return (grouped or _keyish(value, 3)) and (ended or len(value) >= 6)
    if _STRUCTURED.fullmatch(value):
        return False
    if family == _KEY:
        if strict:
            return _keyish(value, 8) or _HEX_OR_UUID.fullmatch(value) is not None
        return _keyish(value, 12)
    if value.isdigit():
        return ended and 4 <= len(value) <= 16
    if _keyish(value, 4):
        return ended or len(value) >= 8
    if " " in value:  # a quoted passphrase
        return quoted and len(value) >= 8
    return ended and len(value) >= 3 and not _prose_word(value)


def _keyword_rule(text: str) -> _Finding | None:
    """Values stated after password / PIN / key words, in assignments and in sentences."""
    if "=" in text or ":" in text:
        for m in _ASSIGNMENT.finditer(text):
            if not _ends_identifier(text, m.start()):
                continue
            family = _family(m)
            mode = "colon" if m.group("op") == ":" and m.group("sp") else "assign"
            if _judge(m.group("val"), family, mode, text, m.end()):
                return _DETAILS[family, "assignment"]
    for m in _KEYWORD.finditer(text):
        family = _family(m)
        if family == _KEY and _NOT_SECRET_BEFORE.search(text, max(0, m.start() - 16), m.start()):
            continue
        tail = _PROSE_TAIL.match(text, m.end())
        if tail is None:
            continue
        conn = tail.group("conn").strip().lower()
        mode = "assign" if "=" in conn else "colon" if conn == ":" else "bare" if not conn else "verb"
        if _judge(tail.group("val"), family, mode, text, tail.end()):
            return _DETAILS[family, "sentence"]
    return None


def _intl_password_rule(text: str) -> _Finding | None:
    """A password stated in a sentence in one of the other languages a user may write in."""
    for m in INTL_SENTENCE.finditer(text):
        raw = m.group("val")
        if raw.strip("\"'«»「」.,;:!?").lower() in INTL_PROSE or _prose_word(raw.rstrip(".,;:!?")):
            continue
        conn = m.group("conn").strip()
        mode = "assign" if conn == "=" else "colon" if conn in (":", "：") else "bare" if not conn else "verb"
        end = m.end()
        if CJK_NEXT.match(text, end):  # the value ends where the sentence's script resumes
            text_after, end_at = raw + ".", len(raw)
        else:
            text_after, end_at = text, end
        if _judge(raw, _PW, mode, text_after, end_at):
            return _DETAILS[_PW, "sentence"]
    return None


def _family(m: re.Match[str]) -> str:
    for family in (_PW, _PIN, _KEY):
        if m.group(family) is not None:
            return family
    raise AssertionError("keyword match without a family")  # pragma: no cover


# --------------------------------------------------------------------------- key formats


def _random_tail(match: str) -> bool:
    """A generic prefix (``sk-``, ``npm_``, ``Bearer``) must be followed by something random-looking."""
    tail = re.split(r"[\s_-]", match, maxsplit=1)[-1] if " " not in match else match.split()[-1]
    return _classes(tail) >= 2 and _entropy(tail) >= 3.0 and not _SLUG.fullmatch(tail)


_Validator = Callable[[str], bool]

# (detail, advice, pattern, validator). Order matters where prefixes overlap (sk-ant- before sk-).
_FORMATS: Final[tuple[tuple[str, str, str, _Validator | None], ...]] = (
    ("Anthropic API key", _ADVICE_KEY, r"\bsk-ant-[A-Za-z0-9_\-]{20,}", None),
    ("OpenAI API key", _ADVICE_KEY, r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}", _random_tail),
    ("GitHub token", _ADVICE_KEY, r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})", None),
    ("GitLab token", _ADVICE_KEY, r"\bgl(?:pat|dt|ft|soat|rt|cbt|ptt|oas|imt|agent)-[A-Za-z0-9_\-]{20,}", None),
    ("Slack token", _ADVICE_KEY, r"\b(?:xox[abposre]-[A-Za-z0-9\-]{12,}|xapp-\d-[A-Za-z0-9\-]{10,})", None),
    ("Slack webhook URL", _ADVICE_KEY, r"https://hooks\.slack\.com/(?:services|workflows)/[A-Za-z0-9_/]{20,}", None),
    ("AWS access key ID", _ADVICE_KEY, r"\b(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}\b", None),
    ("Google API key", _ADVICE_KEY, r"\bAIza[0-9A-Za-z_\-]{35}(?![0-9A-Za-z_\-])", None),
    ("Google OAuth credential", _ADVICE_KEY, r"\b(?:ya29\.[0-9A-Za-z_\-]{20,}|GOCSPX-[0-9A-Za-z_\-]{20,})", None),
    ("JSON Web Token", _ADVICE_KEY, r"\beyJ[A-Za-z0-9_\-]{10,}\.eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]*", None),
    (
        "private key block",
        _ADVICE_PRIVATE_KEY,
        r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|PuTTY-User-Key-File-\d",
        None,
    ),
    ("Stripe secret key", _ADVICE_KEY, r"\b(?:[sr]k_(?:live|test)_[0-9A-Za-z]{16,}|whsec_[A-Za-z0-9]{20,})", None),
    ("npm token", _ADVICE_KEY, r"\bnpm_[A-Za-z0-9]{36}\b", None),
    ("PyPI token", _ADVICE_KEY, r"\bpypi-AgE[A-Za-z0-9_\-]{50,}", None),
    ("Hugging Face token", _ADVICE_KEY, r"\bhf_[A-Za-z0-9]{30,}\b", _random_tail),
    ("SendGrid API key", _ADVICE_KEY, r"\bSG\.[A-Za-z0-9_\-]{16,}\.[A-Za-z0-9_\-]{16,}", None),
    ("DigitalOcean token", _ADVICE_KEY, r"\bdo[por]_v1_[a-f0-9]{64}\b", None),
    ("memledger API token", _ADVICE_KEY, r"\bmlt_[A-Za-z0-9_\-]{43}(?![A-Za-z0-9_\-])", None),
    ("Shopify token", _ADVICE_KEY, r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}\b", None),
    (
        "HTTP authorization header",
        _ADVICE_KEY,
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


def _format_rule(text: str, low: str) -> _Finding | None:
    if _FORMAT_HINT.search(low):
        for m in _FORMAT_RE.finditer(text):
            detail, advice, _, validator = _FORMATS[int(str(m.lastgroup)[1:])]
            if validator is None or validator(m.group()):
                return _Finding(detail, advice)
    if "://" in text and "@" in text:
        for m in _URL_CREDENTIALS.finditer(text):
            if not _is_placeholder(m.group("pw")):
                return _Finding("connection string with a password", _ADVICE_URL)
    return None


# --------------------------------------------------------------------------- detect-secrets


class _Detector(Protocol):
    secret_type: str

    def analyze_string(self, string: str) -> Iterable[str]: ...


_detectors: tuple[_Detector, ...] | None = None
_detectors_lock = threading.Lock()


def _load_detectors() -> tuple[_Detector, ...]:
    """Build detect-secrets' specific detectors once (lazily: importing detect-secrets costs ~0.1 s)."""
    global _detectors
    if _detectors is not None:
        return _detectors
    with _detectors_lock:
        if _detectors is None:
            from detect_secrets.plugins import (  # deferred: importing it costs ~0.1 s
                artifactory,
                aws,
                azure_storage_key,
                basic_auth,
                cloudant,
                discord,
                github_token,
                gitlab_token,
                ibm_cloud_iam,
                ibm_cos_hmac,
                jwt,
                keyword,
                mailchimp,
                npm,
                openai,
                private_key,
                pypi_token,
                sendgrid,
                slack,
                softlayer,
                square_oauth,
                stripe,
                telegram_token,
                twilio,
            )

            _detectors = (
                aws.AWSKeyDetector(),
                github_token.GitHubTokenDetector(),
                gitlab_token.GitLabTokenDetector(),
                slack.SlackDetector(),
                private_key.PrivateKeyDetector(),
                jwt.JwtTokenDetector(),
                stripe.StripeDetector(),
                openai.OpenAIDetector(),
                npm.NpmDetector(),
                pypi_token.PypiTokenDetector(),
                sendgrid.SendGridDetector(),
                twilio.TwilioKeyDetector(),
                discord.DiscordBotTokenDetector(),
                telegram_token.TelegramBotTokenDetector(),
                mailchimp.MailchimpDetector(),
                square_oauth.SquareOAuthDetector(),
                azure_storage_key.AzureStorageKeyDetector(),
                artifactory.ArtifactoryDetector(),
                ibm_cloud_iam.IbmCloudIamDetector(),
                ibm_cos_hmac.IbmCosHmacDetector(),
                cloudant.CloudantDetector(),
                softlayer.SoftlayerDetector(),
                basic_auth.BasicAuthDetector(),
                keyword.KeywordDetector(),
            )
    return _detectors


_KEYWORD_DETECTOR_HINT: Final = re.compile(r"key|pass|pwd|secret|contrase")
# KeywordDetector accepts any word that starts with a keyword ("secretary"); we want the keyword
# to end a word or an identifier part (secret, client_secret, password_2).
_KEYWORD_DETECTOR_WORD: Final = re.compile(r"(?i)(?:key|pass(?:word|wd)?|pwd|secret|contrase[\u00f1n]a)(?![a-z])")


def _detect_secrets_rule(segment: str) -> _Finding | None:
    """Run detect-secrets' detectors line by line, each only where it could match."""
    for line in segment.splitlines():
        line_low = line.lower()
        # Every detector but KeywordDetector needs a long token, a URL or a key-block header;
        # KeywordDetector (by far the slowest) needs a quote and one of its keywords.
        shaped = (
            _has_long_token(line) or "://" in line or "begin" in line_low or "putty" in line_low
        ) or _has_artifactory_hint(line)
        quoted = (
            ('"' in line or "'" in line or "`" in line)
            and _KEYWORD_DETECTOR_HINT.search(line_low) is not None
            and _KEYWORD_DETECTOR_WORD.search(line) is not None
        )
        if not (shaped or quoted):
            continue
        for detector in _load_detectors():
            is_keyword = detector.secret_type == "Secret Keyword"
            if not (quoted if is_keyword else shaped):
                continue
            for value in detector.analyze_string(line):
                if _is_placeholder(value.strip("\"'` ")):
                    continue
                if is_keyword and not _judge(value, _PW, "assign"):
                    continue
                advice = _ADVICE_URL if detector.secret_type == "Basic Auth Credentials" else _ADVICE_KEY
                return _Finding(detector.secret_type, advice)
    return None


# --------------------------------------------------------------------------- public API


def find_credential(text: str) -> str | None:
    """Return the kind of credential ``text`` holds (e.g. ``"Anthropic API key"``), or None.

    The kind never contains the secret. Safe to call from many threads at once.
    """
    finding = _find(text)
    return finding.detail if finding else None


def _find(text: str) -> _Finding | None:
    """Screen ``text``, then what a person would read in it: normalised, and decoded from base64/hex."""
    finding = _find_in(text)
    if finding is not None:
        return finding
    view = normalised(text)
    if view != text:
        finding = _find_in(view)
        if finding is not None:
            return _Finding(f"{finding.detail}, disguised with invisible or look-alike characters", finding.advice)
    if _has_long_token(view):
        for decoded in decoded_runs(view):
            finding = _find_in(decoded) or _find_in(normalised(decoded))
            if finding is not None:
                return _Finding(f"{finding.detail}, base64- or hex-encoded", finding.advice)
    return None


def _find_in(text: str) -> _Finding | None:
    low = text.lower()
    if not _is_candidate(text, low):
        return None
    finding = _format_rule(text, low)
    if finding is not None:
        return finding
    segments = [text] if len(text) <= _WHOLE_TEXT_CHARS else _SENTENCE_BREAK.split(text)
    for segment in segments:
        segment_low = segment.lower() if len(segments) > 1 else low
        if not _is_candidate(segment, segment_low):
            continue
        finding = _keyword_rule(segment) or _intl_password_rule(segment) or _detect_secrets_rule(segment)
        if finding is not None:
            return finding
    return None


# NUL and the other C0/C1 controls except tab, line feed and carriage return: no database
# stores NUL in text, and the rest only hides what a memory says.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def screen_body(body: object, *, max_chars: int = MAX_BODY_CHARS) -> str:
    """Return the body to store (leading/trailing whitespace stripped), or raise BodyRejected.

    The length limit applies to the stripped body: exactly ``max_chars`` characters is accepted.

    Raises:
        BodyRejected: ``why="not_text"`` when ``body`` is not a ``str`` or holds a control
            character; ``why="empty"`` when it is empty or whitespace only; ``why="too_long"``
            when the stripped body is longer than
            ``max_chars``; ``why="credential"`` when it holds an API key, token, private key,
            password or a connection string with a password (``detail`` names the kind, never
            the value).
    """
    if not isinstance(body, str):
        raise BodyRejected(
            f"A memory must be text, not {type(body).__name__}: send the fact as a string.", why="not_text"
        )
    text = body.strip()
    if not text:
        raise BodyRejected("The memory is empty: write the fact you want to keep.", why="empty")
    if _CONTROL.search(text):
        raise BodyRejected(
            "The memory contains a control character (such as NUL): send plain text; line breaks and tabs are fine.",
            why="not_text",
        )
    if len(text) > max_chars:
        raise BodyRejected(
            f"The memory is {len(text):,} characters long and the limit is {max_chars:,}: "
            "keep one fact per memory, shorten it or split it into several.",
            why="too_long",
        )
    finding = _find(text)
    if finding is not None:
        log.debug("body rejected: why=credential detail=%s", finding.detail)
        raise BodyRejected(
            f"This looks like a credential ({finding.detail}), so it was not saved. {finding.advice}",
            why="credential",
            detail=finding.detail,
        )
    return text
