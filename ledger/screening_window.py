"""A secret word in any language, then a value a few words later, for :mod:`ledger.screening`.

The keyword rules (:mod:`ledger.screening_rules`) read a sentence's grammar; this one does not need to:
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

from ledger.screening_shapes import PUBLIC_PREFIX
from ledger.screening_values import (
    DETAILS,
    KEY,
    PIN,
    PW,
    SLUG,
    STRUCTURED,
    Finding,
    is_placeholder,
    is_code_expression,
    keyish,
    mentions_store,
)

_PASSWORD = (
    r"pass(?:word|wort|ord|wd|phrase)\w{0,4}|pwd|pw|pass|kennwort\w{0,3}|wachtwoord\w{0,3}|wagwoord\w{0,3}"
    r"|l[öo]senord\w{0,3}|adgangskode\w{0,3}|salasan\w{1,6}|hesl\w{1,3}|has[łl]\w{1,3}|jelsz\w{1,6}|parol\w{0,4}|parool\w{0,3}|κωδικ\w{1,3}"
    r"|lozink\w{1,3}|geslo\w{0,2}|slapta[žz]od\w{1,6}|lykilor[ðd]\w{0,4}|n?[cg]h?yfrinair|pasahitz\w{1,3}"
    r"|contrasinal\w{0,2}|contrasenya\w{0,2}|contrase[ñn]a\w{0,2}|fjal[ëe]kalim\w{0,3}|senha\w{0,2}"
    r"|palavra[\s-]passe|mot\s+de\s+passe|mdp|clave|[şs]ifr[eə]\w{0,4}|kata\s+(?:sandi|laluan)|sandi"
    r"|m[ậa]t\s+kh[ẩa]u|nenosiri|neno\s+la\s+siri|iphasiwedi|kalmar\s+sirri|login|creds|credentials"
    r"|zugangsdaten|identifiants|credenciales|credenziali|парол\w{0,3}|лозинк\w{1,2}|нууц\s+үг\w{0,3}"
    r"|құпия\s+сөз\w{0,3}|логин|συνθηματικ\w{1,3}|პაროლ\w*|գաղտնաբառ\w*"
)
# Keywords in scripts written without spaces or with suffixes glued on: no word boundary asked.
_PASSWORD_SCRIPT = (
    r"סיסמ[הא]|كلمة\s+(?:المرور|السر|سر|مرور)|رمز|گذرواژه|پسورد|پاس\s?ورڈ|የይለፍ\s+ቃ|ពាក្យសម្ងាត់"
    r"|പാസ്\u200c?വേഡ്|ಪಾಸ್\u200c?ವರ್ಡ್|પાસવર્ડ|ਪਾਸਵਰਡ|पासवर्ड|পাসওয়ার্ড|கடவுச்சொல்|పాస్\u200c?వర్డ్|මුරපදය"
    r"|စကားဝှက်|ລະຫັດຜ່ານ|รหัส|パスワード|密码|密碼|口令|비밀번호|비번|암호|패스워드"
)
_PIN = (
    r"pin(?:[\s-]?(?:code|kod\w{0,2}|koodi|nummer|number|numero|код))?|pincode|passcodes?|combination|combo"
    r"|kombination\w{0,2}|combinaison|combinazione|combinaci[óo]n|пин-?код\w{0,2}"
)
_PIN_SCRIPT = r"暗証番号|PIN[码碼]|핀\s?번호"
_CVV = r"cvv2?|cvc2?|csc|security\s+code"
# The generic word "code", compounds included (Türcode, portkod, ovikoodi): it needs an access word.
_CODE = r"(?:code|kode|koden|kod|kód|koodi|c[óo]digo|codice|codul|cod|код|κωδικ|קוד|kodu|kodi)\w{0,3}"
_KEY = (
    r"(?:api[\s_-]?)?(?:key|keys|token|secret)|apikey|licen[sc]e|serial|activation|cl[ée]f?|chave|schl[üu]ssel|chiave|ключ\w{0,2}|klucz\w{0,2}"
    r"|sleutel|nyckel\w{0,2}|n[øo]gle\w{0,2}|n[øo]kkel\w{0,2}|avain\w{0,2}|anahtar\w{0,2}|kulcs\w{0,2}|cheie"
    r"|κλειδί|токен\w{0,2}|jeton|segreto|secreto|geheimnis|wallet|metamask"
)
_KEY_SCRIPT = r"מפתח|키|キー|密钥|秘钥|トークン|토큰"
_WORD_START = r"(?<![^\W_])"
_WORD_END = r"(?![^\W_])"
_KEYWORD: Final = re.compile(
    rf"{_WORD_START}(?:(?P<cvv>{_CVV})|(?P<pin>{_PIN})|(?P<password>{_PASSWORD})|(?P<key>{_KEY})){_WORD_END}"
    rf"|(?P<code>{_CODE}){_WORD_END}|{_WORD_START}(?P<pair>wi-?fi|wlan|ssid|network){_WORD_END}"
    rf"|(?P<pin_script>{_PIN_SCRIPT})|(?P<password_script>{_PASSWORD_SCRIPT})|(?P<key_script>{_KEY_SCRIPT})",
    re.IGNORECASE,
)
# Words that make "code" an access code, in the languages above (lower-case stems).
_ACCESS: Final = re.compile(
    r"door|gate|garage|alarm|safe|lock|keypad|entry|entrance|building|intercom|access|unlock|bike|lobby|atm|card"
    r"|voicemail|sim\b|phone|wifi|t[üu]r|tor\b|zugang|haus|tresor|schlo|porte|portail|immeuble|digi|coffre|acc[èe]s"
    r"|carte|puerta|port[óãa]o?|cancell|citofon|allarm|cassaforte|accesso|bancomat|caja|cofre|acceso|acesso|tarjeta"
    r"|cart[ãa]o|edif[ií]cio|pr[ée]dio|deur|poort|kluis|toegang|drzwi|bram|domofon|sejf|dost[ęe]p|двер|домофон"
    r"|подъезд|під.?їзд|сейф|сигнал|ворот|карт|dve[řr]|br[áa]n|trezor|vchod|d[öo]rr|port|larm|kassask|d[øo]r|boks"
    r"|ovi|portti|h[äa]lytys|kap[ıi]|kasa|bina|kart|kapu|ajt[óo]|riaszt|sz[ée]f|πόρτ|συναγερμ|θυρ|כניסה|דלת|שער|כספת"
    r"|אזעקה|门禁|門禁|大门|保险箱|현관|도어|금고"
)
# Plain words after which no value follows: where or when the secret is, or what it is like.
_STOP: Final = frozenset(
    """in inside at under behind near since until after before every each per ago within via into onto
    from stored saved kept written changed reset hashed encrypted printed taped stuck expires expired
    rotated must should needs need requires required has have contains length long characters chars digits letters
    manager policy hint rules field managers hidden im dans nel nella sous unter seit depuis desde dal sinds
    в у під под gespeichert hinterlegt guardada guardado salvata salvato enregistré opgeslagen zapisane
    tx transaction hash address addr id ids fingerprint checksum digest commit public""".split()
)
_MAX_WORDS: Final = 5
_CLAUSE_END: Final = re.compile(r"[.,;!?。、，]$")
_OPENERS: Final = "\"'«「([{"
_CLOSERS: Final = ".,;:!?)]}»\"'」。、，"
_CONNECTOR: Final = re.compile(r"^(?:[:：=\-–—>/]+|is|=>|->)$")
_PIN_VALUE: Final = re.compile(r"\d{4,12}[#*]?|\*?\d{4,12}#|\d{1,4}(?:-\d{1,4}){1,5}|(?=[0-9A-Z]*[A-Z])(?=(?:[A-Z]*\d){3})[0-9A-Z]{4,10}")
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
    return letters >= 2 and any(c.isdigit() or c in "!@#$%^&*+=?~_" for c in value)


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
    tokens = text[end : end + 240].split()
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
            if low in _STOP or mentions_store(value) or (words := words + 1) > _MAX_WORDS:
                return False
            access = access or _ACCESS.search(low) is not None
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
_IDENTIFIER_END: Final = re.compile(r"[\w-]*")
_PUBLIC_BEFORE: Final = re.compile(r"(?i)(?:public|publishable|host|primary|foreign|sort|partition|idempotency)\W*$")


def window_rule(text: str) -> Finding | None:
    """A password, PIN, access code or key stated a few plain words after its keyword, in any language."""
    for m in _KEYWORD.finditer(text):
        family = str(m.lastgroup)
        end = m.end()
        if not family.endswith("_script"):
            # A keyword inside an identifier (secret_key_base, DB_PASSWORD) stands for the identifier,
            # which must be a word of the sentence, not a placeholder or code (${DB_PASSWORD}, form.password).
            start = m.start()
            while start and (text[start - 1].isalnum() or text[start - 1] in "_-"):
                start -= 1
            end = _IDENTIFIER_END.match(text, end).end()
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
            access = _ACCESS.search(before) is not None
        if _value_after(text, end, family, access):
            kind = PIN if family in ("cvv", "code") else PW if family == "pair" else family
            return DETAILS[kind, "sentence"]
    return None
