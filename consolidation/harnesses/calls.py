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

Standard library only: the worker imports this module on its way out without loading an SDK.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, Self

log = logging.getLogger(__name__)

_guards_lock = threading.Lock()
_guards: set[CallGuard] = set()


class CallGuard:
    """Bounds one model call by ``deadline`` (a ``time.monotonic()`` instant); use it as a context manager.

    :meth:`event_hooks` goes to the SDK's HTTP client (``http_client=DefaultHttpxClient(event_hooks=...)``).
    After the call, :attr:`expired` says the deadline cut it and :attr:`given_up` why it was given up
    (None when it was not). Thread-safe.
    """

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.expired = False
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
        """The call was cut short: its deadline came, or it was given up."""
        return self.expired or self.given_up is not None

    def event_hooks(self) -> dict[str, list[Callable[[Any], None]]]:
        """The HTTP client's event hooks that let this guard see the call's sockets."""
        return {"request": [self._on_request]}

    def give_up(self, reason: str) -> None:
        """Close the call now; it raises in its own thread, and :attr:`given_up` says ``reason``."""
        with self._lock:
            if self.given_up is None and not self.expired:
                self.given_up = reason
        self._shut()

    def _on_request(self, request: Any) -> None:
        request.extensions["trace"] = self._trace

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
