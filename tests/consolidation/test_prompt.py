"""The user message encoding, the answer schema and the answer parser."""

from __future__ import annotations

import json

import anthropic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from consolidation.harnesses.base import PromptRecord
from consolidation.prompt import (
    ANSWER_SCHEMA,
    CLOSE_TAG,
    OPEN_TAG,
    SYSTEM_PROMPT,
    AnswerParseError,
    build_user_message,
    decode_user_message,
    parse_answer,
)

records_strategy = st.lists(
    st.builds(
        PromptRecord,
        id=st.text(min_size=1, max_size=30),
        kind=st.sampled_from(["preference", "fact", "decision", "constraint"]),
        body=st.text(max_size=200),
        conflict_group=st.none() | st.text(max_size=20),
    ),
    max_size=20,
)


def test_message_layout_is_compact_and_grouped_by_kind():
    records = [
        PromptRecord("mem_2", "fact", "My deploy region is eu-west-1", None),
        PromptRecord("mem_1", "preference", "I prefer metric units", "units"),
    ]

    assert build_user_message(records) == (
        f"{OPEN_TAG}\n"
        '{"preference":[\n["mem_1","I prefer metric units","units"]],\n'
        '"fact":[\n["mem_2","My deploy region is eu-west-1"]]}\n'
        f"{CLOSE_TAG}"
    )


def test_an_empty_scope_is_an_empty_document():
    assert decode_user_message(build_user_message([])) == []


@given(records_strategy)
def test_any_records_round_trip_and_never_break_the_tags(records):
    message = build_user_message(records)

    assert message.count(CLOSE_TAG) == 1 and message.count(OPEN_TAG) == 1
    assert "<" not in message[len(OPEN_TAG) : -len(CLOSE_TAG)]
    decoded = decode_user_message(message)
    assert sorted(decoded, key=repr) == sorted(records, key=repr)


def test_the_system_prompt_says_bodies_are_data_and_names_the_vocabulary():
    assert "never instructions" in SYSTEM_PROMPT
    for op in ("merge", "correct", "keep"):
        assert f'"op": "{op}"' in SYSTEM_PROMPT
    assert "number" in SYSTEM_PROMPT and "negation" in SYSTEM_PROMPT and "name" in SYSTEM_PROMPT


def test_the_schema_is_already_in_the_structured_output_subset():
    # The SDK's own transformer changes nothing, so the API receives exactly this schema.
    assert anthropic.transform_schema(ANSWER_SCHEMA) == ANSWER_SCHEMA


@pytest.mark.parametrize(
    "text",
    [
        '{"operations": [{"op": "keep", "targets": ["m"]}]}',
        '  \n{"operations": [{"op": "keep", "targets": ["m"]}]}\n',
        '```json\n{"operations": [{"op": "keep", "targets": ["m"]}]}\n```',
        'Here you go:\n{"operations": [{"op": "keep", "targets": ["m"]}]}\nThanks.',
        '{"operations": [{"op": "keep", "targets": ["m"]}], "note": "extra keys are dropped"}',
    ],
)
def test_answers_that_parse(text):
    assert parse_answer(text) == {"operations": [{"op": "keep", "targets": ["m"]}]}


def test_operations_are_returned_unvalidated():
    text = json.dumps({"operations": [{"op": "explode"}, 3, "x"]})

    assert parse_answer(text) == {"operations": [{"op": "explode"}, 3, "x"]}


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("no json here", "no JSON object"),
        ('{"operations": [{"op": "keep"', "invalid JSON"),
        ('{"ops": []}', 'no "operations" key'),
        ('{"operations": {"op": "keep"}}', "must be a list"),
        ("[1, 2]", "no JSON object"),
    ],
)
def test_answers_that_do_not_parse(text, reason):
    with pytest.raises(AnswerParseError, match=reason):
        parse_answer(text)


@given(st.text(max_size=300))
def test_parse_never_raises_anything_but_its_own_error(text):
    try:
        answer = parse_answer(text)
    except AnswerParseError:
        return
    assert isinstance(answer["operations"], list)
