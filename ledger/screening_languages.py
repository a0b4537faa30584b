"""Passwords and PINs stated in a sentence in other languages, for :mod:`ledger.screening_rules`.

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
