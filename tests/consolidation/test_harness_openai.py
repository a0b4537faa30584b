"""What only the openai harness does, through the real ``openai`` SDK against the loopback Chat Completions fake:
the request's shape, the response_format forms and their fallback, the scope's call options (temperature, system
role, streaming, context window), refusals, cached tokens, and keys."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from consolidation import Outcome
from consolidation.errors import HarnessError
from consolidation.extraction.digest import DigestMessage
from consolidation.extraction.prompt import ANSWER_SCHEMA as PROPOSALS_SCHEMA
from consolidation.extraction.prompt import SYSTEM_PROMPT as EXTRACTION_SYSTEM_PROMPT
from consolidation.fake_anthropic import Reply
from consolidation.fake_model import request_records
from consolidation.fake_openai import FakeOpenAI
from consolidation.harnesses import CallOptions, PromptRecord, Usage
from consolidation.harnesses.anthropic import AnthropicHarness
from consolidation.harnesses.extract_base import OneTurnExtractor
from consolidation.harnesses.openai import OpenAIHarness, forget_formats, remembered_format, strict_schema
from consolidation.pricing import DEFAULT_PRICES, scope_price
from consolidation.prompt import ANSWER_SCHEMA, SYSTEM_PROMPT
from tests.conftest import T0
from tests.consolidation.conftest import SCOPE

MODEL = "qwen2.5:7b-instruct"
PRICES = scope_price(DEFAULT_PRICES, MODEL, input_usd_per_mtok=1, output_usd_per_mtok=5)
RECORDS = [
    PromptRecord(id="1", kind="preference", body="I prefer metric units", conflict_group=None),
    PromptRecord(id="2", kind="preference", body="i prefer  metric units", conflict_group=None),
]
MERGE = {"op": "merge", "targets": ["1", "2"], "body": "I prefer metric units"}


@pytest.fixture(autouse=True)
def fresh_formats() -> Iterator[None]:
    forget_formats()
    yield
    forget_formats()


@pytest.fixture
def merging_openai() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(operations=[MERGE]) as server:
        yield server


def harness(base_url: str | None, *, api_key: str | None = None, **options: Any) -> OpenAIHarness:
    return OpenAIHarness(
        api_key=api_key, base_url=base_url, prices=PRICES, options=CallOptions(**options),
        backoff_initial_s=0.02, backoff_max_s=0.1,
    )  # fmt: skip


def call(h: OpenAIHarness, model: str = MODEL):
    return h.call(RECORDS, model=model, max_output_tokens=512, wall_clock_cap_s=5)


def test_one_tool_less_turn_with_the_anthropic_harnesses_system_text_and_records(merging_openai: FakeOpenAI) -> None:
    result = call(harness(merging_openai.base_url))

    [request] = merging_openai.requests
    body = request.json
    assert set(body) == {
        "model",
        "max_tokens",
        "messages",
        "response_format",
        "temperature",
        "stream",
        "stream_options",
    }
    assert body["model"] == MODEL and body["max_tokens"] == 512 and body["temperature"] == 0
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    # the same system text and the same encoded records as the Messages request carries
    anthropic = AnthropicHarness(api_key="k", base_url=None, prices=PRICES)
    messages_request = anthropic.request_params(RECORDS, model="claude-haiku-4-5", max_output_tokens=512)
    assert body["messages"] == [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": messages_request["messages"][0]["content"]},
    ]
    assert result.prompt == body["messages"][1]["content"]
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "memledger_operations", "schema": strict_schema(ANSWER_SCHEMA), "strict": True},
    }
    assert result.answer == {"operations": [MERGE]} and result.error is None


def test_the_strict_schema_requires_every_field_and_the_nulls_it_forces_are_dropped(merging_openai: FakeOpenAI) -> None:
    item = strict_schema(ANSWER_SCHEMA)["properties"]["operations"]["items"]
    assert set(item["required"]) == set(item["properties"]) and item["additionalProperties"] is False
    assert item["properties"]["body"] == {"anyOf": [{"type": "string"}, {"type": "null"}]}
    assert item["properties"]["op"] == ANSWER_SCHEMA["properties"]["operations"]["items"]["properties"]["op"]
    # Given a model that fills every field, as a strict schema makes it
    full = {**MERGE, "kind": None, "confidence_bps": None, "after_days": None, "subject": None, "rationale": None}
    merging_openai.set_operations([full])

    # Then the answer carries only what the model set, as the gate expects
    assert call(harness(merging_openai.base_url)).answer == {"operations": [MERGE]}


def test_a_server_refusing_the_schema_gets_json_mode_then_text_and_it_is_remembered(merging_openai: FakeOpenAI) -> None:
    # Given a server that takes no response_format at all (an older llama.cpp)
    merging_openai.set_formats("text")
    h = harness(merging_openai.base_url)

    # When the harness calls
    result = call(h)

    # Then it asked for the schema, then JSON mode, then plain text, and the text parsed
    kinds = [(r.json.get("response_format") or {}).get("type") for r in merging_openai.requests]
    assert kinds == ["json_schema", "json_object", None]
    assert result.answer == {"operations": [MERGE]} and result.error is None
    assert remembered_format(h.base_url, MODEL) == "plain"
    # And the next call, by another harness of the same process, goes straight to plain text
    call(harness(merging_openai.base_url))
    assert merging_openai.calls == 4 and "response_format" not in merging_openai.requests[-1].json
    # while another model on that server starts from the schema again
    call(harness(merging_openai.base_url), model="gpt-4o-mini")
    assert merging_openai.requests[4].json["response_format"]["type"] == "json_schema"


def test_json_mode_is_kept_when_only_the_schema_is_refused(merging_openai: FakeOpenAI) -> None:
    merging_openai.set_formats("json_object", "text")

    call(harness(merging_openai.base_url))
    call(harness(merging_openai.base_url))

    kinds = [(r.json.get("response_format") or {}).get("type") for r in merging_openai.requests]
    assert kinds == ["json_schema", "json_object", "json_object"]


def test_a_400_that_is_not_about_the_format_fails_without_a_fallback(merging_openai: FakeOpenAI) -> None:
    merging_openai.fail_next(400)

    with pytest.raises(HarnessError, match="HTTP 400"):
        call(harness(merging_openai.base_url))

    assert merging_openai.calls == 1 and remembered_format(merging_openai.base_url, MODEL) == "json_schema"


def test_a_refusal_fails_the_call_with_its_reason_usage_and_spend(merging_openai: FakeOpenAI) -> None:
    merging_openai.push(Reply(refusal="I can't help with that.", usage={"input_tokens": 300, "output_tokens": 10}))

    with pytest.raises(HarnessError, match="the model refused: I can't help with that") as caught:
        call(harness(merging_openai.base_url))

    assert caught.value.usage == Usage(input_tokens=300, output_tokens=10)
    assert caught.value.spend_micro_usd == 300 + 50
    assert merging_openai.calls == 1


def test_cached_tokens_are_cache_reads_and_priced_as_such(merging_openai: FakeOpenAI) -> None:
    merging_openai.set_usage(input_tokens=1000, output_tokens=100, cache_read_input_tokens=4000)
    h = OpenAIHarness(api_key=None, base_url=merging_openai.base_url, prices=DEFAULT_PRICES)

    result = call(h, model="gpt-4o-mini")

    # prompt_tokens 5000 of which 4000 cached: 1000 at 0.15, 4000 at 0.075, 100 out at 0.60 USD per MTok
    assert result.usage == Usage(input_tokens=1000, output_tokens=100, cache_read_input_tokens=4000)
    assert result.spend_micro_usd == 150 + 300 + 60


def test_a_cut_off_reply_says_so(merging_openai: FakeOpenAI) -> None:
    merging_openai.push(Reply(text='{"operations": [{"op": "keep", "targ', stop_reason="max_tokens"))

    result = call(harness(merging_openai.base_url))

    assert result.answer is None and "cut off at max_tokens=512" in (result.error or "")


def test_a_local_server_gets_a_placeholder_key_and_a_configured_key_is_sent_and_never_shown(
    merging_openai: FakeOpenAI,
) -> None:
    call(harness(merging_openai.base_url))
    assert merging_openai.requests[0].headers["authorization"] == "Bearer memledger-no-key"

    merging_openai.fail_next(401)
    with pytest.raises(HarnessError) as caught:
        call(harness(merging_openai.base_url, api_key="sk-very-secret"))
    assert merging_openai.requests[1].headers["authorization"] == "Bearer sk-very-secret"
    assert "sk-very-secret" not in str(caught.value)


def test_openais_own_api_without_a_key_is_refused_before_any_request() -> None:
    h = OpenAIHarness(api_key=None, base_url=None, prices=DEFAULT_PRICES)

    with pytest.raises(HarnessError, match="OPENAI_API_KEY"):
        call(h, model="gpt-4o-mini")


def test_openais_own_api_is_asked_for_max_completion_tokens() -> None:
    h = OpenAIHarness(api_key="k", base_url="https://api.openai.com/v1/", prices=DEFAULT_PRICES)

    params = h.request_params(RECORDS, model="gpt-4o-mini", max_output_tokens=300)

    assert params["max_completion_tokens"] == 300 and "max_tokens" not in params


def test_extraction_asks_with_its_own_schema_and_falls_back_too(merging_openai: FakeOpenAI) -> None:
    merging_openai.set_formats("json_object", "text")
    merging_openai.set_proposals([{"body": "I prefer metric units", "kind": "preference"}])
    extractor = OneTurnExtractor(OpenAIHarness(api_key=None, base_url=merging_openai.base_url, prices=PRICES))

    result = extractor.extract(
        [DigestMessage("m1", "user", "remember that I prefer metric units")],
        ["my deploy region is eu-west-1"],
        model=MODEL,
        max_output_tokens=256,
        wall_clock_cap_s=5,
    )

    first, second = merging_openai.requests
    assert first.json["response_format"]["json_schema"]["name"] == "memledger_proposals"
    assert second.json["response_format"] == {"type": "json_object", "schema": PROPOSALS_SCHEMA}
    assert second.json["messages"][0] == {"role": "system", "content": EXTRACTION_SYSTEM_PROMPT}
    assert result.answer == {"proposals": [{"body": "I prefer metric units", "kind": "preference"}]}


def test_a_refusal_settles_the_run_failed_once_with_its_reason_and_usage(
    make_service, merging_openai: FakeOpenAI
) -> None:  # type: ignore[no-untyped-def]
    # Given a scope on a local server whose model declines
    svc = make_service(openai_api_key="", openai_base_url=merging_openai.base_url)
    svc.update_settings(
        SCOPE, mode="apply", harness="openai", model=MODEL, debounce_s=0,
        price_in_usd_per_mtok=1, price_out_usd_per_mtok=5, now=T0,
    )  # fmt: skip
    svc.led.save("I prefer metric units", now=T0)
    merging_openai.push(Reply(refusal="I won't.", usage={"input_tokens": 200, "output_tokens": 4}))

    # When the run executes
    svc.notify_turn(SCOPE, now=T0 + timedelta(seconds=1))
    [done] = svc.run_due(now=T0 + timedelta(seconds=1))

    # Then it settled failed with the model's reason, the call counted and paid, and it is never run again
    assert done.outcome == Outcome.FAILED and done.error == "the model refused: I won't."
    assert (done.input_tokens, done.output_tokens, done.spend_micro_usd, done.model_calls) == (200, 4, 220, 1)
    assert svc.run_due(now=T0 + timedelta(seconds=60)) == [] and merging_openai.calls == 1


# -- the scope's call options --------------------------------------------------------------


def test_a_500_naming_response_format_falls_back_as_llama_cpp_pythons_server_needs() -> None:
    # Given a server that answers a json_schema request with a 500 whose validation error names the field
    with FakeOpenAI(operations=[MERGE], formats=("json_object", "text"), format_status=500) as fake:
        result = call(harness(fake.base_url))

    kinds = [(r.json.get("response_format") or {}).get("type") for r in fake.requests]
    assert kinds == ["json_schema", "json_object"] and result.answer == {"operations": [MERGE]}


def test_json_mode_carries_the_schema_in_llama_cpps_form_but_not_to_openais_api(merging_openai: FakeOpenAI) -> None:
    call(harness(merging_openai.base_url, response_format="json_object"))
    official = OpenAIHarness(api_key="k", base_url=None, prices=DEFAULT_PRICES, options=CallOptions(
        response_format="json_object"))  # fmt: skip

    assert merging_openai.requests[0].json["response_format"] == {"type": "json_object", "schema": ANSWER_SCHEMA}
    params = official.request_params(RECORDS, model="gpt-4o-mini", max_output_tokens=64, form="json_object")
    assert params["response_format"] == {"type": "json_object"}


def test_a_format_the_scope_chose_is_the_only_one_tried_and_its_refusal_says_what_to_set(
    merging_openai: FakeOpenAI,
) -> None:
    merging_openai.set_formats("json_object", "text")

    call(harness(merging_openai.base_url, response_format="plain"))
    assert "response_format" not in merging_openai.requests[0].json
    with pytest.raises(HarnessError, match=r"refused response_format json_schema .*set the scope's response_format"):
        call(harness(merging_openai.base_url, response_format="json_schema"))

    assert merging_openai.calls == 2  # no fallback to a form the scope did not choose
    assert remembered_format(merging_openai.base_url, MODEL) == "json_schema"  # nor remembered for auto


def test_temperature_and_the_instructions_without_a_system_role(merging_openai: FakeOpenAI) -> None:
    result = call(harness(merging_openai.base_url, temperature=0.7, system_role=False))

    body = merging_openai.requests[0].json
    assert body["temperature"] == 0.7
    [message] = body["messages"]
    assert message["role"] == "user" and message["content"] == f"{SYSTEM_PROMPT}\n{result.prompt}"
    assert result.answer == {"operations": [MERGE]}  # the records still reached the model


def test_usage_is_read_from_the_stream_or_the_whole_response_and_counted_when_a_stream_has_none() -> None:
    usage = {"input_tokens": 300, "output_tokens": 12}
    with FakeOpenAI(operations=[MERGE], usage=usage) as fake:
        streamed = call(harness(fake.base_url))
        whole = call(harness(fake.base_url, stream=False))
    with FakeOpenAI(operations=[MERGE], usage=usage, stream_usage=False) as quiet:
        counted = call(harness(quiet.base_url))

    assert streamed.usage == whole.usage == Usage(input_tokens=300, output_tokens=12)
    assert "stream" not in fake.requests[1].json
    # A stream without usage (llama-cpp-python's): the content chunks counted, no input tokens
    text = counted.raw_text
    assert counted.usage == Usage(input_tokens=0, output_tokens=-(-len(text) // 8)) and counted.answer is not None


def test_the_context_window_bounds_the_records_a_run_sends() -> None:
    from consolidation.harnesses.model_window import DEFAULT_TOKENS_PER_CHAR, TEMPLATE_TOKENS

    with FakeOpenAI(operations=[MERGE], context_window=4096) as fake:
        reported = harness(fake.base_url).records_room(model=MODEL, max_output_tokens=1024, system_chars=1000)
        stated = harness(fake.base_url, context_window_tokens=2048)
        room = stated.records_room(model=MODEL, max_output_tokens=1024, system_chars=1000)
        with pytest.raises(HarnessError, match=r"max_output_tokens 2000 leaves no room .*context window of 2048"):
            stated.records_room(model=MODEL, max_output_tokens=2000, system_chars=1000)
    with FakeOpenAI(operations=[MERGE]) as silent:  # reports no window (llama-cpp-python's server)
        unknown = harness(silent.base_url).records_room(model=MODEL, max_output_tokens=1024, system_chars=1000)

    per_char = DEFAULT_TOKENS_PER_CHAR
    assert reported == int((4096 - 1024 - 1000 * per_char - TEMPLATE_TOKENS) / per_char)
    assert room == int((2048 - 1024 - 1000 * per_char - TEMPLATE_TOKENS) / per_char)
    assert unknown is None


def test_a_calls_usage_teaches_the_tokens_a_character_costs(merging_openai: FakeOpenAI) -> None:
    h = harness(merging_openai.base_url, context_window_tokens=8192)
    before = h.records_room(model=MODEL, max_output_tokens=1024, system_chars=1000)
    merging_openai.set_usage(input_tokens=100, output_tokens=10)  # far fewer tokens than the default guess

    call(h)

    after = h.records_room(model=MODEL, max_output_tokens=1024, system_chars=1000)
    assert after is not None and before is not None and after > 2 * before


# -- the call options through real runs ------------------------------------------------------


def test_a_run_sends_only_the_records_that_fit_the_models_context_window(
    make_service, merging_openai: FakeOpenAI
) -> None:  # type: ignore[no-untyped-def]
    # Given a scope of 60 pins (about 2,700 characters of record lines) on a model with a small window
    svc = make_service(openai_api_key="", openai_base_url=merging_openai.base_url)
    svc.update_settings(
        SCOPE, mode="apply", harness="openai", model=MODEL, debounce_s=0, price_in_usd_per_mtok=0,
        price_out_usd_per_mtok=0, context_window_tokens=2048, max_output_tokens=1024, now=T0,
    )  # fmt: skip
    for n in range(60):
        svc.led.save(f"Project {n} ships on day {n} of the quarter", now=T0)
    merging_openai.set_operations([])

    # When the run executes
    svc.notify_turn(SCOPE, now=T0 + timedelta(seconds=1))
    [done] = svc.run_due(now=T0 + timedelta(seconds=1))

    # Then the prompt held fewer records than the scope, within what the window leaves beside the answer
    sent = request_records(merging_openai.requests[0].json)
    assert done.outcome == Outcome.APPLIED and 0 < len(sent) < 60
    system = merging_openai.requests[0].json["messages"][0]["content"]
    prompt_chars = len(system) + len(merging_openai.requests[0].json["messages"][1]["content"])
    assert prompt_chars * 0.4 + 1024 + 64 <= 2048 + 0.4 * 80  # the harness's estimate, a kind line's slack


def test_an_answer_limit_that_fills_the_context_window_fails_the_run_saying_what_to_set(
    make_service, merging_openai: FakeOpenAI
) -> None:  # type: ignore[no-untyped-def]
    svc = make_service(openai_api_key="", openai_base_url=merging_openai.base_url)
    svc.update_settings(
        SCOPE, mode="apply", harness="openai", model=MODEL, debounce_s=0, price_in_usd_per_mtok=0,
        price_out_usd_per_mtok=0, context_window_tokens=2048, max_output_tokens=2000, now=T0,
    )  # fmt: skip
    svc.led.save("I prefer metric units", now=T0)

    svc.notify_turn(SCOPE, now=T0 + timedelta(seconds=1))
    [done] = svc.run_due(now=T0 + timedelta(seconds=1))

    assert done.outcome == Outcome.FAILED and merging_openai.calls == 0
    assert "max_output_tokens 2000 leaves no room" in (done.error or "") and "context_window_tokens" in (
        done.error or ""
    )
