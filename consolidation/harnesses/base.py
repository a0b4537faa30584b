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
