"""Settings, runs and a call's token usage as the API hands them out.

The fields of a scope's settings and of a run are stated once here (``ConsolidationSettingsFields``,
``ConsolidationRunFields``); the tables (:mod:`consolidation.tables`) and the classes handed out inherit them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlmodel import SQLModel

from consolidation import limits
from consolidation.candidates import DEFAULT_MAX_PROMPT_CHARS
from ledger import format_rfc3339, from_micros, opt_from_micros
from ledger.columns import (
    FROZEN,
    big_field,
    bool_field,
    construct,
    float_field,
    instant_field,
    int_field,
    json_field,
    text_field,
)


class Mode(StrEnum):
    OFF = "off"
    PROPOSE = "propose"
    APPLY = "apply"


class RunState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SETTLED = "settled"


TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    RunState.PENDING: frozenset({RunState.RUNNING, RunState.SETTLED}),  # claimed; or cancelled
    RunState.RUNNING: frozenset({RunState.SETTLED}),  # settled once, by its worker or the janitor
    RunState.SETTLED: frozenset(),
}
"""The moves a run may make: every UPDATE of a run's state is built from it (:func:`consolidation.runs.move`)."""


class Outcome(StrEnum):
    APPLIED = "applied"
    PROPOSED = "proposed"
    CANCELLED = "cancelled"
    SKIPPED_BUDGET = "skipped_budget"
    FAILED = "failed"
    ABANDONED = "abandoned"


class ResponseFormat(StrEnum):
    """How the openai harness asks for the answer's JSON (docs/consolidation.md, "Models")."""

    AUTO = "auto"  # the strongest form the server takes, falling back on a refusal
    JSON_SCHEMA = "json_schema"
    JSON_OBJECT = "json_object"  # with the schema in llama.cpp's form
    PLAIN = "plain"  # no response_format: the system text's instructions only


class Op(StrEnum):
    """The closed vocabulary (docs/consolidation.md), in the order the prompt and the settings list them."""

    MERGE = "merge"
    CORRECT = "correct"
    EXPIRE = "expire"
    GROUP = "group"
    RETIRE = "retire"
    KEEP = "keep"


ALL_OPS: tuple[str, ...] = tuple(op.value for op in Op)


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts reported by the API for one call (all zero for the offline harness)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    @property
    def prompt_tokens(self) -> int:
        """Every input token of the request: uncached, cache writes and cache reads."""
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens


MAX_REPORTED_TOKENS = 10_000_000
"""The most tokens of one kind a single call may report (ten times the largest context window offered): a
server reporting more is wrong or hostile, and its numbers are neither stored nor charged."""


def usage_problem(usage: Usage) -> str | None:
    """Why the usage a model server reported cannot be true (each count a whole number from 0 to
    :data:`MAX_REPORTED_TOKENS`), or None when it can."""
    for name in ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"):
        count = getattr(usage, name)
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_REPORTED_TOKENS:
            return (
                f"the model server reported impossible usage ({name} = {str(count)[:40]}; a call has at most "
                f"{MAX_REPORTED_TOKENS:,}), so it was neither stored nor charged"
            )
    return None


# Ten minutes of quiet after a turn before a run: it does not read a conversation still going on, and
# a chatty user does not pay for a run every half minute. A run waits at most an hour after its first
# turn (so a conversation that never pauses is still tidied), which keeps the debounce meaningful.
DEFAULT_DEBOUNCE_S = 600.0
DEFAULT_MAX_WAIT_S = 3600.0
DEFAULT_CAP_S = 60.0
DEFAULT_MAX_OUTPUT_TOKENS = 4096
DEFAULT_SPEND_BUDGET_MICRO_USD = 5_000_000  # 5 USD per scope per calendar month
CALL_FIELDS = ("response_format", "temperature", "context_window_tokens", "system_role", "stream")
"""How the call to a scope's model is made (the openai harness reads them; see docs/consolidation.md)."""


class ConsolidationSettingsFields(SQLModel):
    """A scope's consolidation settings, each stated once: :class:`ConsolidationSettings` hands them out and
    ``consolidation_settings`` (:class:`consolidation.tables.ConsolidationSettingsRow`) stores them."""

    model_config = FROZEN

    scope_key: str = text_field(primary_key=True)
    mode: Mode = text_field(value=Mode.OFF)
    allowed_ops: list[str] = json_field(factory=lambda: list(ALL_OPS))
    debounce_s: limits.DebounceS = float_field(value=DEFAULT_DEBOUNCE_S)
    max_wait_s: limits.MaxWaitS | None = float_field(value=DEFAULT_MAX_WAIT_S)
    harness: str = text_field()
    model: str = text_field()
    wall_clock_cap_s: limits.WallClockCapS = float_field(value=DEFAULT_CAP_S)
    max_output_tokens: limits.MaxOutputTokens = int_field(value=DEFAULT_MAX_OUTPUT_TOKENS)
    spend_budget_micro_usd: limits.SpendBudgetMicroUsd = big_field(value=DEFAULT_SPEND_BUDGET_MICRO_USD)
    allow_removal: bool = bool_field(default=False, value=False)  # retire passes the gate only when on
    max_prompt_chars: limits.MaxPromptChars = int_field(default=16000, value=DEFAULT_MAX_PROMPT_CHARS)
    # The model target beyond harness + model: a server of the scope's own, and its own price of the model.
    base_url: str | None = text_field(value=None)
    price_in_usd_per_mtok: limits.PriceUsdPerMtok | None = float_field(value=None)
    price_out_usd_per_mtok: limits.PriceUsdPerMtok | None = float_field(value=None)
    # How the call to the scope's model is made (the openai harness; docs/consolidation.md, "Models").
    response_format: ResponseFormat = text_field(default="auto", value=ResponseFormat.AUTO)
    temperature: limits.Temperature = float_field(default=0, value=0.0)
    context_window_tokens: limits.ContextWindowTokens | None = int_field(value=None)
    system_role: bool = bool_field(default=True, value=True)
    stream: bool = bool_field(default=True, value=True)


class ConsolidationSettings(ConsolidationSettingsFields):
    """A scope's consolidation settings; each number in the range :mod:`consolidation.limits` states.

    A field left out takes its default (mode off, every operation, the budget of 5 USD a month).
    Built by :mod:`consolidation.settings`, which checks a change field by field first (its
    messages say what to set); a row read back from the database is trusted as stored.
    """

    def to_json(self) -> dict[str, Any]:
        return {
            "scope_key": self.scope_key,
            "mode": self.mode.value,
            "allowed_ops": list(self.allowed_ops),
            "debounce_s": self.debounce_s,
            "max_wait_s": self.max_wait_s,
            "harness": self.harness,
            "model": self.model,
            "wall_clock_cap_s": self.wall_clock_cap_s,
            "max_output_tokens": self.max_output_tokens,
            "spend_budget_micro_usd": self.spend_budget_micro_usd,
            "allow_removal": self.allow_removal,
            "max_prompt_chars": self.max_prompt_chars,
            "base_url": self.base_url,
            "price_in_usd_per_mtok": self.price_in_usd_per_mtok,
            "price_out_usd_per_mtok": self.price_out_usd_per_mtok,
            "response_format": self.response_format.value,
            "temperature": self.temperature,
            "context_window_tokens": self.context_window_tokens,
            "system_role": self.system_role,
            "stream": self.stream,
        }


class ConsolidationRunFields(SQLModel):
    """A run's fields, each stated once: :class:`ConsolidationRun` hands them out and ``consolidation_runs``
    (:class:`consolidation.tables.ConsolidationRunRow`) stores them. ``prompt``/``answer``/``answer_raw`` hold
    bodies (their repr leaves them out)."""

    model_config = FROZEN

    id: str = text_field(primary_key=True)
    scope_key: str = text_field()
    state: RunState = text_field()
    outcome: Outcome | None = text_field()
    turns: int = int_field()
    created_at: datetime = instant_field()
    due_at: datetime = instant_field()
    started_at: datetime | None = instant_field()
    settled_at: datetime | None = instant_field()
    harness: str | None = text_field()
    model: str | None = text_field()
    input_tokens: int = big_field(default=0)
    output_tokens: int = big_field(default=0)
    cache_creation_input_tokens: int = big_field(default=0)
    cache_read_input_tokens: int = big_field(default=0)
    spend_micro_usd: int = big_field(default=0)
    model_calls: int = int_field(default=0)
    ops_proposed: int = int_field(default=0)
    ops_applied: int = int_field(default=0)
    ops_refused: int = int_field(default=0)
    refusals: dict[str, int] = json_field(default="{}")
    error: str | None = text_field()
    mode: str | None = text_field(value=None)
    # What a run left waiting for the user (propose mode, extraction), apart from what it applied (migration 0013).
    proposals_written: int = int_field(default=0, value=0)
    wall_clock_cap_s: float | None = float_field(value=None)
    prompt: str | None = text_field(value=None, hidden=True)
    answer: dict[str, Any] | None = json_field(value=None, hidden=True)
    answer_raw: str | None = text_field(value=None, hidden=True)
    answer_stored_at: datetime | None = instant_field(value=None)
    # Both jobs share the table (docs/extraction.md): "consolidate" or "extract".
    job: str = text_field(default="consolidate", value="consolidate")


class ConsolidationRun(ConsolidationRunFields):
    """One run (docs/consolidation.md). ``prompt`` and ``answer`` hold bodies: never log or export them."""

    # An extraction run's session (None for consolidation): the table stores "" for none.
    session_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The run's public fields, RFC 3339 instants; never the prompt or answer (they hold bodies)."""
        return {
            "id": self.id,
            "scope_key": self.scope_key,
            "state": self.state.value,
            "outcome": None if self.outcome is None else self.outcome.value,
            "turns": self.turns,
            "created_at": format_rfc3339(self.created_at),
            "due_at": format_rfc3339(self.due_at),
            "started_at": format_rfc3339(self.started_at),
            "settled_at": format_rfc3339(self.settled_at),
            "harness": self.harness,
            "model": self.model,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
            "spend_micro_usd": self.spend_micro_usd,
            "model_calls": self.model_calls,
            "ops_proposed": self.ops_proposed,
            "ops_applied": self.ops_applied,
            "ops_refused": self.ops_refused,
            "proposals_written": self.proposals_written,
            "refusals": dict(self.refusals),
            "error": self.error,
            "job": self.job,
            "session_id": self.session_id,
        }


_RUN_FIELDS = set(ConsolidationRun.model_fields)


def run_from_row(row: Mapping[Any, Any]) -> ConsolidationRun:
    """The run a row of ``consolidation_runs`` holds (the table's types and CHECKs hold it to the fields,
    so it is not checked again: runs are read on every turn)."""
    values = {
        "id": row["id"],
        "scope_key": row["scope_key"],
        "state": RunState(row["state"]),
        "outcome": None if row["outcome"] is None else Outcome(row["outcome"]),
        "turns": row["turns"],
        "created_at": from_micros(row["created_at"]),
        "due_at": from_micros(row["due_at"]),
        "started_at": opt_from_micros(row["started_at"]),
        "settled_at": opt_from_micros(row["settled_at"]),
        "harness": row["harness"],
        "model": row["model"],
        "input_tokens": row["input_tokens"],
        "output_tokens": row["output_tokens"],
        "cache_creation_input_tokens": row["cache_creation_input_tokens"],
        "cache_read_input_tokens": row["cache_read_input_tokens"],
        "spend_micro_usd": row["spend_micro_usd"],
        "model_calls": row["model_calls"],
        "ops_proposed": row["ops_proposed"],
        "ops_applied": row["ops_applied"],
        "ops_refused": row["ops_refused"],
        "refusals": dict(json.loads(row["refusals"] or "{}")),
        "error": row["error"],
        "mode": row["mode"],
        "proposals_written": row["proposals_written"] or 0,
        "wall_clock_cap_s": row["wall_clock_cap_s"],
        "prompt": row["prompt"],
        "answer": None if row["answer"] is None else json.loads(row["answer"]),
        "answer_raw": row["answer_raw"],
        "answer_stored_at": opt_from_micros(row["answer_stored_at"]),
        "job": row["job"] or "consolidate",
        "session_id": row["session_id"] or None,
    }
    return construct(ConsolidationRun, values, _RUN_FIELDS)
