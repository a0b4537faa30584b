"""The third round of the screening corpus: passwords and PINs in the twenty most used languages,
keys broken by spaces, hyphens or line breaks, every detector family, passphrases; and the
look-alikes those must keep (version pins, order numbers, SHAs, UUIDs, "my password is in ..."
in every language, keyword mentions).

Every key is fake: a pseudo-random tail from a fixed seed, joined to its prefix at import time,
so no literal in this file has the shape of a live credential.
"""

from __future__ import annotations

import random

from tests.ledger.screening_corpus import Sample

_rng = random.Random(20261202)
_ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def _tail(n: int, alphabet: str = _ALNUM) -> str:
    return "".join(_rng.choice(alphabet) for _ in range(n))


def _split(key: str, sep: str, parts: int = 3) -> str:
    """``key`` cut into ``parts`` pieces joined by ``sep`` (how a key arrives pasted from a chat or a PDF)."""
    step = -(-len(key) // parts)
    return sep.join(key[i : i + step] for i in range(0, len(key), step))


KEYS = {
    "Anthropic": "sk-" + "ant-" + "api03-" + _tail(90),
    "OpenAI": "sk-" + "proj-" + _tail(60),
    "GitHub": "gh" + "p_" + _tail(36),
    "GitHub fine-grained": "github" + "_pat_" + _tail(22) + "_" + _tail(59),
    "Slack": "xo" + "xb-" + _tail(12, "0123456789") + "-" + _tail(13, "0123456789") + "-" + _tail(24),
    "AWS": "AK" + "IA" + _tail(16, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"),
    "Notion": "sec" + "ret_" + _tail(43),
    "Notion ntn": "nt" + "n_" + _tail(46),
    "Stripe": "sk" + "_live_" + _tail(24),
    "GitLab": "gl" + "pat-" + _tail(20),
    "npm": "np" + "m_" + _tail(36),
    "Google": "AI" + "za" + _tail(35),
}

# (language, statements): a password goes in {v}, a PIN or passcode in {p}.
_LANGUAGE_SECRETS: list[tuple[str, list[str]]] = [
    ("en", ["my passcode is {p}", "the PIN for my debit card is {p}", "Our alarm passcode: {p}"]),
    ("zh", ["我的密码是{v}", "银行卡PIN码是{p}"]),
    ("hi", ["मेरा पासवर्ड {v} है", "मेरा पिन {p} है"]),
    ("es", ["mi contraseña del banco es {v}", "mi PIN es {p}"]),
    ("fr", ["mon mot de passe est {v}", "mon code PIN est {p}"]),
    ("ar", ["كلمة المرور الخاصة بي هي {v}", "الرقم السري: {p}"]),
    ("bn", ["আমার পাসওয়ার্ড হল {v}", "আমার পিন {p}"]),
    ("pt", ["minha senha do email é {v}", "o meu PIN é {p}"]),
    ("ru", ["мой пароль от почты {v}", "мой PIN-код {p}"]),
    ("ur", ["میرا پاس ورڈ {v} ہے", "میرا پن کوڈ {p} ہے"]),
    ("id", ["kata sandi saya adalah {v}", "PIN saya {p}"]),
    ("de", ["Mein Kennwort lautet {v}", "meine PIN ist {p}"]),
    ("ja", ["パスワードは{v}です", "暗証番号は{p}"]),
    ("mr", ["माझा पासवर्ड {v} आहे"]),
    ("te", ["నా పాస్‌వర్డ్ {v}"]),
    ("tr", ["şifrem {v}", "benim parolam: {v}", "PIN kodum {p}"]),
    ("ta", ["என் கடவுச்சொல் {v}"]),
    ("vi", ["mật khẩu của tôi là {v}", "mã PIN của tôi là {p}"]),
    ("ko", ["제 비밀번호는 {v} 입니다", "내 암호는 {v}", "카드 비밀번호: {p}"]),
    ("it", ["la mia password è {v}", "il mio PIN è {p}"]),
    ("fa", ["رمز عبور من {v} است"]),
    ("pl", ["moje hasło to {v}", "mój PIN to {p}"]),
    ("th", ["รหัสผ่านของฉันคือ {v}"]),
    ("sw", ["nenosiri langu ni {v}"]),
    ("nl", ["mijn pincode is {p}"]),
    ("uk", ["мій пароль: {v}"]),
]
_PASSWORDS = ["Kx7#mPq2", "Blue-Otter-88", "rainFall2031", "Zq9!vLm4", "marmot77X", "T0p-Secr3t", "h4ppyDays!"]
_PINS = ["7394", "018263", "5521", "90817", "3306"]


def _language_secrets() -> list[Sample]:
    samples = []
    for n, (lang, template) in enumerate((lang, t) for lang, templates in _LANGUAGE_SECRETS for t in templates):
        value = _PINS[n % len(_PINS)] if "{p}" in template else _PASSWORDS[n % len(_PASSWORDS)]
        samples.append(Sample(template.format(v=value, p=value), True, f"{lang}: stated in a sentence", value))
    return samples


def _broken_keys() -> list[Sample]:
    samples = []
    for name, key in KEYS.items():
        for label, sep in (("spaces", " "), ("hyphens", "-"), ("line breaks", "\n")):
            broken = _split(key, sep)
            body = f"{name} key: {broken}" if sep != "\n" else f"the {name} key\n{broken}"
            samples.append(Sample(body, True, f"{name} key broken by {label}", broken.split(sep)[-1]))
    return samples


_PEM_KINDS = ["EC PRIVATE KEY", "DSA PRIVATE KEY", "ENCRYPTED PRIVATE KEY", "PRIVATE KEY", "PGP PRIVATE KEY BLOCK"]


def _detector_secrets() -> list[Sample]:
    samples = []
    for kind in _PEM_KINDS:
        material = _tail(64)
        samples.append(
            Sample(f"-----BEGIN {kind}-----\n{material}\n-----END {kind}-----", True, f"PEM {kind}", material)
        )
    for name, key in KEYS.items():
        samples.append(Sample(f"the {name.lower()} credential {key}", True, f"{name} key", key))
    bearers = [_tail(40), _tail(32), f"{_tail(28)}.{_tail(12)}"]
    samples += [
        Sample(f"Authorization: Bearer {bearers[0]}", True, "bearer header", bearers[0]),
        Sample(f"curl -H 'authorization: bearer {bearers[1]}' localhost", True, "bearer in curl", bearers[1]),
        Sample(f"use Bearer {bearers[2]} for the admin API", True, "bearer in prose", bearers[2]),
    ]
    header = "ey" + "JhbGciOiJIUzI1NiJ9"
    for n in range(3):
        token = f"{header}.eyJ{_tail(30)}.{_tail(43)}"
        samples.append(Sample(f"session cookie {n}: {token}", True, "JWT", token))
    assignments = [
        "API_KEY={v}",
        "export GITHUB_TOKEN={v}",
        "SECRET_KEY = '{v}'",
        'db_password: "{v}"',
        "PASSWORD={v}",
        '"access_token": "{v}"',
        "client_secret={v}",
        "AUTH_TOKEN: {v}",
        "docker run -e MYSQL_PASSWORD={v} mysql",
        "aws_secret_access_key = {v}",
        'token = "{v}"',
        "SLACK_SIGNING_SECRET={v}",
        "private_key: {v}",
        "set -x REDIS_PASSWORD {v}",
        "ENCRYPTION_KEY={v}",
        "jwt_secret: '{v}'",
    ]
    for template in assignments:
        value = _tail(24)
        samples.append(Sample(template.format(v=value), True, "assignment", value))
    return samples


_PASSPHRASES = [
    "my password is purple elephant dancing slowly",
    "the wifi password is orange river quiet mountain",
    "My master password is velvet thunder ocean candle",
    "laptop password is seven lazy frogs jumping",
    "my vault passphrase is maple tiger window cloud",
    "The passphrase is ancient copper whistle garden",
]


_PASSPHRASE_GAPS = {"laptop password is seven lazy frogs jumping"}  # starts with a number: read as a quantity


def _passphrases() -> list[Sample]:
    return [
        Sample(body, True, "unquoted word passphrase", " ".join(body.split()[-2:]), known_gap=body in _PASSPHRASE_GAPS)
        for body in _PASSPHRASES
    ]


SECRETS_WORLD: list[Sample] = _language_secrets() + _broken_keys() + _detector_secrets() + _passphrases()

_KEPT_LANGUAGE = [
    "my password is saved in Bitwarden",
    "I reset my PIN at the branch yesterday",
    "我的密码保存在密码管理器里",
    "密码必须至少12位",
    "मेरा पासवर्ड 1Password में है",
    "पासवर्ड कम से कम 12 अक्षर का होना चाहिए",
    "mi contraseña está guardada en Bitwarden",
    "olvidé mi PIN otra vez",
    "mon mot de passe est dans le coffre-fort",
    "j'ai oublié mon code PIN",
    "كلمة المرور محفوظة في مدير كلمات المرور",
    "يجب أن تكون كلمة المرور طويلة",
    "আমার পাসওয়ার্ড 1Password এ আছে",
    "minha senha está no cofre",
    "esqueci o meu PIN",
    "мой пароль хранится в Bitwarden",
    "пароль должен быть длинным",
    "میرا پاس ورڈ 1Password میں ہے",
    "kata sandi saya ada di 1Password",
    "kata sandi harus panjang",
    "mein Kennwort liegt im Passwortmanager",
    "PIN vergessen, bitte zurücksetzen",
    "パスワードは1Passwordに保存してあります",
    "暗証番号を忘れました",
    "माझा पासवर्ड 1Password मध्ये आहे",
    "నా పాస్‌వర్డ్ 1Password లో ఉంది",
    "şifrem 1Password içinde",
    "şifre en az 12 karakter olmalı",
    "என் கடவுச்சொல் 1Password இல் உள்ளது",
    "mật khẩu của tôi nằm trong 1Password",
    "tôi quên mã PIN",
    "내 비밀번호는 1Password에 있어요",
    "비밀번호는 12자 이상이어야 합니다",
    "la mia password è nel portachiavi",
    "ho dimenticato il PIN",
    "رمز عبور من در 1Password است",
    "moje hasło jest w menedżerze haseł",
    "hasło musi mieć 12 znaków",
    "รหัสผ่านของฉันอยู่ใน 1Password",
    "nenosiri langu liko kwenye 1Password",
    "mijn pincode staat in de kluis",
    "мій пароль у менеджері паролів",
    "my passcode is written down at home",
]
_KEPT_PINS_AND_VERSIONS = [
    "pin react to 18.2.0 in package.json",
    "pinned requests==2.31.0 in requirements.txt",
    "pin the Terraform provider at ~> 5.0",
    "we pin numpy>=1.26,<2 for now",
    "pin express@4.19.2 until the audit passes",
    "pin go to 1.22.3 in the Dockerfile",
    "pin postgres:16.2-alpine in compose",
    'pinned serde = "1.0.197" in Cargo.toml',
    "pin rails 7.1.3 in the Gemfile",
    "go get github.com/spf13/cobra@v1.8.0",
    "pin actions/checkout@v4 in CI",
    "PIN the Slack channel to the sidebar",
    "pin the docs tab in the browser",
    "pin @types/node@20.11.30 as a dev dependency",
    "pin ruff==0.4.1 in pre-commit",
    "pin python 3.11.7 with pyenv",
    "pin node 20.12.2 via .nvmrc",
    "pin kubectl 1.29.3 on the runners",
    "pin webpack@5.91.0 and babel-loader@9.1.3",
    "pin image nginx@sha256:" + "0123456789abcdef" * 4,
]
_KEPT_IDS = [
    "order #A-2024-118734 arrives Thursday",
    "invoice INV-00731-2024 is overdue",
    "order number 4417-2290-1187",
    "tracking number 1Z999AA10123456784",
    "ticket JIRA-4821 blocks the release",
    "booking reference QX7P2M",
    "my customer number is 30018822",
    "case id 5003k00000ABCdEAAX at support",
    "PO 4500098123 for the laptops",
    "the Amazon order 112-4417229-9981123 was refunded",
    "flight UA 930 seat 32C",
    "my phone is +44 20 7946 0958",
    "commit a1b2c3d fixed the login bug",
    "revert 3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f",
    "cherry-pick 9f8e7d6 onto release",
    "git tag v2.4.0 points at 7c1d2e3f4a5b",
    "the run id is 6d7e8f90-1a2b-4c3d-8e9f-0a1b2c3d4e5f",
    "tenant 3f2504e0-4f89-11d3-9a0c-0305e82c3301 is the staging one",
    "ULID 01HV6Z8Q3K9M2N4P5R7S8T0V1W",
    "sha256 digest e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 of the empty file",
    "Notion page https://www.notion.so/Team-Wiki-8e1f0c3a9b2d4e5f8a7b6c5d4e3f2a1b",
    "trace 4bf92f3577b34da6a3ce929d0e0e4736 in Honeycomb",
    "the MAC is 00:1A:2B:3C:4D:5E",
    "IBAN format is DE + 20 digits",
]
_KEPT_MENTIONS = [
    "the model's context is 200k tokens",
    "max_tokens is 4096 for summaries",
    "Secret Santa draw is on Friday",
    "key lime pie for dessert",
    "rotate API keys every 90 days",
    "the PIN pad at the door is broken",
    "the passcode reset flow sends an SMS",
    "bearer of bad news: the demo is cancelled",
    "JWTs expire after 15 minutes",
    "-----BEGIN CERTIFICATE----- blocks are public",
    "the deploy key is read-only",
    "AWS region is us-east-1",
    "alerts go to #ops-alerts in Slack",
    "the repo is octocat/hello-world on GitHub",
    "secret_sauce_recipe is a variable name",
    "sk-learn is shorthand I use for scikit-learn",
    "keys starting with sk-ant- belong to Anthropic",
    "AKIA prefixes mark AWS key ids",
    "ghp_ tokens are classic GitHub PATs",
    "ntn_ is the newer Notion token prefix",
    "the token field is optional",
    "password: see 1Password entry 'router'",
    "PASSWORD=${DB_PASSWORD}",
    'api_key: "{{ vault_api_key }}"',
    "GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }}",
    "secretName: db-credentials",
    "token = os.environ['API_TOKEN']",
    "my password manager is KeePassXC",
    "the key is to sleep early",
    "turn the key twice to lock",
    "my PIN is four digits long",
    "my password is case sensitive",
    "the wifi name is CoffeeHouse-5G",
    "my username is alice_w-1990",
    "keyboard layout is UK",
    "The password is the one on the router sticker",
    "my password was changed last week",
    "passwords must not be reused",
]

LOOKALIKES_WORLD: list[Sample] = [
    Sample(body, False, note)
    for group, note in (
        (_KEPT_LANGUAGE, "password mention in another language"),
        (_KEPT_PINS_AND_VERSIONS, "version pin"),
        (_KEPT_IDS, "id, number, SHA or UUID"),
        (_KEPT_MENTIONS, "keyword mention"),
    )
    for body in group
]
