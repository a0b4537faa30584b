"""The openai harness from the command line: a scope pointed at a local server by `memledger consolidation set`,
a run through the worker's runtime against the loopback Chat Completions fake, and `memledger models`."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from typer.testing import CliRunner

from consolidation.fake_anthropic import request_records
from consolidation.fake_openai import FakeOpenAI
from worker.cli import app
from worker.cli.worker import cli_runtime

OLLAMA_PORT = 11434
MODEL = "qwen2.5:7b-instruct"


# Every test: the command line on a SQLite file of its own (tests/worker/conftest.py).
pytestmark = pytest.mark.usefixtures("cli_db_url")


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.fixture
def ollama() -> Iterator[FakeOpenAI]:
    """The fake on Ollama's own port when it is free (so the command below is exactly an operator's), else any."""
    merge = [
        {
            "op": "merge",
            "target_bodies": ["I prefer metric units", "i prefer  metric units."],
            "body": "I prefer metric units",
        }
    ]
    with FakeOpenAI(operations=merge, port=OLLAMA_PORT if _port_free(OLLAMA_PORT) else 0) as fake:
        yield fake


def run(*args: str) -> Any:
    result = CliRunner().invoke(app, list(args))
    return result


def test_a_scope_on_a_local_server_applies_a_merge_with_its_tokens_counted(ollama: FakeOpenAI) -> None:
    # Given a scope pointed at a local OpenAI-compatible server, free of charge
    configured = run(
        "consolidation", "set", "account:local", "--mode", "apply", "--harness", "openai", "--model", MODEL,
        "--base-url", ollama.base_url, "--price-in-usd-per-mtok", "0", "--price-out-usd-per-mtok", "0", "--json",
    )  # fmt: skip
    assert configured.exit_code == 0, configured.output
    settings = json.loads(configured.stdout)["settings"]
    assert (settings["harness"], settings["model"], settings["baseUrl"]) == ("openai", MODEL, ollama.base_url)
    assert (settings["priceInUsdPerMtok"], settings["priceOutUsdPerMtok"]) == (0, 0)
    # and two pins that say the same thing, and a turn
    assert run("pin", "I prefer metric units", "--kind", "preference").exit_code == 0
    assert run("pin", "i prefer  metric units.", "--kind", "preference").exit_code == 0
    turn = run("turn", "account:local", "--json")
    assert turn.exit_code == 0, turn.output

    # When the worker's service runs what is due (after the debounce)
    with cli_runtime() as runtime:
        due = runtime.service.runs("account:local")[0].due_at
        [settled] = runtime.service.run_due(now=due + timedelta(seconds=1))

    # Then one request reached the server, with the records and no key of ours
    assert ollama.calls == 1
    request = ollama.requests[0]
    assert request.json["model"] == MODEL and len(request_records(request.json)) == 2
    assert request.headers.get("authorization") == "Bearer memledger-no-key"
    # and the merge is applied, its tokens counted and nothing spent
    runs = json.loads(run("runs", "--scope", "account:local", "--json").stdout)
    assert runs[0]["id"] == settled.id and runs[0]["outcome"] == "applied" and runs[0]["opsApplied"] == 1
    assert runs[0]["harness"] == "openai" and runs[0]["model"] == MODEL
    assert runs[0]["inputTokens"] > 0 and runs[0]["outputTokens"] > 0 and runs[0]["spendMicroUsd"] == 0
    pins = json.loads(run("pins", "--json").stdout)
    assert [p["body"] for p in pins] == ["I prefer metric units"]
    assert pins[0]["provenance"] == "model_consolidation"


def test_an_unpriced_model_is_refused_with_the_prices_to_set(ollama: FakeOpenAI) -> None:
    refused = run(
        "consolidation", "set", "account:local", "--harness", "openai", "--model", MODEL, "--base-url", ollama.base_url
    )
    assert refused.exit_code == 1 and "Traceback" not in refused.output
    assert "--price-in-usd-per-mtok" in refused.stderr and "--price-out-usd-per-mtok" in refused.stderr
    shown = json.loads(run("consolidation", "status", "account:local", "--json").stdout)["settings"]
    assert shown["harness"] != "openai" and shown["baseUrl"] is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--base-url", "ftp://127.0.0.1/v1"), "http(s) URL"),
        (("--base-url", "http://user:sk-secret@127.0.0.1/v1"), "OPENAI_API_KEY"),
        # A key in the query or the path would be shown to every account that reads the settings.
        (("--base-url", "http://127.0.0.1/v1?key=sk-secret"), "must not have a ?query"),
        (("--base-url", "http://127.0.0.1/v1;key=sk-secret"), "must not have a ?query"),
        (("--base-url", "http://127.0.0.1/v1/sk-proj-sk-secretAbCdEfGhIjKlMnOpQrStUv0123"), "key in its path"),
        (("--base-url", "http://127.0.0.1/v1/Zq7vX2mK9pL4nR8sT1wY6bC3dF5gH0jA"), "key in its path"),
        (("--price-in-usd-per-mtok", "-1", "--price-out-usd-per-mtok", "0"), "price_in_usd_per_mtok"),
        (("--price-in-usd-per-mtok", "0"), "both"),
    ],
)
@pytest.mark.parametrize("job", ["consolidation", "extraction"])
def test_bad_target_options_are_refused(job: str, args: tuple[str, ...], message: str) -> None:
    refused = run(job, "set", "account:local", "--harness", "openai", "--model", MODEL, *args)
    assert refused.exit_code == 1 and message in refused.stderr and "Traceback" not in refused.output
    assert "sk-secret" not in refused.output and "Zq7vX2mK9pL4" not in refused.output


@pytest.mark.parametrize("job", ["consolidation", "extraction"])
def test_a_new_model_with_one_price_is_refused_after_a_free_one(job: str) -> None:
    # Given a free local model, When the model changes with its input price only
    free = ("--harness", "openai", "--model", MODEL, "--base-url", "http://127.0.0.1:11434/v1", "--no-check")
    set_free = run(job, "set", "account:local", *free, "--price-in-usd-per-mtok", "0", "--price-out-usd-per-mtok", "0")
    assert set_free.exit_code == 0, set_free.output
    refused = run(job, "set", "account:local", "--model", "gpt-4.1", "--price-in-usd-per-mtok", "2")
    # Then it is refused (the old output price of 0 was the old model's) and nothing changed
    assert refused.exit_code == 1 and "set both" in refused.stderr, refused.output
    shown = json.loads(run(job, "status", "account:local", "--json").stdout)["settings"]
    assert (shown["model"], shown["priceInUsdPerMtok"], shown["priceOutUsdPerMtok"]) == (MODEL, 0, 0)


def test_extraction_set_takes_the_same_target() -> None:
    result = run(
        "extraction", "set", "account:local", "--mode", "propose", "--harness", "openai", "--model", "gpt-4o-mini",
        "--base-url", "https://api.openai.com/v1", "--no-check", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    settings = json.loads(result.stdout)["settings"]
    assert (settings["harness"], settings["model"], settings["priceInUsdPerMtok"]) == ("openai", "gpt-4o-mini", None)


def test_models_lists_the_harnesses_and_the_priced_models() -> None:
    result = run("models", "--json")
    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)
    assert [h["name"] for h in listed["harnesses"]] == ["anthropic", "openai", "offline"]
    models = {m["model"]: m for m in listed["models"]}
    assert models["claude-haiku-4-5"]["harness"] == "anthropic" and models["claude-haiku-4-5"]["inputUsdPerMtok"] == "1"
    assert models["gpt-4o-mini"]["harness"] == "openai"
    text = run("models")
    assert text.exit_code == 0 and "qwen" not in text.stdout and "--price-in-usd-per-mtok" in text.stdout


def test_the_call_options_are_set_shown_and_checked(ollama: FakeOpenAI) -> None:
    target = ("--harness", "openai", "--model", MODEL, "--base-url", ollama.base_url,
              "--price-in-usd-per-mtok", "0", "--price-out-usd-per-mtok", "0")  # fmt: skip
    shown = run(
        "consolidation", "set", "account:local", *target, "--response-format", "json_object", "--temperature",
        "0.2", "--context-window-tokens", "8192", "--no-system-role", "--no-stream", "--wall-clock-cap-s", "1200",
        "--json",
    )  # fmt: skip
    assert shown.exit_code == 0, shown.output
    settings = json.loads(shown.stdout)["settings"]
    assert (settings["responseFormat"], settings["temperature"], settings["contextWindowTokens"]) == (
        "json_object", 0.2, 8192)  # fmt: skip
    assert (settings["systemRole"], settings["stream"], settings["wallClockCapS"]) == (False, False, 1200)
    # 0 hands the window back to what the server reports
    unset = json.loads(run("consolidation", "set", "account:local", "--context-window-tokens", "0", "--json").stdout)
    assert unset["settings"]["contextWindowTokens"] is None
    for args, message in (
        (("--temperature", "3"), "temperature must be from 0 to 2"),
        (("--context-window-tokens", "100"), "context_window_tokens must be an integer from 512"),
        (("--response-format", "yaml"), "--response-format"),
    ):
        refused = run("consolidation", "set", "account:local", *args)
        assert refused.exit_code in (1, 2) and message in refused.output, refused.output
        assert "Traceback" not in refused.output
    still = json.loads(run("consolidation", "status", "account:local", "--json").stdout)["settings"]
    assert (still["temperature"], still["responseFormat"]) == (0.2, "json_object")  # a refused change changes nothing


def test_run_due_exits_1_when_a_run_it_settled_failed(ollama: FakeOpenAI) -> None:
    # Given a scope whose server answers a 500 to everything
    configured = run(
        "consolidation", "set", "account:local", "--mode", "apply", "--harness", "openai", "--model", MODEL,
        "--base-url", ollama.base_url, "--price-in-usd-per-mtok", "0", "--price-out-usd-per-mtok", "0",
        "--debounce-s", "0",
    )  # fmt: skip
    assert configured.exit_code == 0, configured.output
    assert run("pin", "I prefer metric units").exit_code == 0
    assert run("turn", "account:local").exit_code == 0
    ollama.fail_next(500)

    # When an operator runs what is due
    result = run("consolidation", "run-due")

    # Then the run is listed, and the command says it failed and exits 1
    assert result.exit_code == 1, result.output
    assert "1 of 1 runs failed" in result.stderr and "HTTP 500" in result.stderr
