"""Body screening's layers: what a record body must look like before any write path stores it.

:func:`screen_body` is called by every write path (save, propose, slash commands,
consolidation). It returns the body to store, stripped of leading and trailing
whitespace, or raises :class:`~ledger.errors.BodyRejected` with a ``why`` of
``not_text``, ``empty``, ``too_long`` or ``credential``.

Credential screening has three layers, cheapest first, each in its own module:

1. A *prefilter* (here): one precompiled pattern over the lower-cased body, a longest-token
   check, a key-prefix check and the other languages' keywords. A body with none of them
   is accepted at once; that is the common case and costs a few microseconds
   (docs/screening.md has the measurements).
2. Our own patterns for current key formats, whole or pasted in pieces, and connection
   strings with a password (:mod:`ledger.screening.formats`); the keyword rules for values
   stated after ``password`` / ``PIN`` / ``api key`` / ``token`` / ``secret`` in an
   assignment or a sentence, in English or another language, passphrases included
   (:mod:`ledger.screening.rules`, :mod:`ledger.screening.languages`), judged by
   :mod:`ledger.screening.values`.
3. detect-secrets' specific detectors (:mod:`ledger.screening.detectors`; never its
   high-entropy plugins, which flag ordinary words), each run only where it could match.

Each layer runs on the body as sent, then on what a person would read in it (NFKC, format
characters removed, look-alike letters folded; base64 and hex decoded:
:mod:`ledger.screening.views`).

Nothing here logs or returns the body or any part of it: ``BodyRejected.detail``
names the kind of credential, never its value.
"""

from __future__ import annotations

import logging
import re
from typing import Final

from ledger.errors import BodyRejected
from ledger.screening.detectors import detect_secrets_rule
from ledger.screening.formats import format_rule
from ledger.screening.languages import has_ascii_language_word, has_ascii_window_word
from ledger.screening.rules import intl_password_rule, keyword_rule
from ledger.screening.shapes import command_line_rule, key_material_rule, seed_phrase_rule, url_secret_rule
from ledger.screening.values import Finding, has_artifactory_hint, has_long_token
from ledger.screening.views import INVISIBLE, decoded_runs, normalised
from ledger.screening.window import has_value_char, window_rule

__all__ = ["find_credential", "screen_body"]


log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- prefilter
# Everything a later layer can flag contains one of these keywords (searched in the lower-cased
# text, which is several times faster than a case-insensitive pattern) or a long token: every
# key format and every detect-secrets detector we run needs one of the two, except Artifactory's
# short formats, which get their own hint.
# Every branch starts with a literal so the regex engine can skip ahead (a leading \b costs 10x).
_TRIGGER: Final = re.compile(
    r"p(?:ass(?:w|phrase|code|\b|_)|wd|ins?\b|in_?code|rivate|utty)|secret|token|key|co(?:des?\b|mbina)|cv[vc]"
    r"|cred|auth|be(?:arer|gin)|contrase|://"
    r"|kennwort|mot de passe|mdp|clave|senha|palavra|parola|wachtwoord"
)


# A command line that may carry a password: `mysql -p…`, `curl -u user:pass`, `redis-cli -a …`.
_COMMAND_FLAG: Final = re.compile(r" -[pPuUa]")


def _has_network_pair(low: str) -> bool:
    """A network and its password, written as a pair: "wifi: Home-5G / Walnut#2021"."""
    return " / " in low and ("wifi" in low or "wi-fi" in low or "wlan" in low or "ssid" in low or "network" in low)


_SCRIPT_TRIGGER: Final = re.compile(
    r"парол|пин|pin[码碼]|hasło|şifre|mật kh|密码|密碼|口令|パスワード|暗証|비밀번호|암호|패스워드|번호"
    r"|पासवर्ड|कूटशब्द|पिन|পাসওয়ার্ড|পিন|கடவுச்சொல்|పాస్|รหัส|كلمة|الرقم|رمز|گذرواژه|پسورد|پاس|پن"
    r"|κωδικ|συνθηματ|סיסמ|קוד|პაროლ|գաղտնաբառ|የይለፍ|ពាក្យសម្ងាត់|പാസ്|ಪಾಸ್|પાસવર્ડ|ਪਾਸਵਰਡ"
    r"|මුරපද|စကားဝှက်|ລະຫັດ|비번|κλειδί|מפתח|키|キー|密钥|秘钥"
)


# Keywords in Latin letters with diacritics and in Cyrillic, with `in`: a pattern branch starting with
# a common letter would be tried at most positions of French, German, Spanish or Russian prose.
def _has_script_word(low: str) -> bool:
    return (
        "lösen" in low
        or "kód" in low
        or "códig" in low
        or "şifr" in low
        or "jelsz" in low
        or "код" in low
        or "лозинк" in low
        or "нууц" in low
        or "құпия" in low
        or "ключ" in low
        or "токен" in low
    )


# A key prefix (a key pasted in pieces has no long token): sk-, sk_live_, ghp_, github_pat_, glpat-,
# xoxb-, hf_, npm_, ntn_, whsec_, mlt_, pypi- are found from their separator; AKIA, ASIA, AIza,
# GOCSPX, eyJ and ya29 with `in` (written out), which is cheaper than a pattern starting with a letter.
_PREFIX_AT_SEPARATOR: Final = re.compile(
    r"[-_](?:(?<=sk.)|(?<=rk_live.)|(?<=gh[pousr].)|(?<=_pat.)|(?<=glpat.)|(?<=xox[a-z].)|(?<=xapp.)|(?<=hf.)"
    r"|(?<=npm.)|(?<=ntn.)|(?<=whsec.)|(?<=mlt.)|(?<=pypi.))"
)


def _has_key_prefix(text: str) -> bool:
    if ("-" in text or "_" in text) and _PREFIX_AT_SEPARATOR.search(text) is not None:
        return True
    return "AKIA" in text or "ASIA" in text or "AIza" in text or "GOCSPX" in text or "eyJ" in text or "ya29" in text


# A body longer than _WHOLE_TEXT_CHARS is cut into lines and sentences before the keyword and
# detect-secrets layers, so it only pays for the sentences that have a trigger. None of the
# secrets we look for contains a line break or "<punctuation><space>"; key blocks, which span
# lines, are found by the key-format layer, which always sees the whole body.
_SENTENCE_BREAK: Final = re.compile(r"\n|(?<=[.!?;])\s+")
_WHOLE_TEXT_CHARS: Final = 400


def _is_candidate(text: str, low: str) -> bool:
    """The cheap gate: False means no later layer could flag ``text``."""
    return (
        _TRIGGER.search(low) is not None
        or has_long_token(text)
        or has_artifactory_hint(text)
        or _has_key_prefix(text)
        or has_ascii_language_word(low)
        or (has_value_char(text) and has_ascii_window_word(low))
        or _COMMAND_FLAG.search(text) is not None
        or _has_network_pair(low)
        or (not text.isascii() and (_SCRIPT_TRIGGER.search(low) is not None or _has_script_word(low)))
    )


# --------------------------------------------------------------------------- public API


def find_credential(text: str) -> str | None:
    """Return the kind of credential ``text`` holds (e.g. ``"Anthropic API key"``), or None.

    The kind never contains the secret. Safe to call from many threads at once.
    """
    finding = _find(text)
    return finding.detail if finding else None


def _find(text: str) -> Finding | None:
    """Screen ``text``, then what a person would read in it: normalised, and decoded from base64/hex.

    The rules that name a format or read a sentence run first, on every view; the generic ones
    (key material by shape, a secret word followed by a value, URLs, command lines, seed phrases)
    run last, so a known key disguised or encoded is reported by its name.
    """
    low = text.lower()
    candidate = _is_candidate(text, low)
    if candidate:
        finding = _layers(text, low, generic=False)
        if finding is not None:
            return finding
    elif text.isascii():
        return seed_phrase_rule(text, low)  # plain words only: nothing to normalise or decode
    view = normalised(text)
    if view != text:
        finding = _find_in(view)
        if finding is not None:
            return Finding(f"{finding.detail}, disguised with invisible or look-alike characters", finding.advice)
    if has_long_token(view):
        for decoded in decoded_runs(view):
            finding = _find_in(decoded) or _find_in(normalised(decoded))
            if finding is not None:
                return Finding(f"{finding.detail}, base64- or hex-encoded", finding.advice)
    view_low = low if view == text else view.lower()
    if candidate if view == text else _is_candidate(view, view_low):
        return _layers(view, view_low, generic=True)
    return seed_phrase_rule(view, view_low)


def _find_in(text: str) -> Finding | None:
    low = text.lower()
    if not _is_candidate(text, low):
        return None
    return _layers(text, low, generic=False)


def _layers(text: str, low: str, *, generic: bool) -> Finding | None:
    """The specific or the generic layers, on a text that passed the gate."""
    if generic:
        finding = url_secret_rule(text) or command_line_rule(text) or seed_phrase_rule(text, low)
    else:
        finding = format_rule(text, low)
    if finding is not None:
        return finding
    segments = [text] if len(text) <= _WHOLE_TEXT_CHARS else _SENTENCE_BREAK.split(text)
    for segment in segments:
        # One segment is the text, which passed the gate already.
        if len(segments) > 1 and not _is_candidate(segment, segment.lower()):
            continue
        if generic:
            finding = window_rule(segment) or key_material_rule(segment)
        else:
            finding = keyword_rule(segment) or intl_password_rule(segment) or detect_secrets_rule(segment)
        if finding is not None:
            return finding
    return None


# NUL and the other C0/C1 controls except tab, line feed and carriage return: no database
# stores NUL in text, and the rest only hides what a memory says.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def screen_body(body: object, *, max_chars: int) -> str:
    """Return the body to store (leading/trailing whitespace stripped), or raise BodyRejected.

    The length limit applies to the stripped body: exactly ``max_chars`` characters is accepted.

    Raises:
        BodyRejected: ``why="not_text"`` when ``body`` is not a ``str`` or holds a control
            character; ``why="empty"`` when it is empty, whitespace or invisible characters only; ``why="too_long"``
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
    if not text or (not text.isascii() and not INVISIBLE.sub("", text).strip()):
        # Only invisible characters (U+200B, U+034F, U+3164, U+2800 ...): nothing a reader would see.
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
