"""A secret word in any language, then a value a few words later, for :mod:`ledger.screening`.

The keyword rules (:mod:`ledger.screening.rules`) read a sentence's grammar; this one does not need to:
after a password, PIN / access-code or key word (in some sixty languages), it skips up to five plain
words — "for the NAS admin account", "di Netflix", "від пошти", "til routeren er", "ke kartě" — and
judges the first token that is not a plain word. Because it knows no grammar it asks more of that
token: a password must mix letters with digits or symbols, a code must be digits (a number, digit
groups, ``7395#``) and a key must look random. A plain word that says where or when ("in", "stored",
"since") ends the search, and so does the end of the clause. The generic word "code" counts only
next to an access word (door, gate, garage, alarm, safe, keypad … in those languages), so "zip code
94107" and "exit code 137" are kept.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Final

from ledger.screening.languages import (
    ACCESS_WORDS,
    WINDOW_CODE,
    WINDOW_CVV,
    WINDOW_KEY,
    WINDOW_KEY_SCRIPT,
    WINDOW_PASSWORD,
    WINDOW_PASSWORD_SCRIPT,
    WINDOW_PIN,
    WINDOW_PIN_SCRIPT,
    WINDOW_STOP,
)
from ledger.screening.shapes import PUBLIC_PREFIX
from ledger.screening.values import (
    DETAILS,
    KEY,
    PIN,
    PW,
    SLUG,
    STRUCTURED,
    Finding,
    is_code_expression,
    is_placeholder,
    keyish,
    mentions_store,
)

_WORD_START = r"(?<![^\W_])"
_WORD_END = r"(?![^\W_])"
# Matched in the lower-cased text (twice as fast as ignoring case), when lower-casing kept every offset.
_KEYWORD: Final = re.compile(
    rf"{_WORD_START}(?:(?P<cvv>{WINDOW_CVV})|(?P<pin>{WINDOW_PIN})|(?P<password>{WINDOW_PASSWORD})"
    rf"|(?P<key>{WINDOW_KEY})){_WORD_END}"
    rf"|(?P<code>{WINDOW_CODE}){_WORD_END}|{_WORD_START}(?P<pair>wi-?fi|wlan|ssid|network){_WORD_END}"
    rf"|(?P<pin_script>{WINDOW_PIN_SCRIPT})|(?P<password_script>{WINDOW_PASSWORD_SCRIPT})"
    rf"|(?P<key_script>{WINDOW_KEY_SCRIPT})",
)
_KEYWORD_ANY_CASE: Final = re.compile(_KEYWORD.pattern, re.IGNORECASE)
# In lower-cased ASCII text every match of _KEYWORD holds one of these (five times cheaper to look for
# than the keywords themselves): a text without any has nothing for the rule to find.
KEYWORD_ANCHOR: Final = re.compile(
    r"pass|pw|pin|key|token|secret|co[dm]|kod|kood|cv[vc]|csc|cred|login|wi-?fi|wlan|ssid|network|licen|serial"
    r"|activation|product|wallet|clef|chav|chiav|klucz|sleutel|nyckel|nogle|nokkel|avain|anahtar|kulcs|cheie|jeton"
    r"|segreto|secreto|geheim|kennwort|wachtwoord|wagwoord|senord|salasan|hesl|hasl|jelsz|paro|lozink|geslo|slapta"
    r"|lykilor|yfrinair|pasahitz|contras|fjal|senha|palavra|mdp|clave|sifr|sandi|laluan|khau|siri|iphasi|zugangs"
    r"|identifiant|codig"
)
# Every value the rule can flag holds a digit or one of these symbols, or is a run of four-letter groups.
_VALUE_CHAR: Final = re.compile(r"[0-9!@#$%^&*+=?~_]")
_LOWER_GROUPS: Final = re.compile(r"[a-z]{4} [a-z]{4} [a-z]{4} [a-z]{4}(?![a-z])")


def has_value_char(text: str) -> bool:
    """A digit or a symbol: what nearly every value this rule flags holds (prose mostly has neither)."""
    return _VALUE_CHAR.search(text) is not None


_MAX_WORDS: Final = 5
_MAX_TOKEN: Final = 100  # a value is judged on its first 100 characters
_MAX_IDENTIFIER: Final = 64
_CLAUSE_END: Final = re.compile(r"[.,;!?。、，]$")
_OPENERS: Final = "\"'`*«「([{"
_CLOSERS: Final = ".,;:!?)]}»\"'`*」。、，"
_CONNECTOR: Final = re.compile(r"^(?:[:：=\-–—>/]+|is|=>|->)$")
# A code: 4-12 digits (7395#, *4410#), digit groups (4-4-1-9), or capitals and 3+ digits (4B721).
_PIN_VALUE: Final = re.compile(
    r"\d{4,12}[#*]?|\*?\d{4,12}#|\d{1,4}(?:-\d{1,4}){1,5}|(?=[0-9A-Z]*[A-Z])(?=(?:[A-Z]*\d){3})[0-9A-Z]{4,10}"
)
_TECH: Final = re.compile(r"(?i)(?:sha|md|utf|base|ipv|x|arm|win|mp|h|aes|rsa|ec|ed|tls|ssl|http|v)-?\d+|\d+[a-z]{1,5}")


def _plain(token: str) -> bool:
    """A word of letters (any script, combining marks and inner apostrophes or hyphens included)."""
    return all(c.isalpha() or c in "'’-" or unicodedata.category(c)[0] == "M" for c in token)


def _password_shaped(value: str) -> bool:
    if not 6 <= len(value) <= 64 or _TECH.fullmatch(value) or SLUG.fullmatch(value):
        return False
    if STRUCTURED.fullmatch(value) or is_placeholder(value):
        return False
    letters = sum(c.isalpha() for c in value)
    # a digit or a symbol ("_" alone makes an identifier: base_url, run_once)
    return letters >= 2 and any(c.isdigit() or c in "!@#$%^&*+=?~" for c in value)


def _key_shaped(value: str) -> bool:
    hexdigits = value[2:] if value.lower().startswith("0x") else value
    if len(hexdigits) >= 32 and all(c in "0123456789abcdefABCDEF" for c in hexdigits):
        return len(hexdigits) != 40 or not value.lower().startswith("0x")  # 0x + 40 hex is an address
    if PUBLIC_PREFIX.match(value) or not any(c.isdigit() for c in value):
        return False
    return keyish(value, 12) and not STRUCTURED.fullmatch(value)


def _latin(value: str) -> bool:
    """Passwords are typed in Latin letters, digits and symbols: "长度至少12位" after 密码 is prose."""
    return all(ord(c) < 0x250 for c in value)


def _judge(value: str, family: str, ended: bool) -> bool:
    if is_code_expression(value):  # password = getpass.getpass("…"), token = request.headers.get(…)
        return False
    if family == "cvv":
        return value.isdigit() and 3 <= len(value) <= 4
    if family == PIN:
        return _PIN_VALUE.fullmatch(value) is not None
    if family == KEY:
        return _key_shaped(value)
    if ended and _PIN_VALUE.fullmatch(value):  # "현관 비밀번호 4829*": a number closing the statement
        return True
    return _latin(value) and (_password_shaped(value) or _key_shaped(value))


_GROUP: Final = re.compile(r"[A-Za-z0-9]{4}")
_MIN_GROUPS: Final = 4


def _grouped(tokens: list[str], i: int) -> bool:
    """A key or app password written in groups of four: "BEU6 D74V I6T2 Y3CW", "wbzy gfjz zopw ymtm"."""
    groups = []
    for raw in tokens[i : i + 8]:
        group = raw.rstrip(_CLOSERS)
        if not _GROUP.fullmatch(group):
            break
        groups.append(group)
        if group != raw:
            break
    if len(groups) < _MIN_GROUPS:
        return False
    joined = "".join(groups)
    if any(c.isdigit() for c in joined):
        return keyish(joined, 16)
    vowels = sum(c in "aeiouAEIOU" for c in joined)
    return joined.islower() and vowels <= 0.2 * len(joined)  # not words: too few vowels


def _value_after(text: str, end: int, family: str, access: bool) -> bool:
    """Skip up to five plain words after a keyword ending at ``end``; judge the first other token."""
    tokens = [token[:_MAX_TOKEN] for token in text[end : end + 240].split()]
    words, paired = 0, False
    for i, raw in enumerate(tokens[:12]):
        token = raw.lstrip(":：=").strip(_OPENERS)
        if not token or _CONNECTOR.match(token):
            paired = paired or (token == "/" and i > 0)
            continue
        if family in (PW, KEY) and _grouped(tokens, i):
            return True
        value = token.rstrip(_CLOSERS).strip(_OPENERS)
        ended = _CLAUSE_END.search(raw) is not None or i + 1 == len(tokens)
        if value and _plain(value):
            low = value.lower()
            if low in WINDOW_STOP or mentions_store(value) or (words := words + 1) > _MAX_WORDS:
                return False
            access = access or ACCESS_WORDS.search(low) is not None
            if ended:
                return False
            continue
        if mentions_store(value):
            return False
        if i + 2 < len(tokens) and tokens[i + 1] == "/":  # "admin / Tr1dent#88", "qa_user / Kestrel2023!"
            value = tokens[i + 2].rstrip(_CLOSERS).strip(_OPENERS)
            paired = True
        if family == "pair":  # "wifi: Home-5G / Walnut#2021": only the second of a pair is a password
            family = PW if paired else ""
        if not family:
            return False
        if family == "code":
            return access and _judge(value, PIN, ended)
        return _judge(value, family, ended)
    return False


# A keyword inside an identifier or a placeholder (${DB_PASSWORD}, secret_sauce_recipe, form.password)
# is not a word of the sentence: the assignment rule reads identifiers.
_IDENTIFIER_BEFORE: Final = frozenset("${.@/'\"[")
_IDENTIFIER_AFTER_OK: Final = frozenset(" \t\n:=：,;.!?)»")
_IDENTIFIER_END: Final = re.compile(r"[\w-]{0,64}")
_IDENTIFIER_HEAD: Final = re.compile(r"[\w-]*$")
_PUBLIC_BEFORE: Final = re.compile(r"(?i)(?:public|publishable|host|primary|foreign|sort|partition|idempotency)\W*$")


def window_rule(text: str) -> Finding | None:
    """A password, PIN, access code or key stated a few plain words after its keyword, in any language."""
    if not has_value_char(text) and _LOWER_GROUPS.search(text) is None:
        return None
    low = text.lower()
    if text.isascii() and KEYWORD_ANCHOR.search(low) is None:
        return None
    matches = _KEYWORD.finditer(low) if len(low) == len(text) else _KEYWORD_ANY_CASE.finditer(text)
    for m in matches:
        family = str(m.lastgroup)
        end = m.end()
        if not family.endswith("_script"):
            # A keyword inside an identifier (secret_key_base, DB_PASSWORD) stands for the identifier,
            # which must be a word of the sentence, not a placeholder or code (${DB_PASSWORD}, form.password).
            head = _IDENTIFIER_HEAD.search(text, max(0, m.start() - _MAX_IDENTIFIER), m.start())
            start = head.start() if head else m.start()
            identifier = _IDENTIFIER_END.match(text, end)
            end = identifier.end() if identifier else end
            before = text[start - 1] if start else " "
            after = text[end] if end < len(text) else " "
            if before in _IDENTIFIER_BEFORE or after not in _IDENTIFIER_AFTER_OK:
                continue
            if text[max(0, start - 4) : start].rstrip().endswith(("{{", "{%", "{", "(", "[")):
                continue  # a template or a call: {{ redis_password }}, f(password)
        family = family.removesuffix("_script")
        if family == KEY and _PUBLIC_BEFORE.search(text, max(0, m.start() - 24), m.start()):
            continue
        access = False
        if family == "code":
            before = text[max(0, m.start() - 24) : m.end()].lower()
            access = ACCESS_WORDS.search(before) is not None
        if _value_after(text, end, family, access):
            kind = PIN if family in ("cvv", "code") else PW if family == "pair" else family
            return DETAILS[kind, "sentence"]
    return None
