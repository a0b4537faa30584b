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
  HTTP ``format_status`` (400 by default, as llama.cpp, older Ollama and some vLLM builds do;
  500 as llama-cpp-python's server does) naming ``response_format``.
* ``context_window`` — when set, ``GET /props`` reports it as llama.cpp's server does
  (``default_generation_settings.n_ctx``); otherwise ``GET`` answers 404, as llama-cpp-python's does.
* ``stream: true`` is answered with server-sent events: a role chunk, the text in pieces of
  eight characters (fewer, longer ones past 4,000 characters), a chunk with the finish reason,
  then (with ``stream_options.include_usage`` and ``stream_usage``, the default) a usage chunk,
  and ``data: [DONE]``; ``stream_usage=False`` plays a server that reports no usage in a stream
  (llama-cpp-python's). A trickle applies to the stream's bytes the same way.
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
import json
import sys
import time
from collections.abc import Collection
from typing import Any

from consolidation.fake_model import FakeModelServer, Reply
from consolidation.fake_model import _Handler as Handler
from consolidation.fake_process import main

ALL_FORMATS = ("json_schema", "json_object", "text")
_ERROR_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 404: "invalid_request_error"}
_FINISH = {"end_turn": "stop", "max_tokens": "length"}


class FakeOpenAI(FakeModelServer):
    """The loopback fake of Chat Completions; see the module docstring. Every method is thread-safe."""

    PATH = "/v1/chat/completions"

    def __init__(
        self,
        *,
        formats: Collection[str] = ALL_FORMATS,
        format_status: int = 400,
        stream_usage: bool = True,
        context_window: int | None = None,
        **options: Any,
    ) -> None:
        unknown = set(formats) - set(ALL_FORMATS)
        if unknown:
            raise ValueError(f"unknown response_format type(s) {sorted(unknown)}; allowed: {list(ALL_FORMATS)}")
        self._formats = frozenset(formats)
        self._format_status = format_status
        self._stream_usage = stream_usage
        self._context_window = context_window
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
        if kind == "json_object" and isinstance(fmt, dict) and not isinstance(fmt.get("schema", {}), dict):
            return "response_format.schema: expected a JSON schema object"
        return None

    def _refusal_status(self, problem: str) -> int:
        return self._format_status if problem.startswith("response_format") else 400

    def _get(self, path: str) -> dict[str, Any] | None:
        if path == "/props" and self._context_window is not None:
            return {"default_generation_settings": {"n_ctx": self._context_window}}
        return None

    def _send_answer(
        self, handler: Handler, body: dict[str, Any], reply: Reply, *, text: str, usage: dict[str, int], number: int
    ) -> None:
        if not body.get("stream"):
            super()._send_answer(handler, body, reply, text=text, usage=usage, number=number)
            return
        whole = self._payload(body, reply, text=text, usage=usage, number=number)
        options = body.get("stream_options")
        with_usage = self._stream_usage and isinstance(options, dict) and options.get("include_usage") is True
        events = [json.dumps(chunk) for chunk in _chunks(whole, with_usage=with_usage)] + ["[DONE]"]
        data = "".join(f"data: {event}\n\n" for event in events).encode()
        handler.send_body(200, data, trickle_s=reply.trickle_s, content_type="text/event-stream")

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


def _chunks(whole: dict[str, Any], *, with_usage: bool) -> list[dict[str, Any]]:
    """The chunks of a streamed answer carrying what ``whole`` (the non-streamed payload) carries."""
    choice = whole["choices"][0]
    message, finish = choice["message"], choice["finish_reason"]

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        head = {"id": whole["id"], "object": "chat.completion.chunk", "created": whole["created"]}
        return {**head, "model": whole["model"], "choices": choices, **extra}

    def delta(content: dict[str, Any], finish_reason: str | None = None) -> list[dict[str, Any]]:
        return [{"index": 0, "delta": content, "finish_reason": finish_reason, "logprobs": None}]

    out = [chunk(delta({"role": "assistant"}))]
    if message["refusal"] is not None:
        out.append(chunk(delta({"refusal": message["refusal"]})))
    text = message["content"] or ""
    size = max(8, -(-len(text) // 500))  # pieces of eight characters; at most 500 pieces for a huge text
    out.extend(chunk(delta({"content": text[i : i + size]})) for i in range(0, len(text), size))
    out.append(chunk(delta({}, finish)))
    if with_usage:
        out.append(chunk([], usage=whole["usage"]))
    return out


def _main() -> int:
    return main(sys.argv[1:], server=FakeOpenAI)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(_main())

__all__ = ["ALL_FORMATS", "FakeOpenAI", "Reply"]
