"""The :class:`ConsolidationService`: both jobs of the scopes of one ledger behind one front door.

A chat turn (:meth:`ConsolidationService.notify_turn`) feeds both jobs in one transaction: the
scope's consolidation run (:mod:`consolidation.consolidate`) and the session's extraction run
(:mod:`consolidation.extraction.service`). Both are rows of one runs table; a run is handed to its
job's steps by :class:`consolidation.engine.RunEngine`, which lives every run the same way, top to bottom.
Every move is a conditional UPDATE, so concurrent callers (threads, processes, redelivered queue
messages) cannot execute or settle a run twice. This module knows nothing of queues.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple, TypedDict, Unpack

from sqlalchemy import and_, select, union

from consolidation import runs, settings
from consolidation.connections import Connections, Target
from consolidation.consolidate import JOB as CONSOLIDATE_JOB
from consolidation.consolidate import ConsolidationJob
from consolidation.engine import FaultHook, Job, RunEngine
from consolidation.errors import NotRetryable, RunNotFound
from consolidation.extraction import settings as XS
from consolidation.extraction.models import ExtractionMode, ExtractionSettings
from consolidation.extraction.service import JOB as EXTRACT_JOB
from consolidation.extraction.service import ExtractionJobs
from consolidation.harnesses import Connection, Harness
from consolidation.harnesses.extract_base import Extractor
from consolidation.models import (
    ALL_OPS,
    DEFAULT_CAP_S,
    ConsolidationRun,
    ConsolidationSettings,
    Mode,
    Outcome,
    RunState,
)
from consolidation.pricing import PriceTable, default_price_table
from consolidation.tables import CONSOLIDATION_SETTINGS as CS
from consolidation.tables import EXTRACTION_SETTINGS as ES
from consolidation.tables import RUNS
from ledger import Ledger, Transaction, check_scope, to_micros

if TYPE_CHECKING:
    from consolidation.target_check import TargetCheck

log = logging.getLogger(__name__)

DEFAULT_GRACE_S = 30.0
DEFAULT_CHECK_TIMEOUT_S = 5.0
RC = RUNS.c


class TurnArgs(TypedDict, total=False):
    """What a chat turn carries besides its scope: the keyword arguments of :meth:`ConsolidationService.notify_turn`."""

    session_id: str | None
    messages: list[dict[str, Any]] | None
    now: datetime | None


class TurnRuns(NamedTuple):
    """The runs a chat turn left pending: the scope's consolidation run and the session's extraction run."""

    consolidation: ConsolidationRun | None
    extraction: ConsolidationRun | None

    @property
    def run(self) -> ConsolidationRun | None:
        """The session's extraction run when there is one, else the consolidation run."""
        return self.extraction if self.extraction is not None else self.consolidation


class RunNowResult(NamedTuple):
    """One run :meth:`ConsolidationService.run_now` tried: the run as this call settled it, or None when it did not
    start (another run of the scope was running, or another process took it first)."""

    run_id: str
    settled: ConsolidationRun | None


class RetryResult(NamedTuple):
    """What :meth:`ConsolidationService.retry` queued: the pending run, and whether it is new (False: the scope's
    pending run, made due now)."""

    run: ConsolidationRun
    created: bool


class ConsolidationService:
    """Consolidation and extraction for the scopes of one ledger. Thread-safe; share one per process.

    ``api_key``/``base_url`` are the anthropic harness's key and server (``None``: its SDK reads
    ``ANTHROPIC_API_KEY``/``ANTHROPIC_BASE_URL``), ``openai_api_key``/``openai_base_url`` the
    openai harness's (a scope's own ``base_url`` wins); the worker passes the ones it read from
    its environment. Keys are never logged or stored.
    ``fault_hook`` is called with a step name (``after_claim``,
    ``after_answer_stored``, ``mid_apply``, ``after_apply``) so fault tests can kill a
    process at an exact point.
    """

    def __init__(
        self,
        led: Ledger,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        prices: PriceTable | None = None,
        janitor_grace_s: float = DEFAULT_GRACE_S,
        harnesses: dict[str, Harness] | None = None,
        fault_hook: FaultHook | None = None,
        extractors: dict[str, Extractor] | None = None,
        openai_api_key: str | None = None,
        openai_base_url: str | None = None,
    ) -> None:
        self.led = led
        self.connections = Connections(
            prices or default_price_table(), api_key=api_key, base_url=base_url,
            openai_api_key=openai_api_key or None, openai_base_url=openai_base_url or None,
        )  # fmt: skip
        self.janitor_grace_s = janitor_grace_s
        self.consolidation = ConsolidationJob(led, self.connections, harnesses)
        self.extraction = ExtractionJobs(led, self.connections, extractors)
        self.runner = RunEngine(led, {CONSOLIDATE_JOB: self.consolidation, EXTRACT_JOB: self.extraction}, fault_hook)
        self.jobs: dict[str, Job] = self.runner.jobs
        led.add_capability_provider(self.capabilities)
        # A full scope is due for consolidation rather than blocked by it (docs/consolidation.md).
        led.set_budget_hook("consolidation", self.consolidation.on_budget_full)

    @property
    def prices(self) -> PriceTable:
        return self.connections.prices

    def _now(self, now: datetime | None) -> int:
        return to_micros(self.led.now(now))

    # ------------------------------------------------------------------ settings
    def settings(self, scope_key: str) -> ConsolidationSettings:
        return self.consolidation.settings(scope_key)

    def update_settings(self, scope_key: str, *, now: datetime | None = None, **changes: Any) -> ConsolidationSettings:
        """Validate and store settings. ``mode="off"`` cancels pending runs in the same transaction.

        Raises:
            InvalidSettings: a field is invalid (nothing is changed); ScopeError.
        """
        return self.consolidation.update_settings(scope_key, now=now, **changes)

    def preview_settings(self, scope_key: str, **changes: Any) -> ConsolidationSettings:
        """The settings :meth:`update_settings` would store, validated, without storing them.

        Raises:
            InvalidSettings; ScopeError.
        """
        scope = check_scope(scope_key)
        with self.led.reading() as db:
            return settings.merge(self.consolidation.settings_in(db, scope), changes, self.connections.prices)

    def preview_extraction_settings(self, scope_key: str, **changes: Any) -> ExtractionSettings:
        """The extraction settings :meth:`update_extraction_settings` would store, without storing them.

        Raises:
            InvalidSettings; ScopeError.
        """
        scope = check_scope(scope_key)
        with self.led.reading() as db:
            return XS.merge(self.extraction.settings_in(db, scope), changes, self.connections.prices)

    def check_target(self, settings: Target, *, timeout_s: float = DEFAULT_CHECK_TIMEOUT_S) -> TargetCheck:
        """Whether a scope's model target (``settings`` of either job) can be called: the key is there and the
        server answers its models list within ``timeout_s`` (see :mod:`consolidation.target_check`)."""
        from consolidation.target_check import check_target

        return check_target(settings.harness, settings.model, self.connections.of(settings), timeout_s=timeout_s)

    def extraction_settings(self, scope_key: str) -> ExtractionSettings:
        """The scope's extraction settings (defaults when never set)."""
        return self.extraction.settings(scope_key)

    def update_extraction_settings(
        self, scope_key: str, *, now: datetime | None = None, **changes: Any
    ) -> ExtractionSettings:
        """Validate and store extraction settings (``mode``, ``harness``, ``model``, ``debounce_s``, ...).

        ``mode="off"`` cancels the scope's pending extraction runs and deletes their digests.

        Raises:
            InvalidSettings: a field is invalid (nothing is changed); ScopeError.
        """
        return self.extraction.update_settings(scope_key, now=now, **changes)

    def capabilities(self, scope_key: str) -> dict[str, Any]:
        """What consolidation and extraction offer the scope, for :meth:`ledger.Ledger.capabilities`."""
        with self.led.reading() as db:
            settings = self.consolidation.settings_in(db, scope_key)
            extraction = self.extraction.settings_in(db, scope_key)
        return {
            "consolidation": {
                "available": True,
                "mode": settings.mode.value,
                "operations": list(ALL_OPS),
                "allowedOperations": list(settings.allowed_ops),
            },
            "extraction": {
                "available": True,
                "mode": extraction.mode.value,
                "enabled": extraction.mode != ExtractionMode.OFF,
            },
        }

    def connection(
        self, harness: str, model: str, base_url: str | None, price_in: float | None, price_out: float | None
    ) -> Connection:
        """Where a scope's call goes (see :meth:`consolidation.connections.Connections.connection`)."""
        return self.connections.connection(harness, model, base_url, price_in, price_out)

    # ------------------------------------------------------------------ turns
    def notify_turn(self, scope_key: str, **turn: Unpack[TurnArgs]) -> ConsolidationRun | None:
        """Record a chat turn (see :meth:`notify_turn_runs`); return the session's pending extraction run when
        there is one, else the consolidation run; None when both jobs are off."""
        return self.notify_turn_runs(scope_key, **turn).run

    def notify_turn_runs(
        self,
        scope_key: str,
        *,
        session_id: str | None = None,
        messages: list[dict[str, Any]] | None = None,
        now: datetime | None = None,
    ) -> TurnRuns:
        """Record a chat turn, both jobs in one transaction: the scope's pending consolidation run is created or
        pushed back and, with ``session_id`` (and ``messages``), the session's digest is extended and its
        extraction run debounced. Returns both runs (None for a job that is off).

        Raises:
            InvalidArgument, InvalidExtractionInput: a malformed session id or message (nothing stored).
        """
        scope = check_scope(scope_key)
        turn = None if session_id is None and messages is None else self.extraction.check_turn(session_id, messages)

        def fn(tx: Transaction) -> TurnRuns:
            consolidation = self.consolidation.notify_turn_in(tx, scope)
            extraction = None if turn is None else self.extraction.notify_turn_in(tx, scope, *turn)
            return TurnRuns(consolidation, extraction)

        return self.led.run(scope, fn, now=now)

    # ------------------------------------------------------------------ runs
    def get_run(self, run_id: str) -> ConsolidationRun:
        with self.led.reading() as db:
            run = runs.get(db, run_id)
        if run is None:
            raise RunNotFound(f"no consolidation run {run_id!r}")
        return run

    def _select(self, where: Any, order: tuple[Any, ...], limit: int) -> list[ConsolidationRun]:
        with self.led.reading() as db:
            return runs.select_runs(db, where, order=order, limit=limit)

    def runs(self, scope_key: str | None = None, *, limit: int = 100) -> list[ConsolidationRun]:
        """Runs newest first, of one scope or all."""
        where = RC.scope_key == scope_key if scope_key else None
        return self._select(where, (RC.created_at.desc(), RC.id.desc()), limit)

    def due_runs(self, *, now: datetime | None = None, limit: int = 1000) -> list[ConsolidationRun]:
        now_us = self._now(now)
        return self._select(and_(runs.PENDING, RC.due_at <= now_us), (RC.due_at, RC.id), limit)

    def pending_runs(self, *, limit: int = 1000) -> list[ConsolidationRun]:
        return self._select(runs.PENDING, (RC.due_at, RC.id), limit)

    def harnesses_on(self) -> set[str]:
        """The harnesses some scope has on, for either job (a worker preloads them)."""
        on = union(
            select(CS.c.harness).where(CS.c.mode != Mode.OFF.value),
            select(ES.c.harness).where(ES.c.mode != ExtractionMode.OFF.value),
        )
        with self.led.reading() as db:
            return {str(name) for (name,) in db.execute(on)}

    def run_due(self, *, now: datetime | None = None, limit: int = 100) -> list[ConsolidationRun]:
        """Execute every due pending run; returns the runs this call settled."""
        settled = []
        for run in self.due_runs(now=now, limit=limit):
            done = self.execute(run, now=now)
            if done is not None:
                settled.append(done)
        return settled

    def run_now(self, scope_key: str, *, job: str = CONSOLIDATE_JOB, now: datetime | None = None) -> list[RunNowResult]:
        """Execute the scope's pending runs of ``job`` here and now, whatever their due time.

        Consolidation has at most one pending run per scope, extraction one per session. Each is made
        due now (in one transaction) and executed as :meth:`execute` does, exactly once: a queue
        message that comes for it later finds it settled. An empty list: nothing was pending.

        Raises:
            ScopeError; ValueError (an unknown job).
        """
        scope = check_scope(scope_key)
        if job not in self.jobs:
            raise ValueError(f"unknown job {job!r}; jobs are {', '.join(self.jobs)}")
        ids = self.led.run(scope, lambda tx: runs.bring_forward(tx, scope, job=job, now_us=tx.now_us), now=now)
        return [RunNowResult(run_id, self.execute(run_id, now=now)) for run_id in ids]

    def retry(self, run_id: str, *, now: datetime | None = None) -> RetryResult:
        """Queue a failed or abandoned consolidation run again, as a new pending run of its scope due now.

        The new run consolidates the scope as it is now (the old one stays as it settled, for the
        record). When the scope already has a pending run, that one is made due now instead: a scope
        has one pending run at most, and it covers the same records.

        Raises:
            RunNotFound; NotRetryable: the run is not a settled ``failed`` or ``abandoned`` consolidation
                run, or its scope has consolidation off (nothing queued).
        """
        old = self.get_run(run_id)
        if old.job != CONSOLIDATE_JOB:
            raise NotRetryable(
                f"run {run_id} is an extraction run: its conversation was dropped when it settled, so it cannot be "
                "run again; the session's next turn starts a new run"
            )
        if old.outcome not in (Outcome.FAILED, Outcome.ABANDONED):
            state = str(old.state) if old.outcome is None else f"{old.state} {old.outcome}"
            raise NotRetryable(f"run {run_id} is {state}: only a failed or abandoned run can be retried")

        def fn(tx: Transaction) -> RetryResult:
            settings = self.consolidation.settings_in(tx, old.scope_key)
            if settings.mode == Mode.OFF:
                raise NotRetryable(
                    f"consolidation is off for {old.scope_key}: turn it on first "
                    f"(memledger consolidation set {old.scope_key} --mode propose)"
                )
            ids = runs.bring_forward(tx, old.scope_key, job=CONSOLIDATE_JOB, now_us=tx.now_us)
            if ids:
                run = runs.get(tx, ids[0])
                assert run is not None
                return RetryResult(run, created=False)
            return RetryResult(runs.ensure_pending(tx, settings, tx.now_us, due_us=tx.now_us), created=True)

        return self.led.run(old.scope_key, fn, now=now)

    def execute(self, run: str | ConsolidationRun, *, now: datetime | None = None) -> ConsolidationRun | None:
        """Claim, run and settle one run (of either job): its id, or the run as its caller read it (its id, scope
        and job are all the claim needs; the claim checks its state). None when the call is stale (not pending,
        not due, scope busy) or when the janitor settled the run first (it outlived its cap + grace).

        Exactly once: any number of concurrent or repeated calls with one run id
        lead to one execution and one settlement. Claim, answer storage, apply and
        settlement each run in their own ledger transaction at their own instant (an
        explicit ``now`` is used for each of them); see :mod:`consolidation.engine`.
        """
        return self.runner.execute(self.get_run(run) if isinstance(run, str) else run, now)

    def apply_stored(self, run_id: str, *, now: datetime | None = None) -> ConsolidationRun:
        """Gate and apply a running run's stored answer, and settle it, in one transaction.

        Used right after the call and by the janitor for a run whose worker died after
        storing its answer; never calls the model. If the run was settled meanwhile,
        nothing is applied.
        """
        return self.runner.apply_stored(self.get_run(run_id), now)[0]

    # ------------------------------------------------------------------ recovery
    def recover_stuck(self, *, now: datetime | None = None) -> list[ConsolidationRun]:
        """Settle runs stuck in ``running`` past cap + grace: apply a stored answer, else ``abandoned``.

        Exactly once with several janitors: every settlement is conditional, and only
        the runs this call settled are returned.
        """
        now_us = self._now(now)
        grace_us = round(self.janitor_grace_s * 1_000_000)
        stuck = self._select(runs.RUNNING, (RC.started_at, RC.id), 1000)
        recovered = []
        for run in stuck:
            assert run.started_at is not None
            cap_s = run.wall_clock_cap_s if run.wall_clock_cap_s is not None else DEFAULT_CAP_S
            if now_us < to_micros(run.started_at) + round(cap_s * 1_000_000) + grace_us:
                continue
            try:
                done, won = self._recover(run, now)
            except Exception:  # one bad run must not block the recovery of the others
                log.exception("recovering run %s failed; the next janitor pass tries again", run.id)
                continue
            if won:
                recovered.append(done)
        return recovered

    def _recover(self, run: ConsolidationRun, now: datetime | None) -> tuple[ConsolidationRun, bool]:
        if run.answer_stored_at is None:
            done, won = self.runner.settle(
                run,
                Outcome.ABANDONED,
                now,
                error="worker stopped before the answer was stored; settled by the janitor",
                unanswered=True,
            )
            if won or done.state == RunState.SETTLED:
                return done, won
            # An answer was stored between the read and the abandon: apply it instead.
        return self.runner.apply_stored(run, now)
