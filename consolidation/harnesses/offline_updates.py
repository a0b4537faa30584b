"""The offline harness's updates, conflicts, cascades and temporary facts (docs/consolidation.md, "Updates").

**Updates and conflicts.** Two records state one *single-valued* fact when their bodies, read as
:mod:`~consolidation.harnesses.offline_text` reads them and with the words that announce a change
dropped (*now, currently, actually, update:, as of this week, my new …*; *I moved to* reads *I live
in*), are the same words except one *value*: a run of numbers, times, days, months or capitalised
names (for *my diet / title / role / pronouns … is*, any one to three words). The value must come
after the statement's verb — in *Invoice 4417 was paid*, *Alice's birthday*, *the Tuesday meeting*
the differing word names the subject, and the two are different facts — and the statement must be
one that holds one value at a time:

* its subject is *I*, *it*, or a singular noun phrase (*my manager*, *the weekly standup*), never a
  plural (*my kids*, *deploys*), another person (*we, they, he, she*), a relative, a friend, a pet, a
  language, an allergy, an invoice, a meeting or an appointment, nor an imperative (*Remind me …*);
* its verb is in the present tense (past events pile up: *I paid invoice 4417*) and is not one of
  holding several at once (*have, own, keep, speak, use, play, like, visit, meet, prefer* …);
* the value is not a companion or a list item (*with Alice*, *Alice and Bob*), and the statement is
  no condition (*when, if, unless*);
* the two values differ in more than a sign (*+500* / *-500*) or a unit (*7 days* / *7 weeks*,
  *1200 EUR* / *1200 USD*).

Such records become one ``group`` operation: the gate keeps the newest (by ``valid_from``) and
supersedes the others, so one active record says the newest value and the older ones are history.
Anything else is left alone: when unsure, keep both.

**Cascades.** A record older than the newest value that quotes an old value *in the same sense* —
the old value with two or more words (*PostgreSQL 14*), or beside the same subject noun (*the team
offsite*) or the same word (*room 301*, *the Payments team*) as in the statement — joins that group
and is superseded too, so no active record still says the old value (it stays in history). One that
names another person, or speaks of the past (*was, used to, born, former*), is left alone.

**Temporary facts.** A body true "for the next N days" (*for the coming N days, for N more days,
over the next N weeks*, numbers up to twelve in words too) and not already expiring gets an
``expire`` after N days (counted from the run).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from consolidation.harnesses.offline_text import Features, Token

UPDATE_CONFIDENCE_BPS = 8_000
MAX_VALUE_TOKENS = 4
MAX_ATTRIBUTE_VALUE_WORDS = 3

DAYS = frozenset({"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"})
MONTHS = frozenset(
    {
        "january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
        "november", "december",
    }
)  # fmt: skip

_LEADING_MARKERS = (
    ("as", "of", "this", "week"), ("as", "of", "this", "month"), ("as", "of", "today"), ("as", "of", "now"),
    ("from", "now", "on"), ("these", "days"), ("nowadays",), ("actually",), ("update",), ("correction",),
    ("currently",), ("now",), ("so",),
)  # fmt: skip
_ANYWHERE_MARKERS = frozenset({"now", "currently", "nowadays"})
_MOVED = (("have", "moved", "to"), ("moved", "to"), ("am", "moving", "to"), ("relocated", "to"), ("am", "living", "in"))
_POSSESSIVES = frozenset({"my", "our", "your"})

_SUBJECT_PRONOUNS = frozenset({"i", "it"})
_OTHER_PRONOUNS = frozenset({"we", "they", "you", "he", "she"})
_AUX = frozenset({"is", "am", "are", "will", "does", "do", "shall", "can"})
_PAST_AUX = frozenset({"was", "were", "did", "had", "has", "have"})
_ADVERBS = frozenset({"not", "usually", "normally", "always", "generally", "typically", "still", "also", "often"})

_PEOPLE = frozenset(
    {
        # relatives and people
        "sister", "brother", "mother", "father", "mum", "mom", "dad", "parent", "wife", "husband", "partner",
        "son", "daughter", "child", "kid", "baby", "cousin", "uncle", "aunt", "niece", "nephew", "grandmother",
        "grandfather", "grandma", "grandpa", "sibling", "friend", "colleague", "coworker", "teammate",
        "neighbour", "neighbor", "roommate", "flatmate", "mentor",
    }
)  # fmt: skip
"""Nouns of the people and animals of one's life: several at once, so never one value (anywhere in a statement)."""
_MULTI_NOUNS = _PEOPLE | frozenset(
    {
        # pets
        "pet", "cat", "dog", "puppy", "kitten", "hamster", "parrot", "horse",
        # things held several at once
        "language", "allergy", "hobby", "invoice", "meeting", "appointment", "payment", "order",
        "flight", "trip", "booking", "reservation", "reminder", "task", "ticket", "event", "project",
        "account", "subscription", "client", "customer",
    }
)  # fmt: skip
_MULTI_VERBS = frozenset(
    {
        "have", "has", "own", "owns", "keep", "keeps", "speak", "speaks", "use", "uses", "play", "plays", "like",
        "likes", "love", "loves", "enjoy", "enjoys", "know", "knows", "visit", "visits", "collect", "collects",
        "support", "supports", "follow", "follows", "attend", "attends", "read", "reads", "watch", "watches",
        "study", "studies", "learn", "learns", "teach", "teaches", "meet", "meets", "see", "sees", "take",
        "takes", "eat", "eats", "hate", "hates", "prefer", "prefers", "want", "wants", "need", "needs", "miss",
        "misses", "allergic", "write", "writes", "build", "builds", "maintain", "maintains", "manage",
        "manages", "call", "calls", "email", "emails", "text", "texts", "date", "dates",
    }
)  # fmt: skip
_IRREGULAR_PAST = frozenset(
    {
        "was", "were", "had", "did", "paid", "sent", "met", "went", "bought", "made", "got", "took", "gave",
        "saw", "ate", "drank", "wrote", "ran", "came", "found", "told", "said", "grew", "born", "left", "knew",
        "thought", "brought", "spent", "lost", "won", "sold", "built", "taught",
    }
)  # fmt: skip
_IMPERATIVES = frozenset(
    {
        "remind", "alert", "notify", "ping", "send", "keep", "use", "call", "email", "text", "book", "schedule",
        "set", "add", "show", "make", "let", "give", "ask", "tell", "write", "reply", "answer", "respond",
        "deploy", "avoid", "prefer", "always", "never", "do", "put", "run", "start", "stop", "check", "buy",
        "pay", "cancel", "move", "copy", "want", "need", "please", "don't", "dont",
    }
)  # fmt: skip
_CONDITIONS = frozenset({"when", "whenever", "if", "unless"})
_COMPANIONS = frozenset({"with", "and", "or", "&", "plus", "between", "versus", "vs", "nor"})
_LIST_AFTER = frozenset({"and", "or", "&", "plus", "nor"})
_ATTRIBUTES = frozenset(
    {
        "diet", "title", "role", "job", "position", "pronouns", "timezone", "zone", "nationality", "status",
        "religion", "occupation", "profession", "specialty", "shift",
    }
)  # fmt: skip
_PAST_MARKERS = frozenset({"was", "were", "used", "born", "grew", "previously", "formerly", "former", "ex", "old"})
_STOP = frozenset(
    {
        "a", "an", "the", "my", "our", "your", "his", "her", "their", "its", "i", "me", "we", "us", "it", "is",
        "am", "are", "be", "to", "in", "on", "at", "of", "for", "from", "by", "with", "and", "or", "every",
        "each", "this", "that", "do", "does", "not", "will", "next", "after", "before", "until", "number",
    }
)  # fmt: skip

_NUMBER_NAMES = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
    "ten": 10, "eleven": 11, "twelve": 12,
}  # fmt: skip
_COUNT = r"(\d{1,3}|" + "|".join(_NUMBER_NAMES) + ")"
_TEMPORARY = (
    re.compile(r"\b(?:for|over|during)\s+(?:the\s+)?(?:next|coming|following)\s+" + _COUNT + r"\s+(day|week)s?\b"),
    re.compile(r"\bfor\s+(?:another\s+)?" + _COUNT + r"\s+more\s+(day|week)s?\b"),
)


@dataclass(frozen=True, slots=True)
class Slot:
    """One way to read a body as a single-valued statement: the words around its value, and the value."""

    key: tuple[tuple[str, ...], tuple[str, ...]]
    value: tuple[Token, ...]
    head_noun: str | None  # the subject's noun (``standup`` in "my standup is at 9:15"), None for "I"


@dataclass
class Cluster:
    """Records that state values of one single-valued subject."""

    key: tuple[tuple[str, ...], tuple[str, ...]]
    members: list[tuple[Features, Slot]]


def _value(token: Token) -> bool:
    return token.kind == "num" or token.capital or token.text in DAYS or token.text in MONTHS


def _plural(word: str) -> bool:
    return len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is", "'s"))


def _past(word: str) -> bool:
    return word in _IRREGULAR_PAST or (len(word) > 4 and word.endswith("ed") and not word.endswith("eed"))


def _replace(words: list[Token], source: tuple[str, ...], target: tuple[str, ...]) -> list[Token]:
    out: list[Token] = []
    i = 0
    while i < len(words):
        if tuple(t.text for t in words[i : i + len(source)]) == source:
            out += [Token(w, "word", capital=False, cased=False, after_determiner=False) for w in target]
            i += len(source)
        else:
            out.append(words[i])
            i += 1
    return out


def update_tokens(feature: Features) -> list[Token]:
    """The body's tokens with the words that announce a change dropped (see the module docstring)."""
    tokens = list(feature.tokens)
    stripped = True
    while stripped and tokens:
        stripped = False
        for marker in _LEADING_MARKERS:
            if tuple(t.text for t in tokens[: len(marker)]) == marker and len(tokens) > len(marker):
                tokens, stripped = tokens[len(marker) :], True
                break
    tokens = [
        t
        for i, t in enumerate(tokens)
        if t.text not in _ANYWHERE_MARKERS and not (t.text == "new" and i and tokens[i - 1].text in _POSSESSIVES)
    ]
    for source in _MOVED:
        tokens = _replace(tokens, source, ("live", "in"))
    return tokens


def _verb_index(prefix: Sequence[Token]) -> int | None:
    """Where the statement's verb is in the words before its value (None: the value is in the subject)."""
    for idx in range(1, len(prefix)):
        t = prefix[idx]
        if t.kind != "word" or t.capital:
            continue
        if t.text in _AUX or t.text in _PAST_AUX or (prefix[0].text in _SUBJECT_PRONOUNS and idx == 1):
            return idx
        if _plural(t.text) and prefix[idx - 1].kind == "word":
            return idx
    return None


def _single_valued_statement(prefix: Sequence[Token], suffix: Sequence[Token]) -> str | bool | None:
    """False when the words around a value do not state one single-valued fact; else the subject's noun
    (None for a pronoun subject)."""
    words = [t.text for t in (*prefix, *suffix)]
    if not prefix or prefix[0].text in _IMPERATIVES or prefix[0].text in _OTHER_PRONOUNS:
        return False
    if _CONDITIONS.intersection(words) or _PEOPLE.intersection(words):
        return False
    if any(_plural(w) and w[:-1] in _PEOPLE for w in words):
        return False
    v = _verb_index(prefix)
    if v is None:
        return False
    verb = prefix[v].text
    if verb in _PAST_AUX or (verb not in _AUX and _past(verb)):
        return False
    main = next((t.text for t in prefix[v:] if t.text not in _AUX and t.text not in _ADVERBS), None)
    if main in _MULTI_VERBS or (verb not in _AUX and verb in _MULTI_VERBS):
        return False
    if prefix[-1].text in _COMPANIONS or (suffix and suffix[0].text in _LIST_AFTER):
        return False
    if prefix[0].text in _SUBJECT_PRONOUNS:
        return None
    noun = prefix[v - 1].text
    if _plural(noun) or prefix[v - 1].kind != "word" or noun in _MULTI_NOUNS:
        return False
    return noun


def slots(feature: Features) -> list[Slot]:
    """Every reading of ``feature``'s body as a single-valued statement (usually none or one)."""
    tokens = update_tokens(feature)
    found: list[Slot] = []
    i = 0
    while i < len(tokens):
        if not _value(tokens[i]):
            i += 1
            continue
        j = i
        while j < len(tokens) and _value(tokens[j]):
            j += 1
        prefix, suffix = tokens[:i], tokens[j:]
        noun = _single_valued_statement(prefix, suffix)
        if noun is not False and j - i <= MAX_VALUE_TOKENS:
            key = (tuple(t.text for t in prefix), tuple(t.text for t in suffix))
            found.append(Slot(key, tuple(tokens[i:j]), noun if isinstance(noun, str) else None))
        i = j
    attribute = _attribute_slot(tokens)
    return found + ([attribute] if attribute is not None and not found else [])


def _attribute_slot(tokens: list[Token]) -> Slot | None:
    """``my diet is vegan``: a listed attribute of the user's, whose value may be any few words."""
    texts = [t.text for t in tokens]
    if len(texts) < 4 or texts[0] not in _POSSESSIVES or "is" not in texts:
        return None
    at = texts.index("is")
    value = tokens[at + 1 :]
    if texts[at - 1] not in _ATTRIBUTES or not 1 <= len(value) <= MAX_ATTRIBUTE_VALUE_WORDS:
        return None
    if any(t.kind != "word" or t.text in _COMPANIONS for t in value):
        return None
    return Slot((tuple(texts[: at + 1]), ()), tuple(value), texts[at - 1])


def _texts(value: Sequence[Token]) -> tuple[str, ...]:
    return tuple(t.text for t in value)


def _differ_in_value(a: Sequence[Token], b: Sequence[Token]) -> bool:
    """Whether two values are two values of one subject, not one amount with another sign or unit."""
    ta, tb = _texts(a), _texts(b)
    if ta == tb:
        return True
    if len(ta) == len(tb):
        numbers_a = [t for t in a if t.kind == "num"]
        numbers_b = [t for t in b if t.kind == "num"]
        if numbers_a and _texts(numbers_a) == _texts(numbers_b):
            return False  # the same amount in another unit or currency
        if numbers_a and [t.text.lstrip("+-") for t in numbers_a] == [t.text.lstrip("+-") for t in numbers_b]:
            return False  # the same amount with another sign
    return True


def clusters(features: Sequence[Features]) -> list[Cluster]:
    """Groups of records stating two or more values of one single-valued subject, in input order."""
    by_key: dict[tuple[tuple[str, ...], tuple[str, ...]], Cluster] = {}
    for feature in features:
        for slot in slots(feature):
            by_key.setdefault(slot.key, Cluster(slot.key, [])).members.append((feature, slot))
    out: list[Cluster] = []
    used: set[int] = set()
    for cluster in by_key.values():
        members = [(f, s) for f, s in cluster.members if f.index not in used]
        values = {_texts(s.value) for _, s in members}
        grouped = sum(1 for f, _ in members if f.record.conflict_group is not None)
        if len(values) < 2 or grouped > 1:
            continue  # one value only (a duplicate's business), or two conflict groups the user made apart
        if not all(_differ_in_value(members[0][1].value, s.value) for _, s in members[1:]):
            continue
        members = members[:10]
        out.append(Cluster(cluster.key, members))
        used.update(f.index for f, _ in members)
    return out


def _age(feature: Features) -> tuple[datetime | int, int]:
    stamp = feature.record.valid_from
    return (stamp if stamp is not None else feature.index, feature.index)


def _contains(tokens: Sequence[Token], value: tuple[str, ...]) -> int | None:
    texts = [t.text for t in tokens]
    for i in range(len(texts) - len(value) + 1):
        if tuple(texts[i : i + len(value)]) == value:
            return i
    return None


def _quotes(dependent: Features, cluster: Cluster, old: tuple[str, ...], new: tuple[str, ...], slot: Slot) -> bool:
    """Whether ``dependent`` quotes the old value ``old`` in the sense of the cluster's statement."""
    tokens = update_tokens(dependent)
    words = {t.text for t in tokens}
    if _PAST_MARKERS & words or _PEOPLE & words or _contains(tokens, new) is not None:
        return False
    at = _contains(tokens, old)
    if at is None:
        return False
    if len(old) >= 2 or (slot.head_noun is not None and slot.head_noun in words):
        return True
    prefix, suffix = cluster.key
    before = tokens[at - 1].text if at else None
    after = tokens[at + len(old)].text if at + len(old) < len(tokens) else None
    return bool(
        (prefix and before == prefix[-1] and before not in _STOP)
        or (suffix and after == suffix[0] and after not in _STOP)
    )


def update_operations(
    features: Sequence[Features], replaced: Sequence[Features] = ()
) -> tuple[list[tuple[int, dict[str, Any]]], set[int]]:
    """``group`` operations for updates and conflicts (with their cascades), and the records they name.

    ``replaced``: the bodies the user's edits replaced (negative indices): they show an old value, and
    the records quoting it follow the edit, but they are no record of the run's and never a target.
    """
    operations: list[tuple[int, dict[str, Any]]] = []
    named: set[int] = set()
    found = clusters([*replaced, *features])
    for cluster in found:
        named.update(f.index for f, _ in cluster.members if f.index >= 0)
    for cluster in found:
        newest, newest_slot = max(cluster.members, key=lambda m: _age(m[0]))
        new = _texts(newest_slot.value)
        olds = {_texts(s.value) for _, s in cluster.members} - {new}
        targets = [f for f, _ in cluster.members if f.index >= 0]
        for other in features:
            if len(targets) >= 10 or other.index in named or _age(other) >= _age(newest):
                continue
            if any(_quotes(other, cluster, old, new, newest_slot) for old in sorted(olds)):
                targets.append(other)
                named.add(other.index)
        if len(targets) < 2 or newest.index < 0:
            continue  # an edit with nothing quoting its old value: the user's edit already did it all
        subject = " ".join(cluster.key[0]).strip() or "subject"
        operations.append(
            (
                min(f.index for f in targets),
                {
                    "op": "group",
                    "targets": [f.record.id for f in targets],
                    "subject": subject[:80],
                    "rationale": "offline: one single-valued fact stated with another value; the newest stays",
                },
            )
        )
    return operations, named


def _count(text: str) -> int:
    return int(text) if text.isdigit() else _NUMBER_NAMES[text]


def expiry_operations(features: Sequence[Features], named: set[int]) -> list[tuple[int, dict[str, Any]]]:
    """``expire`` for bodies true for the next few days or weeks that have no expiry yet."""
    out: list[tuple[int, dict[str, Any]]] = []
    for feature in features:
        if feature.index in named or feature.record.expires:
            continue
        text = feature.record.body.casefold()
        match = next((m for pattern in _TEMPORARY if (m := pattern.search(text))), None)
        if match is None:
            continue
        days = _count(match.group(1)) * (7 if match.group(2) == "week" else 1)
        if 1 <= days <= 3650:
            out.append(
                (
                    feature.index,
                    {
                        "op": "expire",
                        "targets": [feature.record.id],
                        "after_days": days,
                        "rationale": "offline: true for a stated number of days",
                    },
                )
            )
    return out
