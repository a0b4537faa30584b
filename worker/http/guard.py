"""Who may read the operator's views: ``/ops``, ``/metrics`` of ``serve`` and a worker's metrics port.

They list every account's scope with its spend and budget, so they are no public page. A request
may read them when it bears the operator token (``Authorization: Bearer $MEMLEDGER_OPERATOR_TOKEN``),
or when it comes from a loopback client, names a loopback ``Host`` (a DNS-rebinding page on
another name is refused even though its requests arrive from 127.0.0.1) and carries no ``Origin``
(a script of a web page the operator has open, even an origin allowed to call ``/rpc``, reads
nothing here: typing the address or a scraper sends none). Everything else gets 401
(a token is configured: send it) or 403 (none is: only loopback may read). The API token of an
account opens none of them: it speaks for one account, these views speak for all.

:func:`refusal` decides; :func:`asgi_refusal` answers for Starlette, :func:`guarded_wsgi` wraps
the WSGI app of ``prometheus_client`` for the worker's metrics port.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

LOOPBACK_CLIENTS = frozenset({"127.0.0.1", "::1", "localhost"})
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "[::1]", "::1"})


@dataclass(frozen=True, slots=True)
class Refusal:
    status: int
    message: str
    headers: dict[str, str] = field(default_factory=dict)


def host_name(host_header: str) -> str:
    """The name part of a Host header (no port), lower case; an IPv6 literal keeps its brackets."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[: host.find("]") + 1] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def refusal(
    *, authorization: str, client: str, host: str, operator_token: str | None, what: str, path: str, origin: str = ""
) -> Refusal | None:
    """None when the request may read ``what`` (served at ``path``); else the refusal, saying what would work."""
    if operator_token and authorization[:7].lower() == "bearer ":
        if hmac.compare_digest(authorization[7:].strip().encode(), operator_token.encode()):
            return None
        return Refusal(401, "the operator token is wrong", {"WWW-Authenticate": "Bearer"})
    if client in LOOPBACK_CLIENTS and host_name(host) in LOOPBACK_HOSTS and not origin:
        return None
    if operator_token:
        return Refusal(
            401,
            f"{what} needs Authorization: Bearer <MEMLEDGER_OPERATOR_TOKEN> from this address",
            {"WWW-Authenticate": "Bearer"},
        )
    return Refusal(
        403,
        f"{what} is served to loopback clients only (http://127.0.0.1:<port>{path}); "
        "set MEMLEDGER_OPERATOR_TOKEN to reach it from elsewhere",
    )


def asgi_refusal(request: Request, operator_token: str | None, *, what: str, path: str) -> Response | None:
    """:func:`refusal` for a Starlette request: None, or the plain-text 401/403 answer."""
    refused = refusal(
        authorization=request.headers.get("authorization", ""),
        client=request.client.host if request.client is not None else "",
        host=request.headers.get("host", ""),
        origin=request.headers.get("origin", ""),
        operator_token=operator_token,
        what=what,
        path=path,
    )
    if refused is None:
        return None
    return PlainTextResponse(refused.message, status_code=refused.status, headers=refused.headers)


WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def guarded_wsgi(app: WsgiApp, operator_token: str | None, *, what: str, path: str) -> WsgiApp:
    """``app`` behind :func:`refusal` (for ``prometheus_client``'s WSGI exposition)."""

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        refused = refusal(
            authorization=environ.get("HTTP_AUTHORIZATION", ""),
            client=environ.get("REMOTE_ADDR", ""),
            host=environ.get("HTTP_HOST", ""),
            origin=environ.get("HTTP_ORIGIN", ""),
            operator_token=operator_token,
            what=what,
            path=path,
        )
        if refused is None:
            return app(environ, start_response)
        body = refused.message.encode()
        headers = [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))]
        status = "401 Unauthorized" if refused.status == 401 else "403 Forbidden"
        start_response(status, headers + list(refused.headers.items()))
        return [body]

    return guarded


def serve_guarded_metrics(port: int, registry: Any, operator_token: str | None, *, addr: str = "0.0.0.0") -> Any:
    """Serve ``registry``'s exposition on ``addr:port`` behind the guard, in a daemon thread; returns the server.

    ``prometheus_client.start_http_server`` without the guard: same WSGI app, a threading server
    that does not log every scrape.
    """
    import threading
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    from prometheus_client import make_wsgi_app

    class Server(ThreadingMixIn, WSGIServer):
        daemon_threads = True

    class QuietHandler(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            """Scrapes are not logged."""

    app = guarded_wsgi(make_wsgi_app(registry), operator_token, what="metrics", path="/metrics")
    server = make_server(addr, port, app, Server, handler_class=QuietHandler)
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server
