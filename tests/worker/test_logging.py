"""Structured logs: JSON lines with run id and scope on every line, never a body."""

from __future__ import annotations

import io
import json
import logging

from worker.logging import bind_run, configure_logging


def _lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_every_line_is_json_with_run_id_and_scope() -> None:
    stream = io.StringIO()
    configure_logging(fmt="json", level="INFO", stream=stream)
    log = logging.getLogger("tests.worker.logging")
    log.info("outside any run")
    with bind_run("run_1", "account:local"):
        log.info("run %s settled", "run_1", extra={"outcome": "applied"})
    log.info("after the run")
    first, inside, after = _lines(stream)
    assert first["run_id"] is None and first["scope_key"] is None
    assert inside["run_id"] == "run_1" and inside["scope_key"] == "account:local"
    assert inside["event"] == "run run_1 settled" and inside["outcome"] == "applied"
    assert inside["level"] == "info" and inside["logger"] == "tests.worker.logging" and "timestamp" in inside
    assert after["run_id"] is None


def test_body_like_fields_are_redacted() -> None:
    stream = io.StringIO()
    configure_logging(fmt="json", level="INFO", stream=stream)
    logging.getLogger("x").warning("careless", extra={"body": "my wifi password is hunter2", "prompt": "p"})
    (line,) = _lines(stream)
    assert line["body"] == "[redacted]" and line["prompt"] == "[redacted]"
    assert "hunter2" not in stream.getvalue()


def test_level_filters_and_console_format() -> None:
    stream = io.StringIO()
    configure_logging(fmt="console", level="WARNING", stream=stream)
    logging.getLogger("x").info("hidden")
    logging.getLogger("x").warning("shown")
    text = stream.getvalue()
    assert "shown" in text and "hidden" not in text
