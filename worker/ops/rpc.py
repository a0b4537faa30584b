"""Per-method RPC metrics and structured access logs for ``memledger serve``.

:func:`observe_rpc` wraps one ``POST /rpc`` answer: it counts the call by method and outcome,
times it, counts errors by ``data.reason``, and leaves what it saw on the request's ASGI state so
that :class:`AccessLog` writes one JSON line per request::

    {"event": "rpc memory/list_memory_records 200", "logger": "memledger.access", "http_method": "POST",
     "path": "/rpc", "status": 200, "latency_ms": 1.9, "account": "local", "rpc_method": "...",
     "rpc_outcome": "ok", ...}

Never a body, a param or a query: only the method name (bounded: an unknown name is logged and
counted as ``unknown``), the status, the outcome (``ok`` or the error's reason) and the account.

=================================================  ==========================
series                                             labels
=================================================  ==========================
``memledger_rpc_requests_total``                   ``method``, ``outcome``
``memledger_rpc_request_duration_seconds``         ``method`` (histogram)
``memledger_rpc_errors_total``                     ``method``, ``reason``
=================================================  ==========================
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import prometheus_client as prom
from starlette.types import ASGIApp, Message, Receive, Scope, Send

access_log = logging.getLogger("memledger.access")

UNKNOWN_METHOD = "unknown"
BATCH = "batch"
UNPARSED = "unparsed"
_REASON = re.compile(r"^[a-z][a-z0-9_]{0,47}$")
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
STATE_KEY = "memledger_rpc"


@dataclass(frozen=True, slots=True)
class RpcMetrics:
    requests: prom.Counter
    duration: prom.Histogram
    errors: prom.Counter


_lock = threading.Lock()
_metrics: RpcMetrics | None = None


def rpc_metrics() -> RpcMetrics:
    """The process-wide RPC series (created on first use in the default registry)."""
    global _metrics
    with _lock:
        if _metrics is None:
            _metrics = RpcMetrics(
                requests=prom.Counter(
                    "memledger_rpc_requests",
                    "JSON-RPC requests, by method and outcome.",
                    ["method", "outcome"],
                ),
                duration=prom.Histogram(
                    "memledger_rpc_request_duration_seconds",
                    "Server time to answer one JSON-RPC request.",
                    ["method"],
                    buckets=_LATENCY_BUCKETS,
                ),
                errors=prom.Counter(
                    "memledger_rpc_errors", "JSON-RPC error answers, by method and data.reason.", ["method", "reason"]
                ),
            )
        return _metrics


def method_label(request_text: str, known: Collection[str]) -> str:
    """The method of one request as a bounded label: a known name, ``batch``, ``unknown`` or ``unparsed``."""
    try:
        request = json.loads(request_text)
    except (ValueError, RecursionError):
        return UNPARSED
    if isinstance(request, list):
        return BATCH
    method = request.get("method") if isinstance(request, dict) else None
    return method if isinstance(method, str) and method in known else UNKNOWN_METHOD


def outcome_of(answer: str | None) -> str:
    """``ok``, or the error's ``data.reason`` (``error`` when it has none), of one answer line.

    A batch answer's outcome is ``ok`` only when every element is; else the first reason.
    """
    if answer is None:
        return "ok"  # a notification: nothing is answered
    if '"error"' not in answer:
        return "ok"
    try:
        parsed = json.loads(answer)
    except ValueError:
        return "error"
    for response in parsed if isinstance(parsed, list) else [parsed]:
        if isinstance(response, dict) and isinstance(response.get("error"), dict):
            data = response["error"].get("data")
            reason = data.get("reason") if isinstance(data, dict) else None
            return reason if isinstance(reason, str) and _REASON.match(reason) else "error"
    return "ok"


def observe_rpc(scope_state: dict[str, Any], method: str, outcome: str, elapsed_s: float) -> None:
    """Count and time one answered request, and note it for the access log line."""
    metrics = rpc_metrics()
    metrics.requests.labels(method=method, outcome=outcome).inc()
    metrics.duration.labels(method=method).observe(elapsed_s)
    if outcome != "ok":
        metrics.errors.labels(method=method, reason=outcome).inc()
    scope_state[STATE_KEY] = {"rpc_method": method, "rpc_outcome": outcome}


class AccessLog:
    """ASGI middleware: one structured log line per HTTP request (method, path, status, latency, account).

    The path is logged without its query string (``/ops?scope=…`` names a scope, which is fine to
    see in ``/ops`` but not worth a log line); bodies and headers are never logged.
    """

    def __init__(self, app: ASGIApp, *, account: str) -> None:
        self.app = app
        self.account = account

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = {"code": 500}

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            latency_ms = round((time.perf_counter() - started) * 1000, 3)
            rpc = scope.get("state", {}).get(STATE_KEY, {})
            what = " ".join(str(part) for part in (rpc.get("rpc_method") or scope["path"], status["code"]))
            access_log.info(
                "%s %s",
                scope["method"],
                what,
                extra={
                    "http_method": scope["method"],
                    "path": scope["path"],
                    "status": status["code"],
                    "latency_ms": latency_ms,
                    "account": self.account,
                    **rpc,
                },
            )
