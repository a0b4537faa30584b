"""Structured logs: one JSON object per line (or a console rendering), never a record body.

Modules log through the standard library (``log = logging.getLogger(__name__)`` with
lazy ``%`` arguments); structlog's :class:`~structlog.stdlib.ProcessorFormatter` turns
every record — ours, dramatiq's, uvicorn's, the ledger's — into the same shape.

Every line carries ``run_id`` and ``scope_key`` (``null`` outside a run): the actors
bind them with :func:`bind_run` for the duration of a message. Keys that could hold a
body (``body``, ``prompt``, ``answer``, ...) are replaced by ``"[redacted]"`` as a last
line of defence; no module passes one on purpose.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any, TextIO

import structlog

REDACTED_KEYS = frozenset({"body", "bodies", "prompt", "answer", "answer_raw", "raw_text", "text"})
_QUIET = ("dramatiq", "uvicorn.access", "httpx", "httpx2", "httpcore", "anthropic")


def _ensure_ids(_logger: object, _method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    event.setdefault("run_id", None)
    event.setdefault("scope_key", None)
    return event


def _redact(_logger: object, _method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    event.pop("color_message", None)  # uvicorn's ANSI copy of the message
    for key in REDACTED_KEYS.intersection(event):
        event[key] = "[redacted]"
    return event


def configure_logging(*, fmt: str = "json", level: str = "INFO", stream: TextIO | None = None) -> None:
    """Route every logger of the process through structlog (idempotent: replaces root handlers).

    ``fmt`` is ``json`` (one object per line, for machines) or ``console`` (for people).
    """
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.ExtraAdder(),
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _ensure_ids,
        _redact,
    ]
    out = stream if stream is not None else sys.stderr
    renderer: Any
    if fmt == "console":
        renderer = structlog.dev.ConsoleRenderer(colors=out.isatty())
        tail: list[Any] = []
    else:
        renderer = structlog.processors.JSONRenderer(sort_keys=False)
        tail = [structlog.processors.format_exc_info]
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *tail, renderer],
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # dramatiq and the HTTP clients are chatty at INFO; they speak at DEBUG only when asked for DEBUG.
    for name in _QUIET:
        logging.getLogger(name).setLevel(logging.NOTSET if level == "DEBUG" else logging.WARNING)
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )


@contextmanager
def bind_run(run_id: str | None, scope_key: str | None = None) -> Iterator[None]:
    """Put ``run_id`` and ``scope_key`` on every log line of this thread until the block ends."""
    tokens = structlog.contextvars.bind_contextvars(run_id=run_id, scope_key=scope_key)
    try:
        yield
    finally:
        structlog.contextvars.reset_contextvars(**tokens)
