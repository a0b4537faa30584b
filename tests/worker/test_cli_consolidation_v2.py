"""`memledger consolidation set` for consolidation v2: --allow-removal/--no-allow-removal, --max-prompt-chars."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from worker.cli import app


@pytest.fixture(autouse=True)
def database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMLEDGER_DATABASE_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    monkeypatch.setenv("MEMLEDGER_LOG_FORMAT", "console")


def run(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def settings(*args: str) -> dict[str, Any]:
    result = run("consolidation", "set", "account:local", *args, "--json")
    assert result.exit_code == 0, result.output
    found: dict[str, Any] = json.loads(result.stdout)["settings"]
    return found


def test_removal_and_the_prompt_bound_are_set_from_the_command_line() -> None:
    assert settings("--allow-removal", "--max-prompt-chars", "8000")["allowRemoval"] is True
    assert settings()["maxPromptChars"] == 8000
    assert settings("--no-allow-removal")["allowRemoval"] is False
    assert settings()["maxPromptChars"] == 8000


def test_bad_values_are_refused_with_a_message() -> None:
    small = run("consolidation", "set", "account:local", "--max-prompt-chars", "10")
    assert small.exit_code == 1 and "max_prompt_chars" in small.stderr and "Traceback" not in small.output
    offline = run("consolidation", "set", "account:local", "--harness", "offline", "--model", "gpt-4")
    assert offline.exit_code == 1 and "offline harness calls no model" in offline.stderr
    unpriced = run("consolidation", "set", "account:local", "--harness", "anthropic", "--model", "gpt-4")
    assert unpriced.exit_code == 1 and "gpt-4" in unpriced.stderr
