"""Every documented snippet and command works as written (the conventions: tests/docs_check.py, docs/cli.md).

Cost: the Python snippets run in one subprocess (about 4 s of CPU: each in an empty directory of its own, with a
fake Anthropic server for any model call); the command lines are parsed in this process by the command
line's own parser, never run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import typer

from consolidation.fake_anthropic import FakeAnthropic
from tests import docs_check
from tests.docs_check import Block

# Runs each snippet (JSON on stdin: [{"where", "code"}]) in a directory of its own; prints one JSON list of
# [where, error or null].
RUNNER = r"""
import ast, asyncio, inspect, json, os, sys, tempfile, traceback
results = []
for snippet in json.load(sys.stdin):
    os.chdir(tempfile.mkdtemp(prefix="snippet-"))
    try:
        code = compile(snippet["code"], snippet["where"], "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        done = eval(code, {"__name__": "__main__"})
        if inspect.iscoroutine(done):
            asyncio.run(done)
        results.append([snippet["where"], None])
    except BaseException:
        results.append([snippet["where"], traceback.format_exc(limit=3)[-1500:]])
print(json.dumps(results))
"""


@pytest.fixture
def anthropic_no_ops() -> Iterator[FakeAnthropic]:
    """The loopback fake Anthropic Messages API answering every run with no operation."""
    fake = FakeAnthropic(operations=lambda request: []).start()
    yield fake
    fake.stop()


def test_the_python_snippets_run_as_written(anthropic_no_ops: FakeAnthropic, tmp_path: Path) -> None:
    snippets = docs_check.python_snippets()
    assert len(snippets) >= 5, "the pages' ```python blocks were not found"
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("MEMLEDGER_", "ANTHROPIC_", "OPENAI_"))}
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",  # `memledger` as the README puts it
        ANTHROPIC_API_KEY="test-key",
        ANTHROPIC_BASE_URL=anthropic_no_ops.base_url,
        TMPDIR=str(tmp_path),
    )
    done = subprocess.run(
        [sys.executable, "-c", RUNNER],
        input=json.dumps([{"where": s.where, "code": s.text} for s in snippets]),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    failed = {where: error for where, error in json.loads(done.stdout.splitlines()[-1]) if error}
    assert failed == {}


def test_a_failing_snippet_is_seen(tmp_path: Path) -> None:
    # The runner reports a snippet that raises, one with a syntax error, and an awaited failure
    snippets = [
        {"where": "a", "code": "from ledger import open_ledger\nopen_ledger('sqlite:///x.db').delete('mem_nope')"},
        {"where": "b", "code": "x = {1: 2, ...}"},
        {"where": "c", "code": "import asyncio\nawait asyncio.sleep(0)\nraise KeyError('late')"},
        {"where": "d", "code": "print('fine')"},
    ]
    done = subprocess.run([sys.executable, "-c", RUNNER], input=json.dumps(snippets), capture_output=True,
                          text=True, timeout=60, env={**os.environ, "TMPDIR": str(tmp_path)})  # fmt: skip
    results = dict(json.loads(done.stdout.splitlines()[-1]))
    assert "NotFound" in results["a"] and "SyntaxError" in results["b"] and "KeyError" in results["c"]
    assert results["d"] is None


def _parse(argv: list[str]) -> str | None:
    """None when ``memledger <argv>`` parses (its callbacks are not run), else why not."""
    from worker.cli import app

    command: Any = typer.main.get_command(app)
    parent, name, args = None, "memledger", list(argv)
    try:
        with redirect_stdout(StringIO()), redirect_stderr(StringIO()):
            while True:
                ctx = command.make_context(name, args, parent=parent)
                if not hasattr(command, "resolve_command"):
                    return None
                rest = [*(getattr(ctx, "_protected_args", None) or getattr(ctx, "protected_args", [])), *ctx.args]
                if not rest:
                    return None if not command.no_args_is_help else "a group without a command"
                name, command, args = command.resolve_command(ctx, rest)
                parent = ctx
    except typer.Exit as exc:
        return None if exc.exit_code == 0 else f"exit status {exc.exit_code}"
    except Exception as exc:
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        return f"{type(exc).__name__}: {message}"


def test_the_documented_command_lines_parse() -> None:
    lines = docs_check.command_lines()
    assert len(lines) >= 10, "the pages' memledger command lines were not found"
    failed = [f"{where}: memledger {' '.join(argv)} -> {why}" for where, argv in lines if (why := _parse(argv))]
    assert failed == []


def test_the_parse_check_sees_a_bad_command_line() -> None:
    assert _parse(["consolidation", "set", "account:local", "--mode", "apply"]) is None
    assert _parse(["--version"]) is None and _parse(["pins", "--help"]) is None
    assert "No such command" in str(_parse(["compact"]))
    assert "No such option" in str(_parse(["pins", "--bogus"]))
    assert "bogus" in str(_parse(["consolidation", "set", "account:local", "--mode", "bogus"]))
    assert _parse(["tokens", "list", "[--json]"]) is not None  # a synopsis is not a command line


def test_the_commands_named_in_the_text_exist() -> None:
    from worker.cli import COMMANDS, load_command

    named = docs_check.inline_commands()
    assert len(named) >= 20
    unknown = []
    for page, words in named:
        for alternative in words[0].split("|"):
            command = load_command(alternative) if alternative in COMMANDS else None
            if command is None:
                unknown.append(f"{page}: memledger {alternative}")
                continue
            if len(words) > 1 and hasattr(command, "commands"):
                unknown += [f"{page}: memledger {alternative} {sub}" for sub in words[1].split("|")
                            if sub not in command.commands]  # fmt: skip
    assert unknown == []


def test_the_command_lines_are_found_where_a_shell_runs_them() -> None:
    found = docs_check.memledger_commands
    assert found("memledger pins --json | jq length") == [["pins", "--json"]]
    assert found("TOKEN=$(.venv/bin/memledger tokens create alice)  # shown once") == [["tokens", "create", "alice"]]
    assert found("claude mcp add memledger -- /opt/x/.venv/bin/memledger mcp") == [["mcp"]]
    assert found("sudo -u memledger sh -c 'set -a; . /etc/env; /opt/venv/bin/memledger db upgrade'") == [
        ["db", "upgrade"]
    ]
    assert found("MEMLEDGER_ACCOUNT=alice memledger serve &") == [["serve"]]
    assert found("echo memledger pins") == []


def test_every_relative_link_and_named_file_resolves() -> None:
    assert docs_check.broken_links() == []
    assert docs_check.missing_paths() == []


def test_the_link_check_sees_a_dead_link(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    page.write_text(
        "# A page\n\n## Its part\n\n[ok](#its-part) [gone](missing.md) [bad anchor](#nowhere) [web](https://x.org)\n"
        "`[not a link](nothing.md)` and `tests/none_such.py`\n\n```\n[in a block](nothing.md)\n```\n"
    )
    monkeypatch.setattr(docs_check, "ROOT", tmp_path)
    monkeypatch.setattr(docs_check, "pages", lambda: [page])
    assert docs_check.broken_links() == [
        "docs/page.md: (missing.md): no such file",
        "docs/page.md: (#nowhere): no heading #nowhere in docs/page.md",
    ]
    assert docs_check.missing_paths() == ["docs/page.md: tests/none_such.py"]


def test_blocks_are_read_with_their_language() -> None:
    readme = docs_check.blocks(docs_check.ROOT / "README.md")
    assert any(b.language == "sh" and "memledger --version" in b.text for b in readme)
    assert all(isinstance(b, Block) for b in readme)


def test_every_setting_is_documented() -> None:
    from worker.config import WorkerConfig

    text = "\n".join(page.read_text(encoding="utf-8") for page in docs_check.pages())
    test_only = {"fault_point"}  # fault tests only
    settings = [f"MEMLEDGER_{name.upper()}" for name in WorkerConfig.model_fields if name not in test_only]
    assert [name for name in settings if name not in text] == []
