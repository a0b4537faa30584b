"""A save with a ``request_id`` is applied at most once per scope (docs/ledger.md, "Retrying a save").

On both backends; tests/ledger/test_lost_connection.py retries after a real lost ``COMMIT``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import select

from ledger import InvalidArgument, Ledger, RequestIdReused, Status
from ledger.protocol import handle
from ledger.schema import SAVE_REQUESTS


def _fingerprints(led: Ledger) -> list[Any]:
    with led.reading() as r:
        return [row[0] for row in r.execute(select(SAVE_REQUESTS.c.fingerprint).order_by(SAVE_REQUESTS.c.created_at))]


def test_the_same_request_returns_the_record_it_wrote(led: Ledger) -> None:
    first = led.save("I live in Lisbon", request_id="r-1")
    again = led.save("I live in Lisbon", request_id="r-1")
    assert again.id == first.id and [r.body for r in led.list()] == ["I live in Lisbon"]
    # An edit retried after it applied returns it, though its target is no longer active
    edit = led.save("I live in Porto", supersedes=first.id, request_id="r-2")
    assert led.save("I live in Porto", supersedes=first.id, request_id="r-2").id == edit.id
    assert [r.body for r in led.list()] == ["I live in Porto"]
    # At the budget's ceiling a retry is still answered (it writes nothing)
    led.set_budget(led.scope_key, 1)
    assert led.save("I live in Porto", supersedes=first.id, request_id="r-2").id == edit.id


def test_the_same_key_with_other_arguments_is_refused_and_writes_nothing(led: Ledger) -> None:
    first = led.save("Standup at 9:30", request_id="k")
    for change in ({"body": "Standup at 10:00"}, {"body": "Standup at 9:30", "kind": "decision"}):
        body = str(change.pop("body"))
        with pytest.raises(RequestIdReused, match=r'requestId "k" was already used.*' + first.id):
            led.save(body, request_id="k", **change)  # type: ignore[arg-type]
    assert [r.body for r in led.list()] == ["Standup at 9:30"]


def test_keys_belong_to_their_account(make_ledger: Callable[..., Ledger]) -> None:
    alice, bob = make_ledger(account="alice"), make_ledger(account="bob")
    a = alice.save("Likes green tea", request_id="same-key")
    b = bob.save("Likes green tea", request_id="same-key")
    assert a.id != b.id and b.scope_key == "account:bob"
    assert [r.id for r in bob.list()] == [b.id]


@pytest.mark.parametrize("bad", ["", "x" * 201, "tab\there", "nul\x00", "lone \ud800 surrogate", 7])
def test_a_bad_request_id_is_refused_and_nothing_is_written(led: Ledger, bad: Any) -> None:
    with pytest.raises(InvalidArgument, match="request_id"):
        led.save("A pin", request_id=bad)
    assert led.list() == [] and _fingerprints(led) == []
    answer = handle(
        led,
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "memory/save_memory_record",
            "params": {"body": "A pin", "requestId": bad},
        },
    )
    assert answer is not None and answer["error"]["code"] == -32602, answer
    assert "requestId" in answer["error"]["message"]
    assert led.list() == []


def test_forgetting_the_record_clears_its_fingerprint(led: Ledger) -> None:
    record = led.save("My locker code is in the blue notebook", request_id="locker")
    assert _fingerprints(led) != [None]
    led.delete(record.id)
    assert _fingerprints(led) == [None]
    # The key still answers with the forgotten record; it never writes the body again
    again = led.save("My locker code is in the blue notebook", request_id="locker")
    assert again.id == record.id and again.status == Status.DELETED and again.body is None
    assert led.list() == []


def test_a_save_without_a_key_remembers_nothing(led: Ledger) -> None:
    led.save("Plain")
    led.save("Plain")
    assert len(led.list()) == 2 and _fingerprints(led) == []
