"""Is a scope's model target usable? The key is there and the server answers, checked before a run needs it.

:func:`check_target` asks the target's server for its models list (``GET …/models``: cheap, no tokens,
what every OpenAI-compatible server and the Anthropic API answer) with a short timeout, with the key
the run would send. A target that cannot work is a :class:`TargetCheck` with a ``problem`` saying what
to fix; a server that answers but does not list the model gets a ``note`` (some servers, llama.cpp's,
serve any name they are sent, so that alone is not a refusal). The offline harness calls nothing and
always passes. ``memledger consolidation set`` / ``extraction set`` run it before storing a new target
(``--no-check`` skips it) and ``memledger models check`` runs it on what a scope is set to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from consolidation.harnesses import Connection, spec

DEFAULT_TIMEOUT_S = 5.0
ANTHROPIC_URL = "https://api.anthropic.com"
OPENAI_URL = "https://api.openai.com/v1"
ANTHROPIC_VERSION = "2023-06-01"
_SHOWN_MODELS = 8


@dataclass(frozen=True, slots=True)
class TargetCheck:
    """What :func:`check_target` found: ``problem`` (the target cannot work, and what to fix) or ``ok``."""

    harness: str
    model: str
    url: str | None = None
    problem: str | None = None
    note: str | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None

    def to_json(self) -> dict[str, Any]:
        return {"harness": self.harness, "model": self.model, "url": self.url, "ok": self.ok,
                "problem": self.problem, "note": self.note}  # fmt: skip


def check_target(
    harness: str, model: str, connection: Connection, *, timeout_s: float = DEFAULT_TIMEOUT_S
) -> TargetCheck:
    """Check that ``harness`` + ``model`` through ``connection`` (key, server) can be called. Never raises for
    the target's faults: they are the result's ``problem``.

    Raises:
        UnknownHarness: ``harness`` is not a known harness.
    """
    row = spec(harness)
    if not row.pays:
        return TargetCheck(harness, model)
    if harness == "anthropic":
        base = (connection.base_url or ANTHROPIC_URL).rstrip("/")
        url = f"{base}/v1/models"
        headers = {"x-api-key": connection.api_key or "", "anthropic-version": ANTHROPIC_VERSION}
        key_needed = True
    else:
        base = (connection.base_url or OPENAI_URL).rstrip("/")
        url = f"{base}/models"
        headers = {"Authorization": f"Bearer {connection.api_key}"} if connection.api_key else {}
        # OpenAI's own API needs a key; a server of your own (Ollama, vLLM, llama.cpp) usually takes none.
        key_needed = urlsplit(base).hostname == urlsplit(OPENAI_URL).hostname
    found = TargetCheck(harness, model, url)
    if key_needed and not connection.api_key:
        return _with(found, f"no API key for the {harness} harness: set {row.key_env} where the worker runs "
                            "(and where this command runs)")  # fmt: skip
    try:
        answer = httpx.get(url, headers=headers, timeout=timeout_s, follow_redirects=True)
    except httpx.TimeoutException:
        return _with(found, f"{url} did not answer within {timeout_s:g} s: is the server up and is the base URL "
                            f"right{_where(row.base_url_env)}?")  # fmt: skip
    except httpx.HTTPError as exc:
        return _with(found, f"cannot reach {url} ({_reason(exc)}): start the server or fix the base URL"
                            f"{_where(row.base_url_env)}")  # fmt: skip
    return _read(found, answer, key_env=row.key_env)


def _read(found: TargetCheck, answer: httpx.Response, *, key_env: str | None) -> TargetCheck:
    status = answer.status_code
    if status in (401, 403):
        return _with(found, f"{found.url} refused the key (HTTP {status}): check {key_env}")
    if status == 404:
        return _with(found, f"{found.url} answered 404: is the base URL right? An OpenAI-compatible server's "
                            "usually ends in /v1 (http://127.0.0.1:11434/v1 for Ollama)")  # fmt: skip
    if status >= 400:
        return _with(found, f"{found.url} answered HTTP {status}: the server is not ready to serve the model")
    listed = _model_ids(answer)
    if listed and found.model not in listed:
        shown = ", ".join(listed[:_SHOWN_MODELS]) + (" …" if len(listed) > _SHOWN_MODELS else "")
        note = f"the server does not list model {found.model!r} (it lists {shown}); check the name if runs fail"
        return TargetCheck(found.harness, found.model, found.url, note=note)
    return found


def _model_ids(answer: httpx.Response) -> list[str]:
    try:
        data = answer.json().get("data")
    except (ValueError, AttributeError):
        return []
    if not isinstance(data, list):
        return []
    return [str(item["id"]) for item in data if isinstance(item, dict) and isinstance(item.get("id"), str)]


def _with(found: TargetCheck, problem: str) -> TargetCheck:
    return TargetCheck(found.harness, found.model, found.url, problem=problem)


def _where(env: str | None) -> str:
    return f" (--base-url, or {env})" if env else ""


def _reason(exc: httpx.HTTPError) -> str:
    text = str(exc) or type(exc).__name__
    return "connection refused" if "refused" in text.lower() else text[:120]
