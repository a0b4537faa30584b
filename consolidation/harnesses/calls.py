"""The wall-clock cap of one model call, bytes included, and giving calls up.

An SDK's timeouts are per socket operation (connect, each read, each write): a server that
trickles its answer a byte at a time meets every one of them and holds the call, and the
worker thread making it, for as long as it likes. A :class:`CallGuard` bounds the whole call
instead. It learns each socket the call opens as it connects (httpcore's ``trace`` request
extension, set by a request hook on the SDK's HTTP client) and, when the deadline comes, shuts
the sockets down: the blocked read returns at once, the SDK raises, and the server sees the
connection close, so a server that stops generating for a closed connection stops.

:func:`give_up_calls` does the same at once to every call in flight in the process: a worker
that is stopping gives its model calls up rather than wait on them (their runs settle
``failed`` and say why).

No SDK at import (the standard library and the package's errors): the worker imports this module on its way
out without loading an SDK.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any, Self

from consolidation.errors import ResponseTooLarge

log = logging.getLogger(__name__)

MAX_RESPONSE_BYTES = 8_000_000
"""The largest response body a model call reads (docs/consolidation.md, "Bounds of an answer"): far above what
the largest ``max_output_tokens`` (64,000) produces, far below what would strain a worker. A server that sends
more has its connection closed as the limit is passed, and the run fails saying so."""

_guards_lock = threading.Lock()
_guards: set[CallGuard] = set()


class CallGuard:
    """Bounds one model call by ``deadline`` (a ``time.monotonic()`` instant); use it as a context manager.

    :meth:`event_hooks` goes to the SDK's HTTP client (``http_client=DefaultHttpxClient(event_hooks=...)``).
    After the call, :attr:`expired` says the deadline cut it and :attr:`given_up` why it was given up
    (None when it was not). Thread-safe.
    """

    def __init__(self, deadline: float, *, max_response_bytes: int = MAX_RESPONSE_BYTES) -> None:
        self.deadline = deadline
        self.max_response_bytes = max_response_bytes
        self.expired = False
        self.oversize = False
        self.given_up: str | None = None
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._timer: threading.Timer | None = None

    def __enter__(self) -> Self:
        self._timer = threading.Timer(max(self.deadline - time.monotonic(), 0.0), self._expire)
        self._timer.daemon = True
        self._timer.start()
        with _guards_lock:
            _guards.add(self)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._timer is not None:
            self._timer.cancel()
        with _guards_lock:
            _guards.discard(self)

    @property
    def cut(self) -> bool:
        """The call was cut short: its deadline came, it was given up, or its answer was too large."""
        return self.expired or self.oversize or self.given_up is not None

    def event_hooks(self) -> dict[str, list[Callable[[Any], None]]]:
        """The HTTP client's event hooks that let this guard see the call's sockets and bound its answer."""
        return {"request": [self._on_request], "response": [self._on_response]}

    def give_up(self, reason: str) -> None:
        """Close the call now; it raises in its own thread, and :attr:`given_up` says ``reason``."""
        with self._lock:
            if self.given_up is None and not self.expired:
                self.given_up = reason
        self._shut()

    def _on_request(self, request: Any) -> None:
        request.extensions["trace"] = self._trace

    def _on_response(self, response: Any) -> None:
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_response_bytes:
            self._too_large()
        response.stream = _bounded(response.stream, self)

    def _too_large(self) -> None:
        """Mark the call cut for its size, close it and raise (the SDK reports a failed connection; the harness
        reads :attr:`oversize` to say why)."""
        with self._lock:
            self.oversize = True
        self._shut()
        raise ResponseTooLarge(f"the response is over {self.max_response_bytes:,} bytes")

    def _trace(self, event: str, info: dict[str, Any]) -> None:
        if not event.endswith("connect_tcp.complete"):
            return
        stream = info.get("return_value")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if not isinstance(sock, socket.socket):
            return
        with self._lock:
            self._sockets.append(sock)
            late = self.cut
        if late:  # cut while it was connecting
            _shutdown(sock)

    def _expire(self) -> None:
        with self._lock:
            if self.given_up is None:
                self.expired = True
        self._shut()

    def _shut(self) -> None:
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            _shutdown(sock)


def _bounded(stream: Any, guard: CallGuard) -> Any:
    """``stream`` (the response's byte stream) that raises once more than the guard's limit has come."""
    import httpx2  # the SDKs' HTTP client, loaded with them: this runs only inside a call

    class Bounded(httpx2.SyncByteStream):
        def __iter__(self) -> Iterator[bytes]:
            seen = 0
            for chunk in stream:
                seen += len(chunk)
                if seen > guard.max_response_bytes:
                    guard._too_large()
                yield chunk

        def close(self) -> None:
            stream.close()

    return Bounded()


def _shutdown(sock: socket.socket) -> None:
    # shutdown, not close: closing a socket does not wake a thread blocked reading it, shutting it down does.
    with contextlib.suppress(OSError):  # already closed
        sock.shutdown(socket.SHUT_RDWR)


def give_up_calls(reason: str) -> int:
    """Give up every model call in flight in this process (see :meth:`CallGuard.give_up`); returns how many."""
    with _guards_lock:
        guards = list(_guards)
    for guard in guards:
        guard.give_up(reason)
    if guards:
        log.warning("gave up %d model call(s) in flight: %s", len(guards), reason)
    return len(guards)
