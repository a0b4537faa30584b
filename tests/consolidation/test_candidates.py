"""The bounded candidate list: changed records first, with similar ones; the rest rotating; a small scope whole."""

from __future__ import annotations

import math
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from consolidation.candidates import SIMILAR_PER_CHANGED, select_candidates
from consolidation.harnesses import PromptRecord
from consolidation.prompt import record_chars


def recs(n: int, body_chars: int = 20) -> list[PromptRecord]:
    return [PromptRecord(f"m{i:04d}", "fact", f"{i:04d}".ljust(body_chars, "x"), None) for i in range(n)]


def no_similar(record: PromptRecord) -> Sequence[str]:
    return []


def select(records, *, max_chars, changed=(), similar=no_similar, cursor=None):
    return select_candidates(
        records, max_chars=max_chars, cost=record_chars, changed=set(changed), similar=similar, cursor=cursor
    )


def test_a_scope_that_fits_is_sent_whole_in_order():
    records = recs(10)
    total = sum(record_chars(r) for r in records)

    selection = select(records, max_chars=total, cursor="m0003")

    assert selection.records == records and selection.whole and selection.cursor == "m0003"


def test_the_bound_holds_and_changed_records_come_first_with_their_similar_ones():
    records = recs(100)
    bound = 10 * record_chars(records[0])
    similar = {"m0050": ["m0007", "m0050", "nope", "m0090"]}

    selection = select(records, max_chars=bound, changed={"m0050"}, similar=lambda r: similar.get(r.id, []))

    ids = [r.id for r in selection.records]
    assert ids[:3] == ["m0050", "m0007", "m0090"]
    assert sum(record_chars(r) for r in selection.records) <= bound
    assert len(ids) == 10 and not selection.whole


def test_at_most_three_similar_records_per_changed_record():
    records = recs(100)
    others = [r.id for r in records[1:10]]

    selection = select(
        records, max_chars=50 * 30, changed={"m0000"}, similar=lambda r: others if r.id == "m0000" else []
    )

    assert [r.id for r in selection.records][: 1 + SIMILAR_PER_CHANGED] == ["m0000", *others[:SIMILAR_PER_CHANGED]]
    assert others[SIMILAR_PER_CHANGED] in [r.id for r in selection.records]  # reached by the rotation instead


def test_the_rotation_resumes_after_the_cursor_and_wraps():
    records = recs(30)
    bound = 10 * record_chars(records[0])

    first = select(records, max_chars=bound)
    second = select(records, max_chars=bound, cursor=first.cursor)
    third = select(records, max_chars=bound, cursor=second.cursor)
    fourth = select(records, max_chars=bound, cursor=third.cursor)

    assert [r.id for r in first.records] == [f"m{i:04d}" for i in range(10)]
    assert [r.id for r in second.records] == [f"m{i:04d}" for i in range(10, 20)]
    assert [r.id for r in third.records] == [f"m{i:04d}" for i in range(20, 30)]
    assert [r.id for r in fourth.records] == [f"m{i:04d}" for i in range(10)]


def test_a_record_too_big_for_what_is_left_waits_for_the_next_run_rather_than_being_skipped():
    records = [*recs(5), PromptRecord("m0002x", "fact", "y" * 200, None)]
    bound = 4 * record_chars(records[0]) + 10

    first = select(records, max_chars=bound)
    second = select(records, max_chars=max(bound, 220), cursor=first.cursor)

    assert "m0002x" not in [r.id for r in first.records]
    assert second.records[0].id == "m0002x"


@settings(deadline=None, max_examples=60)
@given(n=st.integers(2, 120), per_run=st.integers(1, 30))
def test_every_record_is_sent_within_ceil_scope_over_bound_plus_one_runs(n, per_run):
    records = recs(n)
    bound = per_run * record_chars(records[0])
    seen: set[str] = set()
    cursor = None
    for _ in range(math.ceil(n / per_run) + 1):
        selection = select(records, max_chars=bound, cursor=cursor)
        assert sum(record_chars(r) for r in selection.records) <= bound or selection.whole
        seen |= {r.id for r in selection.records}
        cursor = selection.cursor
    assert seen == {r.id for r in records}


@settings(deadline=None, max_examples=60)
@given(n=st.integers(2, 120), per_run=st.integers(2, 30), changed_every=st.integers(1, 5))
def test_changed_records_slow_the_rotation_by_no_more_than_the_room_they_take(n, per_run, changed_every):
    # One changed record every few runs takes one record's room: the rotation still covers the scope.
    records = recs(n)
    bound = per_run * record_chars(records[0])
    seen: set[str] = set()
    cursor = None
    for run in range(math.ceil(n / (per_run - 1)) + 1):
        changed = {records[(run * 7) % n].id} if run % changed_every == 0 else set()
        selection = select(records, max_chars=bound, changed=changed, cursor=cursor)
        assert changed <= {r.id for r in selection.records}
        seen |= {r.id for r in selection.records}
        cursor = selection.cursor
    assert seen == {r.id for r in records}
