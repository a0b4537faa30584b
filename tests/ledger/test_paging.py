"""Lists in pages: limit, cursor, filters, the scope given once, on both backends and over the protocol."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable
from typing import Any

import pytest

from ledger import InvalidArgument, Kind, Ledger, Provenance
from ledger.paging import MAX_LIMIT
from ledger.protocol import handle


def rpc(led: Ledger, method: str, **params: Any) -> dict[str, Any]:
    answer = handle(led, {"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    assert answer is not None
    return answer


def ok(led: Ledger, method: str, **params: Any) -> Any:
    answer = rpc(led, method, **params)
    assert "result" in answer, answer
    return answer["result"]


def refused(led: Ledger, method: str, **params: Any) -> str:
    answer = rpc(led, method, **params)
    assert "error" in answer, answer
    assert answer["error"]["code"] == -32602, answer
    assert answer["error"]["data"]["reason"] in ("invalid_params", "scope_error"), answer
    return str(answer["error"]["message"])


def all_pages(fetch: Callable[[str | None], Any]) -> list[str]:
    """Every id over the pages ``fetch(cursor)`` returns (a Page), in order."""
    ids: list[str] = []
    cursor = None
    for _ in range(10_000):
        page = fetch(cursor)
        ids += [r.id for r in page.records]
        cursor = page.next_cursor
        if cursor is None:
            return ids
    raise AssertionError("the pages never ended")


def test_pages_cover_the_list_once_in_order(led: Ledger) -> None:
    saved = [led.save(f"pin number {i}") for i in range(7)]
    pages = [led.list_page(limit=3)]
    while pages[-1].next_cursor is not None:
        pages.append(led.list_page(limit=3, cursor=pages[-1].next_cursor))
    assert [len(p.records) for p in pages] == [3, 3, 1]
    assert [r.id for p in pages for r in p.records] == [r.id for r in saved] == [r.id for r in led.list()]
    # A limit that ends exactly at the list's end says so: no empty last page.
    assert led.list_page(limit=7).next_cursor is None
    assert led.list_page().records == led.list()


def test_filters_by_kind_provenance_and_conflict_group(led: Ledger) -> None:
    tea = led.save("I prefer tea", kind="preference", conflict_group="drink")
    led.save("The office is in Lyon", kind="fact")
    ulm = led.save("I prefer Ulm over Bonn", kind="preference")
    proposed = led.propose("The user likes trains", kind="preference", confidence_bps=8000, rationale="said so")
    assert [r.id for r in led.list_page(kind="preference").records] == [tea.id, ulm.id]
    assert [r.id for r in led.list_page(conflict_group="drink").records] == [tea.id]
    assert led.list_page(provenance=Provenance.MODEL_PROPOSAL).records == []
    assert [r.id for r in led.proposals_page(provenance="model_proposal").records] == [proposed.id]
    assert led.proposals_page(kind=Kind.FACT).records == []
    # A filtered list pages like any other.
    ids = all_pages(lambda c: led.list_page(limit=1, kind="preference", cursor=c))
    assert ids == [tea.id, ulm.id]


def test_bad_limits_filters_and_cursors_are_refused_with_what_to_do(led: Ledger, make_ledger: Any) -> None:
    led.save("one")
    led.save("two")
    cursor = led.list_page(limit=1).next_cursor
    assert cursor is not None
    for limit in (0, -1, MAX_LIMIT + 1, True, 1.5, "3"):
        with pytest.raises(InvalidArgument, match="limit must be an integer from 1 to 1000"):
            led.list_page(limit=limit)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="kind must be one of preference, fact"):
        led.list_page(kind="opinion")
    with pytest.raises(InvalidArgument, match="provenance must be one of"):
        led.proposals_page(provenance="user")
    with pytest.raises(InvalidArgument, match="conflict_group"):
        led.list_page(conflict_group="   ")
    garbled = cursor[:-3]
    edited = base64.urlsafe_b64encode(json.dumps({"v": 2, "a": [1, "x"]}).encode()).decode()
    for bad in (garbled, edited, "", "!!!", "a" * 3000, "\ud800"):
        with pytest.raises(InvalidArgument, match="not one this ledger issued"):
            led.list_page(cursor=bad)
    with pytest.raises(InvalidArgument, match="another list or other filters"):
        led.proposals_page(cursor=cursor)
    with pytest.raises(InvalidArgument, match="another list or other filters"):
        led.list_page(cursor=cursor, kind="fact")
    # Another account's cursor pages nothing here.
    other = make_ledger(account="bob")
    other.save("bob's pin")
    other.save("bob's second pin")
    theirs = other.list_page(limit=1).next_cursor
    with pytest.raises(InvalidArgument, match="another scope"):
        led.list_page(cursor=theirs)


def forged_cursors(scope: str, foreign_id: str) -> list[str]:
    """Cursors a client could write by hand: huge sort keys, nested arrays, another account's record."""

    def encode(raw: str) -> str:
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")

    head = f'"l":"active","s":"{scope}","f":[null,null,null]'
    return [
        encode(f'{{"v":1,{head},"k":[{10**30},1]}}'),  # past any INTEGER column
        encode(f'{{"v":1,{head},"k":[1,{2**63}]}}'),  # one past PostgreSQL's bigint
        encode(f'{{"v":2,{head},"a":{10**30}}}'),
        encode(f'{{"v":2,{head},"a":"{"x" * 500}"}}'),
        encode(f'{{"v":2,{head},"a":' + "[" * 700 + "]" * 700 + "}"),  # nested as deep as the length allows
        encode(f'{{"v":2,{head},"a":"{foreign_id}"}}'),  # a record of another account
    ]


def test_forged_cursors_are_refused_as_invalid_params(led: Ledger, make_ledger: Any) -> None:
    # Given a scope with pages, and another account's record
    for n in range(3):
        led.save(f"pin {n}")
    foreign = make_ledger(account="bob").save("bob's pin")
    # When cursors are forged by hand, Then each is refused, through the ledger and the protocol
    for cursor in forged_cursors(led.scope_key, foreign.id):
        with pytest.raises(InvalidArgument, match="not one this ledger issued"):
            led.list_page(limit=1, cursor=cursor)
        assert "not one this ledger issued" in refused(led, "memory/list_memory_records", limit=1, cursor=cursor)


def test_a_cursor_tells_nothing_of_other_accounts(led: Ledger, make_ledger: Any) -> None:
    # Given another account that wrote many records before this one wrote its two
    bob = make_ledger(account="bob")
    for n in range(30):
        bob.save(f"bob's pin {n}")
    first = led.save("one")
    led.save("two")
    # When the first page of one record is read through the protocol
    page = ok(led, "memory/list_memory_records", limit=1)
    decoded = json.loads(base64.urlsafe_b64decode(page["nextCursor"] + "=="))
    # Then the cursor holds only what the caller was sent: its scope, the list, its filters, the last id
    assert decoded == {"v": 2, "l": "active", "s": led.scope_key, "f": [None, None, None], "a": first.id}
    assert [r["body"] for r in ok(led, "memory/list_memory_records", cursor=page["nextCursor"])["records"]] == ["two"]


def test_the_scope_is_given_once(led: Ledger) -> None:
    pin = led.save("The deploy region is eu-west-1")
    view = led.scope()
    assert view.scope_key == led.scope_key == "account:local"
    assert [r.id for r in view.search("deploy")] == [pin.id]
    assert [r.id for r in view.list()] == [pin.id] == [r.id for r in led.list()]
    assert view.list_page(limit=5).records == view.list()
    assert view.proposals() == [] == led.proposals()
    assert view.build_packet().records == led.build_packet(led.scope_key).records
    assert view.injection() is True


WRITES = 60  # per writer thread


def test_pages_neither_repeat_nor_skip_while_others_save(make_ledger: Any) -> None:
    # Given a scope holding 60 pins and two threads that keep saving
    led = make_ledger()
    led.set_budget(led.scope_key, 10_000)
    existing = [led.save(f"existing pin {i}").id for i in range(60)]
    stop = threading.Event()
    saved = threading.Condition()
    count = [0]
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(WRITES):
                if stop.is_set():
                    break
                led.save(f"writer {n} pin {i}")
                with saved:
                    count[0] += 1
                    saved.notify_all()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def page_after_more_saves(cursor: str | None) -> Any:
        # Between two pages, the writers save at least two more records.
        with saved:
            seen = count[0]
            more = lambda: count[0] >= min(seen + 2, 2 * WRITES) or bool(errors)  # noqa: E731
            assert saved.wait_for(more, timeout=30), "the writers stalled"
        return led.list_page(limit=7, cursor=cursor)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    try:
        # When the scope is read in pages of 7 while they write
        ids = all_pages(page_after_more_saves)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors
    # Then no record comes twice, every record that existed at the start comes once, in order,
    # and the records written meanwhile come after them
    assert len(ids) == len(set(ids))
    assert ids[: len(existing)] == existing
    assert len(ids) > len(existing) + 10


def test_the_protocol_pages_and_filters(led: Ledger, make_ledger: Any) -> None:
    for i in range(5):
        led.save(f"pin {i}", kind="fact" if i % 2 else "preference")
    first = ok(led, "memory/list_memory_records", limit=2)
    assert first["scopeKey"] == "account:local" and len(first["records"]) == 2
    second = ok(led, "memory/list_memory_records", limit=2, cursor=first["nextCursor"])
    third = ok(led, "memory/list_memory_records", limit=2, cursor=second["nextCursor"])
    assert third["nextCursor"] is None
    bodies = [r["body"] for page in (first, second, third) for r in page["records"]]
    assert bodies == [f"pin {i}" for i in range(5)]
    # Without limit or cursor: the whole list, as before, and a null nextCursor.
    whole = ok(led, "memory/list_memory_records", scopeKey="account:local")
    assert len(whole["records"]) == 5 and whole["nextCursor"] is None
    facts = ok(led, "memory/list_memory_records", kind="fact")
    assert [r["body"] for r in facts["records"]] == ["pin 1", "pin 3"]
    assert ok(led, "memory/list_memory_records", provenance="model_proposal")["records"] == []
    group = led.save("tea", conflict_group="drink")
    assert [r["id"] for r in ok(led, "memory/list_memory_records", conflictGroup="drink")["records"]] == [group.id]
    proposal = led.propose("likes trains", kind="preference", confidence_bps=5000, rationale="said so")
    waiting = ok(led, "memory/list_proposed_memory_records", limit=1)
    assert [r["id"] for r in waiting["records"]] == [proposal.id] and waiting["nextCursor"] is None
    # scopeKey left out in every method that takes it: the caller's one scope.
    assert ok(led, "memory/search_memory_records", query="pin")["scopeKey"] == "account:local"
    assert ok(led, "memory/list_memory_records_as_of", asOf="2099-01-01T00:00:00Z")["scopeKey"] == "account:local"
    assert "text" in ok(led, "memory/build_packet")
    assert ok(led, "memory/list_proposed_memory_records")["scopeKey"] == "account:local"


def test_the_protocol_refuses_bad_paging_params(led: Ledger, make_ledger: Any) -> None:
    led.save("one")
    led.save("two")
    cursor = ok(led, "memory/list_memory_records", limit=1)["nextCursor"]
    method = "memory/list_memory_records"
    assert "limit" in refused(led, method, limit=0)
    assert "limit" in refused(led, method, limit=1001)
    assert "limit" in refused(led, method, limit="5")
    assert "kind" in refused(led, method, kind="opinion")
    assert "provenance" in refused(led, method, provenance="nobody")
    assert "conflictGroup" in refused(led, method, conflictGroup="a\x00b")
    assert "lone surrogate" in refused(led, method, cursor="abc\ud800")
    assert "not one this ledger issued" in refused(led, method, cursor=cursor[::-1])
    forged = base64.urlsafe_b64encode(
        json.dumps({"v": 1, "l": "active", "s": "account:local", "f": [None, None, None], "k": [-1, 0]}).encode()
    ).decode()
    assert "not one this ledger issued" in refused(led, method, cursor=forged)
    assert "another list" in refused(led, "memory/list_proposed_memory_records", cursor=cursor)
    bob = make_ledger(account="bob")
    bob.save("bob 1")
    bob.save("bob 2")
    theirs = ok(bob, method, limit=1)["nextCursor"]
    assert "another scope" in refused(led, method, cursor=theirs)
    assert "not this caller's scope" in refused(led, method, scopeKey="account:bob")
    assert "offset: is not a param" in refused(led, method, offset=3)
    # Nothing was changed by any of it.
    assert [r["body"] for r in ok(led, method)["records"]] == ["one", "two"]
