"""How the offline harness reads a body: tokens, the canonical sequence and clauses, and the cleaned body.

The rules are those of :mod:`consolidation.harnesses.offline` (its docstring states them).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from consolidation.harnesses.base import PromptRecord

_ARTICLES = frozenset({"a", "an", "the"})


_DETERMINERS = frozenset(
    {
        "a", "an", "the", "this", "that", "these", "those", "my", "your", "our", "his", "her", "their", "its",
        "each", "every", "any", "some", "no", "many", "few", "several", "much", "more", "most", "all",
    }
)  # fmt: skip


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


_FILLERS = frozenset({"please", "pls", "plz", "kindly"})


_CLOSINGS = (("thank", "you"), ("thanks",))  # dropped only where they end the body


_SIGN_OFFS = frozenset(
    {
        ("thanks", "lot"), ("thanks", "so", "much"), ("thank", "you", "so", "much"), ("thank", "you", "very", "much"),
        ("many", "thanks"), ("thanks", "in", "advance"), ("cheers",), ("much", "appreciated"), ("appreciated",),
        ("thx",), ("ty",),
    }
)  # fmt: skip
"""Closings dropped only when they are the body's whole last clause (articles already dropped: *thanks a lot*)."""


_LEAD_IN = re.compile(
    r"^\s*(?:(?:please|kindly|just)\s+)*"
    r"(?:for\s+the\s+record|fyi|btw|by\s+the\s+way|so\s+you\s+know|for\s+your\s+(?:information|info)"
    r"|for\s+(?:future\s+)?reference|(?:as\s+)?a\s+(?:quick\s+)?reminder|reminder|heads[\s-]up|to\s+be\s+clear"
    r"|to\s+clarify|(?:a\s+)?quick\s+note|a\s+note|note|keep\s+in\s+mind|bear\s+in\s+mind)"
    r"\s*(?:[,:;.!\u2014\u2013]+|\s-)\s*(?=\S)",
    re.IGNORECASE,
)
"""A lead-in set off by punctuation (*For the record, …*, *Heads up: …*, *To be clear, …*): it says nothing of
the fact, and the comma would otherwise make it a clause of its own."""


_PREFIXES = (
    ("remember", "that"), ("note", "that"), ("remember",), ("fyi",), ("btw",), ("for", "the", "record"),
    ("keep", "in", "mind", "that"), ("bear", "in", "mind", "that"), ("just", "so", "you", "know", "that"),
    ("just", "so", "you", "know"), ("for", "your", "information"), ("by", "the", "way"),
)  # fmt: skip


_IMPERATIVE_VERBS = frozenset({"use", "prefer", "want", "need"})


_SYNONYMS: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("would", "rather", "have"), ("prefer",)),
    (("would", "rather"), ("prefer",)),
    (("would", "prefer"), ("prefer",)),
    (("rather", "than"), ("over",)),
    (("instead", "of"), ("over",)),
)


_SYNONYM_STARTS = frozenset(source[0] for source, _ in _SYNONYMS)


_IS_AFTER = frozenset({"it", "that", "he", "she", "there", "here", "what", "who", "where", "how", "this"})


_NOT_STEMS = {"ca": ("can",), "wo": ("will",), "sha": ("shall",), "ai": ("aint",)}


_SUFFIXES = {"m": "am", "re": "are", "ve": "have", "ll": "will", "d": "would"}


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


_TOKEN = re.compile(
    r"(?P<num>(?:(?<![\w.])[-+\u2212])?\d+(?:[.,:/]\d+)*)"
    r"|(?P<word>[^\W\d_]+(?:'[^\W\d_]+)*)"
    r"|(?P<sym>[$\u20ac\u00a3\u00a5\u20b9\u00a2%\u00b0#@&+=<>~^*|\u00d7\u00f7\u00b1\u00a7\u2030\u2190-\u2bff])"
)


_CLAUSE_BREAK = re.compile(r"[;!?]|[.,](?=\s|$)|\band\b", re.IGNORECASE)


APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "`": "'"})


_LOWER_I = re.compile(r"(?<![\w.'\u2019-])i(?![\w-]|\.\w)")


@dataclass(frozen=True, slots=True)
class Token:
    text: str  # canonical (case-folded, contractions expanded)
    kind: str  # "word" | "num" | "sym"
    capital: bool  # written with a capital letter (a name, unless it is "I" or opens the body)
    cased: bool  # written with any capital letter, even where it opens the body (never typo-corrected)
    after_determiner: bool  # preceded by a determiner, possessive or number


@dataclass(frozen=True, slots=True)
class Features:
    record: PromptRecord
    index: int
    clauses: tuple[tuple[Token, ...], ...]
    tokens: tuple[Token, ...]
    key: tuple[str, ...]  # the canonical sequence
    acronyms: frozenset[str]  # tokens written in capitals in a body that is not all capitals
    upper: frozenset[str]  # every token written in capitals


@functools.cache
def _dictionary() -> Any:
    from spellchecker import SpellChecker  # a dictionary of some 160,000 English words; loaded on first use

    return SpellChecker(distance=1)


# British spellings the dictionary (American) lacks: centre/center, kilometres, colour, favourite, organise, travelled.
_BRITISH = ((r"tre(s?)$", r"ter\1"), (r"our", "or"), (r"is(e|es|ed|ing|ation|ations)$", r"iz\1"), (r"yse$", "yze"),
            (r"ll(ed|ing|er)$", r"l\1"), (r"ogue$", "og"))  # fmt: skip
MIN_COMPOUND_PART = 3


@functools.cache
def known(word: str, *, compounds: bool = True) -> bool:
    """Whether ``word`` is an English word: in the dictionary, in its American spelling, or (``compounds``) a
    compound of two words of three letters or more (``offsite``, ``weekday``; but also ``libssh``, ``mongod``)."""
    dictionary = _dictionary()
    if dictionary.known([word]):
        return True
    if any(
        dictionary.known([re.sub(british, american, word)])
        for british, american in _BRITISH
        if re.search(british, word)
    ):
        return True
    return compounds and any(
        dictionary.known([word[:i]]) and dictionary.known([word[i:]])
        for i in range(MIN_COMPOUND_PART, len(word) - MIN_COMPOUND_PART + 1)
    )


MIN_EMPHASIS_CHARS = 4

WORD_ACRONYMS = frozenset(
    {"rest", "soap", "lamp", "mean", "aids", "acid", "base", "solid", "smart", "kiss", "safe", "fair", "grasp", "swat"}
)  # fmt: skip
"""Acronyms that spell an English word (``REST``/*rest*, ``ACID``/*acid*): never read as emphasis."""


def emphasis(word: str) -> bool:
    """Whether ``word`` (case-folded), written in capitals, is an English word stressed ("I NEVER eat before 10")
    rather than an acronym: four letters or more, in the dictionary, and not an acronym that spells a word."""
    return len(word) >= MIN_EMPHASIS_CHARS and word not in WORD_ACRONYMS and known(word, compounds=False)


def _expand(word: str) -> tuple[str, ...]:
    """``word`` (case-folded) with its contraction expanded."""
    if word == "cannot":
        return ("can", "not")
    if word.endswith("n't"):
        stem = word[:-3]
        return (*_NOT_STEMS.get(stem, (stem,)), "not")
    if "'" not in word:
        return (word,)
    stem, _, suffix = word.rpartition("'")
    if suffix == "s":
        if stem == "let":
            return ("let", "us")
        return (stem, "is") if stem in _IS_AFTER else (word,)
    return (stem, _SUFFIXES[suffix]) if suffix in _SUFFIXES else (word,)


def _raw_tokens(text: str) -> list[tuple[str, str, str]]:
    """(original, case-folded, kind) for each token of ``text``."""
    out = []
    for match in _TOKEN.finditer(text):
        kind = match.lastgroup or "sym"
        original = match.group(0)
        folded = original.casefold()
        if kind == "num":
            folded = folded.replace("\u2212", "-")
            if re.fullmatch(r"[-+]?\d{1,3}(,\d{3})+", folded):
                folded = folded.replace(",", "")
        out.append((original, folded, kind))
    return out


def _replace_runs(tokens: list[Token]) -> list[Token]:
    out: list[Token] = []
    i = 0
    while i < len(tokens):
        if tokens[i].text not in _SYNONYM_STARTS:
            out.append(tokens[i])
            i += 1
            continue
        for source, target in _SYNONYMS:
            if tuple(t.text for t in tokens[i : i + len(source)]) == source:
                out.extend(
                    Token(word, "word", capital=False, cased=False, after_determiner=tokens[i].after_determiner)
                    for word in target
                )
                i += len(source)
                break
        else:
            out.append(tokens[i])
            i += 1
    return out


def _canonical(clause: str, *, opens_body: bool) -> list[Token]:
    items: list[Token] = []
    previous: str | None = None
    for original, folded, kind in _raw_tokens(clause):
        expanded = _expand(folded) if kind == "word" else (folded,)
        capital = kind == "word" and any(ch.isupper() for ch in original) and folded != "i"
        after = previous is not None and (
            previous in _DETERMINERS or previous in NUMBER_WORDS or previous.endswith("'s") or previous[-1:].isdigit()
        )
        items.extend(Token(part, kind, capital=capital, cased=capital, after_determiner=after) for part in expanded)
        previous = folded
    items = [t for t in items if t.text not in _FILLERS]
    if opens_body:
        for prefix in _PREFIXES:
            if tuple(t.text for t in items[: len(prefix)]) == prefix and len(items) > len(prefix):
                items = items[len(prefix) :]
                break
    items = _replace_runs(items)
    if opens_body:
        if len(items) > 1 and items[0].text == "i" and items[1].text in _IMPERATIVE_VERBS:
            items = items[1:]
        if items:
            first = items[0]
            items[0] = Token(
                first.text, first.kind, capital=False, cased=first.cased, after_determiner=first.after_determiner
            )  # not a name
    # Articles are ignored, unless they are all the clause has.
    return [t for t in items if t.text not in _ARTICLES] or items


def _drop_closing(clauses: list[tuple[Token, ...]]) -> list[tuple[Token, ...]]:
    if not clauses:
        return clauses
    last = clauses[-1]
    if len(clauses) > 1 and tuple(t.text for t in last) in _SIGN_OFFS:
        return clauses[:-1]
    for closing in _CLOSINGS:
        if tuple(t.text for t in last[-len(closing) :]) == closing:
            rest = last[: -len(closing)]
            return [*clauses[:-1], rest] if rest else clauses[:-1] or clauses
    return clauses


def read_features(record: PromptRecord, index: int) -> Features:
    text = unicodedata.normalize("NFKC", record.body).translate(APOSTROPHES)
    text = _LEAD_IN.sub("", text, count=1)
    clauses: list[tuple[Token, ...]] = []
    for number, clause in enumerate(_CLAUSE_BREAK.split(text)):
        tokens = _canonical(clause, opens_body=number == 0 or not clauses)
        if tokens:
            clauses.append(tuple(tokens))
    if not clauses and _raw_tokens(text):
        clauses.append(tuple(_canonical(text, opens_body=True)))  # a body that is only a clause break ("and")
    clauses = _drop_closing(clauses)
    flat = tuple(token for clause in clauses for token in clause)
    raw = [original for original, _, kind in _raw_tokens(text) if kind == "word"]
    shouting = bool(raw) and all(word.isupper() for word in raw if len(word) > 1)
    upper = frozenset(w.casefold() for w in raw if len(w) > 1 and w.isupper())
    kept = {t.text for t in flat}
    # "I NEVER eat before 10": a stressed word, not an acronym (the dictionary is asked only of short capitals)
    acronyms = frozenset() if shouting else frozenset(w for w in upper if len(w) <= 5 and w in kept and not emphasis(w))
    return Features(
        record=record,
        index=index,
        clauses=tuple(clauses),
        tokens=flat,
        key=tuple(t.text for t in flat),
        acronyms=acronyms,
        upper=upper,
    )


def clean_body(body: str) -> str:
    """``body`` with whitespace and case noise removed; the words themselves are untouched."""
    text = re.sub(r"[^\S\n]+", " ", body)
    text = re.sub(r" *\n *", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text).strip()
    text = _LOWER_I.sub("I", text)
    first = re.match(r"[^\W\d_]+(?:['\u2019][^\W\d_]+)?", text)
    if first and first.group(0).islower() and first.group(0).translate(APOSTROPHES) in _SENTENCE_OPENERS:
        after = text[first.end() : first.end() + 1]
        if after in ("", " ", "\n", ",", ".", ";", ":", "!", "?"):
            text = text[0].upper() + text[1:]
    return text
