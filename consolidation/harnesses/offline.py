"""The offline harness: deterministic consolidation with no network and no model.

It proposes two things, and errs on the side of doing nothing (a false merge destroys
what the user said; a missed one costs nothing):

``merge`` — records of the same kind and the same conflict group (or both without one)
whose bodies are duplicates:

* **equal** after normalisation: case, whitespace, punctuation, the articles
  *a/an/the*, and the order of clauses (split at ``, ; : ! ?``, a sentence-ending
  period, a dash between spaces, or *and*) are ignored — word order *inside* a clause
  is kept, so "tabs over spaces" never equals "spaces over tabs"; or
* **nearly equal**: one body's words are the other's with a few words inserted, in the
  same order, and the shorter has at least :data:`NEAR_DUPLICATE_MIN_RATIO` (0.9) of
  the longer's words. Substituted words never count as near-equal.

and never when the two bodies differ in

* a **number** (digits, including inside tokens such as ``eu-west-1`` or ``v2``, and
  number words such as *two*, *twice*, *first*, *dozen*),
* a **negation or polarity word** (*not, no, never, don't, without, except, former,
  ex, anymore* … — :data:`POLARITY_WORDS`), or
* a **name**: any word written with a capital letter (other than *I*) must appear,
  ignoring case, in both bodies.

Merged groups are cliques (every pair passes), and the merged body is the one with the
most words (it holds every other's words), cleaned.

``correct`` — a record (not in a merge) whose body has whitespace or case noise:
runs of spaces or tabs, spaces at either end of the body or of a line, a lowercase
pronoun *i*, or a lowercase first word that is a common sentence opener (*my, we,
always, prefer …*; an identifier such as ``npm`` or ``eu-west-1`` is left alone).

Tokens and spend are zero; ``prompt`` is the exact user message the anthropic harness
would send for the same records, so prompt size can be measured without a model.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from consolidation.harnesses.base import Harness, HarnessResult, PromptRecord, Usage
from consolidation.prompt import build_user_message

NEAR_DUPLICATE_MIN_RATIO = 0.9
"""Shorter body's word count over the longer's, for an insertion-only near-duplicate."""

EXACT_CONFIDENCE_BPS = 10_000
NEAR_CONFIDENCE_BPS = 9_000
CORRECT_CONFIDENCE_BPS = 10_000

_IGNORED_WORDS = frozenset({"a", "an", "the"})

POLARITY_WORDS = frozenset(
    {
        "not", "no", "never", "none", "nobody", "nothing", "nowhere", "neither", "nor", "without",
        "cannot", "cant", "dont", "doesnt", "didnt", "wont", "isnt", "arent", "wasnt", "werent",
        "shouldnt", "wouldnt", "couldnt", "mustnt", "hasnt", "havent", "hadnt", "aint",
        "except", "unless", "anymore", "longer", "ex", "former", "formerly", "previously", "stopped",
        "avoid", "instead", "only", "un", "non", "nope",
    }
)  # fmt: skip
"""Words whose presence flips or narrows a statement; bodies must hold the same ones to merge."""

NUMBER_WORDS = frozenset(
    {
        "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
        "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
        "nineteen", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety",
        "hundred", "thousand", "million", "billion", "trillion", "dozen", "half", "quarter",
        "once", "twice", "thrice", "single", "double", "triple", "first", "second", "third",
        "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth", "last", "both",
    }
)  # fmt: skip

_SENTENCE_OPENERS = frozenset(
    {
        "my", "our", "we", "you", "your", "he", "she", "they", "it", "its", "this", "that", "these",
        "those", "the", "a", "an", "always", "never", "please", "prefer", "use", "do", "dont",
        "don't", "avoid", "keep", "call", "remember", "when", "if", "for", "in", "on", "at", "all",
        "every", "no", "not", "only", "send", "write", "reply", "answer", "respond", "default",
        "deploy", "there", "let", "make", "put", "show", "give", "ask", "tell", "allergic",
        "likes", "like", "loves", "love", "hates", "works", "work", "lives", "live", "born",
    }
)  # fmt: skip

_TOKEN = re.compile(r"[^\W_]+(?:'[^\W_]+)*")
_NUMBER = re.compile(r"\d+(?:[.,:/]\d+)*")
_CLAUSE_BREAK = re.compile(r"[;!?]|[.,:](?!\d)|\s[-\u2013\u2014]\s|\band\b", re.IGNORECASE)
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'"})
_LOWER_I = re.compile(r"(?<![\w.'\u2019-])i(?![\w-]|\.\w)")


@dataclass(frozen=True, slots=True)
class _Features:
    record: PromptRecord
    index: int
    words: tuple[str, ...]  # casefolded words, articles dropped, in order
    clause_key: tuple[tuple[str, ...], ...]  # clauses' words, clauses sorted
    guard: tuple[tuple[str, ...], tuple[str, ...]]  # (numbers, polarity words), both sorted
    names: frozenset[str]  # casefolded words written with a capital letter, except "I"
    all_words: frozenset[str]  # every casefolded word, articles included


def _words(text: str) -> list[str]:
    return _TOKEN.findall(text.translate(_APOSTROPHES))


def _fold(word: str) -> str:
    return word.casefold()


def _features(record: PromptRecord, index: int) -> _Features:
    raw = _words(record.body)
    folded = [_fold(word) for word in raw]
    # Articles are ignored, unless they are all the body has.
    ignored = _IGNORED_WORDS if any(word not in _IGNORED_WORDS for word in folded) else frozenset()
    clauses = []
    for clause in _CLAUSE_BREAK.split(record.body):
        clause_words = tuple(w for w in (_fold(x) for x in _words(clause)) if w not in ignored)
        if clause_words:
            clauses.append(clause_words)
    numbers = sorted(
        [number.replace(",", "") if re.fullmatch(r"\d{1,3}(,\d{3})+", number) else number for number in
         _NUMBER.findall(record.body)]
        + [word for word in folded if word in NUMBER_WORDS]
    )  # fmt: skip
    polarity = sorted(
        word.replace("'", "") for word in folded if word.replace("'", "") in POLARITY_WORDS or word.endswith("n't")
    )
    return _Features(
        record=record,
        index=index,
        words=tuple(word for word in folded if word not in ignored),
        clause_key=tuple(sorted(clauses)),
        guard=(tuple(numbers), tuple(polarity)),
        names=frozenset(_fold(word) for word in raw if word != "I" and any(char.isupper() for char in word)),
        all_words=frozenset(folded),
    )


def _is_subsequence(short: Sequence[str], long: Sequence[str]) -> bool:
    remaining = iter(long)
    return all(word in remaining for word in short)


def _duplicate_kind(a: _Features, b: _Features) -> str | None:
    """``"exact"``, ``"near"`` or ``None`` (not mergeable) for two records of one bucket."""
    if a.guard != b.guard or not a.names <= b.all_words or not b.names <= a.all_words:
        return None
    if not a.words or not b.words:
        return None
    if a.clause_key == b.clause_key:
        return "exact"
    short, long = (a.words, b.words) if len(a.words) <= len(b.words) else (b.words, a.words)
    if len(short) / len(long) >= NEAR_DUPLICATE_MIN_RATIO and _is_subsequence(short, long):
        return "near"
    return None


def clean_body(body: str) -> str:
    """``body`` with whitespace and case noise removed; the words themselves are untouched."""
    text = re.sub(r"[^\S\n]+", " ", body)
    text = re.sub(r" *\n *", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text).strip()
    text = _LOWER_I.sub("I", text)
    first = re.match(r"[^\W\d_]+(?:['\u2019][^\W\d_]+)?", text)
    if first and first.group(0).islower() and first.group(0).translate(_APOSTROPHES) in _SENTENCE_OPENERS:
        after = text[first.end() : first.end() + 1]
        if after in ("", " ", "\n", ",", ".", ";", ":", "!", "?"):
            text = text[0].upper() + text[1:]
    return text


def _group(features: list[_Features]) -> list[list[tuple[_Features, str]]]:
    """Greedy cliques in input order: a record joins the first group it duplicates entirely."""
    groups: list[list[tuple[_Features, str]]] = []
    for feature in features:
        for group in groups:
            kinds = [_duplicate_kind(feature, member) for member, _ in group]
            if all(kinds):
                group.append((feature, "near" if "near" in kinds else "exact"))
                break
        else:
            groups.append([(feature, "exact")])
    return groups


def propose_operations(records: Sequence[PromptRecord]) -> list[dict[str, Any]]:
    """The offline answer's operations for ``records`` (deterministic; order follows the input)."""
    features = [_features(record, index) for index, record in enumerate(records)]
    buckets: dict[tuple[object, ...], list[_Features]] = {}
    for feature in features:
        key = (feature.record.kind, feature.record.conflict_group, feature.guard)
        buckets.setdefault(key, []).append(feature)
    merges: list[tuple[int, dict[str, Any]]] = []
    merged: set[int] = set()
    for bucket in buckets.values():
        for group in _group(bucket):
            if len(group) < 2:
                continue
            members = [member for member, _ in group]
            near = any(kind == "near" for _, kind in group)
            keeper = max(members, key=lambda m: (len(m.words), clean_body(m.record.body) == m.record.body, -m.index))
            merges.append(
                (
                    min(m.index for m in members),
                    {
                        "op": "merge",
                        "targets": [m.record.id for m in members],
                        "body": clean_body(keeper.record.body),
                        "confidence_bps": NEAR_CONFIDENCE_BPS if near else EXACT_CONFIDENCE_BPS,
                        "rationale": "offline: "
                        + (
                            "near-duplicate (words inserted, nothing changed)"
                            if near
                            else "duplicate after normalising"
                        ),
                    },
                )
            )
            merged.update(m.index for m in members)
    corrections: list[tuple[int, dict[str, Any]]] = []
    for feature in features:
        cleaned = clean_body(feature.record.body)
        if feature.index not in merged and cleaned and cleaned != feature.record.body:
            corrections.append(
                (
                    feature.index,
                    {
                        "op": "correct",
                        "targets": [feature.record.id],
                        "body": cleaned,
                        "confidence_bps": CORRECT_CONFIDENCE_BPS,
                        "rationale": "offline: whitespace or case noise",
                    },
                )
            )
    return [operation for _, operation in sorted(merges + corrections, key=lambda item: item[0])]


class OfflineHarness(Harness):
    """Deterministic, network-free consolidation; what the embedded default uses."""

    name: ClassVar[str] = "offline"

    def call(
        self,
        records: Sequence[PromptRecord],
        *,
        model: str,
        max_output_tokens: int,
        wall_clock_cap_s: float,
    ) -> HarnessResult:
        """Propose merges and corrections for ``records``; never raises for any input.

        ``model``, ``max_output_tokens`` and ``wall_clock_cap_s`` are accepted for the
        common interface and ignored (no model is called).
        """
        answer = {"operations": propose_operations(records)}
        return HarnessResult(
            answer=answer,
            raw_text=json.dumps(answer, ensure_ascii=False),
            prompt=build_user_message(records),
            usage=Usage(),
            spend_micro_usd=0,
        )
