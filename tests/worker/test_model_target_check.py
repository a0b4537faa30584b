"""A model target is checked when it is set (`consolidation set`, `extraction set`, `models check`); a failed run
says why in one WARNING line, and `memledger runs retry` queues it again.

Against the loopback fakes (consolidation/fake_openai.py, fake_anthropic.py) and closed ports; each test costs
a second or two (the run test about three: its first run fails within a 0.5 s cap).
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from consolidation import Outcome, RunState
from consolidation.errors import NotRetryable
from consolidation.fake_anthropic import FakeAnthropic
from consolidation.fake_openai import FakeOpenAI
from consolidation.harnesses import Connection
from consolidation.pricing import default_price_table
from consolidation.target_check import check_target
from tests.worker.conftest import TWO_DUPLICATES, free_port, wait_until
from worker.cli import app
from worker.runtime import Runtime

SCOPE = "account:local"
MODEL = "qwen2.5:7b-instruct"
FREE = ("--price-in-usd-per-mtok", "0", "--price-out-usd-per-mtok", "0")


# Every test: the command line on a SQLite file of its own (tests/worker/conftest.py).
pytestmark = pytest.mark.usefixtures("cli_db_url")


@pytest.fixture
def openai_server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(models=[MODEL, "llama3.1:8b"]) as fake:
        yield fake


def run(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(app, list(args), env=env)


def settings(job: str = "consolidation") -> dict[str, Any]:
    shown: dict[str, Any] = json.loads(run(job, "status", "--json").stdout)["settings"]
    return shown


@pytest.mark.parametrize("job", ["consolidation", "extraction"])
def test_a_server_that_does_not_answer_is_refused_and_no_check_stores_it(job: str) -> None:
    # Given a base URL on a closed port
    closed = f"http://127.0.0.1:{free_port()}/v1"
    target = ("--harness", "openai", "--model", MODEL, "--base-url", closed, *FREE)
    # When it is set, Then it is refused with what to fix, and nothing changed
    refused = run(job, "set", *target)
    said = " ".join(refused.stderr.split())
    assert refused.exit_code == 1, refused.output
    assert f"cannot reach {closed}/models (connection refused)" in said and "--no-check" in said
    assert settings(job)["harness"] == "offline"
    # --no-check stores it anyway
    stored = run(job, "set", *target, "--no-check")
    assert stored.exit_code == 0, stored.output
    assert (settings(job)["harness"], settings(job)["baseUrl"]) == ("openai", closed)


def test_a_paying_harness_without_its_key_is_refused() -> None:
    for target, env in (
        (("--harness", "openai", "--model", "gpt-4.1-mini"), "OPENAI_API_KEY"),
        (("--harness", "anthropic",), "ANTHROPIC_API_KEY"),
    ):  # fmt: skip
        refused = run("consolidation", "set", *target)
        assert refused.exit_code == 1 and f"set {env}" in " ".join(refused.stderr.split()), refused.output
    assert settings()["harness"] == "offline"


def test_a_server_that_answers_is_stored_and_an_unlisted_model_is_noted(openai_server: FakeOpenAI) -> None:
    target = ("--harness", "openai", "--base-url", openai_server.base_url, *FREE)
    stored = run("consolidation", "set", *target, "--model", MODEL)
    assert stored.exit_code == 0 and "note" not in stored.stderr, stored.output
    assert settings()["model"] == MODEL
    # A model the server does not list is stored (some servers serve any name), with a note
    noted = run("consolidation", "set", *target, "--model", "qwen2.5:7b")
    assert noted.exit_code == 0, noted.output
    said = " ".join(noted.stderr.split())
    assert "note: the server does not list model 'qwen2.5:7b' (it lists qwen2.5:7b-instruct, llama3.1:8b)" in said
    assert settings()["model"] == "qwen2.5:7b"


def test_a_wrong_key_and_a_wrong_path_are_refused() -> None:
    with FakeOpenAI(models=[MODEL], api_key="sk-right") as fake:
        target = ("--harness", "openai", "--model", MODEL, *FREE)
        wrong_key = run("consolidation", "set", *target, "--base-url", fake.base_url, env={"OPENAI_API_KEY": "sk-no"})
        assert wrong_key.exit_code == 1 and "refused the key (HTTP 401): check OPENAI_API_KEY" in wrong_key.stderr
        right = run("consolidation", "set", *target, "--base-url", fake.base_url, env={"OPENAI_API_KEY": "sk-right"})
        assert right.exit_code == 0, right.output
        # Ollama's address without /v1: its models list is not there
        bare = fake.base_url.removesuffix("/v1")
        no_v1 = run("consolidation", "set", *target, "--base-url", bare, env={"OPENAI_API_KEY": "sk-right"})
        assert no_v1.exit_code == 1 and "usually ends in /v1" in " ".join(no_v1.stderr.split())
        assert settings()["baseUrl"] == fake.base_url


def test_the_anthropic_target_is_checked_on_its_server() -> None:
    with FakeAnthropic(models=["claude-haiku-4-5"], api_key="sk-ant") as fake:
        env = {"ANTHROPIC_BASE_URL": fake.base_url, "ANTHROPIC_API_KEY": "sk-ant"}
        stored = run("consolidation", "set", "--harness", "anthropic", "--model", "claude-haiku-4-5", env=env)
        assert stored.exit_code == 0, stored.output
        checked = run("models", "check", "--json", env={**env, "ANTHROPIC_API_KEY": "sk-stale"})
        assert checked.exit_code == 1
        assert "refused the key (HTTP 401)" in json.loads(checked.stdout)["consolidation"]["problem"]


def test_a_server_that_never_answers_times_out_quickly() -> None:
    with socket.socket() as silent:  # accepts connections (the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        found = check_target(
            "openai", MODEL, Connection(api_key=None, base_url=url, prices=default_price_table()), timeout_s=0.3
        )
    assert found.problem is not None and "did not answer within 0.3 s" in found.problem


def test_models_check_checks_what_the_scope_is_set_to(openai_server: FakeOpenAI) -> None:
    # Given consolidation pointed at a server that works and extraction at one stored with --no-check
    run("consolidation", "set", "--harness", "openai", "--model", MODEL, "--base-url", openai_server.base_url, *FREE)
    closed = f"http://127.0.0.1:{free_port()}/v1"
    run("extraction", "set", "--harness", "openai", "--model", MODEL, "--base-url", closed, *FREE, "--no-check")
    # When the operator checks the scope
    checked = run("models", "check", SCOPE)
    said = " ".join(checked.output.split())
    # Then it says which target works and which does not, and fails
    assert checked.exit_code == 1, checked.output
    assert f"consolidation of {SCOPE}: openai {MODEL} at {openai_server.base_url}/models: the key is set" in said
    assert f"extraction of {SCOPE}: openai {MODEL} at {closed}/models: cannot reach" in said
    data = json.loads(run("models", "check", "--json").stdout)
    assert (data["consolidation"]["ok"], data["extraction"]["ok"]) == (True, False)
    # An offline scope has nothing to check
    run("extraction", "set", "--harness", "offline")
    assert run("models", "check").exit_code == 0


def test_a_failed_run_logs_one_warning_and_runs_retry_queues_it_again(
    make_runtime: Callable[..., Runtime], caplog: pytest.LogCaptureFixture
) -> None:
    # Given a scope pointed at a closed port (stored without a check), with worker threads
    runtime = make_runtime()
    for body in TWO_DUPLICATES:
        runtime.ledger.save(body)
    service = runtime.service
    closed = f"http://127.0.0.1:{free_port()}/v1"
    target = {"harness": "openai", "model": MODEL, "price_in_usd_per_mtok": 0, "price_out_usd_per_mtok": 0}
    service.update_settings(SCOPE, mode="apply", debounce_s=0, wall_clock_cap_s=0.5, base_url=closed, **target)
    runtime.start_worker(threads=2)
    # When its run fails
    with caplog.at_level(logging.INFO, logger="worker.jobs.actors"):
        failed = runtime.notify_turn().consolidation
        assert failed is not None

        def warned() -> list[str]:
            return [
                r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and failed.id in r.getMessage()
            ]

        wait_until(warned, timeout_s=10)  # the line follows the settlement
    assert service.get_run(failed.id).outcome == Outcome.FAILED
    # Then the log has one WARNING line with the reason (as the run records it) and what to do
    warnings = warned()
    assert len(warnings) == 1 and f"failed: {service.get_run(failed.id).error}" in warnings[0], warnings
    assert f"memledger runs retry {failed.id}" in warnings[0]
    # And once the server is fixed, `runs retry` queues it again as a new run, which a worker executes
    with FakeOpenAI(
        models=[MODEL],
        operations=[{"op": "merge", "target_bodies": list(TWO_DUPLICATES), "body": "I prefer metric units"}],
    ) as fake:
        # (a cap with room: the half second above was for the closed port, and a loaded machine can take longer)
        service.update_settings(SCOPE, base_url=fake.base_url, wall_clock_cap_s=30)
        retried = run("runs", "retry", failed.id, "--json", env={"MEMLEDGER_DATABASE_URL": runtime.config.database_url})
        assert retried.exit_code == 0, retried.output
        new = json.loads(retried.stdout)
        assert new["created"] and new["run"]["id"] != failed.id and new["run"]["state"] == "pending"
        # (the CLI's own queue ends with it: this process's janitor wakes the run, as a serve's would)
        runtime.janitor.run_once(now=runtime.actors.clock() + timedelta(seconds=10))
        wait_until(lambda: service.get_run(new["run"]["id"]).state == RunState.SETTLED, timeout_s=10)
    assert service.get_run(new["run"]["id"]).outcome == Outcome.APPLIED
    assert service.get_run(failed.id).outcome == Outcome.FAILED  # the old run stays as it settled


def test_only_a_failed_or_abandoned_consolidation_run_can_be_retried(make_runtime: Callable[..., Runtime]) -> None:
    runtime = make_runtime()
    service = runtime.service
    runtime.ledger.save(TWO_DUPLICATES[0])
    service.update_settings(SCOPE, mode="apply", harness="offline", debounce_s=0)
    service.update_extraction_settings(SCOPE, mode="propose", harness="offline", debounce_s=0)
    runtime.notify_turn(session_id="s1", messages=[{"role": "user", "text": "Call me Ana."}])
    done = service.run_due()
    applied = next(r for r in done if r.job == "consolidate")
    extracted = next(r for r in done if r.job == "extract")
    with pytest.raises(NotRetryable, match="is settled applied: only a failed or abandoned run"):
        service.retry(applied.id)
    with pytest.raises(NotRetryable, match="extraction run: its conversation was dropped"):
        service.retry(extracted.id)
    url = {"MEMLEDGER_DATABASE_URL": runtime.config.database_url}
    unknown = run("runs", "retry", "run_nope", env=url)
    assert unknown.exit_code == 1 and "no consolidation run 'run_nope'" in unknown.stderr
    refused = run("runs", "retry", applied.id, env=url)
    assert refused.exit_code == 1 and "only a failed or abandoned run can be retried" in refused.stderr
    assert [r.state for r in service.runs(SCOPE)] == [RunState.SETTLED, RunState.SETTLED]  # nothing was queued
