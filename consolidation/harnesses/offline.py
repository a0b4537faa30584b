"""The offline harness: deterministic consolidation with no network and no model.

It errs on the side of doing nothing (a false merge destroys what the user said; a missed
one costs nothing). It never retires. Updates of single-valued facts (``group``), their
cascades and temporary facts (``expire``) are :mod:`consolidation.harnesses.offline_updates`'s;
this module merges and corrects.

``merge`` — records of the same conflict group (or both without one), of any kinds (the
merge keeps the first of :data:`KIND_PRECEDENCE` among them), whose bodies say the same thing.
Each body is read as a sequence of tokens — words,
numbers *with their sign* (``-5`` is not ``5``), and the symbols that carry meaning
(``$ € £ % ° # + = & @`` …; ``C++`` is not ``C#``) — and canonicalised:

* case, whitespace and punctuation, and the articles *a/an/the*, are ignored;
* contractions are expanded (*don't* → *do not*, *I'm* → *I am*, *it's* → *it is*;
  a possessive *'s* is kept);
* function-word synonyms are one word (*I'd rather* / *I would rather* → *I prefer*;
  *rather than* / *instead of* → *over*), and an imperative equals the first-person
  statement (*Use X* / *I use X*, also *prefer, want, need*);
* politeness and pin prefixes are dropped (*please, kindly, thanks, remember that,
  note that, fyi*), as are a lead-in set off by punctuation (*For the record, / Heads up:*)
  and a sign-off that is the whole last clause (*Much appreciated. / Cheers*).

Two bodies are duplicates when the canonical sequences are equal, or when they have
the same clauses in another order (clauses split at ``; . ! ?``, a comma before a
space, or *and*; only when every clause has at least two words, so a label never
comes apart from its value: "lead: Alice, backup: Bob" is not "lead: Bob, backup:
Alice"). They are *near* duplicates when the sequences have the same length and
differ only at positions holding

* a **plural/singular** pair (*unit*/*units*, *reply*/*replies*) that no determiner,
  possessive or number precedes (*my kid*/*my kids*, *a cat*/*cats* differ), and that
  is not a word whose plural means something else (*glasses, news* …); or
* a **one-letter typo** (one insertion, deletion, substitution or swap of adjacent
  letters) of a word of at least four letters, where exactly one of the two is an
  English word (``pyspellchecker``'s dictionary) — *metirc*/*metric* is a typo,
  *hiking*/*biking* two different words — and neither is a name (written with a
  capital), a number or a polarity word, and the unknown one is not the known one with a
  letter added at its end (*mongod*/*mongo*: a daemon, not a typo); or
* a **letter slipped** inside a word the dictionary does not know either (the longer of
  six letters or more; never at the first or last letter), when it is the bodies' one
  difference.

Any other difference blocks the merge — in particular an inserted word (*usually,
maybe, senior, only, very* …: a frequency, certainty, title, scope or degree changes
the claim), a different number, sign, symbol or unit, a negation, a name, an acronym
whose case changed (*US*/*us*), and the order of words inside a clause.

Merged groups are stars of at most ten records: each member duplicates the member with the
fewest misspelled words, whose body, cleaned, is the merged body.

``correct`` — a record (not in a merge) whose body has whitespace or case noise:
runs of spaces or tabs, spaces at either end of the body or of a line, a lowercase
pronoun *i*, or a lowercase first word that is a common sentence opener (*my, we,
always, prefer …*; an identifier such as ``npm`` or ``eu-west-1`` is left alone).

At most twenty operations an answer (the gate considers no more); what is left is
proposed by a later run. Tokens and spend are zero; ``prompt`` is the exact user
message the anthropic harness would send for the same records, so prompt size can be
measured without a model.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any, ClassVar

from consolidation.harnesses.base import Harness, HarnessResult, PromptRecord
from consolidation.harnesses.offline_text import NUMBER_WORDS, Features, Token, known, read_features
from consolidation.harnesses.offline_text import clean_body as clean_body  # re-exported: a public name here
from consolidation.harnesses.offline_updates import expiry_operations, update_operations
from consolidation.prompt import MAX_OPERATIONS, MAX_TARGETS, build_user_message

EXACT_CONFIDENCE_BPS = 10_000
NEAR_CONFIDENCE_BPS = 9_000
CORRECT_CONFIDENCE_BPS = 10_000
MIN_TYPO_WORD_CHARS = 4
MIN_UNKNOWN_TYPO_CHARS = 6


POLARITY_WORDS = frozenset(
    {
        "not", "no", "never", "none", "nobody", "nothing", "nowhere", "neither", "nor", "without",
        "except", "unless", "anymore", "longer", "ex", "former", "formerly", "previously", "stopped",
        "avoid", "only", "un", "non", "nope", "aint",
    }
)  # fmt: skip
"""Words that flip or narrow a statement: never part of a typo or plural pair."""


_PLURAL_MEANS_ELSE = frozenset(
    {
        "glasses", "news", "means", "series", "species", "clothes", "arms", "goods", "savings", "manners",
        "customs", "works", "quarters", "premises", "spirits", "letters", "papers", "times", "ways", "grounds",
        "minutes", "remains", "contents", "terms", "odds", "thanks", "lots", "looks", "glass", "spectacles",
    }
)  # fmt: skip


def _unknown_words(feature: Features) -> int:
    """Misspelt-looking words of a body: only asked of merge members, so the dictionary loads only when needed."""
    return sum(
        1 for t in feature.tokens if t.kind == "word" and len(t.text) >= MIN_TYPO_WORD_CHARS and not _maybe_known(t)
    )


def _maybe_known(token: Token) -> bool:
    # Only bodies that are merge candidates reach here, so the dictionary loads only when needed.
    return token.capital or "'" in token.text or known(token.text)


def _one_edit(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` differ by exactly one insertion, deletion, substitution or adjacent swap."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        if len(diff) == 1:
            return True
        return len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]]
    short, long = (a, b) if len(a) < len(b) else (b, a)
    i = next((i for i in range(len(short)) if short[i] != long[i]), len(short))
    return short[i:] == long[i + 1 :]


def _plural_pair(a: str, b: str) -> bool:
    short, long = (a, b) if len(a) < len(b) else (b, a)
    if long in _PLURAL_MEANS_ELSE or short in _PLURAL_MEANS_ELSE or len(short) < 3:
        return False
    return long in (short + "s", short + "es") or (short.endswith("y") and long == short[:-1] + "ies")


def _inner_slip(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` differ by one letter dropped or added, or two adjacent letters swapped, away from
    either end of the word (a changed letter, or a change at an end, is too often another name: *libssl/libssh*,
    *mongod/mongodb*)."""
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diff) == 2 and diff[1] == diff[0] + 1 and diff[0] >= 1 and diff[1] <= len(a) - 2
    short, long = (a, b) if len(a) < len(b) else (b, a)
    if len(long) - len(short) != 1:
        return False
    i = next((i for i in range(len(short)) if short[i] != long[i]), len(short))
    # Where a doubled letter lost one copy, every copy's position counts: the slip must be inside either way.
    j = i
    while j > 0 and long[j - 1] == long[i]:
        j -= 1
    return short[i:] == long[i + 1 :] and j >= 1 and i <= len(long) - 2


def _variant(a: Token, b: Token) -> str | None:
    """Whether two different tokens at one position are noise: ``"plural"`` (a plural/singular pair), ``"typo"``
    (a one-letter typo of an English word), ``"unknown"`` (a letter slipped inside a long word the dictionary
    does not know either) or None."""
    if a.kind != "word" or b.kind != "word" or a.cased or b.cased:
        return None
    if {a.text, b.text} & (POLARITY_WORDS | NUMBER_WORDS) or "'" in a.text + b.text:
        return None
    if _plural_pair(a.text, b.text):
        return None if a.after_determiner or b.after_determiner else "plural"
    if min(len(a.text), len(b.text)) < MIN_TYPO_WORD_CHARS or not _one_edit(a.text, b.text):
        return None
    if a.text[0] != b.text[0]:  # a different first letter is another word more often than a typo: gunicorn/unicorn
        return None
    # A compound of two short words is no proof of a word here: libssh (lib + ssh) is not a spelling of libssl.
    known_a, known_b = known(a.text, compounds=False), known(b.text, compounds=False)
    if known_a != known_b:
        # A word with a letter added at its end that no dictionary knows is a name more often than a typo:
        # a daemon (mongod, systemd, httpd) is not its program.
        unknown, word = (a.text, b.text) if known_b else (b.text, a.text)
        return None if len(unknown) == len(word) + 1 and unknown.startswith(word) else "typo"
    if known_a or max(len(a.text), len(b.text)) < MIN_UNKNOWN_TYPO_CHARS:
        return None
    return "unknown" if _inner_slip(a.text, b.text) else None


def _duplicate_kind(a: Features, b: Features) -> str | None:
    """``"exact"``, ``"near"`` or ``None`` (not mergeable) for two records of one bucket."""
    if not a.key or not b.key or not a.acronyms <= b.upper or not b.acronyms <= a.upper:
        return None
    if a.key == b.key:
        return "exact"
    if (
        len(a.clauses) > 1
        and all(len(c) >= 2 for c in a.clauses + b.clauses)
        and sorted(tuple(t.text for t in c) for c in a.clauses) == sorted(tuple(t.text for t in c) for c in b.clauses)
    ):
        return "exact"
    if len(a.tokens) != len(b.tokens):
        return None
    differing = [(x, y) for x, y in zip(a.tokens, b.tokens, strict=True) if x.text != y.text]
    # A word of one pair that occurs elsewhere in the other body was moved, not misspelt ("async over sync").
    a_words, b_words = set(a.key), set(b.key)
    if any(x.text in b_words or y.text in a_words for x, y in differing):
        return None
    variants = [_variant(x, y) for x, y in differing]
    if None in variants:
        return None
    # A slip in a word no dictionary knows is trusted only when it is the body's one difference.
    return "near" if "unknown" not in variants or len(variants) == 1 else None


def _group(features: list[Features]) -> list[list[tuple[Features, str]]]:
    """Stars around the best-spelt records: the record with the fewest misspelt words (then the first) gathers
    every other record that duplicates it, up to ten; the rest do the same among themselves. Two misspellings of
    one word (``prefered`` / ``preferd``) are not a pair, but both are a typo of the word they share."""
    groups: list[list[tuple[Features, str]]] = []
    grouped: set[int] = set()
    for center in sorted(features, key=lambda f: (_unknown_words(f), f.index)):
        if center.index in grouped:
            continue
        group = [(center, "exact")]
        for other in features:
            if len(group) >= MAX_TARGETS:
                break
            if other.index in grouped or other.index == center.index:
                continue
            if kind := _duplicate_kind(other, center):
                group.append((other, kind))
        grouped.update(member.index for member, _ in group)
        groups.append(sorted(group, key=lambda member: member[0].index))
    return groups


def _bucket_key(feature: Features) -> tuple[object, ...]:
    # Duplicates share group, length and every number, symbol and polarity word: compare only within a bucket.
    # Kinds may differ: the same words pinned as a fact and as a preference are one pin (the merge's kind below).
    fixed = sorted(t.text for t in feature.tokens if t.kind != "word" or t.text in POLARITY_WORDS | NUMBER_WORDS)
    return (feature.record.conflict_group, len(feature.tokens), tuple(fixed))


KIND_PRECEDENCE = ("constraint", "decision", "preference", "fact")
"""The kind a merge of records of different kinds keeps: the first of these among them. ``fact`` is what a
pin gets when no kind is named, so any named kind says more; among named kinds the one that binds more wins."""


def _merge(members: list[Features], *, near: bool) -> tuple[int, dict[str, Any]]:
    """The merge of a group of duplicates, at the position of its first member; the cleanest body is kept."""
    keeper = min(members, key=lambda m: (_unknown_words(m), clean_body(m.record.body) != m.record.body, m.index))
    kinds = {m.record.kind for m in members}
    kind = min(kinds, key=lambda k: KIND_PRECEDENCE.index(k) if k in KIND_PRECEDENCE else len(KIND_PRECEDENCE))
    return (
        min(m.index for m in members),
        {
            "op": "merge",
            "targets": [m.record.id for m in members],
            "body": clean_body(keeper.record.body),
            **({"kind": kind} if len(kinds) > 1 else {}),
            "confidence_bps": NEAR_CONFIDENCE_BPS if near else EXACT_CONFIDENCE_BPS,
            "rationale": "offline: "
            + ("near-duplicate (a plural or a typo)" if near else "duplicate after normalising"),
        },
    )


def _replaced(records: Sequence[PromptRecord]) -> list[Features]:
    """What the user's edits replaced, each read as a record just older than its edit (never a target)."""
    return [
        read_features(
            PromptRecord(
                f"replaced:{record.id}",
                record.kind,
                record.replaced,
                record.conflict_group,
                valid_from=None if record.valid_from is None else record.valid_from - timedelta(microseconds=1),
            ),
            -1 - index,
        )
        for index, record in enumerate(records)
        if record.replaced
    ]


def propose_operations(records: Sequence[PromptRecord]) -> list[dict[str, Any]]:
    """The offline answer's operations for ``records`` (deterministic; order follows the input; at most 20)."""
    features = [read_features(record, index) for index, record in enumerate(records)]
    updates, merged = update_operations(features, _replaced(records))
    buckets: dict[tuple[object, ...], list[Features]] = {}
    for feature in features:
        if feature.index not in merged:
            buckets.setdefault(_bucket_key(feature), []).append(feature)
    merges: list[tuple[int, dict[str, Any]]] = list(updates)
    for bucket in buckets.values():
        if len(bucket) < 2:
            continue
        for group in _group(bucket):
            if len(group) < 2:
                continue
            members = [member for member, _ in group]
            merges.append(_merge(members, near=any(kind == "near" for _, kind in group)))
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
    merges += expiry_operations(features, merged)
    merged.update(index for index, _ in merges)
    chosen = sorted(merges, key=lambda item: item[0])[:MAX_OPERATIONS]
    chosen += sorted(corrections, key=lambda item: item[0])[: MAX_OPERATIONS - len(chosen)]
    return [operation for _, operation in sorted(chosen, key=lambda item: item[0])]


class OfflineHarness(Harness):
    """Deterministic, network-free consolidation; what the embedded default uses."""

    name: ClassVar[str] = "offline"

    def call(
        self, records: Sequence[PromptRecord], *, model: str, max_output_tokens: int, wall_clock_cap_s: float
    ) -> HarnessResult:
        """Propose merges and corrections for ``records``; never raises for any input.

        ``model``, ``max_output_tokens`` and ``wall_clock_cap_s`` are accepted for the
        common interface and ignored (no model is called).
        """
        return HarnessResult.free({"operations": propose_operations(records)}, prompt=build_user_message(records))
