"""``MEMLEDGER_SQLITE_SYNCHRONOUS=normal|full``: SQLite's ``PRAGMA synchronous`` on every connection the ledger
opens, through the library, the configuration and the ledger commands (docs/operations.md, What is durable)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.pool import Pool

from ledger import LedgerError, open_ledger
from tests.worker.conftest import memledger_env, run_cli
from worker.config import WorkerConfig, load_config
from worker.errors import ConfigError
from worker.runtime import Runtime

PRAGMA_VALUES = {0: "off", 1: "normal", 2: "full", 3: "extra"}


class Connections:
    """Every DB-API connection a pool opens while it watches, and the ``PRAGMA synchronous`` each had whenever it
    went back to its pool (after every use, and at the end), or left it for good (the WAL checkpointer's own:
    ``ledger/store/sqlite_wal.py``). Only connections to files under ``root``: the listeners see every pool of
    the process, and another test's ledger left open (its checkpointer thread) may use its own meanwhile."""

    def __init__(self, root: Path) -> None:
        self.root = str(root)
        self.opened: set[int] = set()
        self.seen: dict[int, set[str]] = {}
        self._lock = threading.Lock()

    def ours(self, dbapi_connection: Any) -> bool:
        """Whether the connection's database is a file of this test's."""
        (_seq, _name, filename) = dbapi_connection.execute("PRAGMA database_list").fetchone()
        return bool(filename) and str(filename).startswith(self.root)

    def connect(self, dbapi_connection: Any, _record: Any) -> None:
        if not self.ours(dbapi_connection):
            return
        with self._lock:
            self.opened.add(id(dbapi_connection))

    def detach(self, dbapi_connection: Any, record: Any) -> None:
        self.checkin(dbapi_connection, record)

    def checkin(self, dbapi_connection: Any, _record: Any) -> None:
        if dbapi_connection is None or not self.ours(dbapi_connection):
            return
        (value,) = dbapi_connection.execute("PRAGMA synchronous").fetchone()
        with self._lock:
            self.seen.setdefault(id(dbapi_connection), set()).add(PRAGMA_VALUES[value])

    def modes(self) -> set[str]:
        assert self.opened, "no connection was opened"
        assert self.opened <= set(self.seen), "a connection was never given back to its pool nor detached"
        return set().union(*self.seen.values())


@pytest.fixture
def connections(tmp_path: Path) -> Iterator[Connections]:
    watched = Connections(tmp_path)
    event.listen(Pool, "connect", watched.connect)
    event.listen(Pool, "checkin", watched.checkin)
    event.listen(Pool, "detach", watched.detach)
    yield watched
    event.remove(Pool, "connect", watched.connect)
    event.remove(Pool, "checkin", watched.checkin)
    event.remove(Pool, "detach", watched.detach)


def _use_from_threads(save: Callable[[str], Any], threads: int = 4) -> None:
    """Writes from several threads at once: each keeps a write connection of its own."""
    barrier = threading.Barrier(threads)

    def work(n: int) -> None:
        barrier.wait(10)
        save(f"pin {n} from a thread of its own")

    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)


@pytest.mark.parametrize("mode", ["normal", "full"])
def test_the_library_sets_it_on_every_connection(tmp_path: Path, connections: Connections, mode: str) -> None:
    led = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}", sqlite_synchronous=mode)
    try:
        _use_from_threads(led.save)
        led.list()
        led.search(led.scope_key, "thread")
    finally:
        led.close()
    assert len(connections.opened) >= 2
    assert connections.modes() == {mode}


def test_the_default_is_normal(tmp_path: Path, connections: Connections) -> None:
    open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}").close()
    assert connections.modes() == {"normal"}
    assert WorkerConfig().sqlite_synchronous == "normal"


@pytest.mark.parametrize(("setting", "mode"), [("full", "full"), (" FULL ", "full"), ("normal", "normal")])
def test_the_service_and_the_commands_follow_the_setting(
    make_runtime: Callable[..., Runtime],
    tmp_path: Path,
    connections: Connections,
    monkeypatch: pytest.MonkeyPatch,
    setting: str,
    mode: str,
) -> None:
    # The service (serve, worker): its configuration
    monkeypatch.setenv("MEMLEDGER_SQLITE_SYNCHRONOUS", setting)
    url = f"sqlite:///{tmp_path / 'service.db'}"
    runtime = make_runtime(database_url=url, sqlite_synchronous=load_config().sqlite_synchronous)
    _use_from_threads(runtime.ledger.save)
    runtime.close(timeout_s=5)
    assert connections.modes() == {mode}
    # The ledger commands (pin, pins, db upgrade ...): the environment alone
    env = {**memledger_env(tmp_path), "MEMLEDGER_SQLITE_SYNCHRONOUS": setting}
    for args in (["pin", "I prefer metric units"], ["pins"], ["db", "upgrade"]):
        done = run_cli(env, *args)
        assert done.exit_code == 0, done.output
    assert connections.modes() == {mode}


def test_another_value_is_a_clear_error_that_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMLEDGER_SQLITE_SYNCHRONOUS", "sometimes")
    with pytest.raises(ConfigError) as refused:
        load_config()
    assert "MEMLEDGER_SQLITE_SYNCHRONOUS='sometimes': must be normal or full" in str(refused.value)
    env = {**memledger_env(tmp_path), "MEMLEDGER_SQLITE_SYNCHRONOUS": "off"}
    for args in (["pin", "I prefer metric units"], ["db", "upgrade"]):
        done = run_cli(env, *args)
        assert done.exit_code == 1 and "MEMLEDGER_SQLITE_SYNCHRONOUS='off': must be normal or full" in done.output
    with pytest.raises(LedgerError, match="must be one of normal, full, not 'extra'"):
        open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}", sqlite_synchronous="extra")
    assert not (tmp_path / "ledger.db").exists()  # nothing was created
