"""``memledger serve``: the record protocol over HTTP, on uvicorn + Starlette, served safely (docs/operations.md).

Routes::

    POST /rpc       one JSON-RPC 2.0 request or batch (ledger.protocol) plus the worker's extra methods
    GET  /healthz   {"status": "ok" | "degraded" | "down", ...}; 503 only when the database is down
    GET  /metrics   Prometheus exposition (the operator's: loopback or operator token, as /ops)
    POST /mcp       the MCP tools over streamable HTTP (worker.mcp.server), behind the same checks; the
                    MCP SDK loads in the background once the server listens (:class:`LazyMcp`)
    GET  /livez     liveness: the process answers (no database check); see worker.http.ops
    GET  /ops       the read-only operator page (loopback or operator token); see worker.http.ops

Every request is counted per RPC method and access-logged (never a body): worker.http.ops.

What ``POST /rpc`` refuses, in this order, before anything is read or run:

======  ==================================================================================
421     a ``Host`` that is not a loopback name or in ``MEMLEDGER_ALLOWED_HOSTS`` (DNS rebinding);
        with tokens on and no allowed hosts configured the Host is not checked (a browser
        never attaches the Bearer token, so rebinding gains nothing)
403     an ``Origin`` that is present and not in ``MEMLEDGER_ALLOWED_ORIGINS`` (cross-site forms)
415     a ``Content-Type`` other than ``application/json`` (the "simple" cross-site request)
401     with ``MEMLEDGER_AUTH=tokens``: no valid ``Authorization: Bearer`` token
429     with tokens: the account already has ``max_requests_per_account`` requests open (``busy``,
        ``Retry-After: 1``; :mod:`worker.http.limits`)
503     ``max_requests_in_flight`` requests already waiting for their body (``busy``)
413     a ``Content-Length`` over ``max_request_bytes`` (before a byte is read), or a chunked
        body that reaches it (cut off there); the connection is closed
408     a body that does not arrive within ``body_timeout_s``
503     ``max_requests_in_flight`` requests already being answered (``busy``, ``Retry-After: 1``);
        a request waiting for its body holds no such place
======  ==================================================================================

Everything else is answered in JSON-RPC, with status 200 (204 for notifications only):
an unexpected failure is a ``-32603`` response, never a 500 that would drop the
connection's next pipelined request. CORS headers are sent only to configured origins.

Slow clients: uvicorn bounds the header size (``h11_max_incomplete_event_size``) and idle
keep-alive connections (``timeout_keep_alive``); it has no header read timeout, so
:func:`bounded_h11_protocol` adds one (a connection whose request headers are not complete
within ``header_timeout_s`` is closed). The body timeout is enforced here, while reading.
Floods of idle connections: only requests in flight are limited (503 past
``max_requests_in_flight``, :mod:`worker.http.limits`), never connections, and the
open-file limit is raised at start. Other routes take their place when their head is in
(``/livez`` never waits for one).

The protocol is synchronous (database I/O), so each request runs in Starlette's
thread pool. The lifespan starts the background parts (see :mod:`worker.runtime`)
and stops them on shutdown: uvicorn turns SIGTERM into a graceful shutdown, the
dramatiq worker lets in-flight runs finish (up to ``shutdown_timeout_s``; a run cut
off is left ``running`` for a janitor), and the process exits 0.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import signal
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING, Any

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from ledger import Ledger
from ledger.protocol import (
    METHODS,
    PARSE_ERROR,
    RpcError,
    dumps,
    error_response,
    handle_line,
    internal_error_response,
)
from worker.errors import PortUnavailable
from worker.http.admission import Guard, check_bind
from worker.http.guard import asgi_refusal
from worker.http.limits import InFlightLimit, raise_open_file_limit
from worker.http.observe import ACCOUNT_STATE_KEY
from worker.http.ops import ops_routes, with_observability
from worker.metrics import render_latest
from worker.rpc.methods import NAMES, extra_methods
from worker.runtime import Runtime

if TYPE_CHECKING:
    from worker.mcp.server import McpHttp

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 1_000_000  # the default of WorkerConfig.max_request_bytes
MAX_HEADER_BYTES = 16 * 1024
KEEP_ALIVE_S = 5
GRACEFUL_HTTP_SHUTDOWN_S = 10
MCP_PATH = "/mcp"  # worker.mcp.server.MCP_PATH, not imported from there: that would load the MCP SDK


def rpc_endpoint(runtime: Runtime) -> Callable[[Request], Awaitable[Response]]:
    """``POST /rpc``: one JSON-RPC request or batch in the body; one JSON answer (204 when there is none)."""
    # Without tokens, serve answers its one account on loopback: its operator. With tokens, tenants.
    extra = extra_methods(runtime, operator=runtime.config.auth != "tokens")
    guard = Guard(runtime)

    async def answer(request: Request) -> Response:
        admitted = await guard.admit(request)
        if isinstance(admitted, Response):
            return admitted
        account, body = admitted
        try:
            line = body.decode("utf-8")
        except UnicodeDecodeError:
            err = RpcError(PARSE_ERROR, "parse error: the request is not UTF-8 JSON", reason="parse_error")
            return _json_line(dumps(error_response(None, err)))
        request.scope.setdefault("state", {})[ACCOUNT_STATE_KEY] = account  # for the access log
        reply = await run_in_threadpool(handle_line, guard.ledger_for(account), line, extra_methods=extra)
        if reply is None:  # notifications only: nothing to answer
            return Response(status_code=204)
        return _json_line(reply)

    async def rpc(request: Request) -> Response:
        try:
            return await answer(request)
        except ClientDisconnect:
            return Response(status_code=204)
        except Exception:
            log.exception("internal error serving POST /rpc")
            return _json_line(dumps(internal_error_response()))

    return rpc


def mcp_endpoint(runtime: Runtime) -> McpHttp:
    """``POST /mcp``: the MCP tools (worker.mcp.server) behind ``/rpc``'s checks, in the same order.

    Host, Origin, content type, the token (which alone picks the account), then the body,
    read here with the same limit and timeout and handed to the SDK as read.
    """
    from worker.mcp.server import McpHttp

    guard = Guard(runtime)

    async def admit(request: Request) -> Response | bytes:
        admitted = await guard.admit(request)
        if isinstance(admitted, Response):
            return admitted
        request.state.account, body = admitted
        return body

    def ledger_for(ctx: Any) -> Ledger:
        return guard.ledger_for(ctx.request.state.account)

    return McpHttp(ledger_for, admit=admit, max_request_bytes=guard.max_bytes)


class LazyMcp:
    """``/mcp`` whose MCP SDK (a second of imports) loads after the server listens, so that ``/livez``
    answers without it.

    :meth:`build` runs on the background start thread (:meth:`Runtime.start_in_background`, before
    the worker); :meth:`run`, entered in the lifespan, then runs the SDK's session manager on the
    event loop. A request that comes before waits for it; if the SDK could not load, ``/mcp``
    answers 503 (the reason is logged).
    """

    def __init__(self, make: Callable[[], McpHttp]) -> None:
        self._make = make
        self._loop: asyncio.AbstractEventLoop | None = None
        self._built: asyncio.Future[McpHttp | None] | None = None
        self._ready = asyncio.Event()
        self._mcp: McpHttp | None = None

    def build(self) -> None:
        """Import the SDK and build the endpoint (blocking: on a background thread, after :meth:`run`)."""
        mcp: McpHttp | None = None
        try:
            mcp = self._make()
        except Exception:
            log.exception("the MCP endpoint could not start: /mcp answers 503")
        loop, built = self._loop, self._built
        if loop is not None and built is not None:

            def settle() -> None:
                if not built.done():
                    built.set_result(mcp)

            with suppress(RuntimeError):  # the loop has closed: the server is gone
                loop.call_soon_threadsafe(settle)

    @asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """Serve ``/mcp`` while inside: its session manager runs once :meth:`build` has finished."""
        self._loop = asyncio.get_running_loop()
        self._built = self._loop.create_future()
        self._ready = asyncio.Event()
        stop = asyncio.Event()
        task = asyncio.create_task(self._serve(self._built, stop))
        try:
            yield
        finally:
            stop.set()
            if not self._built.done():
                task.cancel()
            with suppress(asyncio.CancelledError):
                await task

    async def _serve(self, built: asyncio.Future[McpHttp | None], stop: asyncio.Event) -> None:
        try:
            mcp = await built
            if mcp is not None:
                async with mcp.run():
                    self._mcp = mcp
                    self._ready.set()
                    await stop.wait()
        finally:
            self._mcp = None
            self._ready.set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._ready.wait()
        mcp = self._mcp
        if mcp is None:
            refusal = PlainTextResponse("/mcp is unavailable: see the server's log", status_code=503)
            await refusal(scope, receive, send)
            return
        await mcp(scope, receive, send)


def create_app(runtime: Runtime, *, run_worker: bool = True) -> Starlette:
    """The ASGI app for ``runtime``; its lifespan starts and stops the background parts."""
    mcp_http = LazyMcp(lambda: mcp_endpoint(runtime))

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with mcp_http.run():
            # /livez answers while they start; the MCP SDK loads first, then the worker
            runtime.start_in_background(run_worker=run_worker, first=mcp_http.build)
            broker = "embedded" if runtime.config.embedded else "redis"
            log.info(
                "memledger serve ready (worker: %s, broker: %s, auth: %s)", run_worker, broker, runtime.config.auth
            )
            yield
        log.info("shutting down: stopping the janitor and the worker")
        await run_in_threadpool(runtime.close)

    async def healthz(_request: Request) -> Response:
        report = await run_in_threadpool(runtime.health)
        return JSONResponse(report, status_code=503 if report["status"] == "down" else 200)

    async def metrics(request: Request) -> Response:
        # Every account's scope, spend and budget: the operator's, like /ops (worker.http.guard).
        refused = asgi_refusal(request, runtime.config.operator_token, what="metrics", path="/metrics")
        if refused is not None:
            return refused
        payload, content_type = await run_in_threadpool(render_latest)
        return Response(payload, media_type=content_type)

    routes = [
        Route("/rpc", rpc_endpoint(runtime), methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route(MCP_PATH, mcp_http),
        *ops_routes(runtime),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, middleware=_middleware(runtime))
    return with_observability(app, runtime, known_methods=(*METHODS, *NAMES))


def _middleware(runtime: Runtime) -> list[Middleware]:
    """The in-flight limit, then CORS when origins are configured (no CORS headers at all otherwise)."""
    # Counted from a request's complete head (its body, on /rpc and /mcp) to its response's end: idle
    # connections and dribbled bodies never take a place. With tokens, each account gets a bounded share.
    config = runtime.config
    per_account = config.max_requests_per_account if config.auth == "tokens" else None
    if per_account is not None and per_account >= config.max_requests_in_flight:
        log.warning(
            "MEMLEDGER_MAX_REQUESTS_PER_ACCOUNT (%d) is not below MEMLEDGER_MAX_REQUESTS_IN_FLIGHT (%d): one account "
            "can take every place; keep it well below (docs/operations.md, Floods of connections)",
            per_account,
            config.max_requests_in_flight,
        )
    middleware = [Middleware(InFlightLimit, limit=config.max_requests_in_flight, per_account=per_account)]
    origins = runtime.config.origin_list()
    if origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=origins,
                allow_methods=["POST"],
                allow_headers=["content-type", "authorization"],
                max_age=600,
            )
        )
    return middleware


def _json_line(text: str, *, status: int = 200) -> Response:
    return Response(text, status_code=status, media_type="application/json")


def bounded_h11_protocol(header_timeout_s: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a header read timeout: a connection is closed when a request's
    headers are not complete ``header_timeout_s`` after the connection opened or the last response ended.
    """

    class BoundedH11Protocol(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None
        _armed_cycle: object = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)  # type: ignore[arg-type]
            self._arm_header_timer()

        def _arm_header_timer(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
            self._armed_cycle = self.cycle
            self._header_timer = self.loop.call_later(header_timeout_s, self._header_deadline)

        def _header_deadline(self) -> None:
            self._header_timer = None
            in_flight = self.cycle is not None and not self.cycle.response_complete
            if in_flight or self.cycle is not self._armed_cycle:
                self._arm_header_timer()  # a request got its headers in time: watch the next one
            elif not self.transport.is_closing():
                log.info("closing a connection whose request headers did not arrive in %.0f s", header_timeout_s)
                self.transport.close()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None
            super().connection_lost(exc)

    return BoundedH11Protocol


def server_config(runtime: Runtime, *, host: str, port: int, run_worker: bool) -> uvicorn.Config:
    """The uvicorn configuration ``serve`` runs with: its limits and timeouts, and the header timeout."""
    return uvicorn.Config(
        create_app(runtime, run_worker=run_worker),
        host=host,
        port=port,
        http=bounded_h11_protocol(runtime.config.header_timeout_s),
        log_config=None,
        access_log=False,
        lifespan="on",
        proxy_headers=False,  # the client's address is the socket's; no header can change it
        server_header=False,
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        timeout_keep_alive=KEEP_ALIVE_S,
        limit_concurrency=None,  # it counts connections, idle ones included: InFlightLimit counts requests
        timeout_graceful_shutdown=GRACEFUL_HTTP_SHUTDOWN_S,
    )


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port`` for :func:`run_server`, opened before anything else starts.

    Raises:
        PortUnavailable: the port is in use or the address cannot be bound, with what to do.
    """
    try:
        family, kind, proto, _name, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise PortUnavailable(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise PortUnavailable(
                f"port {port} on {host} is already in use; choose another with --port, MEMLEDGER_PORT "
                f"or `make run PORT=<port>`"
            ) from None
        raise PortUnavailable(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


def run_server(runtime: Runtime, *, host: str, port: int, run_worker: bool, sock: socket.socket | None = None) -> None:
    """Serve until SIGTERM or SIGINT, then shut down gracefully and return (exit status 0).

    ``sock`` is a socket from :func:`listen` (else uvicorn binds ``host:port`` itself).

    Raises:
        BindRefused: ``host`` is not loopback and tokens are off.
    """
    check_bind(host, auth=runtime.config.auth)
    open_files = raise_open_file_limit()
    log.info("serving with up to %d open files", open_files)
    config = server_config(runtime, host=host, port=port, run_worker=run_worker)
    # uvicorn re-raises the signal it caught after a graceful shutdown, with the handler that was
    # installed before it started; a no-op one makes that a clean return instead of death by signal.
    previous = {sig: signal.signal(sig, _ignore) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        uvicorn.Server(config).run(sockets=None if sock is None else [sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        runtime.close()


def _ignore(_signum: int, _frame: object) -> None:
    """Swallow the signal uvicorn re-raises after it has shut down."""
