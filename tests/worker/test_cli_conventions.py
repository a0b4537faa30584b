"""One command-line convention: every command's --help and --json output, walked.

* every command is classified below (a new command fails until it is): does it read, open the
  database, act on a scope;
* its help shows flags as flags (no ``<bool>``), names no internal document, and offers ``--json``
  (reads; the files commands keep ``--format``), ``--database-url`` (database) and ``--scope``;
* every ``--json`` output is camelCase all the way down (maps keyed by data, like refusal reasons,
  excepted), and every error under ``--json`` is one JSON object on stderr;
* ``--scope`` is validated the same way by every command.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ledger import open_ledger
from worker.cli import app, every_command
from worker.cli.output import DATA_KEYED

ROOT = Path(__file__).resolve().parents[2]
CAMEL = re.compile(r"^[a-z][a-zA-Z0-9]*$")
INTERNAL = re.compile(r"\bSPEC\b|(?i:\bthe brief\b|\bthe issue\b|\bissue \d+\b)")
SCOPE = "account:local"


@dataclass(frozen=True)
class Cmd:
    read: bool = False  # a read: takes --json (or --format for files)
    db: bool = True  # opens the database: takes --database-url
    scope: bool = False  # acts on one scope: takes --scope
    json: bool = True  # takes --json (writes too, when they print a result)
    format: bool = False  # the files commands: --format json instead of --json


COMMANDS: dict[str, Cmd] = {
    "pin": Cmd(),
    "pins": Cmd(read=True, scope=True),
    "unpin": Cmd(),
    "history": Cmd(read=True),
    "as-of": Cmd(read=True, scope=True),
    "search": Cmd(read=True, scope=True),
    "sweep": Cmd(),
    "proposals": Cmd(read=True, scope=True),
    "accept": Cmd(),
    "reject": Cmd(),
    "budget": Cmd(read=True, scope=True),
    "rpc": Cmd(json=False),
    "serve": Cmd(json=False),
    "worker": Cmd(json=False, db=True),
    "turn": Cmd(scope=True),
    "runs": Cmd(read=True, scope=True),
    "status": Cmd(read=True, scope=True),
    "db upgrade": Cmd(json=False),
    "db compact": Cmd(),
    "db check": Cmd(read=True),
    "db rebuild-index": Cmd(json=False),
    "mcp": Cmd(json=False),
    "models": Cmd(read=True, db=False),  # the registry and the price table, no database
    "extraction set": Cmd(scope=True),
    "extraction status": Cmd(read=True, scope=True),
    "tokens create": Cmd(),
    "tokens list": Cmd(read=True),
    "tokens revoke": Cmd(),
    "consolidation set": Cmd(scope=True),
    "consolidation status": Cmd(read=True, scope=True),
    "consolidation enable": Cmd(scope=True),
    "consolidation disable": Cmd(scope=True),
    "consolidation propose": Cmd(scope=True),
    "consolidation run-due": Cmd(),
    "consolidation run-now": Cmd(scope=True),
    "runs retry": Cmd(),
    "models check": Cmd(read=True, scope=True),
    "extraction run-now": Cmd(scope=True),
    "files new": Cmd(db=False, json=False),
    "files schema": Cmd(read=True, db=False, json=False),  # prints the JSON Schema itself
    "files validate": Cmd(read=True, db=False, json=False, format=True),
    # --scope of audit and import is a trust context (global | project:REF), not a ledger scope
    "files audit": Cmd(read=True, db=False, json=False, format=True),
    "files export": Cmd(json=False, format=True, scope=True),
    "files import": Cmd(json=False, format=True),
    # a report with fixed snake_case fields (docs/consolidation-quality.md), chosen with --format as files' are
    "bench replay": Cmd(read=True, json=False, format=True),
    "bench cluster": Cmd(read=True, json=False, format=True),
}


def _walk(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, Any]]:
    subs = getattr(command, "commands", None)
    if subs:
        if getattr(command, "invoke_without_command", False):  # `runs`, `models`: a command of its own too
            yield " ".join(path), command
        for name, sub in sorted(subs.items()):
            yield from _walk(sub, (*path, name))
    else:
        yield " ".join(path), command


def _commands() -> dict[str, Any]:
    return {path: command for name, top in every_command().items() for path, command in _walk(top, (name,))}


def _groups() -> list[tuple[str, ...]]:
    found: list[tuple[str, ...]] = [()]

    def visit(command: Any, path: tuple[str, ...]) -> None:
        for name, sub in getattr(command, "commands", {}).items():
            if getattr(sub, "commands", None):
                found.append((*path, name))
                visit(sub, (*path, name))

    for name, top in every_command().items():
        if getattr(top, "commands", None):
            found.append((name,))
            visit(top, (name,))
    return found


def _options(command: Any) -> set[str]:
    return {opt for param in command.params for opt in (*param.opts, *param.secondary_opts) if opt.startswith("--")}


def test_every_command_is_classified() -> None:
    assert set(_commands()) == set(COMMANDS), "classify the new command in COMMANDS"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_shows_flags_as_flags_names_no_internal_document_and_offers_the_options(
    name: str, runner: CliRunner
) -> None:
    kind = COMMANDS[name]
    result = runner.invoke(app, [*name.split(), "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.output
    assert not INTERNAL.search(result.output), INTERNAL.search(result.output)
    options = _options(_commands()[name])
    if kind.json:
        assert "--json" in options
    if kind.format:
        assert "--format" in options
    if kind.db:
        assert "--database-url" in options
    if kind.scope:
        assert "--scope" in options


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_fits_80_columns_with_every_option_named_whole_and_explained(name: str, runner: CliRunner) -> None:
    result = runner.invoke(app, [*name.split(), "--help"], terminal_width=80, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 80
    cut = [line for line in lines if re.search(r"…\s*│", line)]
    assert cut == [], result.output  # nothing cut at a cell's edge: an option name, a word of help
    shown = set(re.findall(r"--[a-z][a-z0-9-]*", result.output))
    for param in _commands()[name].params:
        if getattr(param, "param_type_name", "") != "option" or param.hidden:
            continue
        assert (param.help or "").strip(), f"{name} {param.opts[0]} has no help"
        for opt in (*param.opts, *param.secondary_opts):
            if opt.startswith("--"):
                assert opt in shown, f"{name}: {opt} is not shown whole at 80 columns"


@pytest.mark.parametrize("group", _groups(), ids=lambda g: " ".join(g) or "memledger")
def test_group_help_names_no_internal_document(group: tuple[str, ...], runner: CliRunner) -> None:
    result = runner.invoke(app, [*group, "--help"], terminal_width=200)
    assert result.exit_code == 0 and "<bool>" not in result.output
    assert not INTERNAL.search(result.output)


def _assert_camel(value: Any, where: str = "$") -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            assert CAMEL.match(key), f"{where}.{key} is not camelCase"
            if key not in DATA_KEYED:
                _assert_camel(item, f"{where}.{key}")
    elif isinstance(value, list):
        for n, item in enumerate(value):
            _assert_camel(item, f"{where}[{n}]")


@pytest.fixture
def seeded(tmp_path: Path) -> tuple[str, str]:
    url = f"sqlite:///{tmp_path / 'conventions.db'}"
    led = open_ledger(url)
    try:
        record = led.save("I prefer metric units")
        led.propose("you like tea")
    finally:
        led.close()
    return url, record.id


def _json_reads(record_id: str) -> dict[str, list[str]]:
    return {
        "pins": [],
        "history": [record_id],
        "as-of": ["2999-01-01"],
        "search": ["metric"],
        "proposals": [],
        "budget": [],
        "runs": [],
        "status": [],
        "consolidation status": [],
        "consolidation set": ["--mode", "propose", "--harness", "offline"],
        "consolidation disable": [],
        "turn": [],
        "sweep": [],
        "consolidation run-due": [],
        "consolidation run-now": [],
        "extraction run-now": [],
        "models check": [],
        "pin": ["I like tea"],
        "extraction status": [],
        "extraction set": ["--mode", "off"],
        "tokens list": [],
        "models": [],
        "db check": [],
    }


def test_every_json_output_is_camel_case(seeded: tuple[str, str], runner: CliRunner) -> None:
    url, record_id = seeded
    reads = _json_reads(record_id)
    for name, kind in COMMANDS.items():
        if kind.json and kind.read:
            assert name in reads, f"give {name} arguments in _json_reads"
    for name, args in reads.items():
        database = ["--database-url", url] if COMMANDS[name].db else []
        result = runner.invoke(app, [*name.split(), *args, "--json", *database])
        assert result.exit_code == 0, (name, result.output)
        _assert_camel(json.loads(result.stdout), name)


def test_errors_under_json_are_json_on_stderr(seeded: tuple[str, str], runner: CliRunner) -> None:
    url, _ = seeded
    # A refusal (exit 1) ...
    result = runner.invoke(app, ["history", "mem_nope", "--json", "--database-url", url])
    assert result.exit_code == 1 and result.stdout == ""
    error = json.loads(result.stderr)["error"]
    assert error["reason"] == "not_found" and error["exitCode"] == 1 and "mem_nope" in error["message"]
    # ... and a usage error (exit 2), both one JSON object on stderr
    result = runner.invoke(app, ["pins", "--json", "--no-such-option", "--database-url", url])
    assert result.exit_code == 2
    error = json.loads(result.stderr)["error"]
    assert error["reason"] == "usage" and "--no-such-option" in error["message"]
    # Without --json the same error is text for people
    result = runner.invoke(app, ["history", "mem_nope", "--database-url", url])
    assert result.exit_code == 1 and not result.stderr.lstrip().startswith("{")


@pytest.mark.parametrize("name", sorted(n for n, k in COMMANDS.items() if k.scope))
def test_every_scope_option_is_validated_the_same_way(
    name: str, seeded: tuple[str, str], runner: CliRunner, tmp_path: Path
) -> None:
    url, _ = seeded
    extra = {
        "as-of": ["2999-01-01"],
        "search": ["metric"],
        "consolidation set": ["--mode", "off"],
        "extraction set": ["--mode", "off"],
        "files export": [str(tmp_path / "out")],
    }.get(name, [])
    result = runner.invoke(app, [*name.split(), *extra, "--scope", "nope", "--database-url", url])
    assert result.exit_code == 2, (name, result.output)
    assert "invalid scope key 'nope'" in result.output and "kind:name" in result.output
    result = runner.invoke(app, [*name.split(), *extra, "--scope", "nope", "--json", "--database-url", url])
    if COMMANDS[name].json:
        assert json.loads(result.stderr)["error"]["reason"] == "usage"


def test_docs_name_no_internal_document() -> None:
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "deploy" / "README.md"]:
        found = INTERNAL.search(path.read_text(encoding="utf-8"))
        assert found is None, f"{path.relative_to(ROOT)} cites {found.group(0)!r}"
