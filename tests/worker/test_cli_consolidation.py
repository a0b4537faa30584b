"""Operator commands: consolidation set/status/enable/disable/propose/run-due, turn, runs; process guards."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from ledger import open_ledger
from tests.worker.conftest import TWO_DUPLICATES
from worker.cli import app

RUN_FIELDS = {
    "id",
    "scopeKey",
    "state",
    "outcome",
    "turns",
    "createdAt",
    "dueAt",
    "startedAt",
    "settledAt",
    "harness",
    "model",
    "inputTokens",
    "outputTokens",
    "spendMicroUsd",
    "opsProposed",
    "opsApplied",
    "opsRefused",
    "proposalsWritten",
    "refusals",
    "error",
}


def run(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def run_json(*args: str) -> Any:
    result = run(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_set_status_and_mode_shortcuts(cli_db_url: str) -> None:
    data = run_json(
        "consolidation",
        "set",
        "account:local",
        "--mode",
        "apply",
        "--harness",
        "offline",
        "--debounce-s",
        "2",
        "--max-wait-s",
        "60",
        "--budget-usd",
        "0.25",
    )
    assert data["settings"]["mode"] == "apply" and data["settings"]["debounceS"] == 2
    assert data["settings"]["maxWaitS"] == 60 and data["settings"]["spendBudgetMicroUsd"] == 250_000
    assert run_json("consolidation", "propose", "account:local")["settings"]["mode"] == "propose"
    assert run_json("consolidation", "disable", "account:local")["settings"]["mode"] == "off"
    assert run_json("consolidation", "enable", "account:local")["settings"]["mode"] == "apply"
    status = run_json("consolidation", "status", "account:local")
    assert status["settings"]["harness"] == "offline" and status["pending"] is None and status["runs"] == []
    table = run("consolidation", "status", "account:local")
    assert table.exit_code == 0 and "debounce_s" in table.stdout


def test_bad_settings_are_refused_with_a_message(cli_db_url: str) -> None:
    result = run("consolidation", "set", "account:local", "--debounce-s", "-1")
    assert result.exit_code == 1 and "debounce_s" in result.stderr and "Traceback" not in result.output
    budget = run("consolidation", "set", "account:local", "--budget-usd", "lots")
    assert budget.exit_code == 2
    scope = run("consolidation", "set", "no-colon", "--mode", "apply")
    assert scope.exit_code == 2 and "scope" in scope.stderr  # a usage error, as for every --scope


def test_turn_then_run_due_then_runs(cli_db_url: str) -> None:
    led = open_ledger(cli_db_url)
    for body in TWO_DUPLICATES:
        led.save(body)
    led.close()
    assert run_json("turn", "account:local") is None  # off: nothing scheduled
    off = run("turn", "account:local")
    assert "nothing scheduled" in off.stdout and "consolidation set account:local --mode propose" in off.stdout
    run_json("consolidation", "set", "account:local", "--mode", "apply", "--harness", "offline", "--debounce-s", "0")
    pending = run_json("turn", "account:local")
    assert pending["state"] == "pending" and pending["turns"] == 1
    told = " ".join(run("turn", "account:local").stdout.split())
    assert "turn 2 recorded" in told and "due at" in told  # when the run comes, and where to see it
    assert "`memledger runs` shows its outcome, `memledger proposals` what it proposed" in told
    settled = run_json("consolidation", "run-due")
    assert [r["id"] for r in settled] == [pending["id"]] and settled[0]["outcome"] == "applied"
    assert run_json("consolidation", "run-due") == []
    runs = run_json("runs", "--scope", "account:local")
    assert len(runs) == 1 and set(runs[0]) >= RUN_FIELDS
    assert runs[0]["createdAt"].endswith("Z") and runs[0]["opsApplied"] == 1
    assert "prompt" not in runs[0] and "answer" not in runs[0]
    table = run("runs")
    assert table.exit_code == 0 and pending["id"] in table.stdout and "applied" in table.stdout
    assert run_json("runs", "--scope", "account:other") == []


def test_run_now_executes_the_pending_run_whatever_its_due_time(cli_db_url: str) -> None:
    # Given consolidation on with the default ten-minute debounce and nothing pending
    led = open_ledger(cli_db_url)
    for body in TWO_DUPLICATES:
        led.save(body)
    led.close()
    run_json("consolidation", "set", "--mode", "propose", "--harness", "offline")
    nothing = run("consolidation", "run-now")
    assert nothing.exit_code == 0 and "no pending consolidation run for account:local" in nothing.stdout
    # When a turn schedules a run ten minutes out, run-due has nothing to do, run-now runs it
    pending = run_json("turn")
    assert "`memledger consolidation run-now` runs it now" in " ".join(run("turn").stdout.split())
    assert run_json("consolidation", "run-due") == []
    done = run_json("consolidation", "run-now")
    [settled] = done["settled"]
    assert done["notStarted"] == [] and settled["id"] == pending["id"] and settled["outcome"] == "proposed"
    assert (settled["opsApplied"], settled["proposalsWritten"]) == (0, 1)
    assert "no pending consolidation run" in run("consolidation", "run-now").stdout  # it ran once
    # Extraction the same way: every session's pending run
    run_json("extraction", "set", "--mode", "propose", "--harness", "offline")
    assert "no pending extraction run for account:local" in run("extraction", "run-now").stdout
    rt = open_ledger(cli_db_url)
    try:
        from consolidation import ConsolidationService

        svc = ConsolidationService(rt)
        for session in ("s1", "s2"):
            svc.notify_turn("account:local", session_id=session, messages=[{"role": "user", "text": "Call me Ana."}])
    finally:
        rt.close()
    extracted = run_json("extraction", "run-now")["settled"]
    assert sorted(r["sessionId"] for r in extracted) == ["s1", "s2"] and {r["job"] for r in extracted} == {"extract"}


def test_processes_refuse_an_impossible_topology(cli_db_url: str) -> None:
    worker = run("worker")
    assert worker.exit_code == 2 and "MEMLEDGER_REDIS_URL" in worker.stderr
    api_only = run("serve", "--no-worker", "--port", "0")
    assert api_only.exit_code == 2 and "MEMLEDGER_REDIS_URL" in api_only.stderr


# `memledger consolidation set`: --allow-removal/--no-allow-removal, --max-prompt-chars.
def settings(*args: str) -> dict[str, Any]:
    result = run("consolidation", "set", "account:local", *args, "--json")
    assert result.exit_code == 0, result.output
    found: dict[str, Any] = json.loads(result.stdout)["settings"]
    return found


@pytest.mark.usefixtures("cli_db_url")
def test_removal_and_the_prompt_bound_are_set_from_the_command_line() -> None:
    assert settings("--allow-removal", "--max-prompt-chars", "8000")["allowRemoval"] is True
    assert settings()["maxPromptChars"] == 8000
    assert settings("--no-allow-removal")["allowRemoval"] is False
    assert settings()["maxPromptChars"] == 8000


@pytest.mark.usefixtures("cli_db_url")
def test_bad_values_are_refused_with_a_message() -> None:
    small = run("consolidation", "set", "account:local", "--max-prompt-chars", "10")
    assert small.exit_code == 1 and "max_prompt_chars" in small.stderr and "Traceback" not in small.output
    offline = run("consolidation", "set", "account:local", "--harness", "offline", "--model", "gpt-4")
    assert offline.exit_code == 1 and "offline harness calls no model" in offline.stderr
    unpriced = run("consolidation", "set", "account:local", "--harness", "anthropic", "--model", "gpt-4")
    assert unpriced.exit_code == 1 and "gpt-4" in unpriced.stderr
