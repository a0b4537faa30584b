"""What bounds ``memledger serve`` under a flood of connections (docs/operations.md, "Floods of connections").

* :class:`InFlightLimit` counts the requests being answered and answers ``503`` past
  ``max_requests_in_flight``. A connection that has not sent a whole request head counts for
  nothing: it costs one file descriptor and a few kilobytes until the header timeout closes it
  (``bounded_h11_protocol`` in :mod:`worker.http.server`). uvicorn's own ``limit_concurrency``
  counts *connections*, so a thousand idle sockets made it answer every real request 503;
  ``serve`` does not use it.
* A request with a body (``POST /rpc``, ``POST /mcp``) takes its place only once its body is in:
  while the body arrives it waits in a pool of its own, of the same size, so bodies dribbled
  by one client never hold the places of the requests being answered. Its :class:`Ticket`
  (handed to :class:`worker.http.admission.Guard` in the ASGI scope) moves it from one to the
  other. With tokens on, one account has at most ``max_requests_per_account`` requests open
  (waiting for their body or being answered); its next one gets ``429`` at once, so one tenant
  cannot fill either pool.
* :func:`raise_open_file_limit` lifts the soft ``RLIMIT_NOFILE`` to the hard limit at start,
  so thousands of idle sockets do not exhaust the descriptors the real requests (and the
  database) need; the usual soft default is 1024.
"""

from __future__ import annotations

import logging
import resource
from collections import Counter
from typing import NamedTuple

from starlette.types import ASGIApp, Receive, Scope, Send

from ledger.protocol import REASON_CODES, RpcError, dumps, error_response

log = logging.getLogger(__name__)

UNLIMITED_PATHS = frozenset({"/livez"})  # liveness must answer under load: a 503 there gets the process killed
BODY_PATHS = frozenset({"/rpc", "/mcp"})  # a place only once the body is in (worker.http.admission.Guard)
TICKET_KEY = "memledger.ticket"  # where a request's Ticket is in its ASGI scope
_CAP_WHEN_UNLIMITED = 1 << 20


def raise_open_file_limit() -> int:
    """Raise this process's soft limit on open files to its hard limit; return the soft limit now in force.

    When the hard limit is unlimited the soft limit goes to 2**20. A refusal by the system
    leaves the limit as it was (logged): serving goes on with fewer connections.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = _CAP_WHEN_UNLIMITED if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-file limit from %d to %d: %s", soft, target, exc)
    return soft


class Busy(NamedTuple):
    """A refusal for lack of room: its HTTP status (503 the server's, 429 the account's) and message."""

    status: int
    message: str

    def body(self) -> bytes:
        """The JSON-RPC ``busy`` error (``-32005``) it is answered with, with ``Retry-After: 1``."""
        return dumps(error_response(None, RpcError(REASON_CODES["busy"], self.message, reason="busy"))).encode()


class InFlightLimit:
    """ASGI middleware: at most ``limit`` HTTP requests answered at once; the next ones get 503 at once.

    Only requests whose head has arrived reach an ASGI app, so idle or half-open connections
    never take a place; on :data:`BODY_PATHS` a request takes one only when its body is in
    (:class:`Ticket`). ``per_account``: the most requests one account may have open at once
    (None: no share; ``serve`` sets it with tokens on). The refusals are JSON-RPC ``busy`` errors
    (``-32005``) with ``Retry-After: 1``. Every counter is touched on the event loop only.
    """

    def __init__(self, app: ASGIApp, *, limit: int, per_account: int | None = None) -> None:
        self.app = app
        self.limit = limit
        self.per_account = per_account
        self.in_flight = 0  # requests being answered
        self.waiting = 0  # requests whose body is being read
        self.by_account: Counter[str] = Counter()  # open requests per account, while per_account is set

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in UNLIMITED_PATHS:
            await self.app(scope, receive, send)
            return
        ticket = Ticket(self)
        if scope["path"] in BODY_PATHS:
            scope[TICKET_KEY] = ticket
        else:
            refused = ticket.answer()
            if refused is not None:
                await _refuse(send, refused)
                return
        try:
            await self.app(scope, receive, send)
        finally:
            ticket.release()

    def server_busy(self) -> Busy:
        return Busy(503, f"server busy: {self.limit} requests are being answered; retry in a second")


class Ticket:
    """The places one request holds: its account's share, a place to wait for its body, a place being answered.

    :class:`worker.http.admission.Guard` calls :meth:`join` once it knows the account and
    :meth:`answer` once the body is in; :class:`InFlightLimit` calls :meth:`release` when the
    response has ended. Each step returns the refusal, or None.
    """

    __slots__ = ("account", "answering", "limits", "waiting")

    def __init__(self, limits: InFlightLimit) -> None:
        self.limits = limits
        self.account: str | None = None
        self.waiting = False
        self.answering = False

    def join(self, account: str) -> Busy | None:
        """Count the request for ``account`` and let it wait for its body; the refusal when there is no room."""
        limits = self.limits
        if limits.per_account is not None:
            if limits.by_account[account] >= limits.per_account:
                return Busy(
                    429,
                    f"too many requests: this account already has {limits.per_account} requests open "
                    "(waiting for their body or being answered); retry in a second",
                )
            limits.by_account[account] += 1
            self.account = account
        if limits.waiting >= limits.limit:
            return Busy(503, f"server busy: {limits.limit} requests are sending their body; retry in a second")
        limits.waiting += 1
        self.waiting = True
        return None

    def answer(self) -> Busy | None:
        """The body is in (or there is none): take a place among the requests being answered."""
        limits = self.limits
        self._stop_waiting()
        if limits.in_flight >= limits.limit:
            return limits.server_busy()
        limits.in_flight += 1
        self.answering = True
        return None

    def _stop_waiting(self) -> None:
        if self.waiting:
            self.waiting = False
            self.limits.waiting -= 1

    def release(self) -> None:
        """Give back every place the request holds (at its response's end; idempotent)."""
        limits = self.limits
        self._stop_waiting()
        if self.answering:
            self.answering = False
            limits.in_flight -= 1
        if self.account is not None:
            limits.by_account[self.account] -= 1
            if limits.by_account[self.account] <= 0:
                del limits.by_account[self.account]
            self.account = None


async def _refuse(send: Send, busy: Busy) -> None:
    body = busy.body()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", b"1"),
    ]
    await send({"type": "http.response.start", "status": busy.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
