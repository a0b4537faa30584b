"""Start-up of the command line: ``--help`` and the reads import only what they use.

``memledger --help`` lists every command from :data:`worker.cli.COMMANDS` without importing
any command module; ``memledger pins`` imports the ledger (its tables, so SQLModel) and the ledger
commands, never the migration tool, the model SDKs, the job queue, the servers or the MCP SDK, nor
another package's tables; on SQLite, nothing of PostgreSQL's (SQLAlchemy's dialect, psycopg, the store)
nor pydantic-settings; ``memledger mcp`` answers ``initialize`` before it loads the ledger (docs/cli.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import copy_migrated_sqlite
from worker.cli import COMMANDS, app, every_command

# Loaded only by the commands that use them.
HEAVY = (
    "alembic",
    "anthropic",
    "openai",
    "dramatiq",
    "redis",
    "uvicorn",
    "starlette",
    "mcp",
    "consolidation",
    "structlog",
    "prometheus_client",
)
# A read on SQLite needs nothing of PostgreSQL's, nor pydantic-settings: its three variables are read without it
# (worker/ledger_access.py). About 0.05 s of its start-up between them (docs/performance.md).
NOT_FOR_SQLITE_READ = (
    *HEAVY,
    "sqlalchemy.dialects.postgresql",
    "psycopg",
    "ledger.store.postgres",
    "ledger.store.postgres_save",
    "pydantic_settings",
    "worker.config",
)
# Not even the database layer: the help screen opens nothing.
NOT_FOR_HELP = (*HEAVY, "sqlalchemy", "sqlmodel", "ledger", "worker.cli.ledger", "worker.cli.worker")
# `memledger mcp` answers `initialize` with the configuration, the logging and the MCP SDK only: the ledger (and
# the tools built on its models) load after, on a thread (the SDK itself loads Starlette and uvicorn).
NOT_FOR_INITIALIZE = (
    "alembic",
    "anthropic",
    "openai",
    "dramatiq",
    "redis",
    "consolidation",
    "prometheus_client",
    "sqlalchemy",
    "sqlmodel",
    "ledger.core",
    "ledger.models",
    "ledger.schema",
    "worker.cli.ledger",
    "worker.mcp.tools",
)

_PROBE = """
import json, sys
from worker import cli
sys.argv = ['memledger', *json.loads(sys.argv[1])]
try:
    cli.main()
except SystemExit as exit:
    code = exit.code
else:
    code = 0
print(json.dumps({'code': code, 'modules': sorted(sys.modules)}))
"""


def _loaded(args: list[str], cwd: Path) -> tuple[int, set[str], str]:
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(args)], capture_output=True, text=True, cwd=cwd, check=False
    )
    last = proc.stdout.strip().splitlines()[-1]
    found = json.loads(last)
    return found["code"], set(found["modules"]), proc.stdout + proc.stderr


# `memledger mcp`, with the modules loaded when its first answer is on the wire written to the file argv[1].
_MCP_PROBE = """
import json, sys
from pathlib import Path
from worker import cli
from worker.mcp import server

start = server.LedgerOpening.start
seen = Path(sys.argv[1])

def first_answer_written(self):
    if not seen.exists():
        seen.write_text(json.dumps(sorted(sys.modules)))
    start(self)

server.LedgerOpening.start = first_answer_written
sys.argv = ['memledger', 'mcp']
cli.main()
"""
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}},
}


def _heavy(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(n for n in names if n in modules or any(m.startswith(n + ".") for m in modules))


def test_help_imports_no_command_module(tmp_path: Path) -> None:
    code, modules, out = _loaded(["--help"], tmp_path)
    assert code == 0, out
    assert _heavy(modules, NOT_FOR_HELP) == [], out
    for name in COMMANDS:
        assert name in out  # every command is listed all the same


def test_a_read_imports_none_of_the_heavy_modules(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    code, _, out = _loaded(["pin", "I prefer tea", "--database-url", url], tmp_path)  # creates and migrates
    assert code == 0, out
    code, modules, out = _loaded(["pins", "--database-url", url], tmp_path)
    assert code == 0, out
    assert "I prefer tea" in out
    assert _heavy(modules, NOT_FOR_SQLITE_READ) == [], out


def test_a_read_from_the_environment_imports_neither_postgresql_nor_pydantic_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a ledger named by the environment, in a name of another case (read as the configuration reads it)
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    copy_migrated_sqlite(url)
    monkeypatch.delenv("MEMLEDGER_DATABASE_URL", raising=False)
    monkeypatch.setenv("memledger_Database_URL", url)
    monkeypatch.setenv("MEMLEDGER_SQLITE_SYNCHRONOUS", "FULL")
    monkeypatch.setenv("MEMLEDGER_ACCOUNT", "")  # empty: unset, so the default account
    # When pins runs on it, Then it reads that ledger, and loads nothing it does not use
    code, modules, out = _loaded(["pins"], tmp_path)
    assert code == 0, out
    assert "No pins in account:local." in out
    assert _heavy(modules, NOT_FOR_SQLITE_READ) == [], out


def test_mcp_answers_initialize_before_it_loads_the_ledger(tmp_path: Path) -> None:
    # Given a migrated ledger, and a client that sends initialize and closes stdin
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    copy_migrated_sqlite(url)
    seen = tmp_path / "modules.json"
    env = {**os.environ, "MEMLEDGER_DATABASE_URL": url, "MEMLEDGER_LOG_LEVEL": "WARNING"}
    done = subprocess.run(
        [sys.executable, "-c", _MCP_PROBE, str(seen)],
        input=json.dumps(INITIALIZE) + "\n",
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    # Then initialize is answered, and the process ends well: the ledger opened after the answer
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.splitlines()[0])
    assert answer["id"] == 1 and answer["result"]["serverInfo"]["name"] == "memledger"
    # And when the answer was written, neither the ledger nor the tools built on its models were loaded
    modules = set(json.loads(seen.read_text()))
    assert "mcp" in modules
    assert _heavy(modules, NOT_FOR_INITIALIZE) == []


def test_the_listing_is_each_commands_own_first_line() -> None:
    loaded = every_command()
    for name, (_module, short) in COMMANDS.items():
        command = loaded[name]
        assert command is not None, f"{name}: its module registers no such command"
        own = (command.short_help or command.help or "").strip().split("\n\n")[0]
        assert " ".join(own.split()) == short, name


def test_every_registered_command_is_listed() -> None:
    # A module that registers a command the table does not name would hide it from --help.
    modules = {module for module, _ in COMMANDS.values()}
    from worker.cli import module_commands

    for module in modules:
        for name in module_commands(module):
            assert name in COMMANDS, f"{module} registers {name!r}: add it to worker.cli.COMMANDS"


def test_an_unknown_command_suggests_the_near_one() -> None:
    result = CliRunner().invoke(app, ["pnis"])
    assert result.exit_code == 2
    assert "Did you mean 'pins'?" in result.output


def test_version_prints_the_installed_version() -> None:
    from importlib.metadata import version

    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"memledger {version('memledger')}"


@pytest.mark.parametrize("group", ["db", "files", "tokens", "consolidation", "extraction"])
def test_a_group_runs_from_its_lazily_loaded_module(group: str) -> None:
    result = CliRunner().invoke(app, [group, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert COMMANDS[group][1].split(":")[0] in " ".join(result.output.split())
