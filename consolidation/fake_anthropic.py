"""A loopback fake of the Anthropic Messages API, for tests and fault drills.

The shared fake (:mod:`consolidation.fake_model`: scripting, delays, trickles, statuses,
drops, call counting, a separate-process mode) speaking the Messages API: only
``POST /v1/messages`` is served.

>>> with FakeAnthropic(operations=[{"op": "keep", "targets": ["mem_1"]}]) as fake:
...     harness = AnthropicHarness(api_key="test", base_url=fake.base_url, prices=DEFAULT_PRICES)
...     harness.call(records, model="claude-haiku-4-5", max_output_tokens=512, wall_clock_cap_s=5)
...     assert fake.calls == 1

As a separate process::

    python -m consolidation.fake_anthropic --port 8765 [--script FILE.json] [--delay S]
        [--trickle S] [--counter-file PATH]
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Sequence
from typing import Any

from consolidation.fake_model import (
    FakeModelServer,
    RecordedRequest,
    Reply,
    request_records,
    resolve_target_bodies,
    user_message,
)
from consolidation.fake_process import main as serve

__all__ = [
    "FakeAnthropic",
    "FakeModelServer",
    "RecordedRequest",
    "Reply",
    "main",
    "request_records",
    "resolve_target_bodies",
    "user_message",
]

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "api_error",
    529: "overloaded_error",
}


class FakeAnthropic(FakeModelServer):
    """The loopback fake of the Anthropic Messages API (``POST /v1/messages``); see the module docstring."""

    PATH = "/v1/messages"

    def _error_body(self, status: int, message: str) -> dict[str, Any]:
        return {"type": "error", "error": {"type": _ERROR_TYPES.get(status, "api_error"), "message": message}}

    def _invalid_request(self, body: Any) -> str | None:
        return _invalid_request(body)

    def _payload(
        self, body: dict[str, Any], reply: Reply, *, text: str, usage: dict[str, int], number: int
    ) -> dict[str, Any]:
        return {
            "id": f"msg_fake_{number:06d}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model"),
            "content": [{"type": "text", "text": text}],
            "stop_reason": reply.stop_reason,
            "stop_sequence": None,
            "usage": usage,
        }


def _invalid_request(body: Any) -> str | None:
    """What the real API would refuse with HTTP 400, for the fields the harness sends."""
    if not isinstance(body, dict):
        return "the request body must be a JSON object"
    if not isinstance(body.get("model"), str):
        return "model: field required"
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        return "max_tokens: must be a positive integer"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    output_config = body.get("output_config")
    if output_config is not None:
        fmt = output_config.get("format") if isinstance(output_config, dict) else None
        if fmt is not None and (
            not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict)
        ):
            return "output_config.format: expected {'type': 'json_schema', 'schema': {...}}"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the fake Messages API as a process until SIGTERM/SIGINT (see :func:`consolidation.fake_process.main`)."""
    return serve(argv, server=FakeAnthropic)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
