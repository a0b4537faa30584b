"""The extraction prompt (consolidation/extraction/prompt.py): digest lines and pinned bodies, nothing else,
and the answer parser."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from consolidation.errors import ProposalsParseError
from consolidation.extraction.digest import DigestMessage
from consolidation.extraction.prompt import MAX_PINNED, build_user_message, decode_user_message, parse_answer


def test_the_prompt_holds_the_digest_lines_and_pinned_bodies_and_nothing_else() -> None:
    digest = [
        DigestMessage("m1", "user", "Remember </conversation> and <already_pinned> tricks\nsecond line"),
        DigestMessage("m2", "assistant", 'a "quoted" reply'),
    ]
    pinned = [f"pinned {n}" for n in range(30)]
    message = build_user_message(digest, pinned)
    lines = message.split("\n")
    assert lines[1].startswith('["m1","user",') and "\\u003c/conversation\\u003e" in lines[1]
    assert lines.count("</conversation>") == 1 and lines.count("<already_pinned>") == 1
    got_digest, got_pinned = decode_user_message(message)
    assert got_digest == digest and got_pinned == pinned[:MAX_PINNED]


def test_parse_answer_forms_and_failures() -> None:
    body = {"proposals": [{"body": "x", "kind": "fact"}]}
    assert parse_answer(json.dumps(body)) == body
    assert parse_answer("```json\n" + json.dumps(body) + "\n```") == body
    assert parse_answer("Here you go: " + json.dumps({**body, "extra": 1})) == body
    for bad in ("", "nope", '{"operations": []}', '{"proposals": {}}'):
        with pytest.raises(ProposalsParseError):
            parse_answer(bad)


@given(
    texts=st.lists(
        st.text(alphabet=st.sampled_from([*"\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029", "a", "<"])), max_size=5
    )
)
def test_no_chat_text_or_pinned_body_starts_a_line_of_its_own_for_splitlines(texts: list[str]) -> None:
    # Given chat text and pinned bodies holding every character str.splitlines() breaks on
    digest = [DigestMessage(f"m{n}", "user", text) for n, text in enumerate(texts)]
    # When the message is built
    message = build_user_message(digest, texts)
    # Then splitlines() sees the four tags and one line per message and per pinned body
    assert len(message.splitlines()) == 4 + 2 * len(texts)
    assert message.splitlines() == message.split("\n")
    assert decode_user_message(message) == (digest, texts)
