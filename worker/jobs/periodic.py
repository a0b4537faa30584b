"""A daemon thread that calls a function now and then every N seconds until stopped."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class Periodic:
    """Call ``fn`` at start (unless ``run_at_start=False``) and every ``interval_s`` seconds.

    An exception in ``fn`` is logged and the schedule goes on: a janitor that hits a
    database blip must not die. :meth:`stop` waits for a call in progress to return.
    """

    def __init__(self, name: str, interval_s: float, fn: Callable[[], object], *, run_at_start: bool = True) -> None:
        self.name = name
        self.interval_s = interval_s
        self._fn = fn
        self._run_at_start = run_at_start
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=f"memledger-{self.name}", daemon=True)
            self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the schedule and wait up to ``timeout_s`` for a call in progress."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.warning("%s did not stop within %.0f s", self.name, timeout_s)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _loop(self) -> None:
        wait = 0.0 if self._run_at_start else self.interval_s
        while not self._stop.wait(wait):
            try:
                self._fn()
            except Exception:
                log.exception("%s failed; trying again in %.0f s", self.name, self.interval_s)
            wait = self.interval_s
