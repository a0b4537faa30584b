"""Fixtures for the worker tests: clean configuration, in-process runtimes, real subprocesses.

* Every test starts with no ``MEMLEDGER_*`` setting and no ``ANTHROPIC_*`` variable in
  the environment, and with the logging set-up it found (``configure_logging`` is global).
* ``make_runtime(**config)`` builds an in-process :class:`~worker.runtime.Runtime` on a
  fresh SQLite file (or any URL given), closed after the test.
* ``spawn(...)`` starts a real ``memledger`` (or any) subprocess with its output in
  files, in a process group of its own, and kills that group at teardown (the processes it started
  too, such as a worker's supervised children; nothing else).
* ``shared_mcp_sqlite`` / ``shared_mcp_postgres``: one ``memledger mcp`` per test process for the
  MCP tests that can share it (each test calls ``fresh()`` first: its accounts start empty).
* ``fake_model(...)`` starts ``python -m consolidation.fake_anthropic`` (or ``fake_openai``) as its own process.
* ``run_cli(env, ...)`` runs a ``memledger`` command in this process with ``env``'s settings, for tests
  whose subject is not the command line as a process (each ``memledger`` subprocess costs a start-up).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import structlog
from typer.testing import CliRunner, Result

from tests.conftest import copy_migrated_sqlite, fresh_pg_schema, migrate_postgres_schema, service_missing
from tests.hygiene import kill_group, redis_namespace, schema_name
from tests.hygiene import popen as popen_in_group
from worker.config import WorkerConfig
from worker.runtime import Runtime, build_runtime

if TYPE_CHECKING:
    from starlette.testclient import TestClient

    from tests.worker.mcp_helpers import SharedStdio

VENV_BIN = Path(sys.executable).parent
MEMLEDGER = str(VENV_BIN / "memledger")
TWO_DUPLICATES = ("I prefer metric units", "i prefer  metric units.")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in list(os.environ):
        upper = name.upper()
        field_name = upper.removeprefix("MEMLEDGER_").lower()
        if upper.startswith("ANTHROPIC_") or field_name in WorkerConfig.model_fields or upper.endswith("_CONFIG_FILE"):
            monkeypatch.delenv(name)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    structlog.reset_defaults()


@pytest.fixture
def runner() -> CliRunner:
    """Typer's runner, to invoke the command line in this process."""
    return CliRunner()


@pytest.fixture
def cli_db_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The URL of a new SQLite file that the command line run in this process is pointed at
    (``MEMLEDGER_DATABASE_URL``), with plain log lines and no model API key or base URL from the environment."""
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    monkeypatch.setenv("MEMLEDGER_DATABASE_URL", url)
    monkeypatch.setenv("MEMLEDGER_LOG_FORMAT", "console")
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    return url


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_until(predicate: Callable[[], Any], *, timeout_s: float = 15.0, interval_s: float = 0.05) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout_s} s: {getattr(predicate, '__name__', predicate)}")
        time.sleep(interval_s)


def wait_live(base_url: str, *, timeout_s: float = 30.0) -> None:
    """Wait until the server at ``base_url`` answers ``GET /livez`` with 200; fail the test after ``timeout_s``."""
    import httpx

    def live() -> bool:
        try:
            return httpx.get(f"{base_url}/livez", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(live, timeout_s=timeout_s)


@pytest.fixture
def make_runtime(tmp_path: Path) -> Iterator[Callable[..., Runtime]]:
    """Factory: ``make_runtime(redis_url=..., service_kwargs={...}, **config)``; closed after the test."""
    made: list[Runtime] = []

    def factory(*, service_kwargs: dict[str, Any] | None = None, **config: Any) -> Runtime:
        if "database_url" not in config:
            config["database_url"] = f"sqlite:///{tmp_path / 'ledger.db'}"
            copy_migrated_sqlite(config["database_url"])
        config.setdefault("redis_namespace", redis_namespace())
        config.setdefault("worker_poll_ms", 50)
        config.setdefault("shutdown_timeout_s", 10)
        runtime = build_runtime(WorkerConfig(**config), service_kwargs=service_kwargs)
        made.append(runtime)
        return runtime

    yield factory
    for runtime in made:
        runtime.close(timeout_s=5)


@dataclass
class Proc:
    """A subprocess with its output in files; ``text()`` reads what it printed so far."""

    name: str
    popen: subprocess.Popen[bytes]
    out: Path
    err: Path
    env: dict[str, str] = field(repr=False)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def text(self) -> str:
        return self.out.read_text(errors="replace") + self.err.read_text(errors="replace")

    def log_lines(self) -> list[dict[str, Any]]:
        """The JSON log lines it wrote on stderr (other lines skipped)."""
        lines = []
        for line in self.err.read_text(errors="replace").splitlines():
            try:
                lines.append(json.loads(line))
            except ValueError:
                continue
        return lines

    def terminate(self, *, timeout_s: float = 30.0) -> int:
        """SIGTERM and wait; returns the exit status."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
        return self.popen.wait(timeout_s)

    def kill(self) -> None:
        """SIGKILL its process group: it and every process it started."""
        kill_group(self.popen)


@pytest.fixture
def app_with_worker(make_runtime: Callable[..., Runtime]) -> Iterator[tuple[TestClient, Runtime]]:
    """The HTTP app in this process with its worker and janitor running, and a client on loopback."""
    from starlette.testclient import TestClient

    from worker.http.server import create_app

    runtime = make_runtime(sweep_interval_s=0)
    app = create_app(runtime, run_worker=True)
    with TestClient(app, base_url="http://127.0.0.1:8080", client=("127.0.0.1", 50123)) as client:
        # The worker and the janitor start in the background once the server listens (the model
        # SDKs' import takes seconds on a loaded machine): the tests begin once both run.
        wait_until(lambda: client.get("/healthz").json().get("janitor"), timeout_s=60)
        yield client, runtime


def memledger_env(directory: Path) -> dict[str, str]:
    """The environment of a memledger subprocess: a SQLite DB in ``directory``, fast janitor, JSON logs."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("MEMLEDGER_", "ANTHROPIC_"))}
    env.update(
        MEMLEDGER_DATABASE_URL=f"sqlite:///{directory / 'ledger.db'}",
        MEMLEDGER_LOG_FORMAT="json",
        MEMLEDGER_LOG_LEVEL="INFO",
        MEMLEDGER_JANITOR_INTERVAL_S="0.5",
        MEMLEDGER_JANITOR_RESEND_AFTER_S="0.5",
        MEMLEDGER_WORKER_POLL_MS="50",
        MEMLEDGER_WORKER_THREADS="4",
        MEMLEDGER_REDIS_NAMESPACE=redis_namespace(),
        PYTHONUNBUFFERED="1",
    )
    return env


@pytest.fixture
def base_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a memledger subprocess: a tmp SQLite DB, fast janitor, JSON logs."""
    return memledger_env(tmp_path)


def run_cli(env: dict[str, str], *args: str) -> Result:
    """``memledger <args>`` run in this process with the ``MEMLEDGER_*``/``ANTHROPIC_*``/``OPENAI_*`` settings of
    ``env`` (a command that sets a model target checks it with them)."""
    from worker.cli import app

    settings = {k: v for k, v in env.items() if k.upper().startswith(("MEMLEDGER_", "ANTHROPIC_", "OPENAI_"))}
    return CliRunner().invoke(app, list(args), env=settings)


def start_process(name: str, args: list[str], env: dict[str, str], directory: Path) -> Proc:
    """Start ``args`` (``memledger …`` runs the CLI) in ``directory``, its output in files there."""
    argv = [MEMLEDGER, *args[1:]] if args and args[0] == "memledger" else args
    out, err = directory / f"{name}.out", directory / f"{name}.err"
    with out.open("wb") as fo, err.open("wb") as fe:
        popen = popen_in_group(argv, env=env, stdout=fo, stderr=fe, cwd=directory)
    return Proc(name, popen, out, err, env)


@pytest.fixture
def spawn(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[..., Proc]]:
    """Factory: ``spawn(name, [args…], env)``; ``args`` starting with ``memledger`` run the CLI."""
    procs: list[Proc] = []

    def factory(name: str, args: list[str], env: dict[str, str]) -> Proc:
        proc = start_process(name, args, env, tmp_path)
        procs.append(proc)
        return proc

    yield factory
    failed = getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed
    for proc in procs:
        proc.kill()
        if failed:
            sys.stderr.write(f"\n----- {proc.name} (pid {proc.pid}) -----\n{proc.text()[-6000:]}\n")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


@dataclass
class FakeModel:
    proc: Proc
    base_url: str
    counter: Path

    @property
    def calls(self) -> int:
        try:
            return int(self.counter.read_text().strip() or 0)
        except (FileNotFoundError, ValueError):
            return 0


@pytest.fixture
def fake_model(spawn: Callable[..., Proc], tmp_path: Path) -> Callable[..., FakeModel]:
    """Factory: a fake Anthropic (or, with ``vendor="openai"``, Chat Completions) server in its own process
    (``script`` is its JSON script)."""

    def factory(
        *, script: Any = None, delay_s: float | None = None, name: str = "fake-model", vendor: str = "anthropic"
    ) -> FakeModel:
        counter = tmp_path / f"{name}.calls"
        args = [sys.executable, "-m", f"consolidation.fake_{vendor}", "--port", "0", "--counter-file", str(counter)]
        if script is not None:
            path = tmp_path / f"{name}.json"
            path.write_text(json.dumps(script))
            args += ["--script", str(path)]
        if delay_s is not None:
            args += ["--delay", str(delay_s)]
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMLEDGER_")}
        proc = spawn(name, args, env)
        first = wait_until(lambda: proc.out.read_text().splitlines()[:1], timeout_s=10)
        return FakeModel(proc, first[0].strip(), counter)

    return factory


@pytest.fixture(scope="session")
def shared_mcp_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedStdio]:
    """One ``memledger mcp`` on a SQLite file, shared by the MCP tests of this test process."""
    from tests.worker.mcp_helpers import shared_stdio

    directory = tmp_path_factory.mktemp("shared-mcp")
    url = f"sqlite:///{directory / 'ledger.db'}"
    copy_migrated_sqlite(url)
    with shared_stdio(url, directory / "mcp.err") as shared:
        yield shared


@pytest.fixture(scope="session")
def shared_mcp_postgres(
    tmp_path_factory: pytest.TempPathFactory, pg_available: BaseException | None
) -> Iterator[SharedStdio]:
    """One ``memledger mcp`` on a PostgreSQL schema, shared by the MCP tests of this test process."""
    from tests.worker.mcp_helpers import shared_stdio

    if pg_available is not None:
        service_missing("PostgreSQL", pg_available)
    directory = tmp_path_factory.mktemp("shared-mcp-pg")
    with fresh_pg_schema(schema_name()) as url:
        migrate_postgres_schema(url)
        with shared_stdio(url, directory / "mcp.err") as shared:
            yield shared
