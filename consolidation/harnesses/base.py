"""What every harness takes and gives back.

A harness makes the one hidden model call of a consolidation run: it receives the
scope's active records and returns the model's answer with the tokens and spend the
call observed. It never touches the ledger and never validates the answer's
semantics; the gate does that.

Two outcomes, and only two:

* :class:`HarnessResult` — a response arrived. ``answer`` is the parsed
  ``{"operations": [...]}`` or ``None`` when the text did not parse (``error`` says
  why); usage and spend are recorded either way, because the call was paid for.
* :class:`~consolidation.errors.HarnessError` — the call failed (timeout, HTTP error, connection, retries
  exhausted inside the wall-clock cap). The run settles ``failed``.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from consolidation.models import Usage


@dataclass(frozen=True, slots=True)
class PromptRecord:
    """One active record as the model sees it: nothing but id, kind, body and conflict group.

    ``valid_from``, ``expires`` (whether it already has an expiry) and ``replaced`` (the body a user's edit
    replaced) are never sent to a model: the offline harness reads them to tell the newer of two values, to
    leave an expiring record alone, and to see the old value of an edited fact.
    """

    id: str
    kind: str
    body: str
    conflict_group: str | None
    valid_from: datetime | None = None
    expires: bool = False
    replaced: str | None = None


@dataclass(frozen=True, slots=True)
class HarnessResult:
    """A response arrived.

    ``prompt`` is the exact user message that was sent; the run stores it (and scrubs it
    when a record is erased). ``answer`` is ``None`` when ``raw_text`` did not parse, and
    then ``error`` starts with ``"unparseable answer: "``.
    """

    answer: dict[str, Any] | None
    raw_text: str
    prompt: str
    usage: Usage
    spend_micro_usd: int
    error: str | None = None

    @classmethod
    def free(cls, answer: dict[str, Any], *, prompt: str) -> HarnessResult:
        """The result of a call that asks no model (the offline harnesses): the answer is its text; no spend."""
        return cls(
            answer=answer,
            raw_text=json.dumps(answer, ensure_ascii=False),
            prompt=prompt,
            usage=Usage(),
            spend_micro_usd=0,
        )


class Harness(ABC):
    """One way to make the consolidation call. Implementations are thread-safe."""

    name: ClassVar[str]

    @abstractmethod
    def call(
        self, records: Sequence[PromptRecord], *, model: str, max_output_tokens: int, wall_clock_cap_s: float
    ) -> HarnessResult:
        """Ask for consolidation operations over ``records`` and return the answer.

        At most one paid model response per call; the whole call, retries included,
        stays inside ``wall_clock_cap_s``.

        Raises:
            HarnessError: the call failed; nothing usable arrived.
        """

    def records_room(self, *, model: str, max_output_tokens: int, system_chars: int) -> int | None:
        """Characters of records one call can carry within the model's context window, after ``system_chars`` of
        instructions and ``max_output_tokens`` of answer; None: no bound beyond the scope's ``max_prompt_chars``.

        Raises:
            HarnessError: the answer alone would fill the context window (the message says what to set).
        """
        return None


@dataclass(frozen=True, slots=True)
class Turn:
    """One hidden, tool-less turn of either job: what is sent, and how the reply's text is read.

    ``parse`` turns the text into the answer or raises ``parse_error``; ``schema_name``
    names ``schema`` where the API wants a name for it.
    """

    system: str
    user_message: str
    schema: dict[str, Any]
    schema_name: str
    parse: Callable[[str], dict[str, Any]]
    parse_error: type[ValueError]


@dataclass(frozen=True, slots=True)
class CallOptions:
    """How a paying harness makes its call, from the scope's settings (docs/consolidation.md, "Models").

    ``response_format``: ``auto`` (the strongest form the server takes, falling back on a refusal),
    ``json_schema``, ``json_object`` or ``plain``; ``system_role``: false puts the instructions at
    the head of the user message (chat templates without a system role); ``stream``: the answer is
    streamed, so a call given up stops the server generating; ``context_window_tokens``: None, what
    the server reports. The openai harness reads them all; the anthropic harness none (its API fixes them).
    """

    response_format: str = "auto"
    temperature: float = 0.0
    context_window_tokens: int | None = None
    system_role: bool = True
    stream: bool = True
