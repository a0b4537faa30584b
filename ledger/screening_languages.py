"""Passwords stated in a sentence in other languages, for :mod:`ledger.screening`'s keyword rule.

German, French, Spanish, Portuguese, Italian, Dutch, Russian, Chinese and Japanese: the keyword,
an optional "for the router" phrase, a connector, the value (judged by the screener's password
rules), and the words that follow a connector in prose rather than being a password
("mein Passwort ist *in* 1Password"). docs/screening.md lists them.
"""

from __future__ import annotations

import re
from typing import Final

# Passwords stated in a sentence in other languages (de, fr, es, pt, it, nl, ru, zh, ja): the keyword,
# an optional "for the router" phrase, a connector ("ist", "est", "es", "é", "è", "是", "は", ":" ...),
# the value. An unquoted value stops where CJK text resumes ("私のパスワードは hunter2 です").
_INTL_KEYWORD = (
    r"passwort|kennwort|mot\s+de\s+passe|mdp|contrase(?:ñ|n)a|clave|senha|palavra[\s-]passe|password"
    r"|parola\s+d['\u2019]ordine|wachtwoord|парол(?:ь|я|ем)"
)
_CJK_KEYWORD = r"密码|密碼|口令|パスワード|暗証番号"
_FOR_PHRASE = (
    r"(?:\s+(?:für|fuer|vom|von|zum|zur|des|der|du|de|del|do|da|della|dello|van|voor|от|для)\s+"
    r"(?:(?:das|die|den|dem|le|la|les|mon|ma|mes|el|mi|mis|o|a|meu|minha|il|lo|mio|mia|het|mijn|моей|моего)\s+)?"
    r"[\w.'-]+)?"
)
_INTL_CONN = (
    r"(?P<conn>\s*[:：=]\s*|\s*[—–]\s*|\s+(?:ist|lautet|hei(?:ß|ss)t|est|c['\u2019]est|es|é|è|is|это|равен)\s+"
    r"|\s*(?:是|为|為|は)\s*|\s+)"
)
_CJK = "\u3000-\u30ff\u3400-\u9fff\uf900-\ufaff\uff01-\uff0f\uff1a-\uff20"
_INTL_VALUE = (
    rf"(?P<val>\"[^\"\n]{{1,200}}\"|'[^'\n]{{1,200}}'|«[^»\n]{{1,200}}»|「[^」\n]{{1,200}}」"
    rf"|[^\s{_CJK}、。，,;]{{1,200}})"
)
INTL_SENTENCE: Final = re.compile(
    rf"(?:(?<![\w])(?:{_INTL_KEYWORD})|(?:{_CJK_KEYWORD})){_FOR_PHRASE}{_INTL_CONN}{_INTL_VALUE}", re.IGNORECASE
)
CJK_NEXT: Final = re.compile(rf"[{_CJK}、。，]")
# Words that follow "Passwort ist" / "mot de passe est" ... in prose rather than being the password.
_INTL_PROSE_TEXT = """
    im in bei auf unter nicht noch schon jetzt mein dein unser das der die ein eine gleich sicher geheim lang kurz
    stark schwach falsch richtig neu alt gespeichert geändert vergessen abgelaufen hinterlegt
    dans sur sous chez pas encore déjà sécurisé sûr secret long court fort faible faux nouveau ancien oublié changé
    expiré enregistré le la les mon ma un une même
    en seguro segura secreto secreta largo larga corta corto fuerte débil nueva nuevo vieja viejo olvidada
    cambiada guardada el mi no ya igual
    em na forte fraca nova antiga esquecida o meu minha um uma não
    nel nella sicura sicuro segreta lunga debole vecchia dimenticata salvata il mio mia non uguale
    op veilig geheim sterk zwak nieuw oud vergeten opgeslagen het de mijn een niet hetzelfde
    в на у не надёжный надежный сложный простой длинный короткий новый старый забыт сохранён такой
"""
INTL_PROSE: Final = frozenset(_INTL_PROSE_TEXT.split())
