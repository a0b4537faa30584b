"""Wiring: one :class:`Runtime` per process builds the ledger, the service, the broker, the actors
and the janitor from a :class:`~worker.config.WorkerConfig`, and starts and stops the background parts.

``memledger serve`` and ``memledger worker`` differ only in which parts they start:

=====================  ==============  =========  ==============  ===================
process                dramatiq worker  janitor    sweep schedule  HTTP
=====================  ==============  =========  ==============  ===================
serve (embedded)       yes (threads)    yes        hourly          POST /rpc, healthz
serve (Redis)          yes (threads)    yes        no (cron)       POST /rpc, healthz
serve --no-worker      no               yes        no (cron)       POST /rpc, healthz
worker (Redis)         yes              yes        no (cron)       metrics port
=====================  ==============  =========  ==============  ===================
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from sqlalchemy import text

from consolidation import ConsolidationService, RetryResult, TurnRuns, give_up_calls, preload_harnesses
from ledger import Ledger, LedgerError, open_ledger
from worker.config import OuterEnvironment, WorkerConfig
from worker.gauges import bind_default, unbind_default
from worker.jobs.actors import Actors, declare_actors
from worker.jobs.broker import QueueSentinel, build_broker, ping
from worker.jobs.janitor import Janitor
from worker.jobs.periodic import Periodic
from worker.metrics import Metrics, get_metrics
from worker.snapshot import take_snapshot

log = logging.getLogger(__name__)

FAULT_EXIT_CODE = 86
MODEL_CALL_GRACE_S = 10.0
"""How long a stopping worker lets a model call in flight finish before giving it up (at most half its
shutdown timeout)."""
STOPPING = "the worker was stopping (SIGTERM); `memledger turn` or the next chat turn schedules a new run"


def fault_hook_for(point: str | None) -> Any:
    """The service's ``fault_hook`` for fault tests: end the process abruptly at ``point``, else nothing."""
    if point is None:
        return None

    def hook(step: str) -> None:
        if step == point:
            log.warning("fault point %s reached: exiting abruptly", step)
            for handler in logging.getLogger().handlers:
                handler.flush()
            sys.stderr.flush()
            os._exit(FAULT_EXIT_CODE)

    return hook


@dataclass
class Runtime:
    """Everything one process needs; build it with :func:`build_runtime`, end it with :meth:`close`."""

    config: WorkerConfig
    ledger: Ledger
    service: ConsolidationService
    broker: dramatiq.Broker
    actors: Actors
    janitor: Janitor
    metrics: Metrics
    worker: dramatiq.Worker | None = None
    owns_ledger: bool = True
    _schedules: list[Periodic] = field(default_factory=list)
    _closed: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _starting: threading.Thread | None = None

    def notify_turn(
        self,
        scope_key: str | None = None,
        *,
        session_id: str | None = None,
        messages: list[dict[str, Any]] | None = None,
        now: datetime | None = None,
    ) -> TurnRuns:
        """Record a chat turn (with its session's messages, when given) in the database, then send the delayed
        message of each run the turn created.

        The database write comes first and is all that must succeed: both jobs are recorded in one
        transaction, and when the queue is unreachable the turn is still recorded and the janitor
        wakes the run once due. A turn that only pushes an existing run back sends nothing: the
        run's message, waking before the new ``due_at``, re-sends itself for it (see
        :mod:`worker.jobs.actors`). A run is None when its job is off for the scope (the extraction
        run, too, when no session is given).

        Raises:
            LedgerError: a malformed session id or message (nothing stored, nothing sent).
        """
        runs = self.service.notify_turn_runs(
            scope_key or self.ledger.scope_key, session_id=session_id, messages=messages, now=now
        )
        for run in runs:
            if run is not None and run.turns == 1:
                self.actors.send_run(run, now=now)
        return runs

    def retry_run(self, run_id: str, *, now: datetime | None = None) -> RetryResult:
        """Queue a failed or abandoned run again (:meth:`ConsolidationService.retry`) and send its message, due now.

        As for a turn, the database is what must succeed: when the message is lost (or this process's
        embedded queue ends with it), the janitor of a running worker wakes the run within seconds.

        Raises:
            RunNotFound, NotRetryable: nothing queued.
        """
        retried = self.service.retry(run_id, now=now)
        self.actors.send_run(retried.run, now=now)
        return retried

    def start_worker(self, *, threads: int | None = None) -> None:
        """Start dramatiq worker threads on this process's broker (stopped by :meth:`close`)."""
        if self.worker is None:
            preload_harnesses(self.service.harnesses_on())  # the SDKs its scopes use, before the first run
            self.worker = dramatiq.Worker(
                self.broker,
                worker_threads=threads or self.config.worker_threads,
                worker_timeout=self.config.worker_poll_ms,
            )
            self.worker.start()
            log.info("dramatiq worker started with %d threads", self.worker.worker_threads)

    def start_in_background(self, *, run_worker: bool, first: Callable[[], None] | None = None) -> threading.Thread:
        """Start what ``serve`` runs beside the server on a thread, so that the server answers meanwhile.

        The worker first imports the model SDKs (a second or more), the janitor's first pass and the
        first sweep read the database: none of it has to happen before ``/livez`` answers (a restart
        after a crash is back in service at once). :meth:`close` waits for this thread first.

        ``first`` runs on the same thread before the rest (``serve`` loads the MCP SDK there: one
        thread imports at a time).
        """

        def start() -> None:
            if first is not None:
                try:
                    first()
                except Exception:
                    log.exception("could not prepare serving in the background")
            try:
                if run_worker:
                    self.start_worker()
                    if self.config.embedded:
                        self.start_sweep_schedule()
                self.start_janitor()
            except Exception:
                log.exception("the worker, janitor or sweep could not start (see /healthz)")

        thread = threading.Thread(target=start, name="memledger-start", daemon=True)
        with self._lock:
            self._starting = thread
        thread.start()
        return thread

    def start_janitor(self) -> None:
        """Run the janitor now and every ``janitor_interval_s``."""
        self._schedule(Periodic("janitor", self.config.janitor_interval_s, self.janitor.run_once))

    def start_sweep_schedule(self) -> None:
        """Send a ``sweep_expiry`` message now and every ``sweep_interval_s`` (embedded mode)."""
        if self.config.sweep_interval_s > 0:
            self._schedule(Periodic("sweep", self.config.sweep_interval_s, self.actors.send_sweep))

    def _schedule(self, periodic: Periodic) -> None:
        with self._lock:
            self._schedules.append(periodic)
        periodic.start()

    def health(self) -> dict[str, Any]:
        """Database and queue reachability, the full-text index's state, and which background parts run."""
        try:
            with self.ledger.reading() as r:
                r.execute(text("SELECT 1"))
            database = "ok"
        except Exception as exc:
            cause = exc.__cause__ or exc  # the driver's error names the outage, not the ledger's translation
            database = f"unreachable ({type(cause).__name__})"
        search_index = "unknown" if database != "ok" else self._search_index()
        queue = "ok" if ping(self.broker) else "unreachable"
        status = "down" if database != "ok" else ("ok" if queue == search_index == "ok" else "degraded")
        return {
            "status": status,
            "database": database,
            "searchIndex": search_index,
            "queue": queue,
            "broker": "redis" if isinstance(self.broker, RedisBroker) else "embedded",
            "worker": self.worker is not None,
            "janitor": any(p.name == "janitor" and p.running for p in self._schedules),
        }

    def _search_index(self) -> str:
        """ "ok", or what is wrong with the full-text index (one lookup: a probe may run every few seconds)."""
        try:
            return self.ledger.search_index_problem() or "ok"
        except LedgerError as exc:
            return f"unknown ({exc})"

    def close(self, *, timeout_s: float | None = None) -> None:
        """Stop schedules, then the worker (in-flight runs get ``timeout_s`` to finish), then close connections.

        A model call still in flight after :data:`MODEL_CALL_GRACE_S` (at most half of ``timeout_s``) is
        given up and its run settles ``failed``. A run still in flight when the timeout ends stays
        ``running``; the janitor of a live process settles it later. Idempotent.
        """
        starting = self._starting
        if starting is not None and starting is not threading.current_thread():
            starting.join()  # what it starts is stopped below
        with self._lock:
            if self._closed:
                return
            self._closed = True
            schedules, self._schedules = self._schedules, []
        wait_s = self.config.shutdown_timeout_s if timeout_s is None else timeout_s
        for periodic in schedules:
            periodic.stop(wait_s)
        if self.worker is not None:
            # A model call still in flight after a short grace is given up (its connection closed, so a local
            # server stops generating): its run settles failed and says why, and the worker exits promptly
            # rather than wait out a cap that suits a slow CPU model.
            give_up = threading.Timer(min(MODEL_CALL_GRACE_S, wait_s / 2), give_up_calls, args=(STOPPING,))
            give_up.daemon = True
            give_up.start()
            # Workers stop before consumers (dramatiq's order), so an in-flight run finishes and is acked.
            self.worker.stop(timeout=int(wait_s * 1000))
            give_up.cancel()
            self.worker = None
        self.broker.close()
        if isinstance(self.broker, RedisBroker):
            self.broker.client.close()
        unbind_default(self)
        if self.owns_ledger:
            self.ledger.close()


def build_runtime(
    config: WorkerConfig, *, ledger: Ledger | None = None, service_kwargs: dict[str, Any] | None = None
) -> Runtime:
    """Open the ledger (unless ``ledger`` is given) and build the service, broker, actors and janitor.

    Nothing is started. ``service_kwargs`` are extra keyword arguments for
    :class:`~consolidation.ConsolidationService` (tests pass ``api_key``/``base_url``).

    Raises:
        LedgerError: the database is unreachable or its schema is behind the code.
    """
    led = (
        ledger
        if ledger is not None
        else open_ledger(config.database_url, account=config.account, sqlite_synchronous=config.sqlite_synchronous)
    )
    try:
        kwargs: dict[str, Any] = {
            "prices": config.price_table(),
            "janitor_grace_s": config.janitor_grace_s,
            "fault_hook": fault_hook_for(config.fault_point),
            **OuterEnvironment().model_access(),
            **(service_kwargs or {}),
        }
        service = ConsolidationService(led, **kwargs)
        metrics = get_metrics()
        broker = build_broker(config)
        actors = declare_actors(broker, service=service, ledger=led, metrics=metrics)
        janitor = Janitor(
            service,
            actors,
            QueueSentinel(broker),
            metrics,
            resend_after_s=config.janitor_resend_after_s,
            batch=config.janitor_batch,
        )
    except BaseException:
        if ledger is None:
            led.close()
        raise
    runtime = Runtime(config, led, service, broker, actors, janitor, metrics, owns_ledger=ledger is None)
    if ledger is None:
        # Operator gauges (spend, backlog, sweep health) are read from the database at scrape time,
        # by the runtime that owns the ledger (one that borrows it, like `memledger rpc`'s, exports none).
        max_scopes = config.ops_metrics_max_scopes
        bind_default(runtime, lambda: take_snapshot(led, service, recent_runs=0), max_scopes=max_scopes)
    return runtime
