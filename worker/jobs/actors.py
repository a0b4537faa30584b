"""The dramatiq actors and the one way to send them a message.

``consolidate_scope(run_id)`` executes one due run; ``sweep_expiry(now)`` runs the
expiry sweep. Both are safe under at-least-once delivery because correctness lives
in the database: ``ConsolidationService.execute`` claims with a conditional update
and settles with one, so a duplicate or late message is a no-op.

One live message per run, whatever the chat traffic:

* the turn that creates a run sends one message delayed to its ``due_at``; later
  turns only push ``due_at`` back in the database (delayed messages cannot be
  cancelled, and one per turn would flood Redis and the workers' delay queues);
* a message that wakes before a pushed ``due_at`` re-sends itself for the new one;
* a message that finds the scope busy with another run re-sends itself with a growing
  delay, a bounded number of times;
* anything lost on the way (a failed send, a Redis restart) is re-sent by the janitor.

Retries are owned here, once: each actor sets ``max_retries`` explicitly (dramatiq's
default is 20) and only unexpected errors (a database that stayed busy, a bug) are
retried; a stale message is never an error. ``time_limit`` is a backstop far above
any wall-clock cap: it cannot interrupt a blocking HTTP read, so the harness's own
cap is what bounds a model call.

Actors are declared per broker by :func:`declare_actors` (no global broker, no
import-time side effects), so a process can hold a Redis broker and tests a stub one.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import dramatiq
import redis
from dramatiq.errors import BrokerError
from tenacity import Retrying, retry_if_exception_type, stop_before_delay, wait_exponential

from consolidation import ConsolidationRun, ConsolidationService, Outcome, RunNotFound, RunState
from ledger import Ledger, format_rfc3339, parse_rfc3339
from worker.jobs.broker import QUEUE_NAME
from worker.logging import bind_run
from worker.metrics import Metrics

log = logging.getLogger(__name__)

CONSOLIDATE_MAX_RETRIES = 3
SWEEP_MAX_RETRIES = 2
MIN_BACKOFF_MS = 1_000
MAX_BACKOFF_MS = 30_000
TIME_LIMIT_MS = 3_600_000
SEND_RETRY_S = 1.0
# A scope busy with another run: re-send with a growing delay, this many times, then leave it to the janitor.
BUSY_RESENDS = 12
BUSY_DELAY_S = (0.25, 8.0)
_SEND_ERRORS = (redis.RedisError, BrokerError, OSError)


@dataclass(frozen=True, slots=True)
class Actors:
    """The actors of one broker, and the sending side used by the API, the janitor and the actors."""

    broker: dramatiq.Broker
    consolidate_scope: dramatiq.Actor[..., None]
    sweep_expiry: dramatiq.Actor[..., None]
    clock: Callable[[], datetime]
    metrics: Metrics

    def send_run(
        self, run: ConsolidationRun, *, now: datetime | None = None, at: datetime | None = None, busy_resends: int = 0
    ) -> bool:
        """Send one message that wakes ``run`` at ``at`` (its ``due_at`` by default); True when the broker took it.

        Never raises: a broker that stays unreachable for ~1 s is logged and counted,
        and the janitor re-sends the run once it is due.
        """
        delay_ms = _delay_ms(run.due_at if at is None else at, self.clock() if now is None else now)
        kwargs = {"busy_resends": busy_resends} if busy_resends else {}
        return self._send(self.consolidate_scope, (run.id,), kwargs, delay_ms, what=f"run {run.id}")

    def send_sweep(self, now: datetime | None = None) -> bool:
        """Send one ``sweep_expiry`` message for ``now`` (the current instant when omitted)."""
        at = format_rfc3339(now) if now is not None else None
        return self._send(self.sweep_expiry, (at,), {}, None, what="sweep")

    def _send(
        self,
        actor: dramatiq.Actor[..., None],
        args: tuple[object, ...],
        kwargs: dict[str, int],
        delay_ms: int | None,
        *,
        what: str,
    ) -> bool:
        try:  # the happy path pays for no retry machinery
            actor.send_with_options(args=args, kwargs=kwargs, delay=delay_ms)
            return True
        except _SEND_ERRORS:
            pass
        except Exception as exc:  # the caller's path (a chat turn) never fails because of the queue
            return self._gave_up(what, exc)
        retrying = Retrying(
            retry=retry_if_exception_type(_SEND_ERRORS),
            stop=stop_before_delay(SEND_RETRY_S),
            wait=wait_exponential(multiplier=0.02, max=0.25),
            reraise=True,
        )
        try:
            for attempt in retrying:
                with attempt:
                    actor.send_with_options(args=args, kwargs=kwargs, delay=delay_ms)
        except Exception as exc:
            return self._gave_up(what, exc)
        return True

    def _gave_up(self, what: str, exc: BaseException) -> bool:
        self.metrics.enqueue_failures.inc()
        log.warning("could not send %s to the queue (%s); the janitor will re-send it", what, type(exc).__name__)
        return False


def _delay_ms(due_at: datetime, now: datetime) -> int | None:
    """Milliseconds until ``due_at``, rounded up (never early); None when already due."""
    remaining = (due_at - now) / timedelta(milliseconds=1)
    return math.ceil(remaining) if remaining > 0 else None


def declare_actors(
    broker: dramatiq.Broker, *, service: ConsolidationService, ledger: Ledger, metrics: Metrics
) -> Actors:
    """Declare ``consolidate_scope`` and ``sweep_expiry`` on ``broker``, bound to ``service`` and ``ledger``."""
    actors: Actors

    def consolidate_scope(run_id: str, busy_resends: int = 0) -> None:
        _consolidate(actors, service, run_id, busy_resends)

    def sweep_expiry(now_iso: str | None = None) -> None:
        now = parse_rfc3339(now_iso, name="now") if now_iso else ledger.now()
        expired = ledger.sweep_expired(now)
        metrics.sweep_expired.inc(expired)
        log.info("sweep at %s expired %d records", format_rfc3339(now), expired, extra={"expired": expired})

    common: dict[str, Any] = {
        "broker": broker,
        "queue_name": QUEUE_NAME,
        "min_backoff": MIN_BACKOFF_MS,
        "max_backoff": MAX_BACKOFF_MS,
        "time_limit": TIME_LIMIT_MS,
    }
    actors = Actors(
        broker=broker,
        consolidate_scope=dramatiq.actor(actor_name="consolidate_scope", max_retries=CONSOLIDATE_MAX_RETRIES, **common)(
            consolidate_scope
        ),
        sweep_expiry=dramatiq.actor(actor_name="sweep_expiry", max_retries=SWEEP_MAX_RETRIES, **common)(sweep_expiry),
        clock=ledger.now,
        metrics=metrics,
    )
    return actors


def _consolidate(actors: Actors, service: ConsolidationService, run_id: str, busy_resends: int) -> None:
    """Execute ``run_id`` if it is due; otherwise decide whether this message must re-arm itself."""
    try:
        run = service.get_run(run_id)  # what the claim needs, and the scope every line of the run names
    except RunNotFound:
        log.warning("run %s is not in this database; message dropped", run_id)
        return
    scope_key = run.scope_key
    with bind_run(run_id, scope_key):
        settled = service.execute(run)
        if settled is None:
            _rearm_stale(actors, service.get_run(run_id), busy_resends)
            return
        actors.metrics.observe_start(settled)
        actors.metrics.observe_settled(settled)
        if settled.outcome == Outcome.FAILED:  # one line an operator's log alerting sees, with the reason
            log.warning(
                "run %s of %s failed: %s (memledger runs retry %s re-queues it; memledger models check %s "
                "checks its model target)",
                run_id,
                scope_key,
                settled.error,
                run_id,
                scope_key,
                extra={"outcome": str(settled.outcome), "turns": settled.turns},
            )
            return
        log.info(
            "run %s settled %s (%d applied, %d proposals, %d refused, %d micro-USD)",
            run_id,
            settled.outcome,
            settled.ops_applied,
            settled.proposals_written,
            settled.ops_refused,
            settled.spend_micro_usd,
            extra={"outcome": str(settled.outcome), "turns": settled.turns},
        )


def _rearm_stale(actors: Actors, run: ConsolidationRun, busy_resends: int) -> None:
    """A message that did not execute its run: send the one message that will, if the run still waits."""
    if run.state != RunState.PENDING:
        log.debug("run %s is %s: stale message ignored", run.id, run.state)
        return
    now = actors.clock()
    if run.due_at > now:
        # Later turns pushed the run back. A turn only sends a message when it creates the run, so the
        # message that wakes early carries the run on to its new due_at: one live message per run.
        actors.send_run(run, now=now)
        return
    # Due but not claimed: another run of the scope is running. Try again shortly, a bounded number of times.
    if busy_resends >= BUSY_RESENDS:
        log.info("run %s: scope still busy after %d re-sends; the janitor will wake it", run.id, busy_resends)
        return
    low, high = BUSY_DELAY_S
    wait = timedelta(seconds=min(high, low * 2**busy_resends))
    log.debug("run %s: scope busy, re-sending in %s", run.id, wait)
    actors.send_run(run, now=now, at=now + wait, busy_resends=busy_resends + 1)
