"""The offline harness on a labelled set of pin pairs: never a false merge, recall at least 0.8."""

from __future__ import annotations

from consolidation.harnesses import PromptRecord
from consolidation.harnesses.offline import propose_operations
from tests.consolidation.labelled_pairs import DUPLICATES, LOOK_ALIKES, PAIRS

MIN_RECALL = 0.8


def merged(a: str, b: str) -> bool:
    records = [PromptRecord("r1", "preference", a, None), PromptRecord("r2", "preference", b, None)]
    return any(op["op"] == "merge" for op in propose_operations(records))


def test_the_set_is_large_and_varied() -> None:
    assert len(PAIRS) >= 150
    assert len({c for c, _, _ in DUPLICATES}) >= 8 and len({c for c, _, _ in LOOK_ALIKES}) >= 10
    assert len({(a, b) for _, a, b, _ in PAIRS}) == len(PAIRS)  # no pair twice


def test_no_look_alike_is_ever_merged_in_either_order() -> None:
    false_merges = [(c, a, b) for c, a, b in LOOK_ALIKES if merged(a, b) or merged(b, a)]

    assert false_merges == []


def test_recall_on_the_duplicates_is_at_least_0_8_in_either_order() -> None:
    found = [merged(a, b) and merged(b, a) for _, a, b in DUPLICATES]

    recall = sum(found) / len(found)
    assert recall >= MIN_RECALL, f"recall {recall:.2f}"


def test_look_alikes_among_many_records_stay_apart() -> None:
    # Given every pin of the set in one scope, answered in one call
    bodies = sorted({body for _, a, b, _ in PAIRS for body in (a, b)})
    records = [PromptRecord(f"r{n}", "preference", body, None) for n, body in enumerate(bodies)]
    by_id = {r.id: r.body for r in records}
    apart = {frozenset((a, b)) for _, a, b in LOOK_ALIKES}

    # When the harness answers
    ops = propose_operations(records)

    # Then no merge holds both pins of a labelled look-alike pair
    for op in (op for op in ops if op["op"] == "merge"):
        merged_bodies = {by_id[t] for t in op["targets"]}
        assert not [pair for pair in apart if pair <= merged_bodies]
    assert any(op["op"] == "merge" for op in ops)
