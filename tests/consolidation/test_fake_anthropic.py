"""The loopback fake Messages API, in-process and as a separate process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anthropic
import pytest

from consolidation.fake_anthropic import FakeAnthropic, Reply
from tests.hygiene import kill_group, popen

REQUEST = {
    "model": "claude-haiku-4-5",
    "max_tokens": 64,
    "system": "be brief",
    "messages": [{"role": "user", "content": "hello there"}],
}


def post(base_url: str, body: object = REQUEST, *, path: str = "/v1/messages", timeout: float = 5.0):
    data = json.dumps(body).encode()
    request = urllib.request.Request(base_url + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, dict(response.headers.items()), json.loads(response.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, dict(exc.headers.items()), json.loads(exc.read())


def text_of(message: dict) -> str:
    return message["content"][0]["text"]


def test_default_reply_is_an_empty_operations_list_with_estimated_usage():
    with FakeAnthropic() as fake:
        status, _, message = post(fake.base_url)

    assert status == 200
    assert json.loads(text_of(message)) == {"operations": []}
    assert message["type"] == "message" and message["role"] == "assistant" and message["model"] == "claude-haiku-4-5"
    assert message["usage"]["input_tokens"] == 5  # ceil(len("be brief" + "hello there") / 4)
    assert message["usage"]["output_tokens"] > 0


def test_it_serves_the_real_sdk():
    fake = FakeAnthropic(operations=[{"op": "keep", "targets": ["m1"]}])
    with fake, anthropic.Anthropic(api_key="k", base_url=fake.base_url, max_retries=0) as client:
        message = client.messages.create(**REQUEST)

    assert message.content[0].type == "text"
    assert json.loads(message.content[0].text) == {"operations": [{"op": "keep", "targets": ["m1"]}]}


def test_counts_and_records_requests_with_headers():
    with FakeAnthropic() as fake:
        post(fake.base_url)
        post(fake.base_url, {**REQUEST, "max_tokens": 7})

        assert fake.calls == 2
        assert [r.json["max_tokens"] for r in fake.requests] == [64, 7]
        assert fake.requests[0].headers["Content-Type"] == "application/json"
        assert fake.requests[0].path == "/v1/messages"


def test_the_call_counter_is_thread_safe():
    with FakeAnthropic() as fake:
        threads = [threading.Thread(target=post, args=(fake.base_url,)) for _ in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        assert fake.calls == 16 and len(fake.requests) == 16


def test_scripted_operations_fixed_and_callable():
    with FakeAnthropic(operations=lambda request: [{"op": "keep", "targets": [request["model"]]}]) as fake:
        _, _, message = post(fake.base_url)
        assert json.loads(text_of(message)) == {"operations": [{"op": "keep", "targets": ["claude-haiku-4-5"]}]}

        fake.set_operations([{"op": "merge", "targets": ["a", "b"], "body": "x"}])
        _, _, message = post(fake.base_url)
        assert json.loads(text_of(message))["operations"][0]["op"] == "merge"


def test_garbage_text_and_usage_numbers():
    with FakeAnthropic(text="not json at all", usage={"input_tokens": 11, "cache_read_input_tokens": 3}) as fake:
        _, _, message = post(fake.base_url)

    assert text_of(message) == "not json at all"
    assert message["usage"] == {
        "input_tokens": 11,
        "output_tokens": 0,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 3,
    }


def test_a_queue_of_statuses_then_success():
    with FakeAnthropic(statuses=[429, 529, 500], retry_after_s=0.25) as fake:
        results = [post(fake.base_url) for _ in range(4)]

    assert [status for status, _, _ in results] == [429, 529, 500, 200]
    assert results[0][2]["error"]["type"] == "rate_limit_error"
    assert results[1][2]["error"]["type"] == "overloaded_error"
    assert results[0][1]["retry-after"] == "0.25"


def test_pushed_replies_fall_back_to_the_defaults_for_unset_fields():
    with FakeAnthropic(operations=[{"op": "keep", "targets": ["d"]}], usage={"input_tokens": 9}) as fake:
        fake.push(Reply(stop_reason="max_tokens"), Reply(text="raw"))
        first, second, third = (post(fake.base_url)[2] for _ in range(3))

    assert first["stop_reason"] == "max_tokens" and json.loads(text_of(first))["operations"][0]["targets"] == ["d"]
    assert first["usage"]["input_tokens"] == 9
    assert text_of(second) == "raw"
    assert third["stop_reason"] == "end_turn"


def test_a_slow_reply_and_wait_for_calls():
    with FakeAnthropic(delay_s=0.3) as fake:
        started = time.monotonic()
        status, _, _ = post(fake.base_url)
        assert status == 200 and time.monotonic() - started >= 0.3
        assert fake.wait_for_calls(1, timeout_s=0.1)
        assert not fake.wait_for_calls(2, timeout_s=0.05)


def test_stopping_ends_a_pending_delay_quickly():
    fake = FakeAnthropic(delay_s=30).start()
    errors: list[OSError] = []

    def client_call() -> None:
        try:
            post(fake.base_url, timeout=10)
        except OSError as exc:
            errors.append(exc)

    client = threading.Thread(target=client_call)
    client.start()
    assert fake.wait_for_calls(1)

    started = time.monotonic()
    fake.stop()
    client.join()

    assert time.monotonic() - started < 2
    assert len(errors) == 1  # the fake hung up instead of answering late


def test_a_dropped_connection_gets_no_response():
    with FakeAnthropic() as fake:
        fake.push(Reply(drop=True))
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            post(fake.base_url)
        assert fake.calls == 1
        assert post(fake.base_url)[0] == 200


def test_bad_requests_are_refused_like_the_api():
    with FakeAnthropic() as fake:
        assert post(fake.base_url, {"model": "m"})[0] == 400
        assert post(fake.base_url, {**REQUEST, "messages": []})[0] == 400
        bad_format = {**REQUEST, "output_config": {"format": {"type": "json"}}}
        assert post(fake.base_url, bad_format)[0] == 400
        assert post(fake.base_url, path="/v1/complete")[0] == 404
        ok_format = {**REQUEST, "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}}}
        assert post(fake.base_url, ok_format)[0] == 200


def test_counter_file_and_reset(tmp_path):
    counter = tmp_path / "calls"
    with FakeAnthropic(counter_file=counter) as fake:
        assert counter.read_text() == "0\n"
        post(fake.base_url)
        post(fake.base_url)
        assert counter.read_text() == "2\n"
        fake.reset()
        assert fake.calls == 0 and fake.requests == [] and counter.read_text() == "0\n"


def test_set_usage_refuses_unknown_fields():
    with pytest.raises(ValueError, match="unknown usage field"):
        FakeAnthropic().set_usage(tokens=3)


def _wait_for(predicate, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


@contextmanager
def _spawn(*args: str) -> Iterator[subprocess.Popen[str]]:
    """The fake as a process of its own, killed (with its process group) after the block whatever happened."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    process = popen(
        [sys.executable, "-m", "consolidation.fake_anthropic", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    with process:
        try:
            yield process
        finally:
            kill_group(process)


def test_as_a_process_it_prints_its_url_counts_arrivals_and_exits_on_sigterm(tmp_path):
    # Given the fake as a separate process that hangs on every request
    counter = tmp_path / "calls"
    with _spawn("--delay", "30", "--hang-file", str(counter)) as process:
        assert process.stdout is not None
        base_url = process.stdout.readline().strip()
        assert base_url.startswith("http://127.0.0.1:")

        # When a request arrives (and the client gives up waiting)
        with pytest.raises(OSError):
            post(base_url, timeout=0.3)

        # Then the counter file shows it, and SIGTERM stops the process promptly and cleanly
        assert _wait_for(lambda: counter.exists() and counter.read_text() == "1\n")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0


def test_as_a_process_it_follows_a_script(tmp_path):
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            {
                "statuses": [529],
                "operations": [{"op": "keep", "targets": ["m1"]}],
                "usage": {"input_tokens": 100, "output_tokens": 10},
            }
        )
    )
    with _spawn("--script", str(script)) as process:
        assert process.stdout is not None
        base_url = process.stdout.readline().strip()
        try:
            assert post(base_url)[0] == 529
            status, _, message = post(base_url)
            assert status == 200
            assert json.loads(text_of(message)) == {"operations": [{"op": "keep", "targets": ["m1"]}]}
            assert message["usage"]["input_tokens"] == 100
        finally:
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=10) == 0


def test_scripted_operations_may_name_their_targets_by_body():
    from consolidation.harnesses.base import PromptRecord
    from consolidation.prompt import build_user_message

    records = [PromptRecord("r1", "fact", "I live in Paris", None), PromptRecord("r2", "fact", "I live in Lyon", None)]
    body = {**REQUEST, "messages": [{"role": "user", "content": build_user_message(records)}]}
    script = [
        {"op": "group", "target_bodies": ["I live in Lyon", "I live in Paris"], "subject": "home city"},
        {"op": "retire", "target_bodies": ["I live in Rome"]},
        {"op": "expire", "targets": ["r1"], "after_days": 3},
    ]
    with FakeAnthropic(operations=script) as fake:
        _, _, message = post(fake.base_url, body)

    assert json.loads(text_of(message))["operations"] == [
        {"op": "group", "targets": ["r2", "r1"], "subject": "home city"},
        {"op": "retire", "targets": ["absent:I live in Rome"]},
        {"op": "expire", "targets": ["r1"], "after_days": 3},
    ]
