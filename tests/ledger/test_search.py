"""Full-text search: any text is a valid query, ranking, only active bodies (the packet:
tests/ledger/test_packet.py)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger import Ledger
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
