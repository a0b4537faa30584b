"""``memledger bench cluster``: N API processes and M worker processes on one PostgreSQL and one Redis, under load.

The layout of docs/operations.md ("Many machines"), on one machine: ``serve --no-worker`` x N behind
the clients, ``memledger worker`` x M, a loopback fake of the Messages API answering after a fixed
latency, and a Redis server of the benchmark's own (so that it can be restarted). K clients, each an
account with its own token, save pairs of pins through the API processes (round robin, the next one
when one does not answer) and report a turn after each pair; every scope's consolidation merges the
pair. For each M the load runs for a while and the database says how many runs settled; then, at
one M, the same load with faults: a worker killed (``kill -9``) while runs are in flight, an API
process killed, Redis restarted. Killed processes are started again, as a supervisor would.

Counted from the database afterwards, never from what the processes said:

* ``lost_saves``: saves a client was answered for (it holds the record's id) that are not in
  ``memory_records``;
* ``double_applied``: runs with more applied operations in the event log than the run counted;
* ``unsettled``: runs still pending or running once the load stopped and the queue had time to
  drain (the janitor's grace included).

Everything lives in a PostgreSQL schema of its own (dropped at the end) and a Redis server of its
own on a free port; every child is in a process group of its own, killed at the end.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

MODEL = "claude-haiku-4-5"
MEMLEDGER = [sys.executable, "-c", "from worker.cli import main; main()"]
BUDGET = 100_000  # records per scope: the load must never meet a budget
WAIT_S = 60.0  # how long a process may take to answer, and the queue to drain after a phase


class ClusterError(Exception):
    """The benchmark cannot run here (no PostgreSQL, no redis-server, a process that did not start)."""


@dataclass(frozen=True)
class ClusterPlan:
    database_url: str
    api: int = 2
    workers: tuple[int, ...] = (1, 2, 4)
    threads: int = 1
    clients: int = 16
    seconds: float = 12.0
    model_latency_s: float = 0.2
    client_rate: float = 1.0  # pairs of saves (and a turn) per second per client
    notes: int = 4  # each client repeats this many notes, so its scope stays small whatever the duration
    faults: bool = True
    fault_workers: int = 2
    redis_server: str = "redis-server"
    logs: Path | None = None  # keep the processes' logs here (else a temporary directory)


@dataclass
class Phase:
    """One load phase's figures."""

    workers: int
    seconds: float
    saves: int = 0
    save_latencies_s: list[float] = field(default_factory=list)
    runs: int = 0
    run_latencies_s: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            "workers": self.workers,
            "seconds": round(self.seconds, 2),
            "saves": self.saves,
            "saves_per_s": round(self.saves / self.seconds, 2),
            "save_p50_ms": _ms(_quantile(self.save_latencies_s, 0.5)),
            "save_p99_ms": _ms(_quantile(self.save_latencies_s, 0.99)),
            "runs": self.runs,
            "runs_per_s": round(self.runs / self.seconds, 2),
            "run_p50_ms": _ms(_quantile(self.run_latencies_s, 0.5)),
            "run_p99_ms": _ms(_quantile(self.run_latencies_s, 0.99)),
        }


@dataclass
class ClusterReport:
    plan: ClusterPlan
    phases: list[Phase]
    faults: dict[str, Any] | None

    def to_json(self) -> dict[str, Any]:
        by_m = {str(p.workers): p.summary() for p in self.phases}
        return {
            "api": self.plan.api,
            "threads": self.plan.threads,
            "clients": self.plan.clients,
            "model_latency_ms": round(self.plan.model_latency_s * 1000),
            "saves_per_s": {m: s["saves_per_s"] for m, s in by_m.items()},
            "runs_per_s": {m: s["runs_per_s"] for m, s in by_m.items()},
            "phases": by_m,
            "faults": self.faults,
        }


def _quantile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[max(0, min(98, round(q * 100) - 1))]


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait(predicate: Callable[[], Any], what: str, timeout_s: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise ClusterError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.05)


# ------------------------------------------------------------------------------------------------ processes


@dataclass
class Child:
    name: str
    args: list[str]
    env: dict[str, str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Child:
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(
                self.args, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        return self

    def check(self) -> None:
        """Raise ClusterError, with the end of its log, when the child has exited."""
        if self.popen is not None and self.popen.poll() is not None:
            log = self.log.read_text(errors="replace")[-2000:]
            raise ClusterError(f"{self.name} exited with status {self.popen.returncode}:\n{log}")

    def kill(self) -> None:
        """``kill -9`` of the child's whole process group (a worker's own children too)."""
        if self.popen is None or self.popen.poll() is not None:
            return
        with suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(timeout=WAIT_S)

    def stop(self) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        try:
            os.killpg(self.popen.pid, signal.SIGTERM)
            self.popen.wait(timeout=15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            self.kill()


class Children:
    """Every process the benchmark started; all of them are killed when it ends, whatever happens."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.all: list[Child] = []

    def start(self, name: str, args: list[str], env: dict[str, str]) -> Child:
        child = Child(name, args, env, self.directory / f"{name}.log").start()
        self.all.append(child)
        return child

    def close(self) -> None:
        for child in reversed(self.all):
            child.kill()


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


# ------------------------------------------------------------------------------------------------ the database


def schema_url(url: str, schema: str) -> str:
    """``url`` with search_path at ``schema`` (every process of the benchmark opens that URL)."""
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}options={quote(f'-csearch_path={schema}')}"


@contextmanager
def own_schema(url: str) -> Iterator[str]:
    """A new schema, migrated, for the benchmark; dropped at the end. Yields its URL."""
    from sqlalchemy import create_engine, text

    from ledger import open_ledger

    schema = "memledger_cluster_" + secrets.token_hex(6)
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f"CREATE SCHEMA {schema}"))
    except Exception as exc:
        admin.dispose()
        raise ClusterError(f"cannot create a schema in {url!r}: {type(exc).__name__}: {exc}") from exc
    try:
        target = schema_url(url, schema)
        open_ledger(target, migrate=True).close()
        yield target
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
        admin.dispose()


# ------------------------------------------------------------------------------------------------ the load


@dataclass
class Client:
    """One account: its token, the ids of the saves it was answered for, and its latencies."""

    account: str
    token: str
    acknowledged: list[str] = field(default_factory=list)
    latencies: list[tuple[float, float]] = field(default_factory=list)  # (when, seconds)


def _merge_duplicates(request: dict[str, Any]) -> list[dict[str, Any]]:
    from consolidation.fake_model import request_records

    by_body: dict[str, list[str]] = {}
    for record in request_records(request):
        by_body.setdefault(record.body, []).append(record.id)
    return [
        {"op": "merge", "targets": ids, "body": body, "rationale": "the same words"}
        for body, ids in by_body.items()
        if len(ids) > 1
    ]


class Load:
    """K client threads saving pairs of pins and reporting turns, until stopped."""

    def __init__(self, clients: list[Client], ports: Callable[[], list[int]], plan: ClusterPlan) -> None:
        self.clients = clients
        self.ports = ports
        self.rate = plan.client_rate
        self.notes = plan.notes
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []

    def __enter__(self) -> Load:
        for n, client in enumerate(self.clients):
            thread = threading.Thread(target=self._loop, args=(n, client), daemon=True)
            thread.start()
            self.threads.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(WAIT_S)

    def _post(self, http: Any, n: int, client: Client, body: dict[str, Any]) -> Any:
        """The answer of the first API process that answers (None when none did)."""
        import httpx

        ports = self.ports()
        for attempt in range(len(ports)):
            port = ports[(n + attempt) % len(ports)]
            try:
                response = http.post(
                    f"http://127.0.0.1:{port}/rpc", json=body, headers={"Authorization": f"Bearer {client.token}"}
                )
            except httpx.HTTPError:
                continue
            if response.status_code == 200:
                return response.json()
        return None

    def _loop(self, n: int, client: Client) -> None:
        import httpx

        period = 1.0 / self.rate
        with httpx.Client(timeout=10) as http:
            pair = 0
            while not self.stopping.is_set():
                began = time.monotonic()
                body = f"{client.account} keeps note {pair % self.notes}"  # a merge restates it: the scope stays small
                request = {"jsonrpc": "2.0", "id": 1, "method": "memory/save_memory_record", "params": {"body": body}}
                for _ in range(2):
                    start = time.monotonic()
                    answer = self._post(http, n, client, request)
                    if answer is not None and "result" in answer:
                        client.acknowledged.append(answer["result"]["id"])
                        client.latencies.append((time.time(), time.monotonic() - start))
                self._post(http, n, client, {"jsonrpc": "2.0", "id": 2, "method": "consolidation/notify_turn"})
                pair += 1
                self.stopping.wait(max(0.0, period - (time.monotonic() - began)))


# ------------------------------------------------------------------------------------------------ the cluster


class Cluster:
    """The processes of one benchmark: Redis, N API processes, M workers; each can be killed and restarted."""

    def __init__(self, plan: ClusterPlan, url: str, model_url: str, children: Children) -> None:
        self.plan = plan
        self.children = children
        self.redis_port = free_port()
        namespace = "cluster" + secrets.token_hex(4)
        self.env = {
            **os.environ,
            "MEMLEDGER_DATABASE_URL": url,
            "MEMLEDGER_REDIS_URL": f"redis://127.0.0.1:{self.redis_port}/0",
            "MEMLEDGER_REDIS_NAMESPACE": namespace,
            "MEMLEDGER_AUTH": "tokens",
            "MEMLEDGER_LOG_LEVEL": "WARNING",
            "MEMLEDGER_JANITOR_INTERVAL_S": "1",
            "MEMLEDGER_JANITOR_RESEND_AFTER_S": "2",
            "MEMLEDGER_JANITOR_GRACE_S": "2",
            "MEMLEDGER_MAX_REQUESTS_PER_ACCOUNT": "64",
            "ANTHROPIC_API_KEY": "sk-ant-fake-benchmark-key",
            "ANTHROPIC_BASE_URL": model_url,
        }
        self.env.pop("MEMLEDGER_SWEEP_INTERVAL_S", None)
        self.redis: Child | None = None
        self.apis: list[tuple[int, Child]] = []
        self.workers: list[Child] = []

    def start_redis(self) -> None:
        args = [self.plan.redis_server, "--port", str(self.redis_port), "--bind", "127.0.0.1", "--save", ""]
        args += ["--appendonly", "no", "--dir", str(self.children.directory)]
        self.redis = self.children.start("redis", args, self.env)
        _wait(lambda: _listening(self.redis_port), "redis-server to listen")

    def restart_redis(self) -> None:
        """Redis lost and back, without its data (a restart with no persistence)."""
        assert self.redis is not None
        self.redis.kill()
        self.start_redis()

    def start_api(self, n: int, port: int | None = None) -> None:
        import httpx

        port = port or free_port()
        child = self.children.start(f"api{n}", [*MEMLEDGER, "serve", "--no-worker", "--port", str(port)], self.env)

        def ready() -> bool:
            child.check()
            try:
                return httpx.get(f"http://127.0.0.1:{port}/livez", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        _wait(ready, f"API process {n} to answer on port {port}")
        self.apis.append((port, child))

    def kill_api(self) -> None:
        port, child = self.apis.pop(0)
        child.kill()
        self.start_api(len(self.children.all), port)

    def ports(self) -> list[int]:
        return [port for port, _ in self.apis]

    def scale_workers(self, m: int) -> None:
        while len(self.workers) > m:
            self.workers.pop().stop()
        while len(self.workers) < m:
            args = [*MEMLEDGER, "worker", "--processes", "1", "--threads", str(self.plan.threads)]
            env = {**self.env, "MEMLEDGER_LOG_LEVEL": "INFO"}  # its "ready" line
            worker = self.children.start(f"worker{len(self.children.all)}", args, env)
            self.workers.append(worker)

            def ready(worker: Child = worker) -> bool:
                worker.check()
                return "memledger worker ready" in worker.log.read_text(errors="replace")

            _wait(ready, f"{worker.name} to be ready")

    def kill_worker(self) -> None:
        self.workers.pop(0).kill()
        self.scale_workers(len(self.workers) + 1)


# ------------------------------------------------------------------------------------------------ counting


def _micros(wall: float) -> int:
    return int(wall * 1_000_000)


def _count_runs(led: Any, since: float, until: float) -> tuple[int, list[float]]:
    from sqlalchemy import text

    sql = text(
        "SELECT settled_at - due_at FROM consolidation_runs WHERE job = 'consolidate' AND state = 'settled' "
        "AND outcome = 'applied' AND settled_at >= :a AND settled_at < :b"
    )
    with led.engine.connect() as conn:
        rows = conn.execute(sql, {"a": _micros(since), "b": _micros(until)}).all()
    return len(rows), [row[0] / 1_000_000 for row in rows]


def count_faults(led: Any, clients: list[Client]) -> dict[str, Any]:
    """The three numbers that must be zero, read from the database."""
    from sqlalchemy import text

    acknowledged = [rid for client in clients for rid in client.acknowledged]
    with led.engine.connect() as conn:
        found = {
            row[0]
            for row in conn.execute(text("SELECT id FROM memory_records WHERE id = ANY(:ids)"), {"ids": acknowledged})
        }
        double = conn.execute(
            text(
                "SELECT count(*) FROM consolidation_runs r WHERE r.ops_applied < (SELECT count(*) FROM ledger_events e "
                "WHERE e.run_id = r.id AND e.event = 'consolidation_op_applied')"
            )
        ).scalar_one()
        unsettled = conn.execute(text("SELECT count(*) FROM consolidation_runs WHERE state <> 'settled'")).scalar_one()
        outcomes = dict(
            conn.execute(text("SELECT coalesce(outcome, state), count(*) FROM consolidation_runs GROUP BY 1")).all()
        )
        errors = [
            row[0]
            for row in conn.execute(
                text("SELECT DISTINCT error FROM consolidation_runs WHERE error IS NOT NULL LIMIT 5")
            )
        ]
    return {
        "outcomes": outcomes,
        "errors": errors,
        "acknowledged_saves": len(acknowledged),
        "lost_saves": len(set(acknowledged) - found),
        "double_applied": int(double),
        "unsettled": int(unsettled),
    }


def _drained(led: Any) -> bool:
    from sqlalchemy import text

    with led.engine.connect() as conn:
        return not conn.execute(text("SELECT count(*) FROM consolidation_runs WHERE state <> 'settled'")).scalar_one()


# ------------------------------------------------------------------------------------------------ the benchmark


def run_cluster(plan: ClusterPlan, *, progress: Callable[[str], None] = lambda _: None) -> ClusterReport:
    """Run the benchmark of ``plan``; raises :class:`ClusterError` when it cannot run here."""
    if not plan.database_url.startswith("postgresql"):
        raise ClusterError("the cluster benchmark needs PostgreSQL: --database-url postgresql+psycopg://…")
    if shutil.which(plan.redis_server) is None:
        raise ClusterError(f"{plan.redis_server!r} is not on the PATH: the benchmark starts a Redis of its own")
    from consolidation import ConsolidationService
    from consolidation.fake_anthropic import FakeAnthropic
    from ledger import open_ledger
    from worker.http.tokens import TokenStore

    with ExitStack() as stack:
        if plan.logs is not None:
            plan.logs.mkdir(parents=True, exist_ok=True)
        directory = plan.logs or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="memledger-cluster-")))
        url = stack.enter_context(own_schema(plan.database_url))
        fake = FakeAnthropic(operations=_merge_duplicates, delay_s=plan.model_latency_s).start()
        stack.callback(fake.stop)
        children = Children(directory)
        stack.callback(children.close)
        led = open_ledger(url)
        stack.callback(led.close)
        service = ConsolidationService(led)
        tokens = TokenStore.for_ledger(led)
        clients = []
        for n in range(plan.clients):
            account = f"bench{n:03d}"
            _, token = tokens.create(account)
            scope = f"account:{account}"
            led.set_budget(scope, BUDGET)
            service.update_settings(
                scope, mode="apply", harness="anthropic", model=MODEL, debounce_s=0, wall_clock_cap_s=5
            )
            clients.append(Client(account, token))

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
        faults = None
        if plan.faults:
            faults = _with_faults(led, clients, cluster, plan, progress)
        else:
            _wait(lambda: _drained(led), "the runs to settle")
        return ClusterReport(plan, phases, faults)
    raise AssertionError("unreachable")


def _measure(led: Any, clients: list[Client], m: int, seconds: float) -> Phase:
    since = time.time()
    time.sleep(seconds)  # the load runs meanwhile; this is the measuring window, not a wait for an event
    until = time.time()
    phase = Phase(m, until - since)
    for client in clients:
        window = [lat for when, lat in list(client.latencies) if since <= when < until]
        phase.saves += len(window)
        phase.save_latencies_s += window
    phase.runs, phase.run_latencies_s = _count_runs(led, since, until)
    return phase


def _with_faults(
    led: Any, clients: list[Client], cluster: Cluster, plan: ClusterPlan, progress: Callable[[str], None]
) -> dict[str, Any]:
    """The same load at ``fault_workers`` workers, with one of each fault; then the three counts."""
    from sqlalchemy import text

    def running() -> bool:
        with led.engine.connect() as conn:
            return bool(conn.execute(text("SELECT count(*) FROM consolidation_runs WHERE state = 'running'")).scalar())

    cluster.scale_workers(plan.fault_workers)
    done: list[str] = []
    with Load(clients, cluster.ports, plan):
        _wait(running, "a run in flight")
        cluster.kill_worker()
        done.append("kill -9 of a worker with runs in flight")
        _wait(running, "a run in flight")
        cluster.kill_api()
        done.append("kill -9 of an API process")
        _wait(running, "a run in flight")
        cluster.restart_redis()
        done.append("Redis restarted without its data")
        _wait(running, "a run in flight after the restart")
    progress("faults done; waiting for every run to settle")
    drained = True
    try:
        _wait(lambda: _drained(led), "the runs to settle")
    except ClusterError:
        drained = False
    counts = count_faults(led, clients)
    return {**counts, "faults": done, "drained": drained}


def format_report(report: ClusterReport) -> str:
    lines = [
        f"{report.plan.api} API processes, {report.plan.clients} clients, "
        f"{report.plan.threads} thread(s) per worker, model latency {report.plan.model_latency_s * 1000:.0f} ms",
        f"{'M':>3} {'saves/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'runs/s':>8} {'p50 ms':>8} {'p99 ms':>8}",
    ]
    for phase in report.phases:
        s = phase.summary()
        lines.append(
            f"{phase.workers:>3} {s['saves_per_s']:>9} {s['save_p50_ms']!s:>8} {s['save_p99_ms']!s:>8} "
            f"{s['runs_per_s']:>8} {s['run_p50_ms']!s:>8} {s['run_p99_ms']!s:>8}"
        )
    if report.faults is not None:
        f = report.faults
        lines.append("faults: " + "; ".join(f["faults"]))
        lines.append(
            f"lost saves {f['lost_saves']} of {f['acknowledged_saves']} acknowledged, "
            f"runs applied twice {f['double_applied']}, runs unsettled {f['unsettled']}"
        )
    return "\n".join(lines)


def report_json(report: ClusterReport) -> str:
    return json.dumps(report.to_json(), indent=2)
