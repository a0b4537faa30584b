"""The openai harness: one Chat Completions request through the official ``openai`` SDK.

Chat Completions is what OpenAI and every OpenAI-compatible server speak (Ollama, vLLM,
llama.cpp's server, LM Studio), so one harness covers them all; ``base_url`` picks the
server. The request is a hidden, one-turn, tool-less session: the same system text and
the same encoded user message as the anthropic harness sends
(:func:`consolidation.prompt.build_user_message`), a bounded output, no ``tools``.

The answer's schema goes as ``response_format``, in the strongest form the server takes:

1. ``{"type": "json_schema", "json_schema": {..., "strict": true}}`` — the schema made
   strict (every field required, the optional ones nullable; the nulls are dropped
   before the answer is parsed). vLLM and Ollama enforce it by constrained decoding.
2. ``{"type": "json_object"}`` (JSON mode), when the server refuses the schema;
3. no ``response_format`` at all, the system text's instructions only, when it refuses
   JSON mode too.

A refusal is an HTTP 400 (or 422) whose error names ``response_format``; it was not
processed, so the next form is tried at once, inside the same wall-clock cap, and the
form that worked is remembered per (server, model) for the life of the process. The
answer is parsed by the same parser and judged by the same gate whatever the form.

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
from dataclasses import replace
from typing import Any, ClassVar, cast
from urllib.parse import urlsplit

import openai
from openai.types.chat import ChatCompletion

from consolidation.errors import FormatRefused, HarnessError
from consolidation.harnesses.base import HarnessResult, PromptRecord, Turn
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
FORMATS = ("json_schema", "json_object", "text")
"""The ``response_format`` forms, strongest first; a server that refuses one gets the next."""
_FORMAT_STATUSES = frozenset({400, 422})

_formats_lock = threading.Lock()
_formats: dict[tuple[str, str], str] = {}


def remembered_format(base_url: str, model: str) -> str:
    """The ``response_format`` form this process uses for ``model`` on the server at ``base_url``."""
    with _formats_lock:
        return _formats.get((base_url, model), FORMATS[0])


def forget_formats() -> None:
    """Forget every remembered fallback (the next call starts from the strict schema again)."""
    with _formats_lock:
        _formats.clear()


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
    """An HTTP 400/422 whose error names ``response_format``: the server does not take that form."""
    if not isinstance(exc, openai.APIStatusError) or exc.status_code not in _FORMAT_STATUSES:
        return False
    return "response_format" in f"{exc.message} {exc.body}"


def _usage(completion: ChatCompletion) -> Usage:
    usage = completion.usage
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


class OpenAIHarness(OneTurnHarness):
    """Consolidation through Chat Completions (official ``openai`` SDK); see the module docstring.

    ``api_key`` of ``None`` means none configured (a placeholder goes to a server that is
    not OpenAI's); ``base_url`` of ``None`` means OpenAI's own API. The harness keeps no
    connection between calls and is thread-safe.
    """

    name: ClassVar[str] = "openai"

    def __init__(
        self,
        *,
        api_key: str | None,
        base_url: str | None,
        prices: PriceTable,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 8.0,
    ) -> None:
        self._backoff = Backoff(initial_s=backoff_initial_s, max_s=backoff_max_s)
        self._api_key = api_key or None
        self._base_url = (base_url or OPENAI_BASE_URL).rstrip("/")
        self._prices = prices
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
        # OpenAI's newer models take only max_completion_tokens; servers that copy the API take max_tokens.
        limit = "max_completion_tokens" if self._official else "max_tokens"
        params: dict[str, Any] = {
            "model": model,
            limit: max_output_tokens,
            "messages": [{"role": "system", "content": turn.system}, {"role": "user", "content": turn.user_message}],
        }
        if form == "json_schema":
            params["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": turn.schema_name, "schema": strict_schema(turn.schema), "strict": True},
            }
        elif form == "json_object":
            params["response_format"] = {"type": "json_object"}
        return params

    def ask(self, turn: Turn, *, model: str, max_output_tokens: int, wall_clock_cap_s: float) -> HarnessResult:
        """Make the one Chat Completions request for ``turn`` within ``wall_clock_cap_s``.

        Returns a result whenever an answer arrived (``answer`` is ``None`` when its text did
        not parse). Usage and spend come from the response.

        Raises:
            HarnessError: no price for ``model`` (checked before any request), no key for
                OpenAI's own API, a timeout, an HTTP error other than a retried 429, a dropped
                connection, the cap ran out while retrying, or the model refused.
            ValueError: ``max_output_tokens`` < 1, or ``wall_clock_cap_s`` not a positive finite number.
        """
        check_bounds(max_output_tokens, wall_clock_cap_s)
        price = price_for(self._prices, model)
        if self._api_key is None and self._official:
            raise HarnessError("no OpenAI API key: set OPENAI_API_KEY, or point base_url at a local server")
        form = remembered_format(self._base_url, model)
        with CallGuard(time.monotonic() + wall_clock_cap_s) as guard:
            while True:
                params = self.turn_params(turn, model=model, max_output_tokens=max_output_tokens, form=form)
                try:
                    completion = self.send(params, guard=guard, cap_s=wall_clock_cap_s)
                    break
                except FormatRefused as refused:
                    following = FORMATS[FORMATS.index(form) + 1 :]
                    if not following:  # pragma: no cover - the last form sends no response_format
                        raise HarnessError(f"{self._errors.service} refused the request: {refused}") from refused.cause
                    log.warning(
                        "openai call model=%s: the server refused response_format %s; using %s from now on",
                        model,
                        form,
                        following[0],
                    )
                    form = following[0]
                    _remember_format(self._base_url, model, form)
        return self._result(completion, turn=turn, price=price, form=form, limit=max_output_tokens)

    def send(self, params: dict[str, Any], *, guard: CallGuard, cap_s: float) -> ChatCompletion:
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

            def attempt(remaining: float) -> ChatCompletion:
                try:
                    return cast(ChatCompletion, client.chat.completions.create(**params, timeout=remaining))
                except openai.APIStatusError as exc:
                    if "response_format" in params and _format_refused(exc):
                        raise FormatRefused(exc) from exc
                    raise

            return within_cap(
                attempt,
                guard=guard,
                cap_s=cap_s,
                errors=self._errors,
                backoff=self._backoff,
                model=params["model"],
            )

    def _result(
        self, completion: ChatCompletion, *, turn: Turn, price: ModelPrice, form: str, limit: int
    ) -> HarnessResult:
        usage = _usage(completion)
        spend = checked_spend(price, usage)
        choice = completion.choices[0] if completion.choices else None
        message = choice.message if choice is not None else None
        finish = choice.finish_reason if choice is not None else None
        text = (message.content if message is not None else None) or ""
        log.info(
            "openai call id=%s model=%s form=%s finish_reason=%s input_tokens=%d output_tokens=%d spend_micro_usd=%d",
            completion.id,
            completion.model,
            form,
            finish,
            usage.input_tokens,
            usage.output_tokens,
            spend,
        )
        refusal = message.refusal if message is not None else None
        if refusal:
            raise HarnessError(f"the model refused: {refusal[:200]}", usage=usage, spend_micro_usd=spend)
        if form == "json_schema":
            read = turn.parse
            turn = replace(turn, parse=lambda text: _drop_nulls(read(text)))
        why = {
            "length": f" (the reply was cut off at max_tokens={limit})",
            "content_filter": " (the server's content filter stopped the reply)",
        }.get(finish or "")
        return read_reply(turn, text, prompt=turn.user_message, usage=usage, spend=spend, why=why)
