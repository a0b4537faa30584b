"""Per-method RPC metrics and structured access logs for ``memledger serve``, as one ASGI middleware.

:class:`Observe` sits in front of the whole app. For ``POST /rpc`` it keeps a bounded copy of the
request and of the answer to learn the method name and the outcome (``ok`` or the error's
``data.reason``), counts and times the call, and writes one JSON access-log line per request::

    {"event": "POST memory/list_memory_records 200", "logger": "memledger.access", "http_method": "POST",
     "path": "/rpc", "status": 200, "latency_ms": 1.9, "account": "local",
     "rpc_method": "memory/list_memory_records", "rpc_outcome": "ok", ...}

Never a body, a param, a query string or a header: only the method name, the status, the outcome,
the latency and the account (``request.state.memledger_account`` when the server set one for the
caller, else the bound account). Labels are bounded: a method the server does not know is counted
as ``unknown``, a request that is not JSON as ``unparsed``, a batch as ``batch``.

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
RPC_PATH = "/rpc"
ACCOUNT_STATE_KEY = "memledger_account"
MAX_KEPT_REQUEST_BYTES = 1_000_000  # the server refuses bigger requests anyway
MAX_KEPT_ANSWER_BYTES = 1_000_000  # an error answer is small; a bigger answer is a result
_METHOD = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,40}/[A-Za-z][A-Za-z0-9_]{0,60}$")
_REASON = re.compile(r"^[a-z][a-z0-9_]{0,47}$")
# ``ledger.protocol.dumps`` writes ``{"jsonrpc":"2.0","id":…,"error":{…}}`` (compact, in this order).
_ERROR_ANSWER = re.compile(rb'^\{"jsonrpc":"2\.0","id":(?:null|-?\d+|"(?:[^"\\]|\\.)*"),"error":')
_BEFORE_DISPATCH = frozenset({"method_not_found", "invalid_request", "parse_error"})
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


@dataclass(frozen=True, slots=True)
class RpcMetrics:
    requests: prom.Counter
    duration: prom.Histogram
    errors: prom.Counter

    def observe(self, method: str, outcome: str, elapsed_s: float) -> None:
        self.requests.labels(method=method, outcome=outcome).inc()
        self.duration.labels(method=method).observe(elapsed_s)
        if outcome != "ok":
            self.errors.labels(method=method, reason=outcome).inc()


_lock = threading.Lock()
_metrics: RpcMetrics | None = None


def rpc_metrics() -> RpcMetrics:
    """The process-wide RPC series (created on first use in the default registry)."""
    global _metrics
    with _lock:
        if _metrics is None:
            _metrics = RpcMetrics(
                requests=prom.Counter(
                    "memledger_rpc_requests", "JSON-RPC requests, by method and outcome.", ["method", "outcome"]
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


def method_of(request_body: bytes) -> str:
    """The method named by one request body: its name, ``batch`` or ``unparsed`` (not yet checked as known)."""
    try:
        request = json.loads(request_body)
    except (ValueError, RecursionError):
        return UNPARSED
    if isinstance(request, list):
        return BATCH
    method = request.get("method") if isinstance(request, dict) else None
    return method if isinstance(method, str) and _METHOD.match(method) else UNKNOWN_METHOD


def _reason(response: object) -> str | None:
    if not isinstance(response, dict) or not isinstance(response.get("error"), dict):
        return None
    data = response["error"].get("data")
    reason = data.get("reason") if isinstance(data, dict) else None
    return reason if isinstance(reason, str) and _REASON.match(reason) else "error"


def outcome_of(answer: bytes, *, complete: bool) -> str:
    """``ok``, or the error's ``data.reason`` (``error`` when it names none), of one answer body.

    A batch answer is ``ok`` only when every element is; else its first reason. An answer too big to
    keep (``complete=False``) is a result: errors are small.
    """
    if not answer or not complete:
        return "ok"
    if answer[:1] == b"[":
        try:
            parsed = json.loads(answer)
        except ValueError:
            return "error"
        reasons = [r for r in (_reason(item) for item in parsed if isinstance(parsed, list)) if r]
        return reasons[0] if reasons else "ok"
    if not _ERROR_ANSWER.match(answer):
        return "ok"
    try:
        return _reason(json.loads(answer)) or "error"
    except ValueError:
        return "error"


_UNPRINTABLE = re.compile(rb"[^\x21-\x7e]")


def shown_path(scope: Scope) -> str:
    """The request's path for a log line's text: as the request line carried it, every byte that is not
    visible ASCII percent-escaped. The decoded path (``scope["path"]``) turns ``%1b`` and ``%0a`` into an
    escape sequence and a line break, which a console log would print raw (a forged line, a terminal's
    title rewritten)."""
    raw = scope.get("raw_path")
    if not isinstance(raw, bytes):
        raw = str(scope["path"]).encode("utf-8", "surrogateescape")
    return _UNPRINTABLE.sub(lambda found: b"%%%02X" % found.group()[0], raw).decode("ascii")


class Observe:
    """ASGI middleware: RPC metrics for ``POST /rpc`` and one access-log line for every HTTP request."""

    def __init__(self, app: ASGIApp, *, account: str, known_methods: Collection[str] = ()) -> None:
        self.app = app
        self.account = account
        self.known = frozenset(known_methods)
        self.metrics = rpc_metrics()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        is_rpc = scope["path"] == RPC_PATH and scope["method"] == "POST"
        request = bytearray()
        answer = bytearray()
        seen = {"status": 500, "answer_complete": True}

        async def tee_receive() -> Message:
            message = await receive()
            if is_rpc and message["type"] == "http.request" and len(request) <= MAX_KEPT_REQUEST_BYTES:
                request.extend(message.get("body", b"")[: MAX_KEPT_REQUEST_BYTES + 1 - len(request)])
            return message

        async def tee_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                seen["status"] = int(message["status"])
            elif is_rpc and message["type"] == "http.response.body":
                body = message.get("body", b"")
                if len(answer) + len(body) <= MAX_KEPT_ANSWER_BYTES:
                    answer.extend(body)
                else:
                    seen["answer_complete"] = False
            await send(message)

        try:
            await self.app(scope, tee_receive if is_rpc else receive, tee_send)
        finally:
            elapsed_s = time.perf_counter() - started
            status = int(seen["status"])
            extra: dict[str, Any] = {}
            if is_rpc:
                extra = self._observe_rpc(bytes(request), bytes(answer), bool(seen["answer_complete"]), elapsed_s)
            self._log_access(scope, status, elapsed_s, extra)

    def _log_access(self, scope: Scope, status: int, elapsed_s: float, extra: dict[str, Any]) -> None:
        """One access-log line: never a body, a param, a query string or a header."""
        state = scope.get("state") or {}
        account = state.get(ACCOUNT_STATE_KEY) or self.account
        what = extra.get("rpc_method") or shown_path(scope)
        access_log.info(
            "%s %s %d",
            scope["method"],
            what,
            status,
            extra={
                "http_method": scope["method"],
                "path": scope["path"],
                "status": status,
                "latency_ms": round(elapsed_s * 1000, 3),
                "account": account,
                **extra,
            },
        )

    def _observe_rpc(self, request: bytes, answer: bytes, complete: bool, elapsed_s: float) -> dict[str, str]:
        method = UNPARSED if len(request) > MAX_KEPT_REQUEST_BYTES else method_of(request)
        outcome = outcome_of(answer, complete=complete)
        if method not in (BATCH, UNPARSED) and method not in self.known:
            # A name becomes a label only when the server showed it serves it: it answered with
            # something other than "no such method" or "not a request". A name the server does not
            # serve (or a notification, which gets no answer) never becomes a label of its own.
            served = bool(answer) and outcome not in _BEFORE_DISPATCH
            method = method if served else UNKNOWN_METHOD
        self.metrics.observe(method, outcome, elapsed_s)
        return {"rpc_method": method, "rpc_outcome": outcome}
