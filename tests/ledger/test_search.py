"""Full-text search (any text is a valid query, ranking, only active bodies) and the packet a
chat turn injects (deterministic, one member per conflict group, bounded, never expired)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger import Ledger
from ledger.packet import HEADER, build_packet
from ledger.search import MAX_TERMS, fts5_query

SCOPE = "account:local"

# FTS5 and tsquery syntax, odd unicode (curly quote, em dash, zero-width space, BOM, titlecase
# digraph, ligature, dotted capital I) and a NUL: none of it may escape as an error.
SYNTAX_WORDS = (
    '" \' ( ) NEAR NEAR( * - ^ : AND OR NOT + { } [ ] \\ body: col:x "" NEAR/3 a* ^a -a & | ! <-> <2> ~ @@ ; --'
)
ODD_UNICODE = "\x00 \u2019 \u2014 \u200b \ufeff \u01c5 \ufb01 \u0130 é 日本語 🙂"
FTS_SYNTAX = [*SYNTAX_WORDS.split(), *ODD_UNICODE.split(" "), "/*", "%", "_"]
queries = st.one_of(
    st.text(max_size=80),
    st.lists(st.sampled_from([*FTS_SYNTAX, "apple", "river", "metric"]), max_size=12).map(" ".join),
    st.lists(st.sampled_from(FTS_SYNTAX), max_size=12).map("".join),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=40),
)
HYPOTHESIS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


# --------------------------------------------------------------------------- search
def _seed(led: Ledger) -> None:
    led.save("I prefer metric units")
    led.save('my "apple" river (north) NEAR the bridge: -5 ^ degrees * always')
    led.save("Café au lait, naïve résumé — 日本語 テキスト 🙂")
    led.save("underscored_word and hyphen-ated and dotted.name")


def test_any_text_is_a_valid_query(led: Ledger) -> None:
    _seed(led)

    @HYPOTHESIS
    @given(q=queries)
    def check(q: str) -> None:
        found = led.search(SCOPE, q)
        assert all(r.status == "active" for r in found)

    check()


def test_quoted_words_match_literally(led: Ledger) -> None:
    _seed(led)
    assert len(led.search(SCOPE, 'NEAR("apple" river')) == 1
    assert len(led.search(SCOPE, "metric OR")) == 1
    assert len(led.search(SCOPE, "body:metric")) == 1
    assert led.search(SCOPE, "") == [] and led.search(SCOPE, ' \x00 " ( ) * ') == []
    assert len(led.search(SCOPE, "café")) == 1
    assert len(led.search(SCOPE, " ".join(["zzz"] * (MAX_TERMS + 50)) + " metric")) in (0, 1)


def test_fts5_query_quotes_every_word() -> None:
    assert fts5_query('a "b" NEAR(c) -d*') == '"a" OR "b" OR "NEAR" OR "c" OR "d"'
    assert fts5_query("\x00 ^ * ( ) \" '") == ""
    assert fts5_query(" ".join(f"w{n}" for n in range(100))).count(" OR ") == MAX_TERMS - 1


def test_ranking_puts_the_best_match_first(led: Ledger, clock: Any) -> None:
    both = led.save("solar panel installation guide")
    solar = led.save("solar energy is cheap")
    panel = led.save("panel discussion tonight")
    led.save("unrelated words only")
    found = led.search(SCOPE, "solar panel")
    assert found[0].id == both.id
    assert {r.id for r in found} == {both.id, solar.id, panel.id}
    many = led.save("kayak kayak kayak trip")
    once = led.save("kayak boat river trip")
    assert [r.id for r in led.search(SCOPE, "kayak")] == [many.id, once.id]
    # Deterministic: the same query twice gives the same order.
    assert led.search(SCOPE, "solar panel") == found


def test_search_sees_only_active_bodies_of_its_scope(make_ledger: Callable[..., Ledger], clock: Any) -> None:
    led = make_ledger()
    other = make_ledger(account="other")
    old = led.save("heron one")
    new = led.save("heron two", supersedes=old.id)
    prop = led.propose("heron proposed")
    rej = led.propose("heron rejected")
    led.reject(rej.id)
    gone = led.save("heron forgotten")
    led.delete(gone.id)
    expiring = led.save("heron expiring", expires_at=clock.now + timedelta(seconds=1))
    other.save("heron elsewhere")
    assert {r.id for r in led.search(SCOPE, "heron")} == {new.id, expiring.id}
    clock.advance(seconds=1)
    assert [r.id for r in led.search(SCOPE, "heron")] == [new.id]  # expired, even before the sweep
    led.sweep_expired(clock.now)
    assert [r.id for r in led.search(SCOPE, "heron")] == [new.id]
    assert [r.body for r in other.search("account:other", "heron")] == ["heron elsewhere"]
    assert prop.id not in {r.id for r in led.search(SCOPE, "proposed")}
    led.accept(prop.id)
    assert [r.id for r in led.search(SCOPE, "proposed")] == [prop.id]


def test_search_limit(led: Ledger) -> None:
    for n in range(12):
        led.save(f"limit test item {n}")
    assert len(led.search(SCOPE, "item", limit=5)) == 5
    assert len(led.search(SCOPE, "item", limit=200)) == 12


# --------------------------------------------------------------------------- packet
def test_packet_order_is_deterministic(led: Ledger, clock: Any) -> None:
    made = []
    for kind in ["fact", "decision", "preference", "constraint", "fact", "preference"]:
        clock.advance(seconds=1)
        made.append(led.save(f"a {kind} pin", kind=kind))
    packet = led.build_packet(SCOPE)
    # Explicit pins, newest first (docs/packet.md; tests/ledger/test_packet.py covers suggestions and codes).
    assert [r.id for r in packet.records] == [r.id for r in sorted(made, key=lambda r: r.valid_from, reverse=True)]
    assert packet.text.splitlines()[0] == HEADER
    assert packet.text.splitlines()[1:] == [f"[{r.id[:8]}] {r.kind.value}: {r.body}" for r in packet.records]
    assert led.build_packet(SCOPE) == packet
    assert packet.omitted == []


def test_packet_one_member_per_group_checked_by_its_own_code(led: Ledger, clock: Any) -> None:
    a = led.save("units: metric", conflict_group="units")
    clock.advance(seconds=1)
    b = led.save("units: imperial", conflict_group="units")
    packet = led.build_packet(SCOPE)
    assert [r.id for r in packet.records] == [b.id]
    # Even when handed two active members (which the database never holds), it keeps one: the newer.
    stale = replace(led.get(a.id), status=led.get(b.id).status, valid_to=None)
    built = build_packet([stale, led.get(b.id)], now=clock.now)
    assert [r.id for r in built.records] == [b.id]
    assert "imperial" in built.text and "metric" not in built.text


def test_packet_never_holds_an_expired_or_inactive_record(led: Ledger, clock: Any) -> None:
    keep = led.save("durable pin")
    led.save("ephemeral pin", expires_at=clock.now + timedelta(minutes=1))
    led.propose("a proposal")
    clock.advance(minutes=1)
    packet = led.build_packet(SCOPE)
    assert [r.id for r in packet.records] == [keep.id] and packet.omitted == []
    assert "ephemeral" not in packet.text and "proposal" not in packet.text
    # A packet built for an earlier instant from a later list is not mislabelled either.
    rec = led.get(keep.id)
    assert build_packet([rec], now=rec.valid_from - timedelta(microseconds=1)).records == []


def test_packet_of_an_empty_scope(led: Ledger) -> None:
    packet = led.build_packet(SCOPE)
    assert packet.text == "" and packet.records == [] and packet.omitted == []


def test_packet_respects_max_chars_and_reports_what_it_left_out(led: Ledger, clock: Any) -> None:
    for n in range(8):
        clock.advance(seconds=1)
        led.save(f"pin number {n} " + "word " * (n * 3) + "\n  with   odd\twhitespace")
    everything = led.build_packet(SCOPE, max_chars=100_000)
    assert everything.omitted == [] and len(everything.records) == 8
    assert all("\t" not in line and "  " not in line for line in everything.text.splitlines())

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(limit=st.integers(min_value=0, max_value=len(everything.text) + 10))
    def check(limit: int) -> None:
        packet = led.build_packet(SCOPE, max_chars=limit)
        assert len(packet.text) <= limit
        assert {r.id for r in packet.records} | {r.id for r in packet.omitted} == {r.id for r in everything.records}
        assert not {r.id for r in packet.records} & {r.id for r in packet.omitted}
        for r in packet.records:
            assert " ".join((r.body or "").split()) in packet.text
        if packet.omitted:
            assert limit < len(everything.text)
        # Kept records stay in the packet's order.
        positions = [everything.records.index(r) for r in packet.records]
        assert positions == sorted(positions)

    check()
