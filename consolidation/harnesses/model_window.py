"""What the openai harness knows of a model's context window and of its tokens, per (server, model).

A run's prompt and its answer must fit the model's context window, counted in the model's own
tokens; a local model's window is small (llama-cpp-python's server defaults to 2,048 tokens,
a Gemma 3 GGUF to 8,192 at most), so a bound in characters alone overfills it. Two things
are needed, both remembered per (server, model) for the life of the process:

* **the window**: the scope's ``context_window_tokens`` when it states one, else what the
  server reports — llama.cpp's ``GET /props`` (``default_generation_settings.n_ctx``) or
  vLLM's ``GET /v1/models`` (``max_model_len``); asked once, with a 2 s timeout (a server
  that reports nothing, such as llama-cpp-python's, is asked again after a minute);
* **tokens per character**: 0.4 until a call's usage says better (one token per 2.5
  characters is more than the encoded records of short English pins cost on common
  tokenizers: Gemma's is about one per 3.3), then the largest ratio seen, plus a tenth.

:func:`records_room` turns them into the characters of records a call can carry.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any

from consolidation.errors import HarnessError

log = logging.getLogger(__name__)

DEFAULT_TOKENS_PER_CHAR = 0.4
SAFETY = 1.1
TEMPLATE_TOKENS = 64
"""Tokens a chat template adds around the messages (role markers, the generation prompt), at most."""
MIN_RECORD_TOKENS = 64
ASK_TIMEOUT_S = 2.0
RETRY_UNKNOWN_S = 60.0

_lock = threading.Lock()
_ratios: dict[tuple[str, str], float] = {}
_windows: dict[tuple[str, str], tuple[int | None, float]] = {}


def observe(base_url: str, model: str, *, chars: int, prompt_tokens: int) -> None:
    """Learn from a call's usage: ``chars`` characters of messages cost ``prompt_tokens`` tokens."""
    if chars <= 0 or prompt_tokens <= 0:
        return
    ratio = prompt_tokens / chars
    with _lock:
        _ratios[(base_url, model)] = max(ratio, _ratios.get((base_url, model), 0.0))


def tokens_per_char(base_url: str, model: str) -> float:
    """The tokens one character costs on this server's model, erring high."""
    with _lock:
        seen = _ratios.get((base_url, model))
    return DEFAULT_TOKENS_PER_CHAR if seen is None else seen * SAFETY


def forget() -> None:
    """Forget every learnt ratio and window (tests)."""
    with _lock:
        _ratios.clear()
        _windows.clear()


def server_window(base_url: str, model: str) -> int | None:
    """The context window the server reports for ``model``, in tokens; None when it reports none."""
    key = (base_url, model)
    with _lock:
        known = _windows.get(key)
    if known is not None and (known[0] is not None or time.monotonic() - known[1] < RETRY_UNKNOWN_S):
        return known[0]
    window = _ask(base_url, model)
    with _lock:
        _windows[key] = (window, time.monotonic())
    if window is not None:
        log.info("the server at %s reports a context window of %d tokens for %s", base_url, window, model)
    return window


def _ask(base_url: str, model: str) -> int | None:
    import httpx2

    root = base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url
    try:
        with httpx2.Client(timeout=ASK_TIMEOUT_S) as client:
            props = _json(client, f"{root}/props")
            settings = props.get("default_generation_settings") if isinstance(props, dict) else None
            for found in (settings, props):
                if isinstance(found, dict) and _positive(found.get("n_ctx")):
                    return int(found["n_ctx"])
            listed = _json(client, f"{base_url}/models")
            for entry in listed.get("data", []) if isinstance(listed, dict) else []:
                if isinstance(entry, dict) and entry.get("id") == model and _positive(entry.get("max_model_len")):
                    return int(entry["max_model_len"])
    except (httpx2.HTTPError, ValueError):
        return None
    return None


def _json(client: Any, url: str) -> Any:
    response = client.get(url)
    return response.json() if response.status_code == 200 else None


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def records_room(
    *, window: int | None, base_url: str, model: str, max_output_tokens: int, system_chars: int
) -> int | None:
    """Characters of records that fit ``window`` beside ``system_chars`` of instructions and the answer.

    Raises:
        HarnessError: the answer's limit leaves less than 64 tokens for records; says what to set.
    """
    if window is None:
        return None
    per_char = tokens_per_char(base_url, model)
    room = window - max_output_tokens - math.ceil(system_chars * per_char) - TEMPLATE_TOKENS
    if room < MIN_RECORD_TOKENS:
        raise HarnessError(
            f"max_output_tokens {max_output_tokens} leaves no room for records in the model's context window of "
            f"{window} tokens: lower max_output_tokens (an answer rarely needs more than 1,024) or, if the server "
            "was started with a larger context, say so with context_window_tokens"
        )
    return int(room / per_char)
