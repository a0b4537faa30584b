"""Prometheus metrics of the worker service.

One process-wide set (:func:`get_metrics`) in prometheus_client's default registry,
fed from what the actors and the janitor observe: settled runs (outcome, tokens,
spend, refusals, queue delay), sweeps and janitor actions. dramatiq's own
:class:`~dramatiq.middleware.prometheus.Prometheus` middleware is installed on the
broker too (:class:`DramatiqPrometheus`), re-bound to the same registry so that
``GET /metrics`` of ``memledger serve`` and the metrics port of ``memledger worker``
show both.

Several worker processes: the supervisor of ``memledger worker --processes N`` sets
``PROMETHEUS_MULTIPROC_DIR`` before it starts them, so every value goes to a shared
directory that :func:`exposition_registry` aggregates.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import prometheus_client as prom
from dramatiq.middleware.prometheus import Prometheus
from prometheus_client import multiprocess

from consolidation import ConsolidationRun

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
OFFLINE_HARNESS = "offline"
_DELAY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800)
_DURATION_BUCKETS_MS = (5, 10, 25, 50, 75, 100, 250, 500, 750, 1000, 2500, 5000, 7500, 10000, 30000, 60000, 600000)


@dataclass(frozen=True, slots=True)
class Metrics:
    """The ``memledger_*`` series (names are part of the operations contract)."""

    runs_settled: prom.Counter
    model_calls: prom.Counter
    tokens: prom.Counter
    spend_micro_usd: prom.Counter
    refusals: prom.Counter
    sweep_expired: prom.Counter
    queue_delay: prom.Histogram
    janitor_actions: prom.Counter
    enqueue_failures: prom.Counter
    runs_by_job: prom.Counter

    def observe_settled(self, run: ConsolidationRun) -> None:
        """Count one settled run: outcome, model call, tokens, spend, refusals, queue delay."""
        outcome = "unknown" if run.outcome is None else str(run.outcome)
        self.runs_settled.labels(outcome=outcome).inc()
        self.runs_by_job.labels(job=run.job, outcome=outcome).inc()
        if run.model_calls and run.harness != OFFLINE_HARNESS:
            # The offline harness calls no model: counting it would overstate what was paid for.
            self.model_calls.inc(run.model_calls)
        for kind, count in (
            ("input", run.input_tokens),
            ("output", run.output_tokens),
            ("cache_creation_input", run.cache_creation_input_tokens),
            ("cache_read_input", run.cache_read_input_tokens),
        ):
            if count:
                self.tokens.labels(kind=kind).inc(count)
        if run.spend_micro_usd:
            self.spend_micro_usd.inc(run.spend_micro_usd)
        for reason, count in run.refusals.items():
            self.refusals.labels(reason=reason).inc(count)

    def observe_start(self, run: ConsolidationRun) -> None:
        """Record the queue delay of a run that started: ``started_at - due_at`` (never negative)."""
        if run.started_at is not None:
            self.queue_delay.observe(max(0.0, (run.started_at - run.due_at).total_seconds()))


_lock = threading.Lock()
_metrics: Metrics | None = None
_dramatiq_metrics: dict[str, prom.Counter | prom.Gauge | prom.Histogram] = {}


def get_metrics() -> Metrics:
    """The process-wide :class:`Metrics` (created on first use, in the default registry)."""
    global _metrics
    with _lock:
        if _metrics is None:
            _metrics = Metrics(
                runs_settled=prom.Counter("memledger_runs_settled", "Consolidation runs settled.", ["outcome"]),
                model_calls=prom.Counter("memledger_model_calls", "Consolidation model calls made."),
                tokens=prom.Counter("memledger_tokens", "Tokens observed on model calls.", ["kind"]),
                spend_micro_usd=prom.Counter("memledger_spend_micro_usd", "Spend observed, in micro-USD."),
                refusals=prom.Counter("memledger_refusals", "Operations refused by the gate.", ["reason"]),
                sweep_expired=prom.Counter("memledger_sweep_expired", "Records expired by the sweep actor."),
                queue_delay=prom.Histogram(
                    "memledger_queue_delay_seconds", "Time from a run's due_at to its start.", buckets=_DELAY_BUCKETS
                ),
                janitor_actions=prom.Counter("memledger_janitor_actions", "Janitor actions.", ["action"]),
                enqueue_failures=prom.Counter(
                    "memledger_enqueue_failures", "Turns recorded whose queue message could not be sent."
                ),
                runs_by_job=prom.Counter(
                    "memledger_runs_by_job", "Runs settled, by job (consolidate, extract).", ["job", "outcome"]
                ),
            )
        return _metrics


def _dramatiq_series() -> dict[str, prom.Counter | prom.Gauge | prom.Histogram]:
    """dramatiq's own series (same names and labels as its middleware), created once per process."""
    with _lock:
        if not _dramatiq_metrics:
            labels = ["queue_name", "actor_name"]
            _dramatiq_metrics.update(
                total_messages=prom.Counter("dramatiq_messages", "The total number of messages processed.", labels),
                total_errored_messages=prom.Counter(
                    "dramatiq_message_errors", "The total number of errored messages.", labels
                ),
                total_retried_messages=prom.Counter(
                    "dramatiq_message_retries", "The total number of retried messages.", labels
                ),
                total_rejected_messages=prom.Counter(
                    "dramatiq_message_rejects", "The total number of dead-lettered messages.", labels
                ),
                inprogress_messages=prom.Gauge(
                    "dramatiq_messages_inprogress",
                    "The number of messages in progress.",
                    labels,
                    multiprocess_mode="livesum",
                ),
                inprogress_delayed_messages=prom.Gauge(
                    "dramatiq_delayed_messages_inprogress",
                    "The number of delayed messages in memory.",
                    labels,
                    multiprocess_mode="livesum",
                ),
                message_durations=prom.Histogram(
                    "dramatiq_message_duration_milliseconds",
                    "The time spent processing messages.",
                    labels,
                    buckets=_DURATION_BUCKETS_MS,
                ),
            )
        return dict(_dramatiq_metrics)


class DramatiqPrometheus(Prometheus):
    """dramatiq's Prometheus middleware, exporting through this process's registry.

    The stock middleware creates its series in a private registry at ``process_boot``
    (emitted only by the ``dramatiq`` CLI), points ``PROMETHEUS_MULTIPROC_DIR`` at its
    own directory and forks an HTTP server; none of that fits a worker embedded in
    ``memledger serve``. Its hooks are kept; its series are bound at construction.
    """

    def __init__(self) -> None:
        super().__init__()
        for name, series in _dramatiq_series().items():
            setattr(self, name, series)

    @property
    def forks(self) -> list[Callable[[], int]]:
        return []

    def after_process_boot(self, broker: object) -> None:
        """Nothing to do: the series were bound in ``__init__``."""

    def after_worker_shutdown(self, broker: object, worker: object) -> None:
        """Nothing to do: multiprocess files belong to the supervisor, which cleans them up."""


def exposition_registry() -> prom.CollectorRegistry:
    """The registry to serve: the default one, or an aggregate of every process in multiprocess mode."""
    from worker.config import OuterEnvironment

    path = OuterEnvironment().prometheus_multiproc_dir
    if not path:
        return prom.REGISTRY
    registry = prom.CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=path)  # type: ignore[no-untyped-call]
    return registry


def render_latest() -> tuple[bytes, str]:
    """The current exposition text and its content type."""
    return prom.generate_latest(exposition_registry()), prom.CONTENT_TYPE_LATEST
