"""The bound on a model call's answer (consolidation/harnesses/calls.py), below the SDKs: a body sent without a
length (chunked) is cut as the limit is passed, and one declared too long is refused before it is read.
A few milliseconds: the HTTP client's own mock transport, no server."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx2
import pytest

from consolidation.errors import ResponseTooLarge
from consolidation.harnesses.calls import CallGuard


def chunks(count: int, size: int = 1000) -> Iterator[bytes]:
    for _ in range(count):
        yield b"x" * size


def fetch(guard: CallGuard, response: httpx2.Response) -> bytes:
    with httpx2.Client(transport=httpx2.MockTransport(lambda _: response), event_hooks=guard.event_hooks()) as client:
        return client.get("http://model.test/v1/chat/completions").content


def test_a_chunked_answer_is_cut_once_it_passes_the_limit() -> None:
    with (
        CallGuard(time.monotonic() + 5, max_response_bytes=5_000) as guard,
        pytest.raises(ResponseTooLarge, match="over 5,000 bytes"),
    ):
        fetch(guard, httpx2.Response(200, content=chunks(20)))
    assert guard.oversize and guard.cut


def test_a_declared_length_over_the_limit_is_refused_before_reading() -> None:
    with CallGuard(time.monotonic() + 5, max_response_bytes=5_000) as guard, pytest.raises(ResponseTooLarge):
        fetch(guard, httpx2.Response(200, headers={"content-length": "6000"}, content=b"x" * 6000))
    assert guard.oversize


def test_an_answer_within_the_limit_is_read_whole() -> None:
    with CallGuard(time.monotonic() + 5, max_response_bytes=20_000) as guard:
        assert len(fetch(guard, httpx2.Response(200, content=chunks(20)))) == 20_000
    assert not guard.cut
