"""detect-secrets' specific detectors for :mod:`ledger.screening` (never its high-entropy plugins).

Thread safety: the detectors are used through ``analyze_string``, which only runs compiled
regular expressions; ``analyze_line`` is avoided because it reads detect-secrets' global
settings singleton. The detectors are built once, lazily, under a lock, so importing the
screener stays cheap (importing detect-secrets costs ~0.1 s).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from typing import Final, Protocol

from ledger.screening.values import (
    ADVICE_KEY,
    ADVICE_URL,
    PW,
    Finding,
    has_artifactory_hint,
    has_long_token,
    is_placeholder,
    judge,
)

# --------------------------------------------------------------------------- detect-secrets


class _Detector(Protocol):
    secret_type: str

    def analyze_string(self, string: str) -> Iterable[str]: ...


_detectors: tuple[_Detector, ...] | None = None
_detectors_lock = threading.Lock()


# (module in detect_secrets.plugins, class): every specific detector, in the order they are tried.
_PLUGINS: Final = (
    ("aws", "AWSKeyDetector"),
    ("github_token", "GitHubTokenDetector"),
    ("gitlab_token", "GitLabTokenDetector"),
    ("slack", "SlackDetector"),
    ("private_key", "PrivateKeyDetector"),
    ("jwt", "JwtTokenDetector"),
    ("stripe", "StripeDetector"),
    ("openai", "OpenAIDetector"),
    ("npm", "NpmDetector"),
    ("pypi_token", "PypiTokenDetector"),
    ("sendgrid", "SendGridDetector"),
    ("twilio", "TwilioKeyDetector"),
    ("discord", "DiscordBotTokenDetector"),
    ("telegram_token", "TelegramBotTokenDetector"),
    ("mailchimp", "MailchimpDetector"),
    ("square_oauth", "SquareOAuthDetector"),
    ("azure_storage_key", "AzureStorageKeyDetector"),
    ("artifactory", "ArtifactoryDetector"),
    ("ibm_cloud_iam", "IbmCloudIamDetector"),
    ("ibm_cos_hmac", "IbmCosHmacDetector"),
    ("cloudant", "CloudantDetector"),
    ("softlayer", "SoftlayerDetector"),
    ("basic_auth", "BasicAuthDetector"),
    ("keyword", "KeywordDetector"),
)


def _load_detectors() -> tuple[_Detector, ...]:
    """Build detect-secrets' specific detectors once (lazily: importing detect-secrets costs ~0.1 s)."""
    global _detectors
    if _detectors is not None:
        return _detectors
    with _detectors_lock:
        if _detectors is None:
            import importlib  # deferred with the plugins it loads

            _detectors = tuple(
                getattr(importlib.import_module(f"detect_secrets.plugins.{module}"), name)()
                for module, name in _PLUGINS
            )
    return _detectors


_KEYWORD_DETECTOR_HINT: Final = re.compile(r"key|pass|pwd|secret|contrase")
# KeywordDetector accepts any word that starts with a keyword ("secretary"); we want the keyword
# to end a word or an identifier part (secret, client_secret, password_2).
_KEYWORD_DETECTOR_WORD: Final = re.compile(r"(?i)(?:key|pass(?:word|wd)?|pwd|secret|contrase[\u00f1n]a)(?![a-z])")


def detect_secrets_rule(segment: str) -> Finding | None:
    """Run detect-secrets' detectors line by line, each only where it could match."""
    for line in segment.splitlines():
        line_low = line.lower()
        # Every detector but KeywordDetector needs a long token, a URL or a key-block header;
        # KeywordDetector (by far the slowest) needs a quote and one of its keywords.
        shaped = (
            has_long_token(line) or "://" in line or "begin" in line_low or "putty" in line_low
        ) or has_artifactory_hint(line)
        quoted = (
            ('"' in line or "'" in line or "`" in line)
            and _KEYWORD_DETECTOR_HINT.search(line_low) is not None
            and _KEYWORD_DETECTOR_WORD.search(line) is not None
        )
        if not (shaped or quoted):
            continue
        for detector in _load_detectors():
            is_keyword = detector.secret_type == "Secret Keyword"
            if not (quoted if is_keyword else shaped):
                continue
            for value in detector.analyze_string(line):
                if is_placeholder(value.strip("\"'` ")):
                    continue
                if is_keyword and not judge(value, PW, "assign"):
                    continue
                advice = ADVICE_URL if detector.secret_type == "Basic Auth Credentials" else ADVICE_KEY
                return Finding(detector.secret_type, advice)
    return None
