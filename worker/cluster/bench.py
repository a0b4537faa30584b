"""The benchmark itself: the cluster up, the load at each M, then the faults (see :mod:`worker.cluster`)."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from worker.cluster.database import count_faults, count_runs, drained, own_schema
from worker.cluster.load import Client, Load, merge_duplicates
from worker.cluster.processes import Children, Cluster, wait
from worker.cluster.report import ClusterPlan, ClusterReport, Phase
from worker.errors import ClusterError

MODEL = "claude-haiku-4-5"
BUDGET = 100_000  # records per scope: the load must never meet a budget


def run_cluster(plan: ClusterPlan, *, progress: Callable[[str], None] = lambda _: None) -> ClusterReport:
    """Run the benchmark of ``plan``; raises :class:`ClusterError` when it cannot run here."""
    if not plan.database_url.startswith("postgresql"):
        raise ClusterError("the cluster benchmark needs PostgreSQL: --database-url postgresql+psycopg://…")
    if shutil.which(plan.redis_server) is None:
        raise ClusterError(f"{plan.redis_server!r} is not on the PATH: the benchmark starts a Redis of its own")
    from consolidation import FakeAnthropic
    from ledger import open_ledger

    with ExitStack() as stack:
        if plan.logs is not None:
            plan.logs.mkdir(parents=True, exist_ok=True)
        directory = plan.logs or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="memledger-cluster-")))
        url = stack.enter_context(own_schema(plan.database_url))
        fake = FakeAnthropic(operations=merge_duplicates, delay_s=plan.model_latency_s).start()
        stack.callback(fake.stop)
        children = Children(directory)
        stack.callback(children.close)
        led = open_ledger(url)
        stack.callback(led.close)
        clients = _accounts(led, plan.clients)
        cluster = Cluster(plan, url, fake.base_url, children)
        cluster.start_redis()
        for n in range(plan.api):
            cluster.start_api(n)
        progress(f"{plan.api} API processes, {plan.clients} clients, a {plan.model_latency_s * 1000:.0f} ms model")
        phases: list[Phase] = []
        with Load(clients, cluster.ports, plan):
            for m in plan.workers:
                cluster.scale_workers(m)
                phases.append(_measure(led, clients, m, plan.seconds))
                progress(f"M={m}: {phases[-1].summary()['runs_per_s']} runs/s")
        if not plan.faults:
            wait(lambda: drained(led), "the runs to settle")
            return ClusterReport(plan, phases, None)
        return ClusterReport(plan, phases, _with_faults(led, clients, cluster, plan, progress))
    raise AssertionError("unreachable")  # ExitStack does not swallow exceptions


def _accounts(led: Any, count: int) -> list[Client]:
    """``count`` accounts, each with a token, room for the whole load and consolidation on (the fake model)."""
    from consolidation import ConsolidationService
    from worker.http.tokens import TokenStore

    service, tokens, clients = ConsolidationService(led), TokenStore.for_ledger(led), []
    for n in range(count):
        account = f"bench{n:03d}"
        _, token = tokens.create(account)
        scope = f"account:{account}"
        led.set_budget(scope, BUDGET)
        service.update_settings(scope, mode="apply", harness="anthropic", model=MODEL, debounce_s=0, wall_clock_cap_s=5)
        clients.append(Client(account, token))
    return clients


def _measure(led: Any, clients: list[Client], m: int, seconds: float) -> Phase:
    since = time.time()
    time.sleep(seconds)  # the load runs meanwhile; this is the measuring window, not a wait for an event
    until = time.time()
    phase = Phase(m, until - since)
    for client in clients:
        window = [lat for when, lat in list(client.latencies) if since <= when < until]
        phase.saves += len(window)
        phase.save_latencies_s += window
    phase.runs, phase.run_latencies_s = count_runs(led, since, until)
    return phase


def _with_faults(
    led: Any, clients: list[Client], cluster: Cluster, plan: ClusterPlan, progress: Callable[[str], None]
) -> dict[str, Any]:
    """The same load at ``fault_workers`` workers, with one of each fault; then the three counts."""
    from sqlalchemy import text

    def running() -> bool:
        with led.reading() as conn:
            return bool(conn.execute(text("SELECT count(*) FROM consolidation_runs WHERE state = 'running'")).scalar())

    cluster.scale_workers(plan.fault_workers)
    done: list[str] = []
    with Load(clients, cluster.ports, plan):
        wait(running, "a run in flight")
        cluster.kill_worker()
        done.append("kill -9 of a worker with runs in flight")
        wait(running, "a run in flight")
        cluster.kill_api()
        done.append("kill -9 of an API process")
        wait(running, "a run in flight")
        cluster.restart_redis()
        done.append("Redis restarted without its data")
        wait(running, "a run in flight after the restart")
    progress("faults done; waiting for every run to settle")
    settled = True
    try:
        wait(lambda: drained(led), "the runs to settle")
    except ClusterError:
        settled = False  # the unsettled runs are counted below
    return {**count_faults(led, clients), "faults": done, "drained": settled}
