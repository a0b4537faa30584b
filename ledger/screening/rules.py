"""The keyword rules of :mod:`ledger.screening`: values stated after password / PIN / key words.

In an assignment (``DB_PASSWORD=...``, ``"api_key": "..."``), in an English sentence ("my wifi
password is ..."), and in a sentence in another language (:mod:`ledger.screening.languages`).
Each value is judged by :func:`ledger.screening.values.judge`.
"""

from __future__ import annotations

import re
from typing import Final

from ledger.screening.languages import INTL_ASCII_HINT, INTL_PROSE, INTL_SENTENCE, SCRIPT_NEXT
from ledger.screening.values import DETAILS, KEY, PIN, PROSE_WORDS, PW, Finding, judge, prose_word

_KW_PASSWORD = r"pass(?:word|wd|phrase)s?|pass[\s-]phrase|pwd|wi-?fi\s+(?:pass|key)|network\s+key"
_CODE_OF = (
    r"(?:door|gate|alarm|lock|garage|safe|security|access|entry|unlock|login|otp|verification|2fa|mfa|backup|recovery"
    r"|one-time)\s+code"
)
_KW_PIN = rf"pins?(?:\s*(?:code|number))?|passcodes?|combination|cvv|cvc|{_CODE_OF}s?"
_KW_KEY = (
    r"(?:api|access|secret|private|license|licence|signing|encryption|master|client|app|service|auth|ssh|gpg|pgp"
    r"|deploy|product|activation|serial|admin)[\s_-]?keys?|apikey|keys?"
    r"|(?:access|refresh|auth|bearer|api|session|bot|personal\s+access)[\s_-]?tokens?|tokens?"
    r"|(?:client|app|api|shared|webhook|signing|jwt|session)[\s_-]?secrets?|secrets?|credentials?|creds"
)
_KEYWORD: Final = re.compile(
    rf"(?<![\w-])(?:(?P<{PW}>{_KW_PASSWORD})|(?P<{PIN}>{_KW_PIN})|(?P<{KEY}>{_KW_KEY}))(?![\w-])", re.IGNORECASE
)
# In lower-cased ASCII text, every match of _KEYWORD and _ENV_NAME holds one of these (a keyword's
# literal part; "code" only after its word): a text without any has nothing for them to find. Not for
# other text: ignoring case, a pattern's "s" or "k" also matches "ſ" or the Kelvin sign.
_KEYWORD_HINT: Final = re.compile(rf"pass|pwd|key|pin|combination|cvv|cvc|token|secret|cred|{_CODE_OF}")
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
    rf"(?i:(?P<{PW}>pass(?:word|wd|phrase|code)?|pwd)|(?P<{PIN}>pin(?:_?code)?)"
    rf"|(?P<{KEY}>(?:secret|access|private|api|auth)?[_\-]?key|apikey|secret|token|auth|credentials?|creds))"
    r"(?:\[\d*\])?[\"'\]]{0,2}[ \t]*(?P<op>:=|=>|==?|:)(?P<sp>[ \t]*)"
    rf"(?P<val>\"[^\"\n]{{0,{_MAX_VALUE}}}\"|'[^'\n]{{0,{_MAX_VALUE}}}'|`[^`\n]{{0,{_MAX_VALUE}}}`"
    rf"|[^\s;,&'\"]{{1,{_MAX_VALUE}}})"
)


def _ends_identifier(text: str, start: int) -> bool:
    """True when the keyword at ``start`` begins a word or an identifier part (db_password, dbPassword)."""
    if start == 0:
        return True
    before = text[start - 1]
    # PGPASSWORD, MYSQL_PWD: a keyword glued to an upper-case prefix ends an environment name too
    upper_name = before.isupper() and text[start : start + 3].isupper()
    return not before.isalnum() or (before.islower() and text[start].isupper()) or upper_name


def keyword_rule(text: str) -> Finding | None:
    """Values stated after password / PIN / key words, in assignments and in sentences."""
    if "=" in text or ":" in text:
        for m in _ASSIGNMENT.finditer(text):
            if not _ends_identifier(text, m.start()):
                continue
            family = _family(m)
            if family == KEY and _NOT_SECRET_BEFORE.search(text, max(0, m.start() - 16), m.start()):
                continue  # PublicKey = …, public_key: …
            mode = "colon" if m.group("op") == ":" and m.group("sp") else "assign"
            if judge(m.group("val"), family, mode, text, m.end()):
                return DETAILS[family, "assignment"]
    if text.isascii() and _KEYWORD_HINT.search(text.lower()) is None:
        return None  # no keyword here, nor a variable named for one
    for m in _KEYWORD.finditer(text):
        family = _family(m)
        if family == KEY and _NOT_SECRET_BEFORE.search(text, max(0, m.start() - 16), m.start()):
            continue
        tail = _PROSE_TAIL.match(text, m.end())
        if tail is None:
            continue
        conn = tail.group("conn").strip().lower()
        mode = "assign" if "=" in conn else "colon" if conn == ":" else "bare" if not conn else "verb"
        if judge(tail.group("val"), family, mode, text, tail.end()):
            return DETAILS[family, "sentence"]
        if family == PW and mode in ("verb", "colon") and _is_passphrase(text, tail.start("val")):
            return DETAILS[family, "sentence"]
    return _env_name_rule(text)


# An unquoted passphrase of plain words after "password is": 3 to 8 words running to the end of
# the clause, none of them a function or time word, the first not a participle ("changed last
# week"), and at most one a prose word ("correct" may start one). Prose after "password is" has a
# function word or ends early: "stored in 1Password", "the same as before", "case sensitive",
# "long and random", "four digits long".
_PASSPHRASE: Final = re.compile(r"[A-Za-z]{2,15}(?:[ \t]+[A-Za-z]{2,15}){2,7}")
_FUNCTION_WORDS_TEXT = """
    a an the my your our their his her its this that these those it i you we they he she me us them is are was
    were be been being am has have had do does did will would should can could may might must shall for to
    from by with without in on at of about into onto over under after before than as like and or but nor if so
    yet because since until while when where which who whom whose what how why not no never always still now
    then also too very just only really quite please every each all any some here there same different one two
    three four five six seven eight nine ten twelve twenty up down out off again ever already almost enough
    rather maybe perhaps else instead otherwise last next ago soon later today yesterday tomorrow tonight week
    weeks month months year years day days
"""
_FUNCTION_WORDS: Final = frozenset(_FUNCTION_WORDS_TEXT.split())
_PARTICIPLE: Final = re.compile(r"(?:ed|ing|en)$")
_CLAUSE_END: Final = re.compile(r"[ \t]*(?:$|[\n.;!?,)])")


def _is_passphrase(text: str, start: int) -> bool:
    m = _PASSPHRASE.match(text, start)
    if m is None or _CLAUSE_END.match(text, m.end()) is None:
        return False
    words = [w.lower() for w in m.group().split()]
    if any(w in _FUNCTION_WORDS for w in words) or _PARTICIPLE.search(words[0]):
        return False
    return sum(w in PROSE_WORDS or w.endswith("ed") for w in words) <= 1


# An environment variable named for a secret, then a space and its value: `set -x DB_PASSWORD …`,
# `setenv API_TOKEN …` (fish, csh). Only a strongly key-shaped value counts.
_ENV_NAME: Final = re.compile(
    r"\b[A-Z][A-Z0-9]*_(?P<name>PASSWORD|PASSWD|PASSPHRASE|TOKEN|SECRET|KEY|PIN)[ \t]+(?P<val>[^\s;&|]{1,200})"
)


def _env_name_rule(text: str) -> Finding | None:
    for m in _ENV_NAME.finditer(text):
        family = PW if m.group("name").startswith("PASS") else PIN if m.group("name") == "PIN" else KEY
        if judge(m.group("val"), family, "bare", text, m.end()):
            return DETAILS[family, "assignment"]
    return None


def intl_password_rule(text: str) -> Finding | None:
    """A password or PIN stated in a sentence in one of the other languages a user may write in."""
    if text.isascii() and INTL_ASCII_HINT.search(text.lower()) is None:
        return None
    for m in INTL_SENTENCE.finditer(text):
        raw = m.group("val")
        if raw.strip("\"'«»「」.,;:!?").lower() in INTL_PROSE or prose_word(raw.rstrip(".,;:!?")):
            continue
        family = PIN if m.group("pin") or m.group("pin_script") else PW
        conn = m.group("conn").strip()
        mode = "assign" if conn == "=" else "colon" if conn in (":", "：") else "bare" if not conn else "verb"
        if m.group("close"):  # "मेरा पासवर्ड X है": the copula closes the statement
            mode = "verb" if mode == "bare" else mode
            text_after, end_at = raw + ".", len(raw)
        elif SCRIPT_NEXT.match(text, m.end("val")):  # the value ends where the sentence's script resumes
            text_after, end_at = raw + ".", len(raw)
        else:
            text_after, end_at = text, m.end("val")
        if judge(raw, family, mode, text_after, end_at):
            return DETAILS[family, "sentence"]
    return None


def _family(m: re.Match[str]) -> str:
    for family in (PW, PIN, KEY):
        if m.group(family) is not None:
            return family
    raise AssertionError("keyword match without a family")  # pragma: no cover
