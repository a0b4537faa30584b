"""The HTTP side of operator visibility, kept out of :mod:`worker.http.server` so its hooks stay two lines.

* ``GET /livez`` — liveness: the event loop answers. It touches neither the database nor the queue,
  so an outage of either never restarts the process (``/healthz``, readiness, takes it out of
  rotation instead).
* ``GET /ops`` — the read-only operator page (:mod:`worker.http.ops_page`), for the operator only
  (:mod:`worker.http.guard`).
* :func:`with_observability` — per-method RPC metrics and access logs (:mod:`worker.http.observe`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from worker.http.guard import asgi_refusal
from worker.http.observe import Observe
from worker.http.ops_page import ops_response
from worker.snapshot import take_snapshot

if TYPE_CHECKING:
    from worker.runtime import Runtime


def ops_routes(runtime: Runtime) -> list[Route]:
    """``GET /livez`` and ``GET /ops`` for ``runtime``."""

    async def livez(_request: Request) -> Response:
        return JSONResponse({"status": "alive"})

    async def ops(request: Request) -> Response:
        refused = asgi_refusal(request, runtime.config.operator_token, what="the operator page", path="/ops")
        if refused is not None:
            return refused

        def page() -> Response:
            snapshot = take_snapshot(runtime.ledger, runtime.service)
            scope = request.query_params.get("scope")
            return ops_response(runtime.ledger, snapshot, scope=scope, bound_scope=runtime.ledger.scope_key)

        return await run_in_threadpool(page)

    return [Route("/livez", livez, methods=["GET"]), Route("/ops", ops, methods=["GET"])]


def with_observability(app: Starlette, runtime: Runtime, *, known_methods: Sequence[str]) -> Starlette:
    """``app`` with RPC metrics and access logs around every request (returns the same app).

    ``known_methods`` get their own metric label; any other method name counts as unknown.
    """
    app.add_middleware(Observe, account=runtime.config.account, known_methods=tuple(known_methods))
    return app
