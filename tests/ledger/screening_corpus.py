"""A labelled corpus for body screening: credentials that must be refused and look-alikes that must be kept.

Every key below is fake and obviously so ("Fake", counting digits). The well-known formats are built by
string concatenation at import time so that no literal in this file has the shape a secret scanner
(GitHub push protection included) would flag as live.

``value`` is the sensitive part of a secret sample: the tests check that no error message or detail
ever repeats it. ``known_gap`` marks a sample the screener is known to get wrong (see docs/screening.md);
its test is an expected failure, and it still counts in the precision/recall figures.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass


@dataclass(frozen=True)
class Sample:
    body: str
    is_secret: bool
    note: str
    value: str = ""
    known_gap: bool = False


def _b64url(obj: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()


_ALNUM = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

ANTHROPIC_KEY = "sk-ant-" + "api03-" + ("Fake0Key1Not2Real3" * 5)[:86] + "-Zz9" + "AA"
OPENAI_LEGACY_KEY = "sk-" + "Fake0123456789abcdEF" + "T3Blbk" + "FJ" + "fake0123456789ABCDEF"
OPENAI_PROJECT_KEY = "sk-" + "proj-" + "Fake_Proj0123456789" + "abcdefGHIJKL-mnopqrSTUVwxyz0123456789"
GITHUB_CLASSIC = "ghp" + "_" + ("Fake0Token1" + _ALNUM)[:36]
GITHUB_OAUTH = "gho" + "_" + ("FakeOauth9" + _ALNUM[::-1])[:36]
GITHUB_FINE_GRAINED = "github" + "_pat_" + "11FAKE0000" + "_" + ("fakeFineGrained" + _ALNUM)[:59]
SLACK_BOT = "xox" + "b-" + "123456789012" + "-" + "1234567890123" + "-" + "FakeSlackBotToken0123456"
SLACK_USER = "xox" + "p-" + "123456789012" + "-" + "123456789012" + "-" + "123456789012" + "-" + "fake0123456789abcdef"
SLACK_WEBHOOK = "https://hooks.slack.com/services/" + "T0000FAKE/" + "B0000FAKE/" + "FakeWebhookSecret0123456"
AWS_KEY_ID = "AKIA" + "FAKE0EXAMPLE0KEY"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYFAKE0KEY0VALUE"
GOOGLE_KEY = "AIza" + ("SyFake-Key_" + _ALNUM)[:35]
GITLAB_PAT = "glpat-" + "Fake0GitLab1Token2xyz"
JWT = ".".join(
    [_b64url({"alg": "HS256", "typ": "JWT"}), _b64url({"sub": "fake-user", "iat": 1700000000}), "ZmFrZS1zaWduYXR1cmU"]
)
RSA_BLOCK = (
    "-----BEGIN " + "RSA PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEAfakefakefakefakefakefakefakefakefakefakefakefake\n"
    "-----END " + "RSA PRIVATE KEY-----"
)
OPENSSH_BLOCK = (
    "-----BEGIN " + "OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAAfakefakefakefakefakefakefake\n"
    "-----END " + "OPENSSH PRIVATE KEY-----"
)
STRIPE_LIVE = "sk_" + "live_" + "51Fake" + "0123456789abcdefGHIJ"
STRIPE_RESTRICTED = "rk_" + "live_" + "51Fake" + "ABCDEFGHIJ0123456789"
NPM_TOKEN = "npm_" + ("Fake0Npm1" + _ALNUM)[:36]
PYPI_TOKEN = "pypi-" + "AgEIcHlwaS5vcmc" + "CJFakeFakeFake0123456789" * 3
HF_TOKEN = "hf_" + "FakeHugging0Face1Token2abcdefghij"
SENDGRID_KEY = "SG." + "Fake0SendGrid1Key2abcd" + "." + ("FakeSendGridSecret" + _ALNUM)[:43]
TELEGRAM_TOKEN = "123456789" + ":" + "AAFake0Telegram1Bot2Token3abcdefghi"
MAILCHIMP_KEY = "0123456789abcdef" + "fedcba9876543210" + "-us12"
AZURE_CONN = "DefaultEndpointsProtocol=https;AccountName=fakeacct;AccountKey=" + ("Fake0Azure1" + _ALNUM) * 2

SECRETS: list[Sample] = [
    # Current key formats.
    Sample(f"my Anthropic key: {ANTHROPIC_KEY}", True, "Anthropic API key", ANTHROPIC_KEY),
    Sample(ANTHROPIC_KEY, True, "Anthropic API key alone", ANTHROPIC_KEY),
    Sample(f"OPENAI_API_KEY={OPENAI_LEGACY_KEY}", True, "OpenAI legacy key", OPENAI_LEGACY_KEY),
    Sample(f"use {OPENAI_PROJECT_KEY} for the eval harness", True, "OpenAI project key", OPENAI_PROJECT_KEY),
    Sample(f"GitHub PAT {GITHUB_CLASSIC}", True, "GitHub classic token", GITHUB_CLASSIC),
    Sample(f"oauth token {GITHUB_OAUTH} for the CI app", True, "GitHub OAuth token", GITHUB_OAUTH),
    Sample(f"the fine-grained token is {GITHUB_FINE_GRAINED}", True, "GitHub fine-grained PAT", GITHUB_FINE_GRAINED),
    Sample(f"slack bot: {SLACK_BOT}", True, "Slack bot token", SLACK_BOT),
    Sample(f"{SLACK_USER} is my slack user token", True, "Slack user token", SLACK_USER),
    Sample(f"post alerts to {SLACK_WEBHOOK}", True, "Slack webhook URL", SLACK_WEBHOOK),
    Sample(f"aws access key id {AWS_KEY_ID}", True, "AWS access key id", AWS_KEY_ID),
    Sample(f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}", True, "AWS secret access key assignment", AWS_SECRET),
    Sample(f"maps key {GOOGLE_KEY}", True, "Google API key", GOOGLE_KEY),
    Sample(f"gitlab: {GITLAB_PAT}", True, "GitLab PAT", GITLAB_PAT),
    Sample(f"session JWT {JWT}", True, "JWT", JWT),
    Sample(RSA_BLOCK, True, "RSA private key block", "MIIEowIBAAKCAQEAfakefake"),
    Sample(f"deploy key:\n{OPENSSH_BLOCK}", True, "OpenSSH private key block", "b3BlbnNzaC1rZXktdjEAAAAA"),
    Sample(f"stripe {STRIPE_LIVE}", True, "Stripe live secret key", STRIPE_LIVE),
    Sample(f"restricted stripe key {STRIPE_RESTRICTED} for reports", True, "Stripe restricted key", STRIPE_RESTRICTED),
    Sample(f"//registry.npmjs.org/:_authToken={NPM_TOKEN}", True, "npm token in .npmrc", NPM_TOKEN),
    Sample(f"npm publish token {NPM_TOKEN}", True, "npm token", NPM_TOKEN),
    Sample(f"pypi upload token {PYPI_TOKEN}", True, "PyPI token", PYPI_TOKEN),
    Sample(f"HF_TOKEN {HF_TOKEN}", True, "Hugging Face token", HF_TOKEN),
    Sample(f"sendgrid {SENDGRID_KEY}", True, "SendGrid key", SENDGRID_KEY),
    Sample(f"alerts bot {TELEGRAM_TOKEN}", True, "Telegram bot token (detect-secrets)", TELEGRAM_TOKEN),
    Sample(f"newsletter {MAILCHIMP_KEY}", True, "Mailchimp key (detect-secrets)", MAILCHIMP_KEY),
    Sample(AZURE_CONN, True, "Azure storage connection string", AZURE_CONN[-40:]),
    Sample(
        "curl -H 'Authorization: Bearer " + "Fake0Bearer1Token2abcdefXYZ" + "' https://api.example.com",
        True,
        "bearer token in a header",
        "Fake0Bearer1Token2abcdefXYZ",
    ),
    # Connection strings with a password.
    Sample("postgres://app:" + "S3cr3t-Fake" + "@db.internal:5432/app", True, "PostgreSQL URL", "S3cr3t-Fake"),
    Sample("redis://:" + "fakepass123" + "@cache.internal:6379/0", True, "Redis URL, password only", "fakepass123"),
    Sample("mongo is mongodb+srv://admin:" + "hunter2" + "@cluster0.example.net/test", True, "MongoDB URL", "hunter2"),
    Sample("ftp://deploy:" + "Pa55-w0rd" + "@files.example.com/", True, "FTP URL", "Pa55-w0rd"),
    # Passwords and codes stated in a sentence.
    Sample("my wifi password is hunter2-Blue!", True, "wifi password in a sentence", "hunter2-Blue"),
    Sample("The router admin password is Tr0ub4dor&3", True, "router password", "Tr0ub4dor&3"),
    Sample("my Netflix password is swordfish", True, "plain-word password ending the sentence", "swordfish"),
    Sample("my password for the NAS is nas-Admin-77, don't share it", True, "password with for-phrase", "nas-Admin-77"),
    Sample("my bank PIN is 4821", True, "PIN in a sentence", "4821"),
    Sample("the garage door code is 2468.", True, "door code", "2468"),
    Sample("laptop passphrase is 'purple monkey dishwasher'", True, "quoted passphrase", "purple monkey dishwasher"),
    Sample("wifi password: CoffeeShop2024", True, "password after a colon", "CoffeeShop2024"),
    Sample("my email password's Winter2024!", True, "possessive form", "Winter2024"),
    Sample("the api key for the weather service is a1B2c3D4e5F6g7H8i9J0", True, "API key in prose", "a1B2c3D4e5F6"),
    # Assignments.
    Sample("DB_PASSWORD=Fake-pa55word", True, "env assignment", "Fake-pa55word"),
    Sample('password = "correct-Horse-7"', True, "quoted assignment", "correct-Horse-7"),
    Sample("api_key: a1B2c3D4e5F6g7H8i9J0", True, "YAML api key", "a1B2c3D4e5F6g7H8i9J0"),
    Sample('{"client_secret": "Fake0Secret1Value2"}', True, "JSON client secret", "Fake0Secret1Value2"),
    Sample("dbPassword := hunter22", True, "camelCase := assignment", "hunter22"),
    Sample("pin_code=0000", True, "PIN assignment", "0000"),
    Sample('char password[] = "hunter2";', True, "C array assignment", "hunter2"),
    Sample('contrase\u00f1a = "hola1234"', True, "Spanish keyword (detect-secrets)", "hola1234"),
    Sample("Server=db;User Id=sa;Password=Fake!Passw0rd;", True, "ADO.NET connection string", "Fake!Passw0rd"),
    Sample(
        "webhook https://api.example.com/hook?token=" + "f4k3T0k3nV4lu3xyz9",
        True,
        "token in a query string",
        "f4k3T0k3nV4lu3xyz9",
    ),
    # A passphrase of plain words, and a known gap (documented in docs/screening.md).
    Sample(
        "my password is correct horse battery staple",
        True,
        "unquoted multi-word passphrase",
        "battery staple",
    ),
    Sample("Tr0ub4dor&3 is my email password", True, "value before the keyword", "Tr0ub4dor&3", known_gap=True),
]

LOOKALIKES: list[Sample] = [
    Sample("my dev server runs on port 8080", False, "port"),
    Sample("my GitHub username is octocat", False, "username"),
    Sample("request id 550e8400-e29b-41d4-a716-446655440000 failed on Tuesday", False, "UUID"),
    Sample("we pinned numpy to version 1.26.4", False, "version"),
    Sample("standup is at 09:30 Europe/Berlin", False, "time"),
    Sample("deploy commit 3f2a1bc to staging", False, "short git SHA"),
    Sample("the release was cut from 9fceb02d0ae598e95dc970b74767f19372d61af8", False, "full git SHA"),
    Sample("staging DB is at 10.0.12.7:5432", False, "IP address and port"),
    Sample("docs live at https://docs.example.com/guides/getting-started", False, "URL"),
    Sample("my wifi password is stored in 1Password", False, "password location"),
    Sample("I changed my password yesterday", False, "password mention"),
    Sample("the password policy requires 12 characters", False, "password policy"),
    Sample("my Anthropic key is in 1Password under 'anthropic-prod'", False, "key reference"),
    Sample("my SSH key is ~/.ssh/id_ed25519", False, "key file path"),
    Sample("postgres://app@db.internal:5432/app is the read replica", False, "connection string without password"),
    Sample("DATABASE_URL=postgres://app:${DB_PASSWORD}@db.internal:5432/app", False, "placeholder password"),
    Sample("the API key is read from the OPENAI_API_KEY environment variable", False, "env var reference"),
    Sample("my api key is OPENAI_API_KEY in .env", False, "env var name as the value"),
    Sample("password reset links expire after 30 minutes", False, "password reset"),
    Sample("use a password manager; I prefer Bitwarden", False, "password manager"),
    Sample("the key insight is that caching beats batching", False, "key as an adjective"),
    Sample("the token expires after 3600 seconds", False, "token lifetime"),
    Sample("the secret to good sourdough is patience", False, "secret as a noun"),
    Sample(
        "my public SSH key is ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakePublicKeyMaterial0123456789 alice@laptop",
        False,
        "public key",
    ),
    Sample("the Stripe publishable key is pk_live_51FakePublishable0123456789", False, "publishable key"),
    Sample("my zip code is 94110", False, "zip code"),
    Sample("I prefer metric units", False, "plain preference"),
    Sample("my deploy region is eu-west-1", False, "region"),
    Sample("AWS account ID is 123456789012", False, "AWS account id"),
    Sample("reports go to s3://acme-reports-prod/2024/", False, "bucket URL"),
    Sample("the sort key is created_at", False, "sort key"),
    Sample("password: required", False, "form field note"),
    Sample("I forgot my PIN again, need to reset it at the bank", False, "PIN mention"),
    Sample("press the key combination Ctrl+Shift+P to open the palette", False, "key combination"),
    Sample("Flight LH123 departs at 14:05 on 2025-03-14", False, "flight, time and date"),
    Sample("my email is alice@example.com", False, "e-mail address"),
    Sample("the auth service runs on auth.internal:8443", False, "auth host"),
    Sample("JWT access tokens are signed with RS256 and expire in 15 minutes", False, "JWT mention"),
    Sample("-----BEGIN CERTIFICATE----- starts every PEM file in our CA bundle", False, "certificate header"),
    Sample("the license key is printed on the box", False, "license key location"),
    Sample("the 2FA backup codes are in the safe", False, "backup codes location"),
    Sample("session token TTL is 24h", False, "token TTL"),
    Sample("the image is ghcr.io/acme/api:1.4.2", False, "container image"),
    Sample("my project lives in /home/alice/projects/memledger", False, "file path"),
    Sample("the Jira ticket is PROJ-1234", False, "ticket id"),
    Sample("tarball digest sha256:e3b0c44298fc1c149afbfc8996fb92427ae41e4649b934ca495991b7852b855", False, "digest"),
    Sample("the password is long and random", False, "password description"),
    Sample("My password is the same as my old one", False, "password prose"),
    Sample("the API key for the weather service is in Vault at secret/data/weather", False, "vault reference"),
    Sample("my laptop PIN is kept in the company vault", False, "PIN location"),
    Sample("password length must be at least 16", False, "password length"),
    Sample("the token bucket allows 100 requests per second", False, "token bucket"),
    Sample('our secretary: "Jane Doe" books the travel', False, "secretary (not secret)"),
    Sample("my password is secure and I rotate it yearly", False, "password adjective"),
]


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _hex(text: str) -> str:
    return text.encode().hex()


# What the first corpus missed (passwords in other languages, invisible and look-alike
# characters, base64/hex-wrapped keys) and the look-alikes those fixes must keep.
ZW_ANTHROPIC = ANTHROPIC_KEY[:10] + "\u200b" + ANTHROPIC_KEY[10:]
ZWNJ_GITHUB = GITHUB_CLASSIC[:6] + "\u200c" + GITHUB_CLASSIC[6:]
WJ_STRIPE = STRIPE_LIVE[:8] + "\u2060" + STRIPE_LIVE[8:]
SHY_AWS = AWS_KEY_ID[:4] + "\u00ad" + AWS_KEY_ID[4:]
BOM_NPM = NPM_TOKEN[:4] + "\ufeff" + NPM_TOKEN[4:]
B64_ANTHROPIC = _b64(ANTHROPIC_KEY)
B64_ASSIGNMENT = _b64("DB_PASSWORD=Fake-pa55word")
HEX_GITHUB = _hex(GITHUB_CLASSIC)
B64URL_SLACK = base64.urlsafe_b64encode(SLACK_BOT.encode()).decode().rstrip("=")

SECRETS_V2: list[Sample] = [
    Sample("mein Passwort ist Sonnenblume42", True, "de: password in a sentence", "Sonnenblume42"),
    Sample("Das WLAN-Passwort lautet Kaffee-2024!", True, "de: wifi password, lautet", "Kaffee-2024"),
    Sample("Passwort: Zugspitze!2962", True, "de: password after a colon", "Zugspitze!2962"),
    Sample("mon mot de passe est Soleil#2024", True, "fr: password in a sentence", "Soleil#2024"),
    Sample("le mot de passe du wifi : Baguette99", True, "fr: wifi password, spaced colon", "Baguette99"),
    Sample("mi contraseña es Girasol-77", True, "es: password in a sentence", "Girasol-77"),
    Sample("la clave del wifi es CasaAzul2023", True, "es: wifi clave", "CasaAzul2023"),
    Sample("a minha senha é Abacaxi#55", True, "pt: password in a sentence", "Abacaxi#55"),
    Sample("la mia password è Pizza2024!", True, "it: password in a sentence", "Pizza2024"),
    Sample("mijn wachtwoord is Tulpen123", True, "nl: password in a sentence", "Tulpen123"),
    Sample("мой пароль qwerty123", True, "ru: password without a connector", "qwerty123"),
    Sample("мой пароль: котик2024", True, "ru: password after a colon", "котик2024"),
    Sample("我的密码是abc123xyz", True, "zh: password in a sentence", "abc123xyz"),
    Sample("wifi密码：Dragon2024", True, "zh: full-width colon", "Dragon2024"),
    Sample("私のパスワードは hunter2-Blue です", True, "ja: password in a sentence", "hunter2-Blue"),
    Sample("パスワード：Sakura2024", True, "ja: full-width colon", "Sakura2024"),
    Sample(f"my Anthropic key {ZW_ANTHROPIC}", True, "zero-width space inside a key", ANTHROPIC_KEY[10:]),
    Sample(f"CI token {ZWNJ_GITHUB}", True, "zero-width non-joiner inside a token", GITHUB_CLASSIC[6:]),
    Sample(f"billing {WJ_STRIPE}", True, "word joiner inside a key", STRIPE_LIVE[8:]),
    Sample(f"aws id {SHY_AWS}", True, "soft hyphen inside a key id", AWS_KEY_ID[4:]),
    Sample(f"publish with {BOM_NPM}", True, "BOM inside a token", NPM_TOKEN[4:]),
    Sample("my p\u0430ssword is Tr0ub4dor&3", True, "Cyrillic a inside 'password'", "Tr0ub4dor&3"),
    Sample("api t\u03bfken: a1B2c3D4e5F6g7H8i9J0", True, "Greek omicron inside 'token'", "a1B2c3D4e5F6g7H8i9J0"),
    Sample("\uff50\uff41\uff53\uff53\uff57\uff4f\uff52\uff44: Hunter2Blue", True, "full-width keyword", "Hunter2Blue"),
    Sample(f"the key, base64: {B64_ANTHROPIC}", True, "base64-wrapped key", B64_ANTHROPIC),
    Sample(f"env blob {B64_ASSIGNMENT}", True, "base64-wrapped assignment", B64_ASSIGNMENT),
    Sample(f"token as hex {HEX_GITHUB}", True, "hex-wrapped token", HEX_GITHUB),
    Sample(f"bot credential (urlsafe) {B64URL_SLACK}", True, "urlsafe base64 token", B64URL_SLACK),
]

LOOKALIKES_V2: list[Sample] = [
    Sample("mein Passwort ist in 1Password", False, "de: password location"),
    Sample("mein Passwort ist sicher", False, "de: password adjective"),
    Sample("das Passwort ist im Tresor gespeichert", False, "de: stored in the safe"),
    Sample("Passwort vergessen? Klicke auf den Link", False, "de: forgot password"),
    Sample("mon mot de passe est dans 1Password", False, "fr: password location"),
    Sample("mon mot de passe est long et compliqué", False, "fr: password description"),
    Sample("mi contraseña está en 1Password", False, "es: password location"),
    Sample("la contraseña es segura", False, "es: password adjective"),
    Sample("la clave del éxito es la paciencia", False, "es: clave as 'key to success'"),
    Sample("a minha senha está no 1Password", False, "pt: password location"),
    Sample("a senha é forte", False, "pt: password adjective"),
    Sample("la mia password è in 1Password", False, "it: password location"),
    Sample("mijn wachtwoord staat in 1Password", False, "nl: password location"),
    Sample("мой пароль в 1Password", False, "ru: password location"),
    Sample("мой пароль хранится в менеджере паролей", False, "ru: kept in a password manager"),
    Sample("我的密码在1Password里", False, "zh: password location"),
    Sample("密码长度至少12位", False, "zh: password length"),
    Sample("私のパスワードは1Passwordにあります", False, "ja: password location"),
    Sample("パスワードの長さは12文字以上", False, "ja: password length"),
    Sample("Привет, я живу в Москве", False, "Russian prose"),
    Sample("Καλημέρα, το όνομά μου είναι Νίκος", False, "Greek prose (not folded)"),
    Sample("\U0001f468\u200d\U0001f469\u200d\U0001f467 family trip in June", False, "emoji with zero-width joiners"),
    Sample(f"attachment text {_b64('I prefer metric units and short answers')}", False, "base64 of ordinary text"),
    Sample(f"the build label is {_hex('Monday, Thursday and Friday')}", False, "hex of ordinary text"),
    Sample("favicon data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAABAAAAAQCAYAAAAf8/9h", False, "base64 image"),
    Sample("\uff34\uff4f\uff4b\uff59\uff4f trip in \uff2d\uff41\uff59", False, "full-width prose"),
]

SECRETS += SECRETS_V2
LOOKALIKES += LOOKALIKES_V2
CORPUS: list[Sample] = SECRETS + LOOKALIKES
