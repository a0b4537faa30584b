"""The bounded digest of a session's messages (consolidation/extraction/digest.py): the newest kept, a
message carrying a credential withheld, bad messages refused."""

from __future__ import annotations

from typing import Any

import pytest

from consolidation.errors import InvalidExtractionInput
from consolidation.extraction.digest import (
    MAX_CHARS,
    MAX_MESSAGES,
    WITHHELD,
    DigestMessage,
    chars,
    check_messages,
    extend,
)


def test_digest_keeps_the_newest_30_messages() -> None:
    digest: list[DigestMessage] = []
    seq = 0
    for n in range(45):
        digest, seq = extend(digest, [{"id": None, "role": "user", "text": f"message {n}"}], next_seq=seq)
    assert len(digest) == MAX_MESSAGES
    assert [m.text for m in digest] == [f"message {n}" for n in range(15, 45)]
    assert [m.id for m in digest][-1] == "m45"


def test_digest_keeps_at_most_24000_characters_newest_kept() -> None:
    digest, seq = extend([], [{"id": "a", "role": "user", "text": "x" * 10_000}] * 2, next_seq=0)
    digest, seq = extend(digest, [{"id": "b", "role": "assistant", "text": "y" * 10_000}], next_seq=seq)
    assert chars(digest) <= MAX_CHARS and [m.role for m in digest] == ["user", "assistant"]
    huge, _ = extend(digest, [{"id": "c", "role": "user", "text": "z" * 50_000}], next_seq=seq)
    assert [m.id for m in huge] == ["c"] and len(huge[0].text) == MAX_CHARS


def test_a_message_carrying_a_credential_is_withheld() -> None:
    digest, _ = extend(
        [], [{"id": None, "role": "user", "text": "my key is sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcd"}],
        next_seq=0,
    )  # fmt: skip
    assert digest[0].text == WITHHELD


@pytest.mark.parametrize(
    "messages",
    [
        [],
        "hello",
        [{"role": "user"}],
        [{"role": "system", "text": "x"}],
        [{"role": "user", "text": 5}],
        [{"role": "user", "text": "bell\x07"}],
        [{"role": "user", "text": "lone \ud800 surrogate"}],
        [{"role": "user", "text": "x", "id": "\udfff"}],
        [{"role": "user", "text": "x", "extra": 1}],
        [{"role": "user", "text": "x", "id": ""}],
        [{"role": "user", "text": "x", "id": "a" * 101}],
        [{"role": "user", "text": "x", "id": "new\nline"}],
        ["not an object"],
        [{"role": "user", "text": "x"}] * 101,
    ],
)
def test_bad_messages_are_refused(messages: Any) -> None:
    with pytest.raises(InvalidExtractionInput):
        check_messages(messages)


def test_good_messages_pass() -> None:
    assert check_messages([{"role": "user", "text": "a\nb\tc"}, {"id": "m-7", "role": "assistant", "text": ""}]) == [
        {"id": None, "role": "user", "text": "a\nb\tc"},
        {"id": "m-7", "role": "assistant", "text": ""},
    ]
