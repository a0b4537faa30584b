"""The held-out screening corpus: credentials that must be refused and risky-looking texts that must be kept.

Written in one go, before any screening rule was changed for it, and never tuned on: a rule is changed
only against the tuning corpora (tests/ledger/screening_corpus*.py); this set only measures. Its numbers
are in docs/screening.md.

Every key, token and password here is fake: the random material was generated once (Python's
``secrets``) and pasted in as literals; it was never issued by any service. The well-known key prefixes
are joined by concatenation so that no literal has the exact shape a push-protection scanner flags.

Each sample has a category and a language (ISO 639-1; "code" for shell, config and source code).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Held:
    body: str
    is_secret: bool
    category: str
    lang: str
    value: str = ""  # the sensitive part of a secret: no refusal may repeat it


# --------------------------------------------------------------------------- random material (fake)
_ANTHROPIC = (
    "sk-"
    + "ant-api03-"
    + "GmLbp9U3zmFzeIftOG4Jpe24oTcRm3X41s1_KZ0WZP48Y5tYEM4FF5-z3e3tK0zWLr1fgT3ekYnA4Dq-symzQF2UPtSHw"
)
_OPENAI = "sk-" + "proj-" + "7kLjS53AiIinnGWTBNMw6VGgzr24Re6UIdSPfqpTruNakHx4"
_GHP = "gh" + "p_" + "7BNUedJzDYjDaZX7ztxnwvYRxlpI1IPJHZi9"
_GH_PAT = "github" + "_pat_" + "AabTMQegmdL10LjgBKfHrt_m3NbkAyxI0ifY1yVuarAW6vJM0hJBRiT1RV1343JNKQCMkU9t84GjQKBS7G"
_SLACK = "xo" + "xb-" + "88708872677-7645200645941-akxrr2Y34bw04gS7vR2Fiu8G"
_STRIPE = "sk" + "_live_" + "AmdXGmKsTMYGDDvd0jaBehbRK3MUkzkkNTTYouPgRHIpgamNDL0K6Q9YZHNrBIjO"
_SENDGRID = "S" + "G." + "3oRwZiHPCBBKgMAHQ2Mhyq.PJE6fG4mVcBYmO6Aql8fNT5lJ9C8_XKUtgWRClLRVAU"
_HF = "h" + "f_" + "KWZZXQLRma9lpUEWuHYvlUQSzg1kCVOW7A"
_GLPAT = "gl" + "pat-" + "AZ9rsRUwGL6oPpOnPx01"
_PYPI = (
    "py" + "pi-" + "AgEIcHlwaS5vcmc" + "TdMCLJF9_n0YPzMQiW9HRBhA5va8P59Ax34baxZjQenpcolAk_TttBmCpVzpiED1fJ3TpIA7md4B"
)
_NPM = "np" + "m_" + "5IBYBKFLqFU0ukrqDCL87sw0AuAYS4jFy46D"
_AWS_ID = "AK" + "IA" + "Q3ZK7WB2NVHXLR4M"
_AWS_SECRET = "rlmFP5cF4vrs54xHf1SEyBN+6zeZNCvHOH99NS24"
_SHOPIFY = "shp" + "at_" + "4a8beaf23d1c34a023b3faa4b1e76865"

_SAS_SIG = "IxDoWXSnRwy%2BtLVLb6zfWFEUXZnMfbAD96dKRndlp9k%3D"
_DISCORD_HOOK = (
    "https://discord.com/api/" + "webhooks/1240131241098772531/"
    "6AXxGEGc5o1wOE9-Eb-JhOtB1prHANo-1gquR66Ra1J9SAf9t5AqL-PKzPtMl4oYPIWb"
)
_DISCORD_BOT = "MTQ1NDk5NzkxODI0ODI3NzA1Mg" + ".lIF83P." + "MC40nKXj86gliYnK61dRzCtPaHN7TOCsvYnIlR"
_BRAINTREE = "access_token" + "$production$" + "u7xj2xp9ha5ycsb1$c481a6265497a1216c06fb1751cb3fe5"
_AIRTABLE_PAT = "pat" + "3K9UVokqQJo1Tq.ac2ccb2f488686243056c3dac70dc0661b55bd67509b9424e7cc94dd6407c287"
_AIRTABLE_KEY = "key" + "er6UjNvaqfx2jJ"
_TWILIO_SID = "A" + "C155acf93316491d0644eb61c8b920d1c"
_TWILIO_TOKEN = "1707d69a21adf29177a65c5f308133af"
_MAILGUN = "key-" + "09cd480354d8bfb9b3eb4daccf457b82"
_DATADOG = "ec3d852901ec9cf6d2576e598b7acfd2"
_DATADOG_APP = "a64b48b612b35e89574cf5897df551d02e23ec2e"
_HEROKU = "2c8bd954-5953-4883-afb5-25720b6f0364"
_CLOUDFLARE = "z8QGfgQBDcu6Ak8g578fn5E_09bQLV6U7q2e0c9x"
_VAULT = "hv" + "s." + "XtiDSjaqU6GLsKU1G7JUCT9VDQFqFMomPc0ECwqMprVGUYXPc3DcPCne9mTJt9zjCnpnL0LGz9EvZGdctHbNvazg3n1"
_DATABRICKS = "da" + "pi" + "ff9b905c9ae25dbebdb6157d33910888"
_TAILSCALE = "tskey-" + "auth-" + "zn9JEqww1Jo7CNTRL-A9nBX8GJSa2O8zldZMhOwV0CAdVGiQQ1d"
_LINEAR = "lin_" + "api_" + "frLt2y7Mu20qpAOCo12RtdxNWpuUpvaWdyoLeb6M"
_POSTMAN = "PM" + "AK-" + "2205e538f203b9dba16bfcaa-66f8748aba4be20111c5329228a7e19c87"
_DOPPLER = "dp." + "st.prd." + "1xt4f5vI547kMnzYI8tFFDlByZDbhybYGNO0AJu2"
_ATLASSIAN = (
    "ATATT"
    + "3xFfGF0"
    + "djUZbZYaeCc1Y1PtWGBRYz_BEgybhbhJp6tAchz_LXEQ7TOXjO--_Mo22HWZ3P3ZP6Vym3WwV9C93qInQcjTnPkvcxY5Pyq7MMz"
    + "OHPLP8gP4w2IFvhl-riEfmxy9x1xvp9paxo1=FDA01211"
)
_FIGMA = "fig" + "d_" + "8AtMlnvRex_rppECqJ3wtQa-wiHAaowsTfKiZ3gn"
_GRAFANA = "gl" + "sa_" + "qMpADuFAYDg0GdJzBYIbEYutWiPdLNf9_bda89a28"
_AGE = "AGE-SECRET" + "-KEY-1" + "SNMU58H09PX67LLUERPV3TYS9CN5EHZE02PHCD3KRA5G2YGU90E3V7H5WK"
_GROQ = "gs" + "k_" + "ZojJIqp18iPJFu4tbGYg2b7XSpFBnLmiviQWhtVcE8ASkSUXJiBJ"
_OPENROUTER = "sk-" + "or-v1-" + "8edde4466b53cba3b3a8902fad4e82a5795495cccc5ee5b901d7f70cf8e2d6ff"
_REPLICATE = "r8" + "_" + "dk5DR5skwGeuQkBTL8cIjtvKXOHN36lZKsFbh"
_PERPLEXITY = "pplx" + "-" + "7uvdNl2hqhZCE4jvuJ1v3EvPuonu9mCZmQCwsFhMeYIU3mUC"
_AZURE_SECRET = "Q6p" + "8Q~" + "5LbrFIiAUZ2ZeSVzFVgv2X3.SiADQ7_LmX"
_FCM = (
    "AAAA"
    + "vd3Vg8I:APA91b"
    + "l1v2pLKU8ZWZ-GmFaZoxIqhq8DlRZzDHXxZB9fTXUhqDfOHCvdpGDfHWP6aoyyXij0lMlCXt8RDXRVP5J88H-0a8eovbQgYarY4B5"
    + "05PFi7iQI4bPhZsFzF7cw6nfP4oXbWTIU"
)
_SQUARE_ATP = "sq0" + "atp-" + "QEwXjdlzefQKxG49ZdIToy"
_SQUARE_CSP = "sq0" + "csp-" + "pDMVHxl-CFGgV9gb9LxbociiDrYG6qBWIy0YgUdsJiL"
_MAPBOX = "s" + "k.eyJ1IjoibWFyaWEtayIsImEiOiJ6WEkzcmlOSUpIVGM1YjNBN1JmSCJ9.DCfLH6Yp5edqg2Q1Ud0qxg"
_WG_PRIVATE = "Van9gnj7x2NwnFpO6USYRmI+Y1PdlDckGX4t5PJqO9g="
_WG_PUBLIC = "2VYKOymwAyNA/iW/zfh0wB9lYnP85mlRFaB7qKN3+zU="
_TOTP = "2TS6ZJMWHDFJGB336HHNKEWVINEQRRNF"
_TOTP_GROUPED = "BEU6 D74V I6T2 Y3CW"
_DJANGO = "django-insecure-" + "gv0#qz5l!#jmj)9(1ccmk&ie#(^3#q(3dxuq$pri!d^%_qhhvz"
_RAILS = (
    "fd8502f6ff79f95b64cfa415c941543e1e098d3b7c0b4a07858e23a7b96e3137"
    "09a1e1fa6a3be31888f600654d4b7ab791f9f43bb9e4d38e39ff276eb91cbe9f"
)
_FERNET = "28eCK-9cr4k8VwTT7J5sZUScTxEQWGX37ymQ4AHheCo="
_OKTA = "00" + "bU8ucGCqm6Pq_mqZpEBL3DTz904vWXLXzMt5pfsA"
_DROPBOX = (
    "s" + "l." + "rIf3tAsFRAtTAZ0g8rFqNNIhyUjHsBAdMv27BSGHSqh3K66hsZ8iMJ8odaBiu-N_BLg_rs7fHOD-mLtLZGXFjepYx8SUU"
    "cXi2suBQVbJrKok_fsc3oMl4p9df3F_8WJO5DO5Ivw"
)
_GCP_KEY_ID = "94b1f55a5916b1d7702041a3eefb5886340e5cb6"
_GENERIC_40 = "iqgN2GLn06Cdq4d8VlTdfmoQipiGj5PAYBpZx7DN"
_GENERIC_32 = "lEEq66IQjnMev7rrRxTJ6fF3QKWRzp56"
_GENERIC_B64 = "L6DUA8H5+mtiii3p6hnsP63tpBC85G2D1DRxLCIyAYHhKIIu"
_SENTRY_TOKEN = "af12bc059f94f75b63ca174c10f3634a4d1f02a301524cb1167c6f44857b6073"
_ETH_KEY = "63a7d4e7393469b6f6a826eea4002b6c43f79561912d783b19d5508150a95cfb"
_ETH_KEY_2 = "b4a05119ad4c44929e629808916fee87aa583427c98a61c515506ac89a641424"
_BTC_WIF = "5urpRQCFAQU69Hsya7gcvdomLDmZHFxQrc15Gd28YJCV7XpgsNP"
_SEED_12 = "orbit valley lemon tragic husband snow pulse fringe ladder copper motion gentle"
_SEED_24 = (
    "exile glimpse tonight acoustic brave fever harbor ocean pilot ribbon sudden taxi "
    "unfold vessel wisdom young zebra crater dolphin enrich garlic humble kiwi meadow"
)
_GOOGLE_APP_PW = "wbzy gfjz zopw ymtm"

# Public look-alikes (hashes, ids, public keys): random too, and harmless by nature.
_ETH_TX = "0x" + "3b84c5a48d5dcc8d2e2e31f9a1eb126b3cbf2050d14b47eef2fd40074de1a96d"
_ETH_ADDRESS = "0x" + "dd449e41a6c83fea21f5c839eeddec30d733c09f"
_SHA256 = "25ae0df3fe49f533c8da1253a6bba636f7d9a68705fe308a181bc5585cbb8513"
_MD5 = "216dc7655ad9ba3d8de47dd18f1ec3b4"
_SHA1 = "99c7cdb51503c51fe092cbb4c0870e63ee70e1c0"
_DOCKER_ID = "d81977a8d21dda0de1a9d5876edfe7edaba3d590d501365cde2c31af42d4a23f"
_ORDER_UUID = "3f1bd986-a1de-4f6e-83e5-dee7a2f01a84"
_BTC_TX = "05978b4d54670932225da78e82a725620c7290f3849ba2eb2dc50fb4181a5cd9"
_SSH_PUBLIC = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIM3kqZf0Zt6W1uJ9b8S7vPpYQw2xR4nLh5oT0aCyE1dG"

# --------------------------------------------------------------------------- secrets

# Keys in formats the screener documents as known.
_KNOWN_FORMATS = [
    ("en", f"claude key for the hackathon: {_ANTHROPIC}", _ANTHROPIC),
    ("en", f"{_OPENAI} (eval runner, personal billing)", _OPENAI),
    ("en", f"git clone https://maria:{_GHP}@github.com/acme/billing.git", _GHP),
    ("en", f"fine-grained PAT for the release bot {_GH_PAT}", _GH_PAT),
    ("en", f"slack bot for #deploys -> {_SLACK}", _SLACK),
    ("en", f"stripe prod {_STRIPE}", _STRIPE),
    ("en", f"sendgrid for the newsletter: {_SENDGRID}", _SENDGRID),
    ("en", f"HF read token {_HF}", _HF),
    ("code", f"git remote set-url origin https://oauth2:{_GLPAT}@gitlab.com/acme/infra.git", _GLPAT),
    ("code", f"[pypi]\n  username = __token__\n  password = {_PYPI}", _PYPI),
    ("code", f"//registry.npmjs.org/:_authToken={_NPM}", _NPM),
    ("en", f"backup bot: {_AWS_ID} / {_AWS_SECRET}", _AWS_SECRET),
    ("en", f"shopify admin token {_SHOPIFY} for the store sync", _SHOPIFY),
    ("de", f"Der OpenAI-Schlüssel fürs Team: {_OPENAI}", _OPENAI),
    ("ja", f"AnthropicのAPIキー {_ANTHROPIC}", _ANTHROPIC),
]

# Keys in formats the screener does not know by name: random material with or without a keyword.
_OTHER_FORMATS = [
    (
        "en",
        "read-only link to the backup: https://acmebackups.blob.core.windows.net/db/nightly.bak?sv=2022-11-02"
        f"&ss=b&srt=o&sp=r&se=2026-03-01T00:00:00Z&spr=https&sig={_SAS_SIG}",
        _SAS_SIG,
    ),
    ("en", f"alerts webhook {_DISCORD_HOOK}", _DISCORD_HOOK),
    ("en", f"discord bot token {_DISCORD_BOT}", _DISCORD_BOT),
    ("en", f"braintree prod: {_BRAINTREE}", _BRAINTREE),
    ("en", f"airtable PAT for the CRM base {_AIRTABLE_PAT}", _AIRTABLE_PAT),
    ("en", f"old airtable api key {_AIRTABLE_KEY}", _AIRTABLE_KEY),
    ("en", f"twilio account {_TWILIO_SID} auth token {_TWILIO_TOKEN}", _TWILIO_TOKEN),
    ("en", f"mailgun sending key {_MAILGUN}", _MAILGUN),
    ("en", f"datadog api key {_DATADOG}, app key {_DATADOG_APP}", _DATADOG),
    ("code", f"heroku config:set HEROKU_API_KEY={_HEROKU}", _HEROKU),
    ("en", f"cloudflare dns edit token: {_CLOUDFLARE}", _CLOUDFLARE),
    ("code", f"vault login {_VAULT}", _VAULT),
    ("en", f"databricks workspace token {_DATABRICKS}", _DATABRICKS),
    ("en", f"tailscale auth key for the new nodes {_TAILSCALE}", _TAILSCALE),
    ("en", f"{_LINEAR} is the Linear key for the triage script", _LINEAR),
    ("en", f"postman {_POSTMAN}", _POSTMAN),
    ("code", f"doppler configure set token {_DOPPLER}", _DOPPLER),
    ("en", f"jira api token: {_ATLASSIAN}", _ATLASSIAN),
    ("en", f"figma personal access token {_FIGMA}", _FIGMA),
    ("en", f"grafana service account {_GRAFANA}", _GRAFANA),
    ("en", f"age identity for the sops files: {_AGE}", _AGE),
    ("en", f"groq {_GROQ}", _GROQ),
    ("en", f"openrouter key {_OPENROUTER} (limit $20)", _OPENROUTER),
    ("code", f"REPLICATE_API_TOKEN {_REPLICATE}", _REPLICATE),
    ("en", f"perplexity: {_PERPLEXITY}", _PERPLEXITY),
    ("en", f"Azure app registration client secret {_AZURE_SECRET} expires in June", _AZURE_SECRET),
    ("en", f"FCM legacy server key {_FCM}", _FCM),
    ("en", f"square sandbox access token {_SQUARE_ATP}", _SQUARE_ATP),
    ("en", f"square oauth secret {_SQUARE_CSP}", _SQUARE_CSP),
    ("en", f"mapbox secret token {_MAPBOX}", _MAPBOX),
    ("code", f"[Interface]\nPrivateKey = {_WG_PRIVATE}\nAddress = 10.8.0.2/24", _WG_PRIVATE),
    ("code", f"otpauth://totp/ACME:maria?secret={_TOTP}&issuer=ACME", _TOTP),
    ("en", f"GitHub 2FA setup key {_TOTP_GROUPED}", _TOTP_GROUPED),
    ("code", f"SECRET_KEY = '{_DJANGO}'", _DJANGO),
    ("en", f"secret_key_base for prod: {_RAILS}", _RAILS),
    ("en", f"fernet key for the backup encryption {_FERNET}", _FERNET),
    ("code", f"Authorization: SSWS {_OKTA}", _OKTA),
    ("en", f"dropbox short-lived token {_DROPBOX}", _DROPBOX),
    ("code", f'"private_key_id": "{_GCP_KEY_ID}",', _GCP_KEY_ID),
    ("en", f"the staging API wants {_GENERIC_40} in the X-Api-Key header", _GENERIC_40),
    ("en", f"paste {_GENERIC_32} into the plugin settings to activate it", _GENERIC_32),
    ("en", f"HMAC signing secret for webhooks: {_GENERIC_B64}", _GENERIC_B64),
    ("code", f"SENTRY_AUTH_TOKEN {_SENTRY_TOKEN}", _SENTRY_TOKEN),
    ("fr", f"clé API de Mailgun : {_MAILGUN}", _MAILGUN),
    ("es", f"token de Cloudflare para el DNS: {_CLOUDFLARE}", _CLOUDFLARE),
    ("pt", f"chave da API do Datadog {_DATADOG}", _DATADOG),
]

# Crypto-wallet secrets: private keys, WIF, seed phrases.
_WALLETS = [
    ("en", f"eth wallet private key 0x{_ETH_KEY}", _ETH_KEY),
    ("en", f"metamask export for the test wallet: {_ETH_KEY_2}", _ETH_KEY_2),
    ("en", f"paper wallet WIF {_BTC_WIF}", _BTC_WIF),
    ("en", f"seed phrase: {_SEED_12}", _SEED_12),
    ("en", f"recovery phrase for the Ledger: {_SEED_24}", _SEED_24),
    ("en", f"my 12 words are {_SEED_12}", _SEED_12),
    ("de", f"Wiederherstellungsphrase: {_SEED_12}", _SEED_12),
]

# Credentials inside commands, connection strings and config files.
_COMMANDS = [
    ("code", "curl -u deploy:Hx7$kq29Lm https://ci.internal/api/builds", "Hx7$kq29Lm"),
    ("code", "curl --user admin:Pelican55 http://192.168.1.1/cgi-bin/reboot", "Pelican55"),
    ("code", "mysql -u root -pTurtle2020! shop_db < dump.sql", "Turtle2020!"),
    ("code", "docker login -u maria -p Q9v!xR2mLk registry.acme.io", "Q9v!xR2mLk"),
    ("code", "sshpass -p 'Osprey#71' ssh pi@10.0.0.8", "Osprey#71"),
    ("code", "PGPASSWORD=Kraken77 psql -h db.internal -U app app", "Kraken77"),
    ("code", "wget --user=backup --password=Bramble9 ftp://files.acme.org/backup.tar", "Bramble9"),
    ("code", f"machine api.heroku.com login maria@acme.io password {_HEROKU}", _HEROKU),
    ("code", "jdbc:postgresql://db:5432/app?user=app&password=Kelp-Forest-31", "Kelp-Forest-31"),
    ("en", f"gmail app password for the printer's scan-to-email: {_GOOGLE_APP_PW}", _GOOGLE_APP_PW),
    ("code", "redis-cli -h cache.internal -a Bluejay42 ping", "Bluejay42"),
    ("code", 'mongosh "mongodb+srv://admin:Walrus2021@cluster0.ab1cd.mongodb.net/test"', "Walrus2021"),
    ("code", r"net use Z: \\fileserver\share /user:CORP\jdoe Ocelot#2022", "Ocelot#2022"),
    ("code", "htpasswd -b /etc/nginx/.htpasswd admin Mantis2024", "Mantis2024"),
    ("code", f"az login --service-principal -u {_ORDER_UUID} -p {_AZURE_SECRET} --tenant acme", _AZURE_SECRET),
    ("code", f"aws configure set aws_secret_access_key {_AWS_SECRET}", _AWS_SECRET),
    ("code", "kubectl create secret generic db --from-literal=password=Narwhal-88", "Narwhal-88"),
    ("code", "openssl enc -aes-256-cbc -k Gecko!4422 -in backup.tar -out backup.enc", "Gecko!4422"),
    ("code", "ftp://printer:Magpie2023@192.168.1.50/scans", "Magpie2023"),
    ("code", "smtp:\n  host: smtp.fastmail.com\n  user: bot@acme.io\n  pass: Cormorant!5", "Cormorant!5"),
    ("code", '<add key="SmtpPassword" value="Lemur-4471" />', "Lemur-4471"),
    ("code", "spring.datasource.password=Falcon#2020", "Falcon#2020"),
]

# Passwords, PINs and codes stated in English prose, in many phrasings.
_ENGLISH = [
    ("en", "password for the staging box = Marlin!2024", "Marlin!2024"),
    ("en", "root pw on the pi is raspberry42", "raspberry42"),
    ("en", "router login: admin / Tr1dent#88", "Tr1dent#88"),
    ("en", "username alice, password Juniper-Falls-7", "Juniper-Falls-7"),
    ("en", "creds for the QA account are qa_user / Kestrel2023!", "Kestrel2023!"),
    ("en", "the wifi at mom's is HomeSweet_5G, pw: lemonade1962", "lemonade1962"),
    ("en", "gate code 2468*", "2468*"),
    ("en", "locker combo 24-11-36", "24-11-36"),
    ("en", "my ATM pin: 0852", "0852"),
    ("en", "alarm code is 4-4-1-9", "4-4-1-9"),
    ("en", "CVC 318 on the company card", "318"),
    ("en", "card 4532 7781 0094 2216 exp 09/27 cvv 415", "415"),
    ("en", "keypad at the side door: 7734#", "7734#"),
    ("en", "safe combination 18-04-33", "18-04-33"),
    ("en", "use Sunflower!88 to log into the kiosk", "Sunflower!88"),
    ("en", "voicemail PIN 62019", "62019"),
    ("en", "new password for the shared drive: Orca+Tide+42", "Orca+Tide+42"),
    ("en", "garage opener code 5150", "5150"),
    ("en", "Netflix login maria@example.com / Blossom#12", "Blossom#12"),
    ("en", "ssh into 10.0.4.2 as deploy, password Wr3n-Falcon", "Wr3n-Falcon"),
    ("en", "apple id pass is appleseed2020", "appleseed2020"),
    ("en", "backup encryption passphrase: copper lantern frost meadow", "copper lantern frost meadow"),
    ("en", "Zoom 812 5541 0092, passcode 448120", "448120"),
    ("en", "GitHub recovery codes: 7h2k9-d3lq4 4mq8z-2x1wp p0w9c-3v7rt", "7h2k9-d3lq4"),
    ("en", "the door to the bike room opens with 1379", "1379"),
    ("en", "PW for the school portal: Tiger$Lily9", "Tiger$Lily9"),
]

# Passwords and PINs in languages the screener covered before, in new phrasings.
_COVERED_LANGUAGES = [
    ("it", "la password del wifi di casa è Girasole77", "Girasole77"),
    ("it", "il codice del cancello è 4590", "4590"),
    ("it", "PIN del bancomat: 1288", "1288"),
    ("uk", "пароль від роутера Kalyna2020", "Kalyna2020"),
    ("uk", "код від домофону 3471", "3471"),
    ("es", "la clave del wifi: Paella#2023", "Paella#2023"),
    ("es", "el código de la alarma es 6190", "6190"),
    ("es", "contraseña de Netflix = Toro_Bravo9", "Toro_Bravo9"),
    ("fr", "le code de la porte d'entrée est 4B721", "4B721"),
    ("fr", "mot de passe de la box : Croissant55", "Croissant55"),
    ("fr", "le code de ma carte bleue c'est 7702", "7702"),
    ("de", "WLAN-Passwort: Brezel#2024", "Brezel#2024"),
    ("de", "der Türcode lautet 5582", "5582"),
    ("de", "Zugangsdaten fürs NAS: admin / Edelweiss88", "Edelweiss88"),
    ("pt", "a senha do wi-fi é Saudade2022", "Saudade2022"),
    ("pt", "código do portão: 4815", "4815"),
    ("ru", "код от домофона 2580", "2580"),
    ("ru", "пароль от wifi: Matryoshka7", "Matryoshka7"),
    ("ru", "логин ivan, пароль Sputnik1957", "Sputnik1957"),
    ("ja", "Wi-Fiのパスワード: Sakura2024!", "Sakura2024!"),
    ("ja", "金庫の暗証番号は 4096", "4096"),
    ("zh", "WiFi密码：Dragon888!", "Dragon888!"),
    ("zh", "门禁密码是 6602", "6602"),
    ("ko", "현관 비밀번호 4829*", "4829*"),
    ("ko", "와이파이 비번 Kimchi2024", "Kimchi2024"),
    ("pl", "kod do bramy 1357", "1357"),
    ("pl", "hasło do wifi: Pierogi#12", "Pierogi#12"),
    ("nl", "het wachtwoord van de router is Tulpen2021", "Tulpen2021"),
    ("nl", "de code van het alarm is 9134", "9134"),
    ("tr", "wifi şifresi: Lokum2023", "Lokum2023"),
    ("tr", "kapı kodu 4471", "4471"),
    ("id", "password wifi: Rendang2020", "Rendang2020"),
    ("id", "PIN ATM saya 7741", "7741"),
    ("vi", "mật khẩu wifi: PhoBo2024", "PhoBo2024"),
    ("hi", "वाईफाई का पासवर्ड Chai@2023 है", "Chai@2023"),
    ("ar", "كلمة سر الواي فاي: Falafel2022", "Falafel2022"),
    ("fa", "رمز وای فای Tahdig#99 است", "Tahdig#99"),
    ("th", "รหัสวายฟาย Tomyum2024", "Tomyum2024"),
    ("sw", "nenosiri la wifi ni Jambo2023", "Jambo2023"),
]

# Passwords and PINs in languages the screener did not cover.
_OTHER_LANGUAGES = [
    ("el", "ο κωδικός του wifi είναι Pelargos#19", "Pelargos#19"),
    ("el", "το PIN της κάρτας μου είναι 5093", "5093"),
    ("cs", "moje heslo k e-mailu je Jablko-552", "Jablko-552"),
    ("cs", "PIN ke kartě: 6617", "6617"),
    ("sk", "heslo na wifi je lesnaJahoda7", "lesnaJahoda7"),
    ("hu", "a jelszavam: Kolbasz2022!", "Kolbasz2022!"),
    ("hu", "a kapukód 3190#", "3190#"),
    ("ro", "parola de la router este ursulet7Mic", "ursulet7Mic"),
    ("ro", "codul PIN al cardului este 2846", "2846"),
    ("sv", "mitt lösenord är Kanelbulle#44", "Kanelbulle#44"),
    ("sv", "portkoden är 1942", "1942"),
    ("nb", "passordet til ruteren er Fjellrev-2020", "Fjellrev-2020"),
    ("da", "min adgangskode er Smørrebrød99", "Smørrebrød99"),
    ("da", "koden til alarmen er 8024", "8024"),
    ("fi", "salasana on Revontuli_73", "Revontuli_73"),
    ("fi", "ovikoodi 4471", "4471"),
    ("he", "הסיסמה שלי היא Shalom#2468", "Shalom#2468"),
    ("he", "קוד הכניסה לבניין 2580", "2580"),
    ("tl", "ang password ko ay Mabuhay2023!", "Mabuhay2023!"),
    ("ca", "la contrasenya del wifi és Gaudi-1926", "Gaudi-1926"),
    ("hr", "lozinka za wifi je Jadran2019", "Jadran2019"),
    ("sr", "моја лозинка је Beograd!77", "Beograd!77"),
    ("bg", "паролата ми е Rozi4kata", "Rozi4kata"),
    ("et", "minu parool on Tallinn-1991", "Tallinn-1991"),
    ("lv", "mana parole ir Rigas_Balzams5", "Rigas_Balzams5"),
    ("lt", "mano slaptažodis yra Vilnius#2030", "Vilnius#2030"),
    ("ka", "ჩემი პაროლი არის Tbilisi#99", "Tbilisi#99"),
    ("hy", "իմ գաղտնաբառը Ararat1988 է", "Ararat1988"),
    ("kk", "менің құпия сөзім Almaty_2024", "Almaty_2024"),
    ("az", "wifi şifrəsi: Xazar2021", "Xazar2021"),
    ("uz", "mening parolim Samarqand77", "Samarqand77"),
    ("af", "my wagwoord is Braai4Life!", "Braai4Life!"),
    ("is", "lykilorðið mitt er Eldfjall88", "Eldfjall88"),
    ("ml", "എന്റെ പാസ്‌വേഡ് Kerala@2022 ആണ്", "Kerala@2022"),
    ("kn", "ನನ್ನ ಪಾಸ್‌ವರ್ಡ್ Mysore#45", "Mysore#45"),
    ("gu", "મારો પાસવર્ડ Garba2023 છે", "Garba2023"),
    ("pa", "ਮੇਰਾ ਪਾਸਵਰਡ Punjab_555 ਹੈ", "Punjab_555"),
    ("ne", "मेरो पासवर्ड Himal@8848 हो", "Himal@8848"),
    ("mn", "миний нууц үг Ulaanbaatar77", "Ulaanbaatar77"),
    ("zu", "iphasiwedi yami ithi Ubuntu2024", "Ubuntu2024"),
    ("cy", "fy nghyfrinair yw Draig-Goch-7", "Draig-Goch-7"),
    ("eu", "nire pasahitza Txakoli2019 da", "Txakoli2019"),
    ("gl", "o meu contrasinal é Pulpo-Feira8", "Pulpo-Feira8"),
    ("sq", "fjalëkalimi im është Shqiponja99", "Shqiponja99"),
    ("mk", "мојата лозинка е Ohrid_2015", "Ohrid_2015"),
    ("sl", "moje geslo je Triglav2864", "Triglav2864"),
    ("am", "የይለፍ ቃሌ Addis2021 ነው", "Addis2021"),
    ("km", "ពាក្យសម្ងាត់របស់ខ្ញុំគឺ Angkor#1113", "Angkor#1113"),
]

# --------------------------------------------------------------------------- innocent texts

_TALK_ENGLISH = [
    "I changed my Netflix password today",
    "password for the NAS admin account is in Bitwarden",
    "the router password is on the sticker under it",
    "remember to rotate the prod DB password on Friday",
    "the password reset link expires in 1 hour",
    "the password needs a symbol and a number",
    "don't use the same password twice",
    "my bank PIN is the same as my old phone's",
    "the garage door code changes every month",
    "ask Sam for the gate code",
    "the CVV is the 3 digits on the back of the card",
    "share the wifi password through the password manager, not Slack",
    "the Stripe API key lives in AWS Secrets Manager under prod/stripe",
    "GITHUB_TOKEN is injected by Actions, no need to set it",
    "set OPENAI_API_KEY in your shell before running the evals",
    "the token expired so I had to log in again",
    "a passphrase should be at least five words",
    "my master password is long and I never wrote it down",
    "username: maria.k, password: ask IT",
    "the alarm code is written on the card in the kitchen drawer",
    "Sam knows the locker combination",
    "the wifi password is the one printed on the router",
]

_TALK_OTHER = [
    ("tr", "şifrem Bitwarden'da kayıtlı"),
    ("tr", "wifi şifresini yine unuttum"),
    ("de", "das WLAN-Passwort steht auf dem Router"),
    ("de", "das Passwort muss mindestens 12 Zeichen haben"),
    ("fr", "j'ai changé mon mot de passe hier"),
    ("fr", "le code de la porte a changé"),
    ("es", "la contraseña del wifi está pegada en la nevera"),
    ("es", "cambia tu clave cada 90 días"),
    ("it", "la password di Netflix è salvata in 1Password"),
    ("pt", "esqueci a senha do banco"),
    ("ru", "пароль от почты лежит в менеджере паролей"),
    ("ru", "не забудь сменить пароль"),
    ("uk", "пароль від пошти збережено в Bitwarden"),
    ("pl", "hasło do wifi jest na lodówce"),
    ("nl", "het wachtwoord staat in de kluis"),
    ("sv", "lösenordet finns i 1Password"),
    ("sv", "jag glömde min PIN-kod"),
    ("nb", "passordet står på lappen i skuffen"),
    ("da", "adgangskoden ligger i 1Password"),
    ("fi", "salasana on tallennettu Bitwardeniin"),
    ("cs", "heslo mám uložené v KeePassu"),
    ("hu", "a jelszó a 1Passwordben van"),
    ("ro", "parola e salvată în Bitwarden"),
    ("el", "ο κωδικός είναι αποθηκευμένος στο 1Password"),
    ("he", "הסיסמה שמורה ב-1Password"),
    ("ja", "Wi-Fiのパスワードはルーターの裏に書いてあります"),
    ("zh", "WiFi密码贴在路由器背面"),
    ("ko", "비밀번호를 잊어버렸어요"),
    ("hi", "पासवर्ड बदलना है"),
    ("ar", "نسيت كلمة المرور"),
    ("vi", "mật khẩu wifi dán trên tủ lạnh"),
    ("id", "password wifi ada di stiker router"),
    ("th", "ลืมรหัสผ่าน"),
    ("ca", "la contrasenya és a 1Password"),
    ("hr", "lozinka je spremljena u Bitwardenu"),
    ("bg", "паролата е в 1Password"),
    ("et", "parool on 1Passwordis"),
    ("lt", "slaptažodį pamiršau"),
    ("fa", "رمز عبور را فراموش کردم"),
    ("sw", "nimesahau nenosiri langu"),
    ("tl", "nakalimutan ko ang password ko"),
]

_HASHES_AND_IDS = [
    f"tx {_ETH_TX} confirmed in block 19442101",
    f"send the USDC refund to {_ETH_ADDRESS}",
    f"release tarball sha256 {_SHA256}",
    f"md5 of the ISO is {_MD5}",
    f"container {_DOCKER_ID[:12]} keeps restarting",
    f"bisected the regression to {_SHA1}",
    "integrity sha512-3Fk0R0RX3p1r7fyt9tTQyhAmOpMIl6wJ9zn3yu6hBb7xO9Nk2pNTBe4zDwN4Za8ph3DMH8o7wL4gr9dq6yHog=="
    " in the lockfile",
    "IPFS CID bafybeigdyrzt5sfp7udm7hu76uh7y26nf3efuylqabf3oclgtqy55fbzdi",
    f"BTC tx {_BTC_TX} has 6 confirmations",
    "donations: bc1qar0srrr7xfkvy5l643lydnw9re59gtzzwf5mdq",
    "GPG fingerprint 4AEE 18F8 3AFD EB23 9C1C 7F21 65B0 2D3E 8F9A 5C47",
    "host key fingerprint SHA256:nThbg6kXUpJWGl7E1IGOCspRomTxdCARLviKw6E5SY8",
    f"order {_ORDER_UUID} shipped on Monday",
    "Stripe customer cus_NffrFeUfNV2Hib is the Berlin office",
    "refund payment intent pi_3MtwBwLkdIwHu7ix28a3tqPa",
    "GA4 measurement id G-7R2KQ4M9TZ",
    "deploy role arn:aws:iam::123456789012:role/gh-actions-deploy",
    "pod api-7d9f8b6c5-x2kqp is crashlooping",
    "request id 01HZY3K4M5N6P7Q8R9S0T1V2W3 in the logs",
    "trace 0af7651916cd43dd8448eb211c80319c shows the slow query",
    f"pin the image to ghcr.io/acme/api@sha256:{_SHA256}",
    f"[Peer]\nPublicKey = {_WG_PUBLIC}\nEndpoint = vpn.acme.io:51820",
    f"my laptop key: {_SSH_PUBLIC} maria@laptop",
    "publishable key for the checkout page is pk_live_51Hx3dE2fK9LmN4pQ7rS8tU0vW",
    "Sentry DSN https://4f1c8a2b9d3e4f5a6b7c8d9e0f1a2b3c@o450512.ingest.sentry.io/4505123",
    "the tiny pixel is data:image/png;base64,"
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
    "the YouTube video id is dQw4w9WgXcQ",
    "VIN 1HGCM82633A004352 for the insurance form",
    "ISBN 978-3-16-148410-0",
    "Kubernetes cluster version 1.30.2-gke.1587003",
]

_NUMBERS = [
    "call the plumber at +1 (415) 555-0134",
    "new address: 221B Baker Street, London NW1 6XE",
    "dentist on 2025-03-14 at 09:30",
    "upgraded postgres to 16.3 and pgvector to 0.7.2",
    "flight LH 441 departs 13:05 from gate B38",
    "my employee number is 004417",
    "rent is 1,450 EUR, due on the 1st",
    "landlord's IBAN DE89 3704 0044 0532 0130 00",
    "passport expires 2031-07-19",
    "build 2024.11.3+g7c9e2f1 is on staging",
    "the NAS is at 10.20.30.40:8443",
    "printer MAC 3C:22:FB:9A:1E:07",
    "the wifi network is called Pineapple-5G",
    "meeting ID 845 2231 9087 for the Tuesday standup",
    "my shoe size is 44, EU",
    "the boiler service number is 0800 123 4567",
]

_CODE = [
    'password = getpass.getpass("DB password: ")',
    'token = request.headers.get("Authorization", "")',
    "if not user.check_password(form.password.data): abort(401)",
    "const apiKey = process.env.STRIPE_KEY;",
    "key = hashlib.sha256(body.encode()).hexdigest()",
    "SELECT id, email FROM users WHERE password_reset_at > now() - interval '1 day';",
    'pin = int(input("PIN: "))',
    'secret_name = "prod/db/password"',
    "env:\n  - name: API_KEY\n    valueFrom:\n      secretKeyRef: {name: api, key: token}",
    'headers = {"Authorization": f"Bearer {token}"}',
    'curl -u "$USER:$PASS" https://api.acme.io/v1/me',
    "curl -u admin https://nas.local/api/shares",
    "docker login -u maria --password-stdin < ~/.docker/pw",
    "ssh -i ~/.ssh/id_ed25519 deploy@10.0.0.8",
    "git config --global credential.helper osxkeychain",
    "aws ssm get-parameter --name /prod/db/password --with-decryption",
    'PASSWORD_RE = re.compile(r"^(?=.*\\d)(?=.*[A-Z]).{12,}$")',
    "def verify_pin(pin: str) -> bool:",
    "auth_token = None  # set in setUp",
    "PASSWORD_MIN_LENGTH = 12",
    "for key, value in config.items():",
    'jwt.decode(token, public_key, algorithms=["RS256"])',
    "mysql -u root -p shop_db",
    "kubectl get secret db-creds -o jsonpath='{.data.password}' | base64 -d",
    "secret = Fernet.generate_key()",
]

_NOT_SECRET_CODES = [
    "zip code 94107",
    "the postal code is SW1A 1AA",
    "promo code SPRING25 gives 20% off",
    "error code 0x80070005 on Windows Update",
    "HTTP status code 429 means slow down",
    "country code for Germany is +49",
    "SWIFT code DEUTDEFF",
    "the airport code for Lisbon is LIS",
    "dress code: smart casual",
    "brand colour code #1A73E8",
    "ICD-10 code J45.909 on the prescription",
    "exit code 137 means the container was OOM-killed",
    "referral code MARIA-2024 gets both of us a free month",
    "GPIO pin 18 drives the LED strip",
    "pin 13 on the Arduino is the built-in LED",
    "pinned the release notes in #general",
    "the 4-pin PWM fan header on the motherboard",
    "the song is in the key of D minor",
    "primary key (tenant_id, id)",
    "press the Esc key twice to leave insert mode",
    "S3 key exports/2024/q3.csv",
    "the prompt used 1,812 tokens",
    "token bucket: 100 requests per second",
    "secret: the surprise party is on Saturday",
    "the secret ingredient is smoked paprika",
    "course code CS-229",
]

_BRANDS = [
    "switched from LastPass to 1Password",
    "YubiKey 5C NFC on my keychain",
    "Okta SSO for all the SaaS apps",
    "Bitwarden self-hosted on the NAS",
    "KeePassXC with a key file on a USB stick",
    "Authy backups are encrypted",
    "Google Authenticator is still on the old phone",
    "Proton Pass family plan renews in May",
    "Have I Been Pwned says my email was in 3 breaches",
    "the Ledger Nano X is in the desk drawer",
    "Keeper vs Dashlane comparison for the team",
    "1Password CLI is `op`, signed in with Touch ID",
]


def _secrets() -> list[Held]:
    groups = (
        ("key, known format", _KNOWN_FORMATS),
        ("key, other format", _OTHER_FORMATS),
        ("wallet key or seed phrase", _WALLETS),
        ("credential in a command or config", _COMMANDS),
        ("password or PIN, English", _ENGLISH),
        ("password or PIN, language covered before", _COVERED_LANGUAGES),
        ("password or PIN, language not covered before", _OTHER_LANGUAGES),
    )
    return [Held(body, True, category, lang, value) for category, rows in groups for lang, body, value in rows]


def _innocent() -> list[Held]:
    samples = [Held(body, False, "password talk, no value", "en") for body in _TALK_ENGLISH]
    samples += [Held(body, False, "password talk, no value", lang) for lang, body in _TALK_OTHER]
    for category, bodies in (
        ("hash, id or public key", _HASHES_AND_IDS),
        ("number, address, date or version", _NUMBERS),
        ("code without a secret", _CODE),
        ("code or key that is not a secret", _NOT_SECRET_CODES),
        ("brand or tool name", _BRANDS),
    ):
        lang = "code" if bodies is _CODE else "en"
        samples += [Held(body, False, category, lang) for body in bodies]
    return samples


HELDOUT_SECRETS: list[Held] = _secrets()
HELDOUT_INNOCENT: list[Held] = _innocent()
HELDOUT: list[Held] = HELDOUT_SECRETS + HELDOUT_INNOCENT
