"""The recovery janitor: the queue may lose messages and workers may die; the database remembers.

One pass (:meth:`Janitor.run_once`), on start and every ``janitor_interval_s`` in
``memledger serve`` and ``memledger worker``:

1. **Queue lost** (:class:`~worker.jobs.broker.QueueSentinel`: first start of the embedded
   queue, or a Redis that came back empty): re-send every pending run, each delayed
   to its ``due_at``.
2. **Orphaned due runs**: every pending run more than ``resend_after_s`` past its
   ``due_at`` gets a message now, and again after a backoff that doubles per run
   (``resend_after_s``, then twice that, four times, … at most 10 min) while it stays pending. A run that
   does have a live message (workers backlogged) gets a duplicate, which is harmless:
   ``execute`` claims in the database, exactly once.
   This also wakes runs recorded by another process on the embedded queue
   (``memledger turn`` beside ``memledger serve``) and runs whose send failed.
3. **Stuck runs**: ``ConsolidationService.recover_stuck`` settles each run stuck in
   ``running`` past its cap + grace — its stored answer applied, or ``abandoned`` —
   exactly once however many janitors race (every settlement is conditional).

Each pass is bounded (``batch`` runs per step) and counted in
``memledger_janitor_actions_total{action}``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from consolidation import ConsolidationRun, ConsolidationService, Outcome
from worker.jobs.actors import Actors
from worker.jobs.broker import QueueSentinel
from worker.logging import bind_run
from worker.metrics import Metrics

log = logging.getLogger(__name__)

MAX_RESEND_BACKOFF = timedelta(minutes=10)


@dataclass(slots=True)
class JanitorReport:
    """What one pass did."""

    rearmed: int = 0
    resent: int = 0
    recovered: list[ConsolidationRun] = field(default_factory=list)

    @property
    def actions(self) -> int:
        return self.rearmed + self.resent + len(self.recovered)


class Janitor:
    """Re-sends what the queue lost and settles what dead workers left running. Safe to run many at once."""

    def __init__(
        self,
        service: ConsolidationService,
        actors: Actors,
        sentinel: QueueSentinel,
        metrics: Metrics,
        *,
        resend_after_s: float = 5.0,
        batch: int = 500,
    ) -> None:
        self.service = service
        self.actors = actors
        self.sentinel = sentinel
        self.metrics = metrics
        self.resend_after = timedelta(seconds=resend_after_s)
        self.batch = batch
        # run id -> (when it may be re-sent again, re-sends so far): a backlog of due runs waiting for
        # busy workers must not grow by a duplicate per run on every pass.
        self._backoff: dict[str, tuple[datetime, int]] = {}

    def run_once(self, *, now: datetime | None = None) -> JanitorReport:
        """One pass: re-arm after a queue loss, re-send orphaned due runs, recover stuck runs."""
        at = self.actors.clock() if now is None else now
        report = JanitorReport()
        rearmed: set[str] = set()
        if self.sentinel.lost():
            for run in self.service.pending_runs(limit=self.batch):
                if self.actors.send_run(run, now=at):
                    rearmed.add(run.id)
            report.rearmed = len(rearmed)
            self._count("rearm", report.rearmed)
            if rearmed:
                log.info("queue was empty: re-sent %d pending runs", report.rearmed)
        report.resent = self._resend_overdue(at, skip=rearmed)
        self._count("resend", report.resent)
        if report.resent:
            log.info("re-sent %d due runs that no message had woken", report.resent)
        report.recovered = self.service.recover_stuck(now=at)
        for run in report.recovered:
            self._recovered(run)
        return report

    def _resend_overdue(self, at: datetime, *, skip: set[str]) -> int:
        """Re-send each run overdue by ``resend_after``, backing off per run (doubling, at most 10 min)."""
        overdue = self.service.due_runs(now=at - self.resend_after, limit=self.batch)
        self._backoff = {run.id: self._backoff[run.id] for run in overdue if run.id in self._backoff}
        resent = 0
        for run in overdue:
            next_at, count = self._backoff.get(run.id, (at, 0))
            if run.id in skip or at < next_at:
                continue
            if self.actors.send_run(run, now=at):
                resent += 1
                wait = min(self.resend_after * 2**count, MAX_RESEND_BACKOFF)
                self._backoff[run.id] = (at + wait, count + 1)
        return resent

    def _recovered(self, run: ConsolidationRun) -> None:
        action = "abandon" if run.outcome == Outcome.ABANDONED else "apply_stored"
        self._count(action, 1)
        self.metrics.observe_settled(run)
        with bind_run(run.id, run.scope_key):
            log.warning(
                "run %s was stuck in running; settled %s by the janitor",
                run.id,
                run.outcome,
                extra={"outcome": str(run.outcome), "action": action},
            )

    def _count(self, action: str, n: int) -> None:
        if n:
            self.metrics.janitor_actions.labels(action=action).inc(n)
