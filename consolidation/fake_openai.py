"""A loopback fake of the OpenAI Chat Completions API, for tests and fault drills.

The same fake as :mod:`consolidation.fake_anthropic` (scripting, delays, statuses, drops,
call counting, a separate-process mode) speaking Chat Completions instead: only
``POST /v1/chat/completions`` is served, and :attr:`FakeOpenAI.base_url` ends in ``/v1``
as the ``openai`` SDK's ``base_url`` does.

>>> with FakeOpenAI(operations=[{"op": "keep", "targets": ["1"]}]) as fake:
...     harness = OpenAIHarness(api_key=None, base_url=fake.base_url, prices=prices)
...     harness.call(records, model="qwen2.5:7b-instruct", max_output_tokens=512, wall_clock_cap_s=5)

What it adds, for what servers differ in:

* ``formats`` — the ``response_format`` types the server takes (default all three:
  ``json_schema``, ``json_object``, ``text``). A request asking for another is refused with
  HTTP 400 naming ``response_format``, as llama.cpp, older Ollama and some vLLM builds do.
* :class:`~consolidation.fake_anthropic.Reply` ``refusal`` — the model declines
  (``message.refusal``, no content).
* Usage is scripted with the Anthropic field names and reported the Chat Completions way:
  ``prompt_tokens`` = input + cache write + cache read, ``prompt_tokens_details.cached_tokens``
  = cache read, ``completion_tokens`` = output. ``stop_reason`` ``max_tokens`` is sent as
  ``finish_reason`` ``length``, ``end_turn`` as ``stop``.

As a separate process::

    python -m consolidation.fake_openai --port 8765 [--script FILE.json] [--delay S] [--counter-file PATH]
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Collection
from typing import Any

from consolidation.fake_model import FakeModelServer, Reply, main

ALL_FORMATS = ("json_schema", "json_object", "text")
_ERROR_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 404: "invalid_request_error"}
_FINISH = {"end_turn": "stop", "max_tokens": "length"}


class FakeOpenAI(FakeModelServer):
    """The loopback fake of Chat Completions; see the module docstring. Every method is thread-safe."""

    PATH = "/v1/chat/completions"

    def __init__(self, *, formats: Collection[str] = ALL_FORMATS, **options: Any) -> None:
        unknown = set(formats) - set(ALL_FORMATS)
        if unknown:
            raise ValueError(f"unknown response_format type(s) {sorted(unknown)}; allowed: {list(ALL_FORMATS)}")
        self._formats = frozenset(formats)
        super().__init__(**options)

    @property
    def base_url(self) -> str:
        """What to pass as the ``openai`` SDK's ``base_url`` (or a scope's ``base_url``)."""
        return f"{super().base_url}/v1"

    def set_formats(self, *formats: str) -> None:
        """From now on take only these ``response_format`` types."""
        with self._lock:
            self._formats = frozenset(formats)

    def _error_body(self, status: int, message: str) -> dict[str, Any]:
        kind = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
        return {"error": {"message": message, "type": kind, "param": None, "code": None}}

    def _invalid_request(self, body: Any) -> str | None:
        if not isinstance(body, dict):
            return "the request body must be a JSON object"
        if not isinstance(body.get("model"), str):
            return "model: field required"
        limits = [body[name] for name in ("max_tokens", "max_completion_tokens") if name in body]
        if len(limits) != 1 or not isinstance(limits[0], int) or isinstance(limits[0], bool) or limits[0] < 1:
            return "exactly one of max_tokens and max_completion_tokens, a positive integer, is expected"
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return "messages: at least one message is required"
        fmt = body.get("response_format")
        kind = "text" if fmt is None else fmt.get("type") if isinstance(fmt, dict) else None
        with self._lock:
            formats = self._formats
        if kind not in formats:
            return f"response_format: type {kind!r} is not supported by this server"
        if kind == "json_schema":
            spec = fmt.get("json_schema") if isinstance(fmt, dict) else None
            if not isinstance(spec, dict) or not isinstance(spec.get("schema"), dict) or not spec.get("name"):
                return "response_format.json_schema: expected {'name': ..., 'schema': {...}}"
        return None

    def _payload(
        self, body: dict[str, Any], reply: Reply, *, text: str, usage: dict[str, int], number: int
    ) -> dict[str, Any]:
        prompt = usage["input_tokens"] + usage["cache_creation_input_tokens"] + usage["cache_read_input_tokens"]
        refused = reply.refusal is not None
        return {
            "id": f"chatcmpl-fake{number:06d}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model"),
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": None if refused else text,
                        "refusal": reply.refusal,
                    },
                    "finish_reason": "stop" if refused else _FINISH.get(reply.stop_reason, reply.stop_reason),
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": usage["output_tokens"],
                "total_tokens": prompt + usage["output_tokens"],
                "prompt_tokens_details": {"cached_tokens": usage["cache_read_input_tokens"]},
            },
        }


def _main() -> int:
    return main(sys.argv[1:], server=FakeOpenAI)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(_main())

__all__ = ["ALL_FORMATS", "FakeOpenAI", "Reply"]
