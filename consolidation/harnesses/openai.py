"""The openai harness: one Chat Completions request through the official ``openai`` SDK.

Chat Completions is what OpenAI and every OpenAI-compatible server speak (Ollama, vLLM,
llama.cpp's server, llama-cpp-python's, LM Studio), so one harness covers them all;
``base_url`` picks the server. The request is a hidden, one-turn, tool-less session: the
same system text and the same encoded user message as the anthropic harness sends
(:func:`consolidation.prompt.build_user_message`), a bounded output, no ``tools``.
How it is made follows the scope's :class:`~consolidation.harnesses.base.CallOptions`:

* **the answer's format** (``response_format``): ``json_schema`` — the schema made strict
  (every field required, the optional ones nullable; the nulls are dropped before the answer
  is parsed), which vLLM, Ollama and llama.cpp's server enforce while decoding;
  ``json_object`` with the schema beside it in llama.cpp's form (``{"type": "json_object",
  "schema": {...}}``, which llama.cpp's and llama-cpp-python's servers enforce; OpenAI's own
  API gets bare JSON mode); ``plain`` — no ``response_format``, the system text's
  instructions only. ``auto`` starts with the strongest and, when the server refuses a form
  (an HTTP 400, 422 or 500 whose error names ``response_format``: nothing was generated),
  tries the next at once inside the same wall-clock cap, remembering the form that worked
  per (server, model) for the life of the process. A form chosen by the scope is never
  swapped for another: its refusal fails the run and says so.
* **temperature**, 0 by default: consolidation is bookkeeping, not prose.
* **system role**: the instructions go in a system message, or (``system_role`` false, for
  chat templates without a system role, such as Gemma's, which drop it) at the head of the
  one user message.
* **streaming** (on by default, with ``stream_options.include_usage``): a call the cap or a
  stopping worker gives up is closed, and a server that generates for an open connection
  only (llama-cpp-python's) stops; the usage comes from the stream's last chunk. A server
  that sends no usage in a stream (llama-cpp-python's) has its output tokens counted, one
  per content chunk, and no input tokens: turn ``stream`` off to read its usage instead.
* **the context window** (:mod:`consolidation.harnesses.model_window`): the scope's, or the
  server's report, bounds the records a run sends (:meth:`OpenAIHarness.records_room`).

Retries, the cap and what fails a run are :mod:`consolidation.harnesses.retry`'s policy,
shared with the anthropic harness (``max_retries=0``; 429 and a connection never
established are retried, nothing else). A refusal by the model (``message.refusal``)
fails the run with the model's reason, its usage and spend recorded.

The key is ``OPENAI_API_KEY`` as the SDK reads it (the service reads it once at start and
passes it in); a local server needs none, so a placeholder is sent. The key is never
logged, stored or shown.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar
from urllib.parse import urlsplit

import openai
from openai.types import CompletionUsage

from consolidation.errors import FormatRefused, HarnessError
from consolidation.harnesses import model_window
from consolidation.harnesses.base import CallOptions, HarnessResult, PromptRecord, Turn
from consolidation.harnesses.calls import CallGuard
from consolidation.harnesses.one_turn import OneTurnHarness, check_bounds, checked_spend, price_for, read_reply
from consolidation.harnesses.retry import Backoff, SdkErrors, within_cap
from consolidation.models import Usage
from consolidation.pricing import ModelPrice, PriceTable
from consolidation.prompt import turn as consolidation_turn

log = logging.getLogger(__name__)

OPENAI_BASE_URL = "https://api.openai.com/v1"
PLACEHOLDER_API_KEY = "memledger-no-key"
"""Sent to a server other than OpenAI's when no key is configured: the SDK insists on one, local servers ignore it."""
FORMATS = ("json_schema", "json_object", "plain")
"""The ``response_format`` forms, strongest first; under ``auto`` a server that refuses one gets the next."""
_FORMAT_STATUSES = frozenset({400, 422, 500})

_formats_lock = threading.Lock()
_formats: dict[tuple[str, str], str] = {}


def remembered_format(base_url: str, model: str) -> str:
    """The ``response_format`` form this process uses for ``model`` on the server at ``base_url`` under ``auto``."""
    with _formats_lock:
        return _formats.get((base_url, model), FORMATS[0])


def forget_formats() -> None:
    """Forget every remembered fallback and what was learnt of models' windows (the next call starts afresh)."""
    with _formats_lock:
        _formats.clear()
    model_window.forget()


def _remember_format(base_url: str, model: str, form: str) -> None:
    with _formats_lock:
        _formats[(base_url, model)] = form


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` as strict structured output wants it: every property required, the optional ones nullable."""
    out = copy.deepcopy(schema)

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            properties = node.get("properties")
            if isinstance(properties, dict):
                required = set(node.get("required", []))
                for name, sub in list(properties.items()):
                    visit(sub)
                    if name not in required:
                        properties[name] = {"anyOf": [sub, {"type": "null"}]}
                node["required"] = list(properties)
                node["additionalProperties"] = False
            for key in ("items", "anyOf"):
                child = node.get(key)
                for sub in child if isinstance(child, list) else [child]:
                    visit(sub)

    visit(out)
    return out


def _drop_nulls(answer: dict[str, Any]) -> dict[str, Any]:
    """The strict schema made the model write ``null`` for every field it did not mean to set: drop them."""
    return {
        key: [{k: v for k, v in item.items() if v is not None} if isinstance(item, dict) else item for item in value]
        if isinstance(value, list)
        else value
        for key, value in answer.items()
    }


def _format_refused(exc: Exception) -> bool:
    """An HTTP 400/422/500 whose error names ``response_format``: the server does not take that form.

    A 500 counts too: llama-cpp-python's server answers a ``json_schema`` request with a 500 whose
    validation error names the field (it generated nothing).
    """
    if not isinstance(exc, openai.APIStatusError) or exc.status_code not in _FORMAT_STATUSES:
        return False
    return "response_format" in f"{exc.message} {exc.body}"


def _usage(usage: CompletionUsage | None) -> Usage:
    if usage is None:
        return Usage()
    details = usage.prompt_tokens_details
    cached = (details.cached_tokens if details is not None else None) or 0
    prompt = usage.prompt_tokens or 0
    return Usage(
        input_tokens=max(prompt - cached, 0),
        output_tokens=usage.completion_tokens or 0,
        cache_read_input_tokens=min(cached, prompt),
    )


@dataclass(frozen=True, slots=True)
class Reply:
    """What one Chat Completions answer said, streamed or whole.

    ``usage_reported``: the server reported usage (else ``usage`` holds the output tokens counted
    from the stream, one per content chunk, and no input tokens).
    """

    id: str
    model: str
    text: str
    refusal: str | None
    finish_reason: str | None
    usage: Usage
    usage_reported: bool


def _whole(completion: Any) -> Reply:
    choice = completion.choices[0] if completion.choices else None
    message = choice.message if choice is not None else None
    return Reply(
        id=completion.id,
        model=completion.model,
        text=(message.content if message is not None else None) or "",
        refusal=message.refusal if message is not None else None,
        finish_reason=choice.finish_reason if choice is not None else None,
        usage=_usage(completion.usage),
        usage_reported=completion.usage is not None,
    )


def _streamed(stream: Any) -> Reply:
    """Read a stream of chunks to its end (or until the guard closes it)."""
    import httpx2

    parts: list[str] = []
    refusal: list[str] = []
    finish = usage = None
    chunk_id = model = ""
    content_chunks = 0
    try:
        for chunk in stream:
            chunk_id, model = chunk.id or chunk_id, chunk.model or model
            usage = chunk.usage or usage
            for choice in chunk.choices:
                if choice.delta.content:
                    parts.append(choice.delta.content)
                    content_chunks += 1
                if choice.delta.refusal:
                    refusal.append(choice.delta.refusal)
                finish = choice.finish_reason or finish
    except httpx2.TransportError as exc:
        # The SDK wraps errors in starting a request, not in reading a stream: translate the same way.
        raise openai.APIConnectionError(message=f"the stream broke: {type(exc).__name__}", request=exc.request) from exc
    return Reply(
        id=chunk_id,
        model=model,
        text="".join(parts),
        refusal="".join(refusal) or None,
        finish_reason=finish,
        usage=_usage(usage) if usage is not None else Usage(output_tokens=content_chunks),
        usage_reported=usage is not None,
    )


class OpenAIHarness(OneTurnHarness):
    """Consolidation through Chat Completions (official ``openai`` SDK); see the module docstring.

    ``api_key`` of ``None`` means none configured (a placeholder goes to a server that is
    not OpenAI's); ``base_url`` of ``None`` means OpenAI's own API; ``options`` are the scope's
    (the defaults when None). The harness keeps no connection between calls and is thread-safe.
    """

    name: ClassVar[str] = "openai"

    def __init__(
        self,
        *,
        api_key: str | None,
        base_url: str | None,
        prices: PriceTable,
        options: CallOptions | None = None,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 8.0,
    ) -> None:
        self._backoff = Backoff(initial_s=backoff_initial_s, max_s=backoff_max_s)
        self._api_key = api_key or None
        self._base_url = (base_url or OPENAI_BASE_URL).rstrip("/")
        self._prices = prices
        self._options = options or CallOptions()
        parts = urlsplit(self._base_url)
        self._official = parts.hostname == "api.openai.com"
        server = (
            "the OpenAI API" if self._official else f"the OpenAI-compatible server at {parts.scheme}://{parts.netloc}"
        )
        self._errors = SdkErrors(
            base=openai.OpenAIError,
            status=openai.APIStatusError,
            connection=openai.APIConnectionError,
            timeout=openai.APITimeoutError,
            service=server,
            retryable_statuses=frozenset({429, 529}),
        )

    @property
    def base_url(self) -> str:
        return self._base_url

    def request_params(
        self, records: Sequence[PromptRecord], *, model: str, max_output_tokens: int, form: str = FORMATS[0]
    ) -> dict[str, Any]:
        """The keyword arguments of the one ``chat.completions.create`` call (no ``tools``)."""
        return self.turn_params(
            consolidation_turn(records), model=model, max_output_tokens=max_output_tokens, form=form
        )

    def turn_params(self, turn: Turn, *, model: str, max_output_tokens: int, form: str) -> dict[str, Any]:
        """The ``chat.completions.create`` arguments of ``turn``, asking for its schema in ``form``."""
        options = self._options
        # OpenAI's newer models take only max_completion_tokens; servers that copy the API take max_tokens.
        limit = "max_completion_tokens" if self._official else "max_tokens"
        if options.system_role:
            messages = [{"role": "system", "content": turn.system}, {"role": "user", "content": turn.user_message}]
        else:
            messages = [{"role": "user", "content": f"{turn.system}\n{turn.user_message}"}]
        params: dict[str, Any] = {
            "model": model,
            limit: max_output_tokens,
            "messages": messages,
            "temperature": options.temperature,
        }
        if options.stream:
            params["stream"] = True
            params["stream_options"] = {"include_usage": True}
        if form == "json_schema":
            params["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": turn.schema_name, "schema": strict_schema(turn.schema), "strict": True},
            }
        elif form == "json_object":
            params["response_format"] = {"type": "json_object"}
            if not self._official:  # llama.cpp's form: the schema beside the type, enforced while decoding
                params["response_format"]["schema"] = turn.schema
        return params

    def records_room(self, *, model: str, max_output_tokens: int, system_chars: int) -> int | None:
        """Characters of records that fit the model's context window (the scope's, else the server's report)."""
        window = self._options.context_window_tokens
        if window is None and not self._official:
            window = model_window.server_window(self._base_url, model)
        return model_window.records_room(
            window=window,
            base_url=self._base_url,
            model=model,
            max_output_tokens=max_output_tokens,
            system_chars=system_chars,
        )

    def ask(self, turn: Turn, *, model: str, max_output_tokens: int, wall_clock_cap_s: float) -> HarnessResult:
        """Make the one Chat Completions request for ``turn`` within ``wall_clock_cap_s``.

        Returns a result whenever an answer arrived (``answer`` is ``None`` when its text did
        not parse, and ``error`` says why). Usage and spend come from the response.

        Raises:
            HarnessError: no price for ``model`` (checked before any request), no key for
                OpenAI's own API, a timeout, an HTTP error other than a retried 429, a dropped
                connection, a format the scope chose refused, the cap ran out while retrying,
                or the model refused.
            ValueError: ``max_output_tokens`` < 1, or ``wall_clock_cap_s`` not a positive finite number.
        """
        check_bounds(max_output_tokens, wall_clock_cap_s)
        price = price_for(self._prices, model)
        if self._api_key is None and self._official:
            raise HarnessError("no OpenAI API key: set OPENAI_API_KEY, or point base_url at a local server")
        chosen = self._options.response_format
        form = remembered_format(self._base_url, model) if chosen == "auto" else chosen
        with CallGuard(time.monotonic() + wall_clock_cap_s) as guard:
            while True:
                params = self.turn_params(turn, model=model, max_output_tokens=max_output_tokens, form=form)
                try:
                    reply = self.send(params, guard=guard, cap_s=wall_clock_cap_s)
                    break
                except FormatRefused as refused:
                    form = self._next_form(model, form, refused, fixed=chosen != "auto")
        return self._result(reply, turn=turn, params=params, price=price, form=form, limit=max_output_tokens)

    def _next_form(self, model: str, form: str, refused: FormatRefused, *, fixed: bool) -> str:
        """The form to try after the server refused ``form``. Raises HarnessError when there is none to try."""
        following = FORMATS[FORMATS.index(form) + 1 :]
        if fixed or not following:
            raise HarnessError(
                f"{self._errors.service} refused response_format {form} ({str(refused)[:200]}); set the scope's "
                "response_format to a form the server takes, or to auto to try each"
            ) from refused.cause
        log.warning(
            "openai call model=%s: the server refused response_format %s; using %s from now on",
            model,
            form,
            following[0],
        )
        _remember_format(self._base_url, model, following[0])
        return following[0]

    def send(self, params: dict[str, Any], *, guard: CallGuard, cap_s: float) -> Reply:
        """Make the ``chat.completions.create`` request before ``guard``'s deadline under the shared retry policy.

        Raises:
            FormatRefused: the server refused the ``response_format`` form (nothing was processed).
            HarnessError: see :func:`consolidation.harnesses.retry.within_cap`.
        """

        with openai.OpenAI(
            api_key=self._api_key or PLACEHOLDER_API_KEY,
            base_url=self._base_url,
            max_retries=0,
            timeout=max(guard.deadline - time.monotonic(), 0.001),
            http_client=openai.DefaultHttpxClient(event_hooks=guard.event_hooks()),
        ) as client:

            def attempt(remaining: float) -> Reply:
                try:
                    answer = client.chat.completions.create(**params, timeout=remaining)
                except openai.APIStatusError as exc:
                    if "response_format" in params and _format_refused(exc):
                        raise FormatRefused(exc) from exc
                    raise
                return _streamed(answer) if params.get("stream") else _whole(answer)

            return within_cap(
                attempt,
                guard=guard,
                cap_s=cap_s,
                errors=self._errors,
                backoff=self._backoff,
                model=params["model"],
            )

    def _result(
        self, reply: Reply, *, turn: Turn, params: dict[str, Any], price: ModelPrice, form: str, limit: int
    ) -> HarnessResult:
        usage = reply.usage
        spend = checked_spend(price, usage)
        log.info(
            "openai call id=%s model=%s form=%s finish_reason=%s input_tokens=%d output_tokens=%d usage=%s "
            "spend_micro_usd=%d",
            reply.id,
            reply.model,
            form,
            reply.finish_reason,
            usage.input_tokens,
            usage.output_tokens,
            "reported" if reply.usage_reported else "counted",
            spend,
        )
        if reply.usage_reported:
            chars = sum(len(str(message["content"])) for message in params["messages"])
            model_window.observe(self._base_url, params["model"], chars=chars, prompt_tokens=usage.prompt_tokens)
        if reply.refusal:
            raise HarnessError(f"the model refused: {reply.refusal[:200]}", usage=usage, spend_micro_usd=spend)
        if form == "json_schema":
            read = turn.parse
            turn = replace(turn, parse=lambda text: _drop_nulls(read(text)))
        why = {
            "length": f" (the reply was cut off at max_tokens={limit}: raise max_output_tokens)",
            "content_filter": " (the server's content filter stopped the reply)",
        }.get(reply.finish_reason or "")
        return read_reply(turn, reply.text, prompt=turn.user_message, usage=usage, spend=spend, why=why)
