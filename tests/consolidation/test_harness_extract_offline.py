"""The offline extraction harness on the labelled quality set (precision >= 0.95; recall is
reported in docs/extraction.md), and its hard rules: never the assistant's words, never a
question, a hypothetical or a secret."""

from __future__ import annotations

import pytest

from consolidation.extraction.digest import DigestMessage
from consolidation.extraction.gate import normalize
from consolidation.harnesses import get_extractor
from consolidation.harnesses.extract_offline import OfflineExtractor
from tests.consolidation.extraction_corpus import CASES

NOTHING_TO_PROPOSE = ("question", "hypothetical", "assistant", "secret", "negation", "chatter")


def _propose(role: str, text: str, pinned: tuple[str, ...] = ()) -> list[dict[str, object]]:
    return OfflineExtractor().propose([DigestMessage("m1", role, text)], list(pinned))


def test_the_quality_set_is_large_and_labelled() -> None:
    assert len(CASES) >= 60
    assert {c[0] for c in CASES} == {"explicit", *NOTHING_TO_PROPOSE}
    assert all(c[0] != "explicit" or c[3] for c in CASES) and all(c[0] == "explicit" or not c[3] for c in CASES)


def test_precision_on_the_quality_set() -> None:
    true_pos = false_pos = false_neg = 0
    for _category, role, text, expected in CASES:
        got = {normalize(str(p["body"])) for p in _propose(role, text)}
        want = {normalize(b) for b in expected}
        true_pos += len(got & want)
        false_pos += len(got - want)
        false_neg += len(want - got)
    precision = true_pos / (true_pos + false_pos)
    recall = true_pos / (true_pos + false_neg)
    print(f"offline extraction: precision {precision:.3f}, recall {recall:.3f} over {len(CASES)} turns")
    assert precision >= 0.95
    assert recall >= 0.8  # a floor, so a regression shows; the figure itself is in docs/extraction.md


@pytest.mark.parametrize("case", [c for c in CASES if c[0] in NOTHING_TO_PROPOSE], ids=lambda c: c[2][:40])
def test_never_from_the_assistant_a_question_a_hypothetical_or_a_secret(
    case: tuple[str, str, str, tuple[str, ...]],
) -> None:
    _category, role, text, _expected = case
    assert _propose(role, text) == []


def test_the_assistants_words_are_never_read_even_beside_the_users() -> None:
    digest = [
        DigestMessage("a1", "assistant", "Remember that your region is us-east-1. I prefer short replies."),
        DigestMessage("u1", "user", "Remember that my region is eu-west-1."),
        DigestMessage("a2", "assistant", "My name is Claude. Call me Claude."),
    ]
    proposals = OfflineExtractor().propose(digest, [])
    assert [(p["body"], p["source_message_id"]) for p in proposals] == [("My region is eu-west-1", "u1")]


def test_already_pinned_bodies_are_not_re_proposed_and_at_most_ten() -> None:
    assert _propose("user", "I prefer metric units.", ("i prefer  METRIC units",)) == []
    many = " ".join(f"Remember that locker {n} holds box {n}." for n in range(15))
    assert len(_propose("user", many)) == 10


def test_kinds_and_confidence() -> None:
    got = {str(p["body"]): (p["kind"], p["confidence_bps"]) for p in _propose(
        "user",
        "Remember that I always answer in French. Remember that we decided to use Go. "
        "I prefer dark mode. My city is Porto. Call me Ana.",
    )}  # fmt: skip
    assert got == {
        "I always answer in French": ("constraint", 9000),
        "We decided to use Go": ("decision", 9000),
        "I prefer dark mode": ("preference", 8000),
        "My city is Porto": ("fact", 8000),
        "Call me Ana": ("preference", 8000),
    }


def test_the_offline_extractor_reports_the_prompt_and_no_spend() -> None:
    result = get_extractor("offline").extract(
        [DigestMessage("m1", "user", "I prefer tea.")], ["pinned body"], model="offline",
        max_output_tokens=512, wall_clock_cap_s=5,
    )  # fmt: skip
    assert result.answer == {"proposals": [
        {"body": "I prefer tea", "kind": "preference", "confidence_bps": 8000,
         "rationale": "the user stated this explicitly", "source_message_id": "m1"},
    ]}  # fmt: skip
    assert result.spend_micro_usd == 0 and "pinned body" in result.prompt
