"""``memledger serve``: the record protocol over HTTP, on uvicorn + Starlette.

Routes::

    POST /rpc       one JSON-RPC 2.0 request (ledger.protocol) plus ``consolidation/notify_turn``
    GET  /healthz   {"status": "ok" | "degraded" | "down", ...}; 503 only when the database is down
    GET  /metrics   Prometheus exposition
    GET  /livez     liveness: the process answers (no database check); see worker.ops.http
    GET  /ops       the read-only operator page (loopback or operator token); see worker.ops.http

Every request is counted per RPC method and access-logged (never a body): worker.ops.http.

The protocol is synchronous (database I/O), so each request runs in Starlette's
thread pool. The lifespan starts the background parts (see :mod:`worker.runtime`)
and stops them on shutdown: uvicorn turns SIGTERM into a graceful shutdown, the
dramatiq worker lets in-flight runs finish (up to ``shutdown_timeout_s``; a run cut
off is left ``running`` for a janitor), and the process exits 0.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ledger import Ledger
from ledger.instants import format_rfc3339
from ledger.protocol import INVALID_PARAMS, PARSE_ERROR, RpcError, dumps, error_response, handle_line
from worker.metrics import render_latest
from worker.ops.http import ops_routes, with_observability
from worker.runtime import Runtime

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 1_000_000
NOTIFY_TURN = "consolidation/notify_turn"
GRACEFUL_HTTP_SHUTDOWN_S = 10


def notify_turn_method(runtime: Runtime) -> Any:
    """The ``consolidation/notify_turn`` protocol method: no params; the bound account's scope.

    Result: ``{"scheduled": false, "scopeKey"}`` when the scope's consolidation is off,
    else ``{"scheduled": true, "scopeKey", "runId", "turns", "dueAt"}``. The turn is
    recorded in the database before the queue is touched, and a queue failure never
    fails the call.
    """

    def method(led: Ledger, params: dict[str, Any]) -> dict[str, Any]:
        if params:
            raise RpcError(
                INVALID_PARAMS,
                f"invalid params: {NOTIFY_TURN} takes no params; the scope is always {led.scope_key}",
                reason="invalid_params",
            )
        run = runtime.notify_turn(led.scope_key)
        if run is None:
            return {"scheduled": False, "scopeKey": led.scope_key}
        return {
            "scheduled": True,
            "scopeKey": run.scope_key,
            "runId": run.id,
            "turns": run.turns,
            "dueAt": format_rfc3339(run.due_at),
        }

    return method


def rpc_endpoint(runtime: Runtime) -> Callable[[Request], Awaitable[Response]]:
    """``POST /rpc``: one JSON-RPC request in the body, one response (or 204 for a notification)."""
    extra = {NOTIFY_TURN: notify_turn_method(runtime)}

    async def rpc(request: Request) -> Response:
        body = await request.body()
        if len(body) > MAX_REQUEST_BYTES:
            err = RpcError(-32600, f"request too large (over {MAX_REQUEST_BYTES} bytes)", reason="invalid_request")
            return _json_line(dumps(error_response(None, err)), status=413)
        try:
            line = body.decode("utf-8")
        except UnicodeDecodeError:
            err = RpcError(PARSE_ERROR, "parse error: the request is not UTF-8 JSON", reason="parse_error")
            return _json_line(dumps(error_response(None, err)))
        answer = await run_in_threadpool(handle_line, runtime.ledger, line, extra_methods=extra)
        if answer is None:  # a notification: nothing to answer
            return Response(status_code=204)
        return _json_line(answer)

    return rpc


def create_app(runtime: Runtime, *, run_worker: bool = True) -> Starlette:
    """The ASGI app for ``runtime``; its lifespan starts and stops the background parts."""

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        if run_worker:
            runtime.start_worker()
            if runtime.config.embedded:
                runtime.start_sweep_schedule()
        runtime.start_janitor()
        broker = "embedded" if runtime.config.embedded else "redis"
        log.info("memledger serve ready (worker: %s, broker: %s)", run_worker, broker)
        yield
        log.info("shutting down: stopping the janitor and the worker")
        await run_in_threadpool(runtime.close)

    async def healthz(_request: Request) -> Response:
        report = await run_in_threadpool(runtime.health)
        return JSONResponse(report, status_code=503 if report["status"] == "down" else 200)

    async def metrics(_request: Request) -> Response:
        payload, content_type = await run_in_threadpool(render_latest)
        return Response(payload, media_type=content_type)

    routes = [
        Route("/rpc", rpc_endpoint(runtime), methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        *ops_routes(runtime),
    ]
    return with_observability(Starlette(routes=routes, lifespan=lifespan), runtime)


def _json_line(text: str, *, status: int = 200) -> Response:
    return Response(text, status_code=status, media_type="application/json")


def run_server(runtime: Runtime, *, host: str, port: int, run_worker: bool) -> None:
    """Serve until SIGTERM or SIGINT, then shut down gracefully and return (exit status 0)."""
    app = create_app(runtime, run_worker=run_worker)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=GRACEFUL_HTTP_SHUTDOWN_S,
    )
    # uvicorn re-raises the signal it caught after a graceful shutdown, with the handler that was
    # installed before it started; a no-op one makes that a clean return instead of death by signal.
    previous = {sig: signal.signal(sig, _ignore) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        uvicorn.Server(config).run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        runtime.close()


def _ignore(_signum: int, _frame: object) -> None:
    """Swallow the signal uvicorn re-raises after it has shut down."""
