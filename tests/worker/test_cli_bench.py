"""``memledger bench replay``: the command's output forms and its refusals (docs/consolidation-quality.md)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner, Result

from worker.cli import app

FIELDS = {
    "episodes", "classes", "false_merges", "as_of_exact", "erased_leaks", "runs", "tokens", "spend_micro_usd",
    "failed_runs", "failed_by_cause", "first_errors", "ops_proposed", "ops_applied", "ops_refused", "refusals",
}  # fmt: skip


def bench(*args: str, code: int = 0) -> Result:
    result = CliRunner().invoke(app, ["bench", "replay", *args])
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr, result.exception)
    assert "Traceback" not in result.stdout + result.stderr
    return result


def test_json_is_one_object_with_exactly_the_documented_fields() -> None:
    report = json.loads(bench("--harness", "offline", "--episodes", "2", "--format", "json").stdout)
    assert set(report) == FIELDS | {"baselines", "split", "splits"}
    assert report["split"] == "all" and set(report["splits"]) == {"tuning", "heldout"}
    for figures in report["splits"].values():
        assert set(figures) == FIELDS and figures["episodes"] == 2
    assert set(report["baselines"]) == {"keep_all", "latest_wins"}
    for figures in report["baselines"].values():
        assert set(figures) == FIELDS | {"splits"}
    assert set(report["classes"]) == {"duplicate", "lookalike"}
    assert report["episodes"] == 4 and report["false_merges"] == 0 and report["as_of_exact"] == 1.0
    assert report["classes"]["duplicate"] == {
        "episodes": 2,
        "precision": 1.0,
        "recall": report["classes"]["duplicate"]["recall"],
    }


def test_text_prints_a_table_per_class_with_the_baselines_beside_it() -> None:
    out = bench("--episodes", "2", "--seed", "4").stdout
    for word in ("duplicate", "lookalike"):
        assert word in out
    for arm in ("offline P", "keep_all R", "latest_wins P", "false merges", "as-of exact", "erased leaks"):
        assert arm in out


def test_an_unknown_harness_is_refused_with_the_known_names() -> None:
    result = bench("--harness", "gpt-local", code=2)
    assert "unknown harness 'gpt-local'" in result.stderr
    assert "anthropic" in result.stderr and "offline" in result.stderr


def test_a_model_for_the_offline_harness_is_refused_before_anything_is_played() -> None:
    result = bench("--model", "claude-haiku-4-5", "--episodes", "7", code=1)
    assert "the offline harness calls no model" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("episodes", ["0", "-3", "many"])
def test_a_bad_episode_count_is_a_usage_error(episodes: str) -> None:
    bench("--episodes", episodes, code=2)


@pytest.mark.postgres
def test_database_url_plays_in_postgres(pg_migrated: str) -> None:
    args = ("--episodes", "2", "--split", "tuning", "--format", "json", "--database-url", pg_migrated)
    report = json.loads(bench(*args).stdout)
    assert report["episodes"] == 2 and report["erased_leaks"] == 0 and report["as_of_exact"] == 1.0
    assert report["runs"] > 0 and report["classes"]["duplicate"]["recall"] > 0
    assert report["baselines"]["keep_all"]["episodes"] == 2


def test_a_model_priced_in_the_configuration_is_scored_with_its_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    from consolidation.fake_anthropic import FakeAnthropic

    # Given a model the price table does not know, priced at 0 in the configuration (a local model)
    with FakeAnthropic(operations=[]) as fake:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.base_url)
        monkeypatch.setenv("MEMLEDGER_MODEL_PRICES", '{"my-local-model": {"input": 0, "output": 0}}')
        # When it is scored
        args = ("--harness", "anthropic", "--model", "my-local-model", "--episodes", "2", "--split", "tuning")
        args += ("--format", "json")
        report = json.loads(bench(*args).stdout)
    # Then its runs called it, counted its tokens and charged nothing
    assert fake.calls >= 2 and report["runs"] >= 2
    assert report["tokens"] > 0 and report["spend_micro_usd"] == 0
    assert all(r.json["model"] == "my-local-model" for r in fake.requests)


@pytest.mark.parametrize("split", ["tuning", "heldout"])
def test_one_split_is_played_and_reported_alone(split: str) -> None:
    report = json.loads(bench("--episodes", "2", "--split", split, "--format", "json").stdout)
    assert report["split"] == split and list(report["splits"]) == [split]
    assert report["episodes"] == report["splits"][split]["episodes"] == 2


def test_an_unknown_split_is_a_usage_error() -> None:
    assert "tuning" in bench("--split", "everything", code=2).stderr


def test_a_dead_server_is_refused_before_anything_is_played(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket
    import time

    # Given a port nothing listens on
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("MEMLEDGER_MODEL_PRICES", '{"local": {"input": 0, "output": 0}}')
    started = time.monotonic()
    # When the openai harness is scored against it
    args = ("--harness", "openai", "--model", "local", "--base-url", f"http://127.0.0.1:{port}/v1", "--format", "json")
    result = bench(*args, code=1)
    # Then it is refused at once, saying what to fix, and nothing is reported as a score
    assert time.monotonic() - started < 30
    assert f"cannot reach http://127.0.0.1:{port}/v1/models" in result.stderr and "--base-url" in result.stderr
    assert result.stdout == ""


def test_a_paying_harness_without_a_key_is_refused_before_anything_is_played(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("MEMLEDGER_ANTHROPIC_API_KEY", raising=False)
    result = bench("--harness", "anthropic", "--episodes", "7", code=1)
    assert "no API key for the anthropic harness: set ANTHROPIC_API_KEY" in result.stderr and result.stdout == ""


def test_runs_that_fail_for_another_cause_than_a_forget_make_the_command_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    from consolidation.fake_openai import FakeOpenAI

    # Given a server whose every answer is unusable (something listens, so it is not refused up front)
    with FakeOpenAI(text="I would rather not answer in JSON.") as fake:
        monkeypatch.setenv("MEMLEDGER_MODEL_PRICES", '{"local": {"input": 0, "output": 0}}')
        args = ("--harness", "openai", "--model", "local", "--base-url", fake.base_url, "--episodes", "7")
        result = bench(*args, "--split", "tuning", "--format", "json", code=1)
    # Then the replay stops after a few failed runs, exits 1 and says why
    assert "failed 3 runs in a row" in result.stderr and "unparseable" in result.stderr
    assert fake.calls == 3


def test_the_model_target_options_reach_the_harnesss_scopes(monkeypatch: pytest.MonkeyPatch) -> None:
    from consolidation.fake_openai import FakeOpenAI

    # Given a local server, and the options `consolidation set` takes for it
    with FakeOpenAI(operations=[]) as fake:
        monkeypatch.setenv("MEMLEDGER_MODEL_PRICES", '{"local": {"input": 0, "output": 0}}')
        args = ("--harness", "openai", "--model", "local", "--base-url", fake.base_url, "--episodes", "1")
        args += ("--split", "tuning", "--temperature", "0.25", "--max-output-tokens", "512")
        args += ("--response-format", "json_object", "--no-system-role", "--wall-clock-cap-s", "30")
        # When it is scored
        report = json.loads(bench(*args, "--format", "json").stdout)
    # Then every call was made with them
    calls = [r.json for r in fake.requests if r.path.endswith("/chat/completions")]
    assert calls and report["runs"] >= len(calls)
    for call in calls:
        assert call["temperature"] == 0.25 and call["max_tokens"] == 512
        assert call["response_format"]["type"] == "json_object"
        assert [m["role"] for m in call["messages"]] == ["user"]


def test_one_failed_run_among_good_ones_prints_the_report_and_exits_1(monkeypatch: pytest.MonkeyPatch) -> None:
    from consolidation.fake_model import Reply
    from consolidation.fake_openai import FakeOpenAI

    # Given a server whose first answer is not JSON and every later one is an empty answer
    with FakeOpenAI(operations=[], replies=[Reply(text="Sorry, no JSON today.")]) as fake:
        monkeypatch.setenv("MEMLEDGER_MODEL_PRICES", '{"local": {"input": 0, "output": 0}}')
        args = ("--harness", "openai", "--model", "local", "--base-url", fake.base_url, "--episodes", "3")
        result = bench(*args, "--split", "tuning", "--format", "json", code=1)
    # Then the report is printed, with the failure counted by cause, and the command fails saying why
    report = json.loads(result.stdout)
    assert report["failed_runs"] == 1 and report["failed_by_cause"] == {"unparseable": 1}
    assert report["runs"] > 1 and report["first_errors"][0].startswith("unparseable answer")
    assert f"1 of {report['runs']} runs failed (unparseable 1)" in result.stderr
