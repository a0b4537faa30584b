"""What ``POST /rpc`` and ``POST /mcp`` check before anything is read or run, and whose ledger answers.

:class:`Guard` runs the checks of :mod:`worker.http.server`'s table in order (Host, Origin, content
type, the token, the account's share of the requests open, then the body, read with its limit and
timeout, and last a place among the requests being answered: :mod:`worker.http.limits`) and
answers a refusal as one JSON-RPC error with its HTTP status. :func:`check_bind` refuses to listen
beyond loopback without tokens. The token alone picks the account: :meth:`Guard.ledger_for`.
"""

from __future__ import annotations

import asyncio
import ipaddress
import threading

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from ledger import Ledger
from ledger.protocol import INVALID_REQUEST, RpcError, dumps, error_response
from worker.errors import BindRefused
from worker.http.limits import TICKET_KEY, Busy, Ticket
from worker.http.tokens import TokenStore
from worker.runtime import Runtime

_MAX_ACCOUNTS_CACHED = 4096


def is_loopback(host: str) -> bool:
    """True for ``localhost``, ``*.localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    name = host.strip().strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_bind(host: str, *, auth: str) -> None:
    """Refuse to listen on anything but loopback unless every request needs a token.

    Raises:
        BindRefused: with what the operator should do.
    """
    if auth != "tokens" and not is_loopback(host):
        raise BindRefused(
            f"refusing to serve on {host}: without tokens every client could read and write every pin. "
            "Set MEMLEDGER_AUTH=tokens (and create tokens with `memledger tokens create ACCOUNT`), "
            "or bind 127.0.0.1"
        )


class AccountLedgers:
    """The ledger for each account a token names: one :meth:`Ledger.for_account` twin per account."""

    def __init__(self, base: Ledger) -> None:
        self.base = base
        self._lock = threading.Lock()
        self._by_account: dict[str, Ledger] = {}

    def get(self, account: str) -> Ledger:
        with self._lock:
            led = self._by_account.get(account)
            if led is None:
                if len(self._by_account) >= _MAX_ACCOUNTS_CACHED:
                    self._by_account.clear()
                led = self.base.for_account(account)
                self._by_account[account] = led
            return led


def _refusal(
    status: int, code: int, message: str, reason: str, *, close: bool = False, headers: dict[str, str] | None = None
) -> Response:
    answer = dumps(error_response(None, RpcError(code, message, reason=reason)))
    extra = {"connection": "close"} if close else {}
    return Response(answer, status_code=status, media_type="application/json", headers={**extra, **(headers or {})})


def _busy(busy: Busy) -> Response:
    return Response(busy.body(), status_code=busy.status, media_type="application/json", headers={"retry-after": "1"})


def _host_name(host_header: str) -> str:
    """The name part of a Host header (no port), lower case; IPv6 keeps its brackets off."""
    value = host_header.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class Guard:
    """The checks of one ``POST /rpc`` request before its body is read (see the module docstring)."""

    def __init__(self, runtime: Runtime) -> None:
        config = runtime.config
        self.tokens_on = config.auth == "tokens"
        self.origins = frozenset(config.origin_list())
        self.hosts = frozenset(config.host_list())
        self.max_bytes = config.max_request_bytes
        self.body_timeout_s = config.body_timeout_s
        self.tokens = TokenStore.for_ledger(runtime.ledger)
        self.base = runtime.ledger
        self.default_account = runtime.ledger.scope_key.split(":", 1)[1]
        self.ledgers = AccountLedgers(runtime.ledger)

    async def admit(self, request: Request) -> tuple[str, bytes] | Response:
        """The caller's account and the request's body, or the first refusal (checks in the table's order)."""
        refused = self.refuse(request)
        if refused is not None:
            return refused
        account = await self.account(request, self.default_account)
        if isinstance(account, Response):
            return account
        ticket: Ticket | None = request.scope.get(TICKET_KEY)  # None: served without the limit (tests)
        busy = None if ticket is None else ticket.join(account)
        if busy is not None:
            return _busy(busy)
        body = await self.body(request)
        if isinstance(body, Response):
            return body
        busy = None if ticket is None else ticket.answer()
        if busy is not None:
            return _busy(busy)
        return account, body

    def ledger_for(self, account: str) -> Ledger:
        """The ledger bound to ``account``: the server's own, or its twin for another account."""
        return self.base if account == self.default_account else self.ledgers.get(account)

    def refuse(self, request: Request) -> Response | None:
        host = _host_name(request.headers.get("host", ""))
        if (not self.tokens_on or self.hosts) and not (is_loopback(host) or host in self.hosts):
            return _refusal(
                421, INVALID_REQUEST, "misdirected request: this server answers loopback names and its allowed "
                "hosts only (MEMLEDGER_ALLOWED_HOSTS)", "misdirected_request",
            )  # fmt: skip
        origin = request.headers.get("origin")
        if origin is not None and origin.rstrip("/").lower() not in self.origins:
            return _refusal(
                403, INVALID_REQUEST, "forbidden: requests from web pages are refused unless their Origin is in "
                "MEMLEDGER_ALLOWED_ORIGINS", "forbidden_origin",
            )  # fmt: skip
        media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media != "application/json":
            return _refusal(
                415, INVALID_REQUEST, "unsupported media type: send the request as Content-Type: application/json",
                "unsupported_media_type",
            )  # fmt: skip
        return None

    async def account(self, request: Request, default: str) -> str | Response:
        """The caller's account: from the Bearer token with tokens on, else the server's own."""
        if not self.tokens_on:
            return default
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        account = None
        if scheme.lower() == "bearer" and token.strip():
            account = await run_in_threadpool(self.tokens.authenticate, token.strip())
        if account is None:
            return _refusal(
                401, INVALID_REQUEST, "unauthorized: send Authorization: Bearer <token> with a token from "
                "`memledger tokens create ACCOUNT` that has not been revoked", "unauthorized",
                headers={"www-authenticate": 'Bearer realm="memledger"'},
            )  # fmt: skip
        return account

    async def body(self, request: Request) -> bytes | Response:
        """The body, read while counting: refused at the limit, never buffered past it."""
        declared = request.headers.get("content-length")
        too_large = _refusal(
            413, INVALID_REQUEST, f"request too large: the limit is {self.max_bytes:,} bytes (a batch counts whole)",
            "request_too_large", close=True,
        )  # fmt: skip
        if declared is not None:
            if not declared.strip().isdigit():
                return _refusal(400, INVALID_REQUEST, "bad Content-Length", "invalid_request", close=True)
            if int(declared) > self.max_bytes:
                return too_large
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.body_timeout_s):
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > self.max_bytes:
                        return too_large
                    chunks.append(chunk)
        except TimeoutError:
            return _refusal(
                408, INVALID_REQUEST, f"request timeout: the body must arrive within {self.body_timeout_s:g} s",
                "request_timeout", close=True,
            )  # fmt: skip
        return b"".join(chunks)
