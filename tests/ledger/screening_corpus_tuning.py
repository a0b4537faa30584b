"""The fourth round of the screening corpus (a tuning set): key material by shape, secret words in many more
languages followed by a value, credentials in commands, codes without a verb; and the look-alikes those
must keep. The reported examples are here; the held-out corpus (tests/ledger/screening_heldout/) is not.

Every key is fake: random material generated once and pasted in, the well-known prefixes joined by
concatenation.
"""

from __future__ import annotations

from tests.ledger.screening_corpus import Sample

_SAS_SIG = "2FzQfYOs90EvKrdLcGWHkhuqjyt7KCT9T7TfogzFABo%3D"
_DISCORD_HOOK = (
    "https://discordapp.com/api/" + "webhooks/1201124043878974594/"
    "GYb-kbNmCDTMDfHqZfx5f-pAMwbIVzW7Rw7Eh5lFyZEJjnmIHDu-mEJnZEART3H6tmg3"
)
_BRAINTREE = "access_token" + "$sandbox$" + "ljikutu3tjmbbxrw$2c26a32606bff59688dba8f485c9f146"
_AIRTABLE = "pat" + "KuNZ1tllJCn6nv.bfdd268611646318c3d6690a3dfd213989cf6c60d8ed3d9b5c5ffc367e0673fc"
_ETH_KEY = "8cbf856c69aae303eea8315087b5e0ee81040882fd9ba2c835eddc8f3e4bf59d"
_SEED = "canal weather pudding lunar aspect bonus debris elbow funny jacket modify sunset"
_GEN_32 = "NaAv8TkJ41rNrXDsaBG14r6ZWTEqME6r"
_GEN_28 = "VoLib0Y9-yMJse2TNlVkY3unXoCd"
_GEN_40 = "CGPMo9+CL0zzWWgfLRSbQJRpdMuCiAJ2984VUM9J"
_HEX_40 = "f22b10815abbd929d702cbc3461c9a2ee3885d23"
_B64_32 = "DPQEpddoU+uOE95j/xewlfGSJevu7WEvJtCZTxqTw4k="
_MIXED_24 = "FMpiYFFIQIa5s9PH73S79UE4"
_SHA256 = "e0f07b6d0eeab8bcc7bb540120af9ae1beeab4d2fef6dd5580660401861b6a4c"
_SHA1 = "f35fea9c14673a1f16ebf72250b6e7193dd60e2c"
_DOC_ID = "Uq1NoZ1hyLeR6RMsX3JyyWhlxKizEYMGT8SmtRFxHHb3"
_SHORT_17 = "rwEV02BsmOzHtb7wO"
_SHORT_18 = "cbmU9Dp9CwKk3tzqDd"
_HEX_64 = "3dced2c014d15feec4d6feb724c0e1b808abd81efd40a47497be1fee66839045"
_GEN_26 = "khsRFGLoneOX58XMahvXPfGown"
_GEN_19 = "eOI7GppgGWkIDNTzaml"
_ELECTRUM = "wild father tree among universe such mobile favorite target dynamic credit identify"
_SEED_LINES = (
    "1. canal 2. weather 3. pudding 4. lunar 5. aspect 6. bonus\n"
    "7. debris 8. elbow 9. funny 10. jacket 11. modify 12. sunset"
)

_SECRETS: list[tuple[str, str, str]] = [
    # (note, body, value): key material in formats with no name of their own
    ("Azure SAS signature", f"https://acct.blob.core.windows.net/c/f.zip?sv=2021-08-06&sr=b&sig={_SAS_SIG}", _SAS_SIG),
    ("Discord webhook", f"post build results to {_DISCORD_HOOK}", _DISCORD_HOOK),
    ("Braintree token", f"braintree {_BRAINTREE}", _BRAINTREE),
    ("Airtable token", f"airtable: {_AIRTABLE}", _AIRTABLE),
    ("Ethereum private key", f"wallet private key: 0x{_ETH_KEY}", _ETH_KEY),
    ("Ethereum private key, no 0x", f"the deployer key {_ETH_KEY}", _ETH_KEY),
    ("seed phrase", f"{_SEED}", _SEED),
    ("seed phrase after a word", f"mnemonic: {_SEED}", _SEED),
    ("random key after a word", f"signing secret {_GEN_32}", _GEN_32),
    ("random key, no keyword", f"put {_GEN_28} in the config and restart", _GEN_28),
    ("random key with + and /", f"storage account {_GEN_40}", _GEN_40),
    ("base64 key after a word", f"the HMAC key is {_B64_32}", _B64_32),
    ("random key alone", _MIXED_24, _MIXED_24),
    ("hex key after token", f"webhook token {_HEX_40}", _HEX_40),
    # credentials in commands
    ("curl -u user:pass", "curl -u user:Sprocket88 https://api.internal/health", "Sprocket88"),
    ("curl --user", "curl --user ops:Gr3yHeron https://jenkins.internal", "Gr3yHeron"),
    ("mysql -p attached", "mysqldump -u backup -pQuokka!2021 --all-databases", "Quokka!2021"),
    ("--password=", "restic --password=Lynx-Moss-40 backup /srv", "Lynx-Moss-40"),
    ("docker login -p", "podman login -u bot -p Vole77xr quay.io", "Vole77xr"),
    ("sshpass", "sshpass -p Tapir2022 scp dump.sql pi@nas:", "Tapir2022"),
    ("git URL with a token", "pip install git+https://bot:Heron77xq@git.acme.io/lib.git", "Heron77xq"),
    # phrasings in the languages covered before
    ("en: password for the NAS admin account =", "password for the NAS admin account = Ibex-5522", "Ibex-5522"),
    ("it: password di Netflix è", "la password di Netflix è Limone2019", "Limone2019"),
    ("uk: пароль від пошти", "пароль від пошти Kozak#88", "Kozak#88"),
    ("es: la clave de la alarma", "la clave de la alarma: 7781", "7781"),
    ("de: Zugangscode", "Zugangscode fürs Büro 4412", "4412"),
    ("fr: code de l'immeuble", "code de l'immeuble : 2817B", "2817B"),
    ("pt: senha do roteador", "senha do roteador Caju#2020", "Caju#2020"),
    ("ru: пароль от роутера", "пароль от роутера Baikal2019", "Baikal2019"),
    ("en: login pair", "login for the printer: admin / Wombat42", "Wombat42"),
    ("en: creds pair", "creds are svc_ci / Platypus#7", "Platypus#7"),
    # other languages
    ("sv", "lösenordet till routern är Algen-1923", "Algen-1923"),
    ("nb", "passordet mitt er Lofoten#8", "Lofoten#8"),
    ("da", "adgangskoden til wifi er Hygge2020", "Hygge2020"),
    ("fi", "wifin salasana: Sauna#1995", "Sauna#1995"),
    ("cs", "heslo je Knedlik77", "Knedlik77"),
    ("hu", "a wifi jelszó Paprika#19", "Paprika#19"),
    ("ro", "parola mea este Carpati2018", "Carpati2018"),
    ("el", "ο κωδικός μου είναι Olympos#5", "Olympos#5"),
    ("he", "הסיסמה לוויפי Hummus2021", "Hummus2021"),
    ("ca", "la meva contrasenya és Castell#9", "Castell#9"),
    ("hr", "moja lozinka je Dubrovnik1", "Dubrovnik1"),
    ("sl", "geslo za wifi je Bled2023", "Bled2023"),
    ("et", "parool on Saaremaa7", "Saaremaa7"),
    ("lt", "slaptažodis: Trakai#44", "Trakai#44"),
    ("is", "lykilorð: Geysir2017", "Geysir2017"),
    ("cy", "cyfrinair y wifi yw Cennin5", "Cennin5"),
    ("af", "die wagwoord is Fynbos#3", "Fynbos#3"),
    ("tl", "password ng wifi: Adobo2022", "Adobo2022"),
    ("bg", "паролата за wifi е Rila2020", "Rila2020"),
    ("sr", "лозинка: Drina#1915", "Drina#1915"),
    ("sk", "moje heslo je Tatry#2655", "Tatry#2655"),
    # more key material, shorter or after words in other languages
    ("short key after a word", f"Mailjet key {_SHORT_17}", _SHORT_17),
    ("short key, colon", f"license: {_SHORT_18}", _SHORT_18),
    ("hex key after private", f"validator private key {_HEX_64}", _HEX_64),
    ("key after Schlüssel", f"API-Schlüssel: {_GEN_26}", _GEN_26),
    ("key after clé", f"la clé secrète est {_GEN_19}", _GEN_19),
    ("key in a header", f"X-Auth-Token: {_GEN_26}", _GEN_26),
    ("key as the last word", f"for the scraper use {_GEN_26}", _GEN_26),
    ("seed phrase, another word list", f"electrum seed: {_ELECTRUM}", _ELECTRUM),
    ("seed phrase, numbered", f"recovery words\n{_SEED_LINES}", "canal 2. weather"),
    ("grouped TOTP key", "authenticator setup key QK7M 2XWB 9TZC 4HNR", "QK7M"),
    ("app password in groups", "app password for Thunderbird: qmxr tkvb lpzd hwne", "qmxr tkvb"),
    ("identifier as the keyword", f"session_secret for staging: {_GEN_19}", _GEN_19),
    ("env name in prose", f"STRIPE_WEBHOOK_SECRET on prod is {_GEN_26}", _GEN_26),
    ("wallet hex key", f"hot wallet: {_HEX_64}", _HEX_64),
    ("named prefix with random capitals", "VAULT-TOKEN-7QX2M9KD4WZ8R1TB6YHN3CJ5", "7QX2M9KD4WZ8R1TB6YHN3CJ5"),
    (
        "seed phrase after its name, other words",
        "backup phrase: lantern quiet orchard velvet mosaic tundra ember falcon harbor prism cobalt willow",
        "lantern quiet",
    ),
    ("PIN-shaped password closing the statement", "PW for the shed padlock 8130", "8130"),
    # more command lines
    ("env prefix glued to PASSWORD", "PGPASSWORD=Otter2024 pg_dump app", "Otter2024"),
    ("openssl -pass", "openssl enc -d -aes256 -pass pass:Salmon#77 -in x.enc", "Salmon#77"),
    ("XML key/value", '<add key="DbPassword" value="Hedgehog-12" />', "Hedgehog-12"),
    ("JSON name/value", '{"name": "API_TOKEN", "value": "' + _GEN_19 + '"}', _GEN_19),
    ("sqlcmd -P", "sqlcmd -S db01 -U sa -P Zebra#2024 -Q 'select 1'", "Zebra#2024"),
    ("mongo -p", "mongo -u admin -p Koala2019 --authenticationDatabase admin", "Koala2019"),
    ("smbclient user%pass", "smbclient //nas/share -U maria%Gazelle77", "Gazelle77"),
    ("--password with a space", "pg_dump --password 'Bison-41' app", "Bison-41"),
    ("-p quoted", "mysql -uroot -p'Yak!3311' shop", "Yak!3311"),
    # more English phrasings
    ("en: pass for", "pass for the router is Meerkat2018", "Meerkat2018"),
    ("en: user/pass labels", "user: admin pass: Jackal#42", "Jackal#42"),
    ("en: combo to the locker", "combo to the gym locker is 36-12-8", "36-12-8"),
    ("en: code for the alarm", "code for the alarm: 1470", "1470"),
    ("en: PIN with words between", "the PIN for the office printer is 3366", "3366"),
    ("en: wifi pair", "wifi: Hillside-Guest / Walnut#2021", "Walnut#2021"),
    ("en: security code", "security code 552 on the back", "552"),
    # PINs and codes without a verb
    ("en: garage door code", "garage door code 7395#", "7395#"),
    ("en: CVV", "CVV 837", "837"),
    ("en: keypad code", "keypad code 2580*", "2580*"),
    ("en: combo", "bike lock combo 4-1-7-3", "4-1-7-3"),
    ("en: safe code", "safe code is 90125", "90125"),
    ("sv: portkod", "portkod 4471", "4471"),
    ("de: Türcode", "Türcode 8264", "8264"),
    ("fi: ovikoodi", "ovikoodi on 1357", "1357"),
    ("pl: kod do domofonu", "kod do domofonu 2244", "2244"),
    ("cs: kód", "kód od trezoru 6060", "6060"),
]

_LOOKALIKES: list[tuple[str, str]] = [
    ("tr: şifrem 1Password'de", "şifrem 1Password'de kayıtlı"),
    ("fi: reference with a case ending", "salasana on Bitwardenissa"),
    ("hu: reference with a case ending", "a jelszó a KeePassban van"),
    ("de: reference", "das Passwort steht im 1Password-Tresor"),
    ("sv: no value", "lösenordet måste vara minst 12 tecken"),
    ("cs: no value", "zapomněl jsem heslo"),
    ("el: no value", "άλλαξα τον κωδικό μου χθες"),
    ("he: no value", "שכחתי את הסיסמה"),
    ("et: no value", "parool peab olema pikk"),
    ("en: code with a qualifier that is not a lock", "error code 0x80004005 again"),
    ("en: zip code", "ZIP code 10001"),
    ("en: area code", "area code 415"),
    ("en: exit code", "exit code 1 from the linter"),
    ("en: status code", "status code 503 during the deploy"),
    ("en: discount code", "discount code SUMMER20"),
    ("en: coupon code", "coupon code FREESHIP at checkout"),
    ("en: postal code", "postal code 75008"),
    ("en: year after a code word", "the gate code changed in 2023"),
    ("en: door code talk", "the door code is on the fridge"),
    ("en: CVV talk", "never store the CVV"),
    ("en: pin as a header pin", "pin 7 on the header is ground"),
    ("en: a combination of things", "a combination of 3 colours"),
    ("en: key talk", "the API key is in the team vault"),
    ("en: password talk with a number", "the password must be at least 12 characters"),
    ("en: password with 2FA", "the password plus 2FA is required"),
    ("en: password via a site", "reset the password at id.acme.io"),
    ("en: login pair with a placeholder", "login: admin / <ask Jo>"),
    ("en: login page", "the login page is /auth/login"),
    ("git SHA", f"merged as {_SHA1}"),
    ("sha256", f"checksum {_SHA256}"),
    ("sha256 with a word", f"sha256 of the release: {_SHA256}"),
    ("tx hash", f"transaction 0x{_SHA256} is pending"),
    ("Google Doc link", f"spec: https://docs.google.com/document/d/{_DOC_ID}/edit"),
    ("Dropbox link", "https://www.dropbox.com/s/8x2kq7Lm1pZ9vYt/plan.pdf?dl=0"),
    ("ssh public key", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHq7Zl0vPq2x9WkM3Jt8sR5nYc1bLd4Ue6fGh0iAjKk ops@ci"),
    ("public key by name", f"the server's public key is {_B64_32}"),
    ("integrity hash", "integrity: sha384-oqVuAfXRKap7fdgcCY5uykM6+R9GqQ8K/uxy9rx7HNQlGYl1kPzQho1wx4JwY8wC"),
    ("camel-case identifier", "renamed HttpClientFactoryProvider2 to ClientFactory"),
    ("long word list that is prose", "please review the budget and the roadmap before the meeting on Thursday"),
    ("words that are BIP39 but few", "ocean pilot ribbon are the boat names"),
    ("ULID", "job 01HX3M9Q2ZK7V4T8B6N5R1C0WE finished"),
    ("Stripe object id", "charge ch_3OqLb2Kx9vYt7WzQ1aBcDeFg refunded"),
    ("order number", "order 114-8827311-2290019 delivered"),
    ("tracking id", "tracking 9400111899223344556677 via USPS"),
    ("version and build", "build 7.4.2-rc3+20240511.g9c1d2e3 ships Friday"),
    ("phone number", "office line +49 30 901820"),
    ("address", "send it to 1600 Amphitheatre Pkwy, Mountain View, CA 94043"),
    ("Wi-Fi network name", "the guest network is Acme-Guest-5G"),
    ("username", "my username is j.doe-1987"),
    ("code snippet", 'user = authenticate(username=form["user"], password=form["password"])'),
    ("code snippet, env read", 'api_key = os.getenv("OPENAI_API_KEY")'),
    ("code snippet, getpass", "pw = getpass()"),
    ("curl prompting for a password", "curl -u admin https://router.local"),
    ("curl with env vars", "curl -u $API_USER:$API_PASS https://api.acme.io"),
    ("mysql prompting", "mysql -u app -p appdb"),
    ("docker login from stdin", "echo $TOKEN | docker login -u bot --password-stdin"),
    ("brand", "I keep everything in 1Password 8"),
    ("brand, hardware key", "the YubiKey 5 NFC backs up my login"),
    ("it: reference", "la password di Netflix è nel portachiavi"),
    ("uk: reference", "пароль від пошти в менеджері паролів"),
    ("en: NAS password talk", "the password for the NAS admin account is in the vault"),
    ("pl: kod pocztowy", "kod pocztowy 00-950"),
    ("de: Postleitzahl code", "der Code der Fehlermeldung ist E1234"),
    ("words after seed that are prose", "a fixed seed for the random tests is set in conftest"),
    ("many short plain words", "we will all act again and add more of what we also need next time"),
    ("mysql -p prompting in the middle", "mysql -p -u root shop"),
    ("sqlcmd with an env var", "sqlcmd -S db01 -U sa -P $SA_PASSWORD"),
    ("docker -p port mapping", "docker run -p 8080:80 nginx"),
    ("ssh -p port", "ssh -p 2222 deploy@10.0.0.8"),
    ("pass as a verb", "pass --verbose to see the SQL"),
    ("code review", "code review for PR 4182 tomorrow"),
    ("pin count", "the 24-pin ATX connector"),
    ("combo meal", "combo #3 with fries"),
    ("CVV talk with a number", "the CVV has 3 or 4 digits"),
    ("key count", "we rotated 12 keys last quarter"),
    ("token count", "the answer took 8192 tokens"),
    ("login count", "login attempts: 5 per minute"),
    ("public key line", f"PublicKey = {_B64_32}"),
    ("hex after tx", f"tx hash {_HEX_40}"),
    ("camel-case class names", "MySQLConnectionPoolFactory2 replaces LegacyPool"),
    ("API path", "call /v2/accounts/{accountId}/tokens to list them"),
    ("code: password from a call", 'pwd = input("Password: ")'),
    ("code: token from a call", "token = jwt.encode(payload, key)"),
    ("code: comparison", "if password != confirm: raise ValueError"),
    ("code: settings attribute", "api_key = settings.STRIPE_KEY"),
    ("code: typed field", "password: str = Field(min_length=12)"),
    ("code: function signature", "def login(user, password):"),
    ("code: bcrypt", "hashed = bcrypt.hashpw(pw.encode(), bcrypt.gensalt())"),
    ("code: constant", "PIN_LENGTH = 6"),
    ("code: generated secret", "secret = secrets.token_urlsafe(32)"),
    ("code: await", "const token = await getToken();"),
    ("code: secrets file", "export PASSWORD_FILE=/run/secrets/db"),
    ("env name in prose, no value", "DB_PASSWORD comes from the vault at deploy time"),
    ("wallet address", "wallet 0x" + _HEX_40 + " holds the test USDC"),
    ("wallet tx", f"wallet tx {_SHA256} confirmed"),
    ("grouped words that are words", "the code name is blue moon over town"),
    ("four-letter words in a row", "password tips: long, rare, your own"),
    ("Bitcoin address", "donate to 1BvBMSEYstWetqTFn5Au4m4GFg7xJaNVN2"),
    ("YouTube playlist id", "youtube playlist PLrAXtmErZgOeiKm4sgNOknGvNjby9efdf is the course"),
    ("serial number", "serial number SN-4A7B-20231104 on the router"),
    ("docker -p and an env var", "docker run -p 5432:5432 -e POSTGRES_PASSWORD=$PGPASS postgres:16"),
    ("redis-cli with an env var", "redis-cli -a $REDIS_PASSWORD ping"),
    ("curl with braces", "curl -u ${USER}:${TOKEN} https://api.acme.io"),
    ("pwd the command", "run pwd && ls -la"),
    ("login shell", "login shell is /bin/zsh"),
    ("password rule, de", "passwort vergessen? Link gilt 24 Stunden"),
    ("password rule, ko", "비밀번호는 8자 이상"),
    ("door code talk, de", "Türcode bitte beim Hausmeister erfragen"),
    ("code line", "the code is on line 42 of main.py"),
    ("response code", "code: 200, message: OK"),
    ("buzzer", "apartment 12B, buzzer 4401"),
    ("pass as a verb before code", "What to pass as the SDK's ``base_url`` (or ``ANTHROPIC_BASE_URL``)."),
    ("pass before an identifier", "pass the scope to `apply_stored` instead of re-reading"),
    ("one pass of a job", "One pass (:meth:`Janitor.run_once`), on start and every minute"),
    ("markdown emphasis after password", "* passwords: *store where the password is kept, not the password itself*;"),
    ("credentials before a URL in backticks", "URLs without credentials (`postgres://app@db/app`) are kept"),
    ("command forms in backticks", "the forms are `smbclient -U user%pass` and `mysql -pSECRET`"),
    ("model name with a slash", "vllm serve Qwen/Qwen2.5-7B-Instruct --port 8000"),
    ("seed in prose", "a seed phrase must never be typed into a website, only into the device itself"),
]

SECRETS_TUNING: list[Sample] = [Sample(body, True, note, value) for note, body, value in _SECRETS]
LOOKALIKES_TUNING: list[Sample] = [Sample(body, False, note) for note, body in _LOOKALIKES]
