"""The chat-turn methods: a turn recorded through :meth:`worker.runtime.Runtime.notify_turn`, the one place
that records a turn and queues the runs it creates (the command line's ``memledger turn`` too).

::

    consolidation/notify_turn   (none)  -> {scheduled, scopeKey, runId?, turns?, dueAt?}
    memory/notify_turn          sessionId, messages [{id?, role: user|assistant, text}]
                                -> {scopeKey, sessionId, consolidation: {scheduled, runId?, turns?, dueAt?},
                                    extraction: {scheduled, runId?, turns?, dueAt?}}

The turn is written to the database (digest, debounced runs) before the queue is touched, and a
queue failure never fails the call: the janitor wakes a run whose message was lost. Both act on
the bound account's scope only. See docs/extraction.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field, StrictStr

from consolidation import ConsolidationRun
from ledger import Ledger, format_rfc3339
from ledger.protocol import INVALID_PARAMS, ExtraMethod, Params, RpcError

if TYPE_CHECKING:
    from worker.runtime import Runtime

CONSOLIDATION_NOTIFY_TURN = "consolidation/notify_turn"
NOTIFY_TURN = "memory/notify_turn"


class NotifyTurnParams(Params):
    session_id: StrictStr
    messages: Annotated[list[dict[str, Any]], Field(min_length=1, max_length=100)]


def scheduled(run: ConsolidationRun | None) -> dict[str, Any]:
    """A job's part of a turn's answer: ``{"scheduled": false}``, or the run it created or pushed back."""
    if run is None:
        return {"scheduled": False}
    return {"scheduled": True, "runId": run.id, "turns": run.turns, "dueAt": format_rfc3339(run.due_at)}


def consolidation_notify_turn(runtime: Runtime, *, operator: bool) -> ExtraMethod:
    """``consolidation/notify_turn``: no params; the bound account's scope, its consolidation run only.

    Result: ``{"scheduled": false, "scopeKey"}`` when the scope's consolidation is off,
    else ``{"scheduled": true, "scopeKey", "runId", "turns", "dueAt"}``.
    """

    def method(led: Ledger, params: dict[str, Any]) -> dict[str, Any]:
        if params:
            raise RpcError(
                INVALID_PARAMS,
                f"invalid params: {CONSOLIDATION_NOTIFY_TURN} takes no params; the scope is always {led.scope_key}",
                reason="invalid_params",
            )
        job = scheduled(runtime.notify_turn(led.scope_key).consolidation)
        return {"scheduled": job.pop("scheduled"), "scopeKey": led.scope_key, **job}

    return method


def notify_turn(runtime: Runtime, *, operator: bool) -> ExtraMethod:
    """``memory/notify_turn``: a turn with its session's messages, for both jobs (consolidation, extraction)."""

    def method(led: Ledger, params: dict[str, Any]) -> dict[str, Any]:
        p = NotifyTurnParams.model_validate(params)
        runs = runtime.notify_turn(led.scope_key, session_id=p.session_id, messages=p.messages)
        return {
            "scopeKey": led.scope_key,
            "sessionId": p.session_id,
            "consolidation": scheduled(runs.consolidation),
            "extraction": scheduled(runs.extraction),
        }

    return method
