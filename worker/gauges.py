"""Operator gauges read from the database at scrape time, so every serving process exports the same truth.

A counter kept in process memory cannot say that cron stopped running ``memledger sweep`` (each
sweep is a one-shot process), nor what another worker spent; the database can. So these series are
computed by a Prometheus *collector* on each scrape of ``GET /metrics`` (serve) or the metrics port
(worker), from one :func:`~worker.snapshot.take_snapshot`:

======================================================  ====================================================
series                                                  labels
======================================================  ====================================================
``memledger_sweep_last_run_timestamp_seconds``          — (when the last sweep finished; alert on its age)
``memledger_sweep_last_expired``                        — (how many records the last sweep expired)
``memledger_sweep_last_swept_to_timestamp_seconds``     — (the instant the last sweep expired up to)
``memledger_sweep_runs_recorded_total``                 — (sweeps recorded in the database, any process)
``memledger_sweep_expired_recorded_total``              — (records expired by recorded sweeps)
``memledger_scopes``                                    ``mode`` (off, propose, apply)
``memledger_pending_runs`` / ``memledger_running_runs``  — (the backlog, every scope)
``memledger_oldest_pending_due_timestamp_seconds``      — (absent when nothing is pending)
``memledger_scope_month_spend_micro_usd``               ``scope``
``memledger_scope_month_budget_micro_usd``              ``scope``
``memledger_scope_month_remaining_micro_usd``           ``scope``
``memledger_scope_month_runs``                          ``scope``, ``outcome`` (runs settled this month)
``memledger_scope_pending_runs``                        ``scope``
``memledger_scope_records``                             ``scope``, ``status`` (active, proposed)
``memledger_scope_consolidation_mode``                  ``scope``, ``mode`` (1 for the scope's mode)
``memledger_ops_scrape_ok``                             — (0 when the database could not be read)
======================================================  ====================================================

The ``scope`` label is bounded: the ``max_scopes`` scopes with the most spend (then backlog) this
month get their own value, the rest are summed under ``scope="_other"`` (no real scope key can be
spelled so: scope keys are ``kind:name``). A failed read never fails the scrape: it logs once and
exports ``memledger_ops_scrape_ok 0``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import prometheus_client as prom
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from consolidation import OUTCOMES, ScopeOverview
from worker.snapshot import OpsSnapshot

log = logging.getLogger(__name__)

OTHER_SCOPES = "_other"
DEFAULT_MAX_SCOPES = 50
MODES = ("off", "propose", "apply")

SnapshotSource = Callable[[], OpsSnapshot]


def _sum_scopes(scopes: list[ScopeOverview]) -> ScopeOverview:
    runs: dict[str, int] = {}
    for scope in scopes:
        for outcome, count in scope.runs_by_outcome.items():
            runs[outcome] = runs.get(outcome, 0) + count
    return ScopeOverview(
        scope_key=OTHER_SCOPES,
        mode="",
        harness=None,
        model=None,
        max_records=None,
        active=sum(s.active for s in scopes),
        proposed=sum(s.proposed for s in scopes),
        spend_budget_micro_usd=sum(s.spend_budget_micro_usd for s in scopes),
        month_spend_micro_usd=sum(s.month_spend_micro_usd for s in scopes),
        month_input_tokens=sum(s.month_input_tokens for s in scopes),
        month_output_tokens=sum(s.month_output_tokens for s in scopes),
        runs_by_outcome=runs,
        pending=sum(s.pending for s in scopes),
        running=sum(s.running for s in scopes),
    )


def bounded_scopes(scopes: list[ScopeOverview], max_scopes: int) -> list[ScopeOverview]:
    """The first ``max_scopes`` scopes as they are, then one ``_other`` sum of the rest (if any)."""
    if len(scopes) <= max_scopes:
        return list(scopes)
    return [*scopes[:max_scopes], _sum_scopes(scopes[max_scopes:])]


def families(snapshot: OpsSnapshot, *, max_scopes: int = DEFAULT_MAX_SCOPES) -> Iterator[Any]:
    """The metric families of one snapshot (see the module docstring)."""
    sweep = snapshot.sweep
    if sweep is not None:
        yield GaugeMetricFamily(
            "memledger_sweep_last_run_timestamp_seconds",
            "When the expiry sweep last finished (Unix time, from the database).",
            value=sweep.last_finished_at.timestamp(),
        )
        yield GaugeMetricFamily(
            "memledger_sweep_last_expired", "Records expired by the last sweep.", value=sweep.last_expired
        )
        yield GaugeMetricFamily(
            "memledger_sweep_last_swept_to_timestamp_seconds",
            "The instant the last sweep expired records up to (Unix time).",
            value=sweep.last_now.timestamp(),
        )
        yield CounterMetricFamily(
            "memledger_sweep_runs_recorded", "Sweeps recorded in the database (every process).", value=sweep.runs
        )
        yield CounterMetricFamily(
            "memledger_sweep_expired_recorded",
            "Records expired by the sweeps recorded in the database.",
            value=sweep.expired_total,
        )
    overview = snapshot.overview
    by_mode = GaugeMetricFamily("memledger_scopes", "Scopes known, by consolidation mode.", labels=["mode"])
    for mode in MODES:
        by_mode.add_metric([mode], sum(1 for s in overview.scopes if s.mode == mode))
    yield by_mode
    yield GaugeMetricFamily("memledger_pending_runs", "Pending runs (the backlog).", value=overview.pending)
    yield GaugeMetricFamily("memledger_running_runs", "Consolidation runs running now.", value=overview.running)
    due = [s.oldest_due_at for s in overview.scopes if s.oldest_due_at is not None]
    if due:
        yield GaugeMetricFamily(
            "memledger_oldest_pending_due_timestamp_seconds",
            "due_at of the oldest pending run (Unix time); far in the past means nothing consumes the queue.",
            value=min(due).timestamp(),
        )
    yield from _scope_families(bounded_scopes(overview.scopes, max_scopes))


def _scope_families(scopes: list[ScopeOverview]) -> Iterator[Any]:
    spend = GaugeMetricFamily(
        "memledger_scope_month_spend_micro_usd", "Spend this calendar month (UTC), micro-USD.", labels=["scope"]
    )
    budget = GaugeMetricFamily(
        "memledger_scope_month_budget_micro_usd", "Spend budget per calendar month, micro-USD.", labels=["scope"]
    )
    remaining = GaugeMetricFamily(
        "memledger_scope_month_remaining_micro_usd",
        "Budget left this month, micro-USD.",
        labels=["scope"],
    )
    runs = GaugeMetricFamily(
        "memledger_scope_month_runs", "Runs settled this month, by outcome.", labels=["scope", "outcome"]
    )
    pending = GaugeMetricFamily("memledger_scope_pending_runs", "Pending runs of the scope.", labels=["scope"])
    records = GaugeMetricFamily(
        "memledger_scope_records", "Records the scope holds against its budget.", labels=["scope", "status"]
    )
    mode = GaugeMetricFamily(
        "memledger_scope_consolidation_mode", "1 for the scope's consolidation mode.", labels=["scope", "mode"]
    )
    for scope in scopes:
        key = [scope.scope_key]
        spend.add_metric(key, scope.month_spend_micro_usd)
        budget.add_metric(key, scope.spend_budget_micro_usd)
        remaining.add_metric(key, scope.remaining_micro_usd)
        for outcome in OUTCOMES:
            runs.add_metric([scope.scope_key, outcome], scope.runs_by_outcome.get(outcome, 0))
        pending.add_metric(key, scope.pending)
        records.add_metric([scope.scope_key, "active"], scope.active)
        records.add_metric([scope.scope_key, "proposed"], scope.proposed)
        if scope.scope_key != OTHER_SCOPES:
            for name in MODES:
                mode.add_metric([scope.scope_key, name], 1 if scope.mode == name else 0)
    yield from (spend, budget, remaining, runs, pending, records, mode)


class OpsCollector(Collector):
    """A Prometheus collector that reads the database on every scrape (through ``source``)."""

    def __init__(self, source: SnapshotSource | None = None, *, max_scopes: int = DEFAULT_MAX_SCOPES) -> None:
        self._source = source
        self.max_scopes = max_scopes
        self._failing = False

    def collect(self) -> Iterator[Any]:
        source = self._source
        if source is None:
            return
        try:
            snapshot = source()
            found = list(families(snapshot, max_scopes=self.max_scopes))
        except Exception as exc:  # a database blip must not fail the whole scrape
            if not self._failing:
                log.warning("operator metrics: the database could not be read (%s)", type(exc).__name__)
            self._failing = True
            yield GaugeMetricFamily("memledger_ops_scrape_ok", "1 when the database could be read.", value=0)
            return
        self._failing = False
        yield from found
        yield GaugeMetricFamily("memledger_ops_scrape_ok", "1 when the database could be read.", value=1)


# One collector in the default registry per process; the newest open runtime feeds it.
_lock = threading.Lock()
_sources: list[tuple[object, SnapshotSource, int]] = []
_default = OpsCollector()
_registered = False


def _refresh() -> None:
    if _sources:
        _, source, max_scopes = _sources[-1]
        _default._source, _default.max_scopes = source, max_scopes
    else:
        _default._source = None


def bind_default(owner: object, source: SnapshotSource, *, max_scopes: int = DEFAULT_MAX_SCOPES) -> None:
    """Export ``source`` through the default registry until :func:`unbind_default` (latest owner wins)."""
    global _registered
    with _lock:
        if not _registered:
            prom.REGISTRY.register(_default)
            _registered = True
        _sources.append((owner, source, max_scopes))
        _refresh()


def unbind_default(owner: object) -> None:
    """Stop exporting what ``owner`` bound (idempotent)."""
    with _lock:
        _sources[:] = [entry for entry in _sources if entry[0] is not owner]
        _refresh()


def lazy_database_source(database_url: str, *, account: str, sqlite_synchronous: str = "normal") -> SnapshotSource:
    """A source that opens the ledger at the first scrape and keeps it (for a process with no runtime).

    ``memledger worker --processes N``'s supervisor serves the aggregated metrics of its children;
    it has no ledger of its own, and a child's collector is not exported in multiprocess mode.
    """
    from ledger import open_ledger
    from worker.snapshot import take_snapshot

    opened: list[Any] = []
    guard = threading.Lock()

    def source() -> OpsSnapshot:
        with guard:
            if not opened:
                opened.append(open_ledger(database_url, account=account, sqlite_synchronous=sqlite_synchronous))
        return take_snapshot(opened[0], recent_runs=0)

    return source
