"""Secrets recognised by their shape, with no format name, for :mod:`ledger.screening`.

* **Key material**: a token of 20+ characters that mixes upper case, lower case and digits the way
  random text does (high entropy, the character class changing at most steps), unless what precedes
  it says it is public (a public key, a fingerprint, a digest, an address, an id) or it sits in a
  URL's path (shared-document and file links look random too).
* **Prefixed hex**: a word or random prefix joined to 32+ hex digits (``key-…``, ``pat….…``,
  ``access_token$…$…``), unless the prefix names a hash (``sha256-…``).
* **Seed phrases**: 12 or more words in a row from the BIP-39 word list (the ``mnemonic`` package).
* **Secrets in URLs**: a query parameter named for a secret (``sig``, ``token``, ``api_key``,
  ``password`` …) with a random value, and a webhook URL with a random path segment.
* **Credentials on a command line**: ``curl -u user:pass``, ``--password=…``, ``mysql -p…``,
  ``docker login -p …``, ``sshpass -p …``, ``redis-cli -a …``, ``net use … /user:… pass``.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from itertools import pairwise
from typing import Final

from ledger.screening.values import ADVICE_KEY, ADVICE_PASSWORD, Finding, entropy, is_placeholder
from ledger.screening.views import decodes_to_text

# --------------------------------------------------------------------------- key material

_TOKEN: Final = re.compile(r"[A-Za-z0-9+/=_\-.~%$]{20,400}")
_MIN_KEY: Final = 20
_SEPARATORS: Final = re.compile(r"[/.\-_~]")
_MIN_PART: Final = 12


def _kind(c: str) -> int:
    return 0 if c.islower() else 1 if c.isupper() else 2 if c.isdigit() else 3


def key_material(token: str, min_len: int = _MIN_KEY) -> bool:
    """True for random-looking key material: long, upper + lower + digits, high entropy, many class changes."""
    core = token.strip("=.-_~")
    n = len(core)
    if n < min_len:
        return False
    if not (any(c.isupper() for c in core) and any(c.islower() for c in core) and any(c.isdigit() for c in core)):
        return False
    if entropy(core) < min(4.0, math.log2(n) - 0.7):
        return False
    changes = sum(_kind(a) != _kind(b) for a, b in pairwise(core))
    if changes < 0.4 * (n - 1):  # random text changes class at ~60 % of steps, CamelCase at ~25 %
        return False
    # A path or a name made of short parts (Qwen/Qwen2.5-7B-Instruct) is not one random string.
    longest = max(_SEPARATORS.split(core), key=len)
    return len(longest) >= _MIN_PART and longest.lower() != longest and not longest.isalpha()


# What precedes a random-looking token when it is public: keys and fingerprints people publish,
# digests, on-chain addresses and transactions, ids.
_PUBLIC_BEFORE: Final = re.compile(
    r"(?i)(?:public|pub|fingerprint|sha\d*|md5|digest|checksum|hash|integrity|commit|revision|rev|tx|transaction"
    r"|txid|address|addr|cid|ipfs|ids?|ref|order|tracking|invoice|playlist|video|channel|file|document|doc|page"
    r"|image|build|job|run|trace|span|request|ssh-\w+|ecdsa-\S+|base64,|sha\d+:)\w*(?:\W+\w+){0,2}\W*$"
)
# Public object ids that carry a prefix (Stripe's customers, charges, payment intents …; publishable keys).
PUBLIC_PREFIX: Final = re.compile(
    r"(?:cus|ch|pi|pm|py|po|sub|txn|prod|price|evt|acct|seti|src|card|in|ii|il|si|ba|cs_test|cs_live|pk_live"
    r"|pk_test|sha\d+|AAAA)[_:-]"
)
# A Bitcoin address (base58, from 1 or 3): public, though it looks random.
_BASE58_ADDRESS: Final = re.compile(r"[13][1-9A-HJ-NP-Za-km-z]{25,34}")
_URL: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://\S+|www\.\S+|\b[\w-]+(?:\.[\w-]+)+/\S+")


def _outside_urls(text: str) -> str:
    return _URL.sub(" ", text) if ("/" in text) else text


def key_material_rule(text: str) -> Finding | None:
    """Random-looking key material anywhere outside a URL, unless what precedes it says it is public."""
    plain = _outside_urls(text)
    for m in _TOKEN.finditer(plain):
        token = m.group()
        if PUBLIC_PREFIX.match(token) or _BASE58_ADDRESS.fullmatch(token):
            continue
        if _PUBLIC_BEFORE.search(plain, max(0, m.start() - 40), m.start()):
            continue
        if (key_material(token) and not decodes_to_text(token)) or _prefixed_hex(token):
            return Finding("random-looking key material", ADVICE_KEY)
    return None


_PREFIXED_HEX: Final = re.compile(r"(?P<prefix>[A-Za-z][A-Za-z0-9_$]{1,60})[.$_-](?P<hex>[0-9a-f]{32,})")
_HASH_NAME: Final = re.compile(r"(?i)(?:sha|md|blake|crc|xxh|murmur|git|commit|rev|tx|hash)\w*")
# A prefix that names a secret, then random capitals and digits: AGE-SECRET-KEY-1…, TOKEN_…
_NAMED_TAIL: Final = re.compile(r"[A-Z0-9]{24,}$")
_SECRET_NAME: Final = re.compile(r"(?i)(?:secret|key|token|pat|auth|api|access)[-_.]")


def _prefixed_hex(token: str) -> bool:
    token = token.rstrip(".,;")
    m = _PREFIXED_HEX.fullmatch(token)
    if m is not None:
        return _HASH_NAME.fullmatch(m.group("prefix").split("$")[0]) is None
    named = _NAMED_TAIL.search(token)
    if named is None or _SECRET_NAME.search(token, 0, named.start() + 1) is None:
        return False
    tail = named.group()
    return any(c.isdigit() for c in tail) and any(c.isalpha() for c in tail) and entropy(tail) >= 3.5


# --------------------------------------------------------------------------- seed phrases

# Twelve short lower-case words (after a seed phrase's name).
_SEED_RUN: Final = re.compile(r"(?:[a-z]{3,8}[ \t,\n]+){11}[a-z]{3,8}(?![a-z])")
_NUMBERING: Final = re.compile(r"(?<![\w.])\d{1,2}[.):]\s")
_SEED_WORDS: Final = 12


@lru_cache(maxsize=1)
def _bip39_words() -> frozenset[str]:
    from mnemonic import Mnemonic  # deferred: reads the word list once

    return frozenset(Mnemonic("english").wordlist)


# Words that name a recovery phrase; after one, any twelve short words in a row count (Electrum and
# other wallets have word lists of their own).
_SEED_NAME: Final = re.compile(
    r"seed|mnemonic|recovery (?:phrase|words)|secret (?:recovery )?phrase|backup phrase|\b(?:12|24) words"
    r"|wiederherstellungsphrase|phrase de r[ée]cup[ée]ration|frase (?:semilla|de recuperaci[óo]n)|сид-?фраз"
)


def seed_phrase_rule(text: str, low: str) -> Finding | None:
    """Twelve or more BIP-39 words in a row, or any twelve after "seed phrase": a wallet's recovery phrase."""
    if low.count(" ") < _SEED_WORDS - 1:
        return None
    if not low.isascii() and len(low.encode()) > 1.3 * len(low):
        return None  # mostly Cyrillic, Greek, CJK … letters: not a phrase of ASCII words
    if "1" in low:  # "1. canal 2. weather …": the numbers are not part of the phrase
        low = _NUMBERING.sub(" ", low)
    tokens = (low.replace(",", " ") if "," in low else low).split()
    if len(tokens) < _SEED_WORDS:
        return None
    named = "seed" in low or "mnemonic" in low or "phrase" in low or "words" in low or "фраз" in low
    words, run = _bip39_words(), 0
    if not named and len(words.intersection(tokens)) < _SEED_WORDS // 2:
        return None  # too few of its words (a phrase may repeat some) and no name: one set operation
    for token in tokens:  # a loop over the words costs a fifth of a pattern for runs of short words
        run = run + 1 if token in words else 0
        if run >= _SEED_WORDS:
            return Finding("wallet recovery (seed) phrase", ADVICE_KEY)
    if named:
        name = _SEED_NAME.search(low)
        if name is not None and _SEED_RUN.match(low[name.end() :].lstrip(" :-=\n\t")):
            return Finding("wallet recovery (seed) phrase", ADVICE_KEY)
    return None


# --------------------------------------------------------------------------- URLs

_SECRET_PARAM: Final = re.compile(
    r"(?i)[?&](?:sig|signature|x-amz-signature|token|access_token|auth|auth_token|api_?key|apikey|key|secret"
    r"|client_secret|password|passwd|pwd|pass)=(?P<val>[^&#\s]{16,})"
)
_WEBHOOK_PATH: Final = re.compile(r"(?i)://\S*?hooks?/\S*?/(?P<val>[A-Za-z0-9_\-]{24,})")


def url_secret_rule(text: str) -> Finding | None:
    """A secret in a URL: a query parameter named for one, or a webhook's random path segment."""
    if "://" not in text:
        return None
    for m in _SECRET_PARAM.finditer(text):
        value = m.group("val").replace("%2B", "+").replace("%2F", "/").replace("%3D", "=")
        if not is_placeholder(value) and (key_material(value, 16) or entropy(value) >= 4.0):
            return Finding("secret in a URL", ADVICE_KEY)
    for m in _WEBHOOK_PATH.finditer(text):
        if key_material(m.group("val"), 24):
            return Finding("webhook URL with its secret", ADVICE_KEY)
    return None


# --------------------------------------------------------------------------- command lines

_CLI: Final = re.compile(
    r"""(?x)
    (?:^|\s)(?:-u|--user|--basic)[ =](?P<pair>[^\s:'"$%]+:[^\s'"]+)                   # curl -u user:pass
    | \s-U\s+[^\s%]+%(?P<smb>\S+)                                                   # smbclient -U user%pass
    | --(?:password|passwd|pass|pwd|secret|client-secret|token|api-key|apikey|auth-token)[ =](?P<flag>\S+)
    | \b(?:mysql|mysqldump|mariadb|mariadb-dump)\b[^\n|;&]{0,200}?\s-p(?P<attached>[^\s-]\S*)  # mysql -pSECRET
    | (?:\s-[uU]\s*\S+|\blogin\b|\bsshpass\b)[^\n|;&]{0,200}?\s-[pP]\s+(?P<after>[^\s-]\S*)    # -u user … -p SECRET
    | \bhtpasswd\s+-\w*b\w*\s+\S+\s+\S+\s+(?P<htpasswd>\S+)
    | \bredis-cli\b[^\n|;&]{0,200}?\s-a\s+(?P<redis>\S+)
    | \bnet\s+use\b[^\n]{0,200}?/user:\S+\s+(?P<netuse>\S+)
    | \bopenssl\b[^\n|;&]{0,200}?\s(?:-k\s+|-pass(?:in|out)?\s+pass:)(?P<openssl>\S+)
    | (?i:(?:key|name)["']?\s*[=:]\s*["'][\w.-]*(?:password|passwd|pwd|secret|token|api_?key)["']
      [\s,]+["']?value["']?\s*[=:]\s*)["'](?P<keyvalue>[^"'\s]+)["']                   # key="DbPassword" value="…"
    """
)


def _password_like(value: str) -> bool:
    value = value.strip("'\"`,.;)")
    if not value or is_placeholder(value) or value.startswith(("$", "%", "<", "-")) or "stdin" in value:
        return False
    return len(value) >= 6 and any(c.isdigit() or not c.isalnum() for c in value) and any(c.isalpha() for c in value)


def command_line_rule(text: str) -> Finding | None:
    """A password or token on a command line: ``curl -u user:pass``, ``--password=…``, ``mysql -p…`` …"""
    if " -" not in text and "--" not in text and "/user:" not in text and "value" not in text:
        return None  # every form has a flag, `net use`'s /user: or a key/value pair; most texts have none
    for line in text.splitlines():
        for m in _CLI.finditer(line):
            value = next(v for v in m.groupdict().values() if v is not None)
            if m.group("pair") is not None:
                value = value.split(":", 1)[1]
            if _password_like(value):
                return Finding("password on a command line", ADVICE_PASSWORD)
    return None
