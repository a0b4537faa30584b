"""What bounds ``memledger serve`` under a flood of connections (docs/operations.md, "Floods of connections").

* :class:`InFlightLimit` counts the requests being answered — from complete headers to the
  end of the response — and answers ``503`` past ``max_requests_in_flight``. A connection
  that has not sent a whole request head counts for nothing: it costs one file descriptor
  and a few kilobytes until the header timeout closes it (``bounded_h11_protocol`` in
  :mod:`worker.http.server`). uvicorn's own ``limit_concurrency`` counts *connections*, so a
  thousand idle sockets made it answer every real request 503; ``serve`` does not use it.
* :func:`raise_open_file_limit` lifts the soft ``RLIMIT_NOFILE`` to the hard limit at start,
  so thousands of idle sockets do not exhaust the descriptors the real requests (and the
  database) need; the usual soft default is 1024.
"""

from __future__ import annotations

import logging
import resource

from starlette.types import ASGIApp, Receive, Scope, Send

from ledger.protocol import REASON_CODES, RpcError, dumps, error_response

log = logging.getLogger(__name__)

UNLIMITED_PATHS = frozenset({"/livez"})  # liveness must answer under load: a 503 there gets the process killed
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


class InFlightLimit:
    """ASGI middleware: at most ``limit`` HTTP requests answered at once; the next ones get 503 at once.

    Only requests whose head has arrived reach an ASGI app, so idle or half-open connections
    never take a place. The 503 is a JSON-RPC ``busy`` error (``-32005``) with ``Retry-After: 1``.
    """

    def __init__(self, app: ASGIApp, *, limit: int) -> None:
        self.app = app
        self.limit = limit
        self.in_flight = 0  # touched on the event loop only

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in UNLIMITED_PATHS:
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.limit:
            await self._refuse(send)
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1

    async def _refuse(self, send: Send) -> None:
        message = f"server busy: {self.limit} requests are being answered; retry in a second"
        body = dumps(error_response(None, RpcError(REASON_CODES["busy"], message, reason="busy"))).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"retry-after", b"1"),
        ]
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": body})
