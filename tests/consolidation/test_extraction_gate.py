"""The extraction gate (consolidation/extraction/gate.py): every refusal class counted, at most ten considered."""

from __future__ import annotations

from typing import Any

from consolidation.extraction.digest import DigestMessage
from consolidation.extraction.gate import MAX_CONSIDERED, check_proposals, normalize
from ledger import screen_body


def _gate(proposals: list[Any], existing: tuple[str, ...] = ()) -> Any:
    digest = [DigestMessage("u1", "user", "hi"), DigestMessage("a1", "assistant", "hello")]
    return check_proposals({"proposals": proposals}, existing_bodies=existing, digest=digest, screen=screen_body)


def test_every_refusal_class_is_counted() -> None:
    result = _gate(
        [
            {"body": "I prefer tea", "kind": "preference", "source_message_id": "u1"},  # passes
            {"body": "x", "kind": "feeling"},  # unknown kind
            {"body": 7, "kind": "fact"},  # malformed
            {"body": "x", "kind": "fact", "confidence_bps": 20_000},  # malformed
            {"body": "x", "kind": "fact", "status": "active"},  # malformed: a field the gate derives
            {"body": "   ", "kind": "fact"},  # body rejected (empty)
            {"body": "my password is Tr0ub4dor&3xyz", "kind": "fact"},  # body rejected (credential)
            {"body": "I PREFER   tea.", "kind": "preference"},  # duplicate of the first
            {"body": "Uses vim", "kind": "fact"},  # duplicate of an existing body
            {"body": "Likes jazz", "kind": "fact", "source_message_id": "a1"},  # from the assistant
            {"body": "Likes blues", "kind": "fact", "source_message_id": "zz"},  # unknown message
            {"body": "eleventh", "kind": "fact"},
            {"body": "twelfth", "kind": "fact"},
        ],
        existing=("uses VIM",),
    )
    assert [p.body for p in result.passed] == ["I prefer tea"]
    assert result.proposed == 13
    assert result.refusals == {
        "unknown_kind": 1,
        "malformed": 3,
        "body_rejected": 2,
        "duplicate": 2,
        "not_from_user": 1,
        "too_many_proposals": 3,
    }
    assert len(result.passed) + len(result.refused) == 13


def test_at_most_ten_are_considered() -> None:
    result = _gate([{"body": f"pin number {n}", "kind": "fact"} for n in range(14)])
    assert len(result.passed) == MAX_CONSIDERED and result.refusals == {"too_many_proposals": 4}


def test_unknown_message_and_no_answer() -> None:
    assert _gate([{"body": "Likes blues", "kind": "fact", "source_message_id": "zz"}]).refusals == {
        "unknown_message": 1
    }
    empty = check_proposals(None, existing_bodies=(), digest=[], screen=screen_body)
    assert empty.proposed == 0 and empty.passed == []


def test_normalize() -> None:
    assert normalize("  I Prefer\tTea!! ") == normalize("i prefer tea") == "i prefer tea"
