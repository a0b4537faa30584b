"""API tokens (docs/operations.md): one token names one account; only its SHA-256 is stored.

A token is ``mlt_`` followed by 43 URL-safe characters (256 random bits). ``memledger tokens
create ACCOUNT`` prints it once; the ``api_tokens`` table (:class:`ApiTokenRow`) keeps its id,
account, hash and times. With ``MEMLEDGER_AUTH=tokens`` every HTTP request needs
``Authorization: Bearer <token>`` and the token alone decides the account.

Tokens are random, so a fast hash is the right one (a slow password hash protects guessable
secrets; a 256-bit token cannot be guessed). Every request looks the hash up, so a revocation
is effective on the next request. ``last_used_at`` is written at most once a minute per token,
so authenticated traffic does not turn every read into a write.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
from datetime import datetime
from typing import Any

from sqlalchemy import CheckConstraint, Row, insert, select, update
from sqlmodel import SQLModel

from ledger import Clock, Ledger, Reader, check_scope, format_rfc3339, from_micros, opt_from_micros, to_micros
from ledger.columns import FROZEN, instant_field, text_field
from ledger.errors import LedgerError
from ledger.schema import table
from worker.errors import TokenNotFound

log = logging.getLogger(__name__)

TOKEN_PREFIX = "mlt_"
TOKEN_RE = re.compile(r"mlt_[A-Za-z0-9_-]{43}")
LAST_USED_EVERY_US = 60 * 1_000_000
_ID_RE = re.compile(r"tok_[0-9a-f]{12}")


class ApiTokenFields(SQLModel):
    """A token's fields, each stated once: :class:`ApiToken` hands them out, :class:`ApiTokenRow` stores them."""

    model_config = FROZEN

    id: str = text_field(primary_key=True)
    account: str = text_field(index=True)
    created_at: datetime = instant_field()
    last_used_at: datetime | None = instant_field()
    revoked_at: datetime | None = instant_field()


class ApiTokenRow(ApiTokenFields, table=True):
    """One API token in the ledger's database: only the SHA-256 of the token is stored."""

    __tablename__ = "api_tokens"
    __table_args__ = (CheckConstraint("revoked_at IS NULL OR revoked_at >= created_at", name="ck_api_tokens_revoked"),)

    hash: str = text_field(unique=True)


_TABLE = table(ApiTokenRow)


class ApiToken(ApiTokenFields):
    """A token as ``memledger tokens list`` shows it: never the token, never its hash."""

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "account": self.account,
            "createdAt": _text(self.created_at),
            "lastUsedAt": _text(self.last_used_at),
            "revokedAt": _text(self.revoked_at),
            "active": self.active,
        }


def _text(value: datetime | None) -> str | None:
    return format_rfc3339(value)


def hash_token(token: str) -> str:
    """The stored form of a token."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _token(row: Row[Any]) -> ApiToken:
    get = row._mapping
    return ApiToken(
        id=get["id"],
        account=get["account"],
        created_at=from_micros(get["created_at"]),
        last_used_at=opt_from_micros(get["last_used_at"]),
        revoked_at=opt_from_micros(get["revoked_at"]),
    )


class TokenStore:
    """Create, list, revoke and check API tokens in the ledger's database. Thread-safe."""

    def __init__(self, led: Ledger, *, clock: Clock | None = None) -> None:
        self.led = led
        self.clock = clock if clock is not None else led.clock

    @classmethod
    def for_ledger(cls, led: Ledger) -> TokenStore:
        return cls(led)

    def _now_us(self, now: datetime | None) -> int:
        return to_micros(self.clock() if now is None else now)

    def create(self, account: str, *, now: datetime | None = None) -> tuple[ApiToken, str]:
        """A new token for ``account``: its record and the token itself (shown once, never stored).

        Raises:
            ScopeError: ``account`` cannot name an account (``account:<account>`` is not a scope key).
        """
        check_scope(f"account:{account}")
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        token_id = "tok_" + secrets.token_hex(6)
        now_us = self._now_us(now)

        def insert_it(w: Reader) -> Row[Any]:
            w.execute(insert(_TABLE).values(id=token_id, account=account, hash=hash_token(token), created_at=now_us))
            return w.execute(select(_TABLE).where(_TABLE.c.id == token_id)).one()

        row = self.led.write(insert_it)
        log.info("api token %s created for account %s", token_id, account)
        return _token(row), token

    def list(self, account: str | None = None) -> list[ApiToken]:
        """Every token (revoked ones too), oldest first; only ``account``'s when given."""
        query = select(_TABLE).order_by(_TABLE.c.created_at, _TABLE.c.id)
        if account is not None:
            query = query.where(_TABLE.c.account == account)
        with self.led.reading() as r:
            return [_token(row) for row in r.execute(query)]

    def revoke(self, token_id: str, *, now: datetime | None = None) -> ApiToken:
        """Revoke a token; the next request that carries it gets 401. Idempotent.

        Raises:
            TokenNotFound: no token has that id.
        """
        now_us = self._now_us(now)

        def revoke_it(w: Reader) -> Row[Any] | None:
            w.execute(
                update(_TABLE).where(_TABLE.c.id == token_id, _TABLE.c.revoked_at.is_(None)).values(revoked_at=now_us)
            )
            return w.execute(select(_TABLE).where(_TABLE.c.id == token_id)).one_or_none()

        row = self.led.write(revoke_it)
        if row is None:
            shown = token_id[:40]
            raise TokenNotFound(f"no API token {shown!r}: `memledger tokens list` shows the ids", token_id=shown)
        log.info("api token %s revoked", token_id)
        return _token(row)

    def authenticate(self, token: str, *, now: datetime | None = None) -> str | None:
        """The account ``token`` speaks for, or None (unknown, malformed or revoked)."""
        if not TOKEN_RE.fullmatch(token):
            return None
        digest = hash_token(token)
        with self.led.reading() as r:
            row = r.execute(
                select(_TABLE.c.id, _TABLE.c.account, _TABLE.c.hash, _TABLE.c.last_used_at).where(
                    _TABLE.c.hash == digest, _TABLE.c.revoked_at.is_(None)
                )
            ).one_or_none()
        if row is None or not hmac.compare_digest(row.hash, digest):
            return None
        now_us = self._now_us(now)
        if row.last_used_at is None or now_us - row.last_used_at >= LAST_USED_EVERY_US:
            try:
                with self.led.writing() as w:
                    w.execute(update(_TABLE).where(_TABLE.c.id == row.id).values(last_used_at=now_us))
            except LedgerError:  # best effort: a busy database must not turn a valid token away
                log.warning("could not record the use of api token %s", row.id, exc_info=True)
        account: str = row.account
        return account


def is_token_id(text: str) -> bool:
    return _ID_RE.fullmatch(text) is not None
