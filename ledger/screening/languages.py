"""Passwords and PINs stated in a sentence in other languages, for :mod:`ledger.screening.rules`.

The twenty most spoken languages and a few more (Chinese, Hindi, Spanish, French, Arabic, Bengali,
Portuguese, Russian, Urdu, Indonesian and Malay, German, Japanese, Marathi, Telugu, Turkish, Tamil,
Vietnamese, Korean, Italian, Persian, Polish, Thai, Swahili, Dutch, Ukrainian): the keyword, an
optional "for the router" or "of mine" phrase, a connector ("ist", "est", "é", "是", "は", "는",
"adalah", "là", "คือ", ":" ...), the value, and an optional closing copula for languages that put
the verb last ("है", "ہے", "است", "입니다", "です"). The value is judged by the screener's password
or PIN rules; prose words that follow a connector ("mein Passwort ist *in* 1Password") are listed
too. docs/screening.md lists the languages.
"""

from __future__ import annotations

import re
from typing import Final

# The password family, keyword by language (Latin and Cyrillic ones need a word start).
_PASSWORD_WORDS = (
    r"passwort|kennwort|mot\s+de\s+passe|mdp|contrase(?:ñ|n)a|clave|senha|palavra[\s-]passe|password"
    r"|parola\s+d['\u2019]ordine|wachtwoord|парол(?:ь|я|ем)|has(?:ł|l)o|(?:şifre|sifre|parola)(?:m|miz|niz|si)?"
    r"|kata\s+(?:sandi|laluan)|sandi|m(?:ậ|a)t\s+kh(?:ẩ|a)u|nenosiri|neno\s+la\s+siri"
)
_PASSWORD_SCRIPT_WORDS = (
    r"密码|密碼|口令|パスワード|비밀번호|암호|패스워드|पासवर्ड|कूटशब्द|পাসওয়ার্ড|கடவுச்சொல்|పాస్\u200c?వర్డ్"
    r"|รหัสผ่าน|كلمة\s+(?:المرور|السر|مرور)|رمز\s+عبور|گذرواژه|پسورد|پاس\s?ورڈ"
)
# The PIN family: PIN codes and passcodes.
_PIN_WORDS = r"(?:code\s+|c(?:ó|o)digo\s+|m(?:ã|a)\s+)?pin(?:[\s-]?(?:code|kod(?:u|um)?|код|nummer))?|pincode|пин-?код"
_PIN_SCRIPT_WORDS = r"暗証番号|PIN码|PIN碼|핀\s?번호|पिन|পিন|پن\s?کوڈ|الرقم\s+السري|رمز\s+PIN"
_LATIN_START = r"(?<![A-Za-z0-9_\u00c0-\u024f\u0400-\u04ff])"
# "for the router", "of the bank", and "of mine" after the keyword.
_FOR_PHRASE = (
    r"(?:\s+(?:für|fuer|vom|von|zum|zur|des|der|du|de|del|do|da|della|dello|van|voor|от|для|od|do|dla)\s+"
    r"(?:(?:das|die|den|dem|le|la|les|mon|ma|mes|el|mi|mis|o|a|meu|minha|il|lo|mio|mia|het|mijn|моей|моего)\s+)?"
    r"[\w.'-]+)?"
    r"(?:\s+(?:saya|aku|kamu|anda|langu|yangu|wangu|من|ما|الخاص(?:ة)?\s+بي)|\s+của\s+(?:tôi|mình|bạn)"
    r"|ของ(?:ฉัน|ผม|เรา))?"
    # one modifier word before a verb connector: "mật khẩu wifi là …", "kata sandi email adalah …"
    r"(?:\s+[\w.'-]{1,20}(?=\s+(?:là|adalah|ialah|ni|to|jest|ist|est|es|é|è)\s))?"
)
_CONNECTOR = (
    r"(?P<conn>\s*[:：=]\s*|\s*[—–]\s*"
    r"|\s+(?:ist|lautet|hei(?:ß|ss)t|est|c['\u2019]est|es|é|è|is|это|равен|to|jest|adalah|ialah|là|ni"
    r"|هي|هو|হল|হলো|হচ্ছে)\s+"
    r"|\s*(?:是|为|為|は|는|은|คือ)\s*|\s+)"
)
# Scripts whose text ends an unquoted value: a password written in Latin letters stops where the
# sentence's own script resumes ("私のパスワードは hunter2 です", "मेरा पासवर्ड X है").
_SCRIPTS = (
    "\u0600-\u06ff\u0750-\u077f\u0900-\u097f\u0980-\u09ff\u0b80-\u0bff\u0c00-\u0c7f\u0e00-\u0e7f"
    "\u1100-\u11ff\u3000-\u30ff\u3130-\u318f\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff\ufb50-\ufdff"
    "\ufe70-\ufefe\uff01-\uff0f\uff1a-\uff20"
)
_VALUE = (
    rf"(?P<val>\"[^\"\n]{{1,200}}\"|'[^'\n]{{1,200}}'|«[^»\n]{{1,200}}»|「[^」\n]{{1,200}}」"
    rf"|[^\s{_SCRIPTS}、。，,;]{{1,200}})"
)
# A copula after the value, in languages that put the verb last.
_CLOSE = r"(?P<close>\s*(?:है|हैं|आहे|ہے|است|です|だ|입니다|이에요|예요|이야|야)(?=$|[\s.,;!?。、]))?"
INTL_SENTENCE: Final = re.compile(
    rf"(?:{_LATIN_START}(?:(?P<pin>{_PIN_WORDS})|(?P<password>{_PASSWORD_WORDS}))"
    rf"|(?P<pin_script>{_PIN_SCRIPT_WORDS})|(?P<password_script>{_PASSWORD_SCRIPT_WORDS}))"
    rf"{_FOR_PHRASE}{_CONNECTOR}{_VALUE}{_CLOSE}",
    re.IGNORECASE,
)
# In lower-cased ASCII text, every match of INTL_SENTENCE holds one of these (a keyword's ASCII spelling,
# or its part that is always ASCII): a text without any has no such sentence. Not for other text: ignoring
# case, a pattern's "s" or "k" also matches "ſ" or the Kelvin sign.


def has_ascii_language_word(low: str) -> bool:
    """The gate's test for the sentence rule's ASCII keywords in lower-cased ``low``.

    Written out with ``in`` (a regex with more branches on common letters, or a loop over a tuple,
    costs two to three times as much); keywords in other scripts are looked for only in text that is
    not ASCII.
    """
    return "sandi" in low or "sifre" in low or "siri" in low or "haslo" in low or "laluan" in low or "mat kh" in low


def has_ascii_window_word(low: str) -> bool:
    """The gate's test for the window rule's other ASCII keywords (asked only when a value could follow)."""
    return (
        "hesl" in low
        or "paro" in low
        or "passord" in low
        or "geslo" in low
        or "lozink" in low
        or "salasan" in low
        or "wagwoord" in low
        or "yfrinair" in low
        or "pasahitz" in low
        or "contras" in low
        or "kod" in low
        or "kood" in low
        or "cod" in low
        or "login" in low
        or "pw" in low
        or "combo" in low
        or "iphasi" in low
        or "senord" in low
        or "jelsz" in low
        or "slapta" in low
        or "lykilor" in low
        or "fjal" in low
        or "zugangs" in low
        or "identifiant" in low
        or "csc" in low
        or "licen" in low
        or "wallet" in low
    )


INTL_ASCII_HINT: Final = re.compile(
    r"pin|pass|kennwort|mdp|contrase|clave|senha|palavra|parola|wachtwoord|haslo|sifre|sandi|laluan|khau|neno"
)
SCRIPT_NEXT: Final = re.compile(rf"[{_SCRIPTS}、。，]")
# Words that follow "Passwort ist" / "mot de passe est" ... in prose rather than being the password.
_INTL_PROSE_TEXT = """
    im in bei auf unter nicht noch schon jetzt mein dein unser das der die ein eine gleich sicher geheim lang kurz
    stark schwach falsch richtig neu alt gespeichert geändert vergessen abgelaufen hinterlegt liegt
    dans sur sous chez pas encore déjà sécurisé sûr secret long court fort faible faux nouveau ancien oublié changé
    expiré enregistré le la les mon ma un une même
    en seguro segura secreto secreta largo larga corta corto fuerte débil nueva nuevo vieja viejo olvidada
    cambiada guardada el mi no ya igual está
    em na forte fraca nova antiga esquecida o meu minha um uma não está
    nel nella sicura sicuro segreta lunga debole vecchia dimenticata salvata il mio mia non uguale
    op veilig geheim sterk zwak nieuw oud vergeten opgeslagen het de mijn een niet hetzelfde staat
    в на у не надёжный надежный сложный простой длинный короткий новый старый забыт сохранён такой хранится
    jest w musi ma nie ada di harus tidak sudah nằm trong phải không liko kwenye lazima si içinde en az olmalı
"""
INTL_PROSE: Final = frozenset(_INTL_PROSE_TEXT.split())

# --------------------------------------------------------------------------- the window rule's words
# Keywords for :mod:`ledger.screening.window` (a secret word, then a value a few plain words later), in
# some sixty languages. Latin, Cyrillic, Greek, Georgian and Armenian ones are matched as whole words
# (inflected endings allowed); the others are found inside longer words too.
WINDOW_PASSWORD = (
    r"pass(?:word|wort|ord|wd|phrase)\w{0,4}|pwd|pw|pass|kennwort\w{0,3}|wachtwoord\w{0,3}|wagwoord\w{0,3}"
    r"|l[öo]senord\w{0,3}|adgangskode\w{0,3}|salasan\w{1,6}|hesl\w{1,3}|has[łl]\w{1,3}|jelsz\w{1,6}|parol\w{0,4}"
    r"|parool\w{0,3}|κωδικ\w{1,3}"
    r"|lozink\w{1,3}|geslo\w{0,2}|slapta[žz]od\w{1,6}|lykilor[ðd]\w{0,4}|n?[cg]h?yfrinair|pasahitz\w{1,3}"
    r"|contrasinal\w{0,2}|contrasenya\w{0,2}|contrase[ñn]a\w{0,2}|fjal[ëe]kalim\w{0,3}|senha\w{0,2}"
    r"|palavra[\s-]passe|mot\s+de\s+passe|mdp|clave|[şs]ifr[eə]\w{0,4}|kata\s+(?:sandi|laluan)|sandi"
    r"|m[ậa]t\s+kh[ẩa]u|nenosiri|neno\s+la\s+siri|iphasiwedi|kalmar\s+sirri|login|creds|credentials"
    r"|zugangsdaten|identifiants|credenciales|credenziali|парол\w{0,3}|лозинк\w{1,2}|нууц\s+үг\w{0,3}"
    r"|құпия\s+сөз\w{0,3}|логин|συνθηματικ\w{1,3}|პაროლ\w*|գաղտնաբառ\w*"
)
# Keywords in scripts written without spaces or with suffixes glued on: no word boundary asked.
WINDOW_PASSWORD_SCRIPT = (
    r"סיסמ[הא]|كلمة\s+(?:المرور|السر|سر|مرور)|رمز|گذرواژه|پسورد|پاس\s?ورڈ|የይለፍ\s+ቃ|ពាក្យសម្ងាត់"
    r"|പാസ്\u200c?വേഡ്|ಪಾಸ್\u200c?ವರ್ಡ್|પાસવર્ડ|ਪਾਸਵਰਡ|पासवर्ड|পাসওয়ার্ড|கடவுச்சொல்|పాస్\u200c?వర్డ్|මුරපදය"
    r"|စကားဝှက်|ລະຫັດຜ່ານ|รหัส|パスワード|密码|密碼|口令|비밀번호|비번|암호|패스워드"
)
WINDOW_PIN = (
    r"pin(?:[\s-]?(?:code|kod\w{0,2}|koodi|nummer|number|numero|код))?|pincode|passcodes?|combination|combo"
    r"|kombination\w{0,2}|combinaison|combinazione|combinaci[óo]n|пин-?код\w{0,2}"
)
WINDOW_PIN_SCRIPT = r"暗証番号|pin[码碼]|핀\s?번호"
WINDOW_CVV = r"cvv2?|cvc2?|csc|security\s+code"
# The generic word "code", compounds included (Türcode, portkod, ovikoodi): it needs an access word.
WINDOW_CODE = r"(?:code|kode|koden|kod|kód|koodi|c[óo]digo|codice|codul|cod|код|κωδικ|קוד|kodu|kodi)\w{0,3}"
WINDOW_KEY = (
    r"(?:api[\s_-]?)?(?:key|keys|token|secret)|apikey|licen[sc]e(?:\s+key)?|(?:serial|activation|product)\s+(?:key|code)"
    r"|cl[ée]f?|chave|schl[üu]ssel|chiave|ключ\w{0,2}|klucz\w{0,2}"
    r"|sleutel|nyckel\w{0,2}|n[øo]gle\w{0,2}|n[øo]kkel\w{0,2}|avain\w{0,2}|anahtar\w{0,2}|kulcs\w{0,2}|cheie"
    r"|κλειδί|токен\w{0,2}|jeton|segreto|secreto|geheimnis|wallet"
)
WINDOW_KEY_SCRIPT = r"מפתח|키|キー|密钥|秘钥|トークン|토큰"
# Words that make "code" an access code, in the languages above (lower-case stems).
ACCESS_WORDS: Final = re.compile(
    r"door|gate|garage|alarm|safe|lock|keypad|entry|entrance|building|intercom|access|unlock|bike|lobby|atm|card"
    r"|voicemail|sim\b|phone|wifi|t[üu]r|tor\b|zugang|haus|tresor|schlo|porte|portail|immeuble|digi|coffre|acc[èe]s"
    r"|carte|puerta|port[óãa]o?|cancell|citofon|allarm|cassaforte|accesso|bancomat|caja|cofre|acceso|acesso|tarjeta"
    r"|cart[ãa]o|edif[ií]cio|pr[ée]dio|deur|poort|kluis|toegang|drzwi|bram|domofon|sejf|dost[ęe]p|двер|домофон"
    r"|подъезд|під.?їзд|сейф|сигнал|ворот|карт|dve[řr]|br[áa]n|trezor|vchod|d[öo]rr|port|larm|kassask|d[øo]r|boks"
    r"|ovi|portti|h[äa]lytys|kap[ıi]|kasa|bina|kart|kapu|ajt[óo]|riaszt|sz[ée]f|πόρτ|συναγερμ|θυρ|כניסה|דלת|שער|כספת"
    r"|אזעקה|门禁|門禁|大门|保险箱|현관|도어|금고"
)
# Plain words after which no value follows: where or when the secret is, or what it is like.
_WINDOW_STOP_TEXT = """
    in inside at under behind near since until after before every each per ago
    within via into onto from stored saved kept written changed reset hashed encrypted printed
    taped stuck expires expired rotated must should needs need requires required has have contains
    length long characters chars digits letters manager policy hint rules field managers hidden im
    dans nel nella sous unter seit depuis desde dal sinds в у під под
    gespeichert hinterlegt guardada guardado salvata salvato enregistré opgeslagen zapisane
    tx transaction hash address addr
    id ids fingerprint checksum digest commit public
"""
WINDOW_STOP: Final = frozenset(_WINDOW_STOP_TEXT.split())
