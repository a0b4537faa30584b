"""The words of the replay corpus: fact templates, look-alike pairs and rewordings.

Every value a template takes is a number or a capitalised name, so the value is one
token a scorer can look for (the *marker*) and the words before it name the subject.
Nothing here is random by itself: every function takes the episode's ``random.Random``.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass

CITIES = ("Berlin", "Munich", "Lisbon", "Porto", "Vienna", "Madrid", "Oslo", "Dublin", "Prague", "Warsaw", "Zurich")
NAMES = ("Alice", "Bruno", "Chen", "Dana", "Emil", "Farah", "Goran", "Hana", "Ivan", "Julia", "Kofi", "Lena", "Omar")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")
EDITORS = ("Vim", "Emacs", "Helix", "Zed", "Neovim", "Kate")


def _clock(rng: random.Random, low: int = 7, high: int = 11) -> str:
    return f"{rng.randint(low, high)}:{rng.choice(('00', '15', '30', '45'))}"


VALUES: dict[str, Callable[[random.Random], str]] = {
    "room": lambda r: str(r.randint(100, 899)),
    "clock": _clock,
    "evening": lambda r: _clock(r, 19, 23),
    "name": lambda r: r.choice(NAMES),
    "city": lambda r: r.choice(CITIES),
    "pg": lambda r: str(r.randint(12, 17)),
    "port": lambda r: str(r.randint(3000, 9999)),
    "day": lambda r: r.choice(DAYS),
    "editor": lambda r: r.choice(EDITORS),
    "rent": lambda r: str(r.randrange(700, 2400, 50)),
    "km": lambda r: str(r.randint(3, 21)),
    "k8s": lambda r: f"1.{r.randint(24, 31)}",
    "minutes": lambda r: str(r.randint(3, 40)),
}

# (template, value kind): one fact about one subject each.
TEMPLATES: tuple[tuple[str, str], ...] = (
    ("My office is in room {v}", "room"),
    ("The weekly standup starts at {v}", "clock"),
    ("My manager is {v}", "name"),
    ("I live in {v}", "city"),
    ("Our production database runs PostgreSQL {v}", "pg"),
    ("The staging server listens on port {v}", "port"),
    ("Deploys go out every {v}", "day"),
    ("My preferred editor is {v}", "editor"),
    ("The rent is {v} euros a month", "rent"),
    ("My gym closes at {v}", "evening"),
    ("The project sync is on {v}", "day"),
    ("My train to work leaves at {v}", "clock"),
    ("The team offsite is in {v}", "city"),
    ("I run {v} kilometres every Sunday", "km"),
    ("I do not drink coffee after {v}", "clock"),
    ("I am on call every {v}", "day"),
    ("It is fine to call me before {v}", "clock"),
    ("I work from home on {v}, and I go to the office on Fridays", "day"),
    ("Our on-call rotation is led by {v}, and the escalation contact is the platform team", "name"),
    # Tool names the dictionary does not know either (a letter dropped from one is a typo of an unknown word).
    ("Our staging cluster runs kubernetes {v}", "k8s"),
    ("The pytest timeout of the billing service is {v} seconds", "minutes"),
    ("Our gunicorn workers restart every {v}", "day"),
    # Words a user writes in capitals for emphasis.
    ("I never eat lunch before {v}", "clock"),
    ("I really need a quiet morning every {v}", "day"),
)


@dataclass(frozen=True, slots=True)
class Fact:
    template: str
    value: str

    @property
    def body(self) -> str:
        return self.template.format(v=self.value)


def fact(
    rng: random.Random, *, template: str | None = None, avoid: str | None = None, words: Words | None = None
) -> Fact:
    """A fact from a random template of ``words`` (default: the tuning split's), or ``template``, whose value is
    not ``avoid``."""
    templates, values = (TEMPLATES, VALUES) if words is None else (words.templates, words.values)
    text, kind = next(t for t in templates if t[0] == template) if template else rng.choice(templates)
    value = values[kind](rng)
    while value == avoid:
        value = values[kind](rng)
    return Fact(text, value)


# ------------------------------------------------------------------ rewordings of one fact

_CONTRACTIONS = (("do not", "don't"), ("I am", "I'm"), ("It is", "It's"), ("is not", "isn't"), ("I would", "I'd"))


def typo(body: str, marker: str, rng: random.Random) -> str | None:
    """Two adjacent letters swapped inside one lowercase word of six letters or more (never the marker)."""
    words = [m for m in re.finditer(r"\b[a-z]{6,}\b", body) if m.group(0) != marker.lower()]
    if not words:
        return None
    word = rng.choice(words)
    i = rng.randint(1, len(word.group(0)) - 3)
    w = word.group(0)
    swapped = w[:i] + w[i + 1] + w[i] + w[i + 2 :]
    return None if swapped == w else body[: word.start()] + swapped + body[word.end() :]


def contraction(body: str, marker: str, rng: random.Random) -> str | None:
    for long, short in _CONTRACTIONS:
        if long in body:
            return body.replace(long, short, 1)
        if short in body:
            return body.replace(short, long, 1)
    return None


def politeness(body: str, marker: str, rng: random.Random) -> str | None:
    lowered = body if body.startswith("I ") else body[0].lower() + body[1:]
    return rng.choice((f"Please remember that {lowered}", f"{body}, thanks", f"Note that {lowered}"))


def word_order(body: str, marker: str, rng: random.Random) -> str | None:
    """The two clauses of ``A, and B`` the other way round."""
    if ", and " not in body:
        return None
    first, second = body.split(", and ", 1)
    second = second[0].upper() + second[1:]
    first = first if first.startswith("I ") else first[0].lower() + first[1:]
    return f"{second}, and {first}"


def noise(body: str, marker: str, rng: random.Random) -> str | None:
    """Case and whitespace noise: a lowercase opening and a doubled space."""
    lowered = body if body.startswith("I ") else body[0].lower() + body[1:]
    return lowered.replace(" ", "  ", 1) + " "


def dropped_letter(body: str, marker: str, rng: random.Random) -> str | None:
    """One letter dropped from inside one lowercase word of seven letters or more (never the marker)."""
    words = [m for m in re.finditer(r"\b[a-z]{7,}\b", body) if m.group(0) != marker.lower()]
    if not words:
        return None
    word = rng.choice(words)
    w = word.group(0)
    i = rng.randint(2, len(w) - 3)
    return body[: word.start()] + w[:i] + w[i + 1 :] + body[word.end() :]


_EMPHASIS = ("never", "always", "really", "every", "must", "only", "before", "after", "still", "very")


def emphasis(body: str, marker: str, rng: random.Random) -> str | None:
    """One word of emphasis (*never, always, really* ...) written in capitals: "I NEVER eat before 10"."""
    words = [m for m in re.finditer(r"\b[A-Za-z]+\b", body) if m.group(0).lower() in _EMPHASIS]
    if not words:
        return None
    word = rng.choice(words)
    return body[: word.start()] + word.group(0).upper() + body[word.end() :]


def lead_in(body: str, marker: str, rng: random.Random) -> str | None:
    """A lead-in that says nothing of the fact, set off by a comma or a colon: "To be clear, my office is …"."""
    lowered = body if body.startswith("I ") else body[0].lower() + body[1:]
    return rng.choice(
        (f"Just so you know, {lowered}", f"To be clear, {lowered}", f"Heads up: {body}", f"As a reminder, {lowered}")
    )


def sign_off(body: str, marker: str, rng: random.Random) -> str | None:
    """A closing of its own after the fact (*… Much appreciated.*, *… Thanks a lot!*)."""
    return rng.choice((f"{body}. Much appreciated.", f"{body}! Cheers", f"{body}. Thanks a lot!"))


REWORDINGS: dict[str, Callable[[str, str, random.Random], str | None]] = {
    "typo": typo,
    "contraction": contraction,
    "politeness": politeness,
    "word_order": word_order,
    "noise": noise,
    "dropped_letter": dropped_letter,
    "emphasis": emphasis,
    "lead_in": lead_in,
    "sign_off": sign_off,
}


def reword(f: Fact, rng: random.Random, *, avoid: set[str], words: Words | None = None) -> tuple[str, str]:
    """One rewording of ``f`` (kind, body) whose body is not in ``avoid``; word order and contractions first
    where the body has them, so every kind is represented. ``words``: the split's rewordings (default: tuning's)."""
    rewordings = REWORDINGS if words is None else words.rewordings
    kinds = list(rewordings)
    rng.shuffle(kinds)
    kinds.sort(key=lambda k: k not in ("word_order", "contraction"))
    for kind in kinds:
        body = rewordings[kind](f.body, f.value, rng)
        if body is not None and body not in avoid and body != f.body:
            return kind, body
    return "politeness", f"Please note: {f.body}"


# ------------------------------------------------------------------ look-alikes: one aspect differs


@dataclass(frozen=True, slots=True)
class Lookalike:
    aspect: str
    a: Fact
    b: Fact


def _other(rng: random.Random, pool: tuple[str, ...], value: str) -> str:
    return rng.choice([v for v in pool if v != value])


def lookalike(rng: random.Random, aspect: str) -> Lookalike:
    """Two facts the user holds at once that differ only in ``aspect``; the marker of each is what differs."""
    if aspect == "number":
        n = rng.randint(1000, 9899)
        m = int(str(n)[:2] + str(n)[3] + str(n)[2]) if str(n)[2] != str(n)[3] else n + 1
        t = "Invoice {v} was paid on " + rng.choice(DAYS)
        return Lookalike(aspect, Fact(t, str(n)), Fact(t, str(m)))
    if aspect == "currency":
        cur = ("EUR", "USD", "GBP", "CHF")
        c = rng.choice(cur)
        t = "I keep a cash reserve of " + str(rng.randrange(200, 3000, 100)) + " {v}"
        return Lookalike(aspect, Fact(t, c), Fact(t, _other(rng, cur, c)))
    if aspect == "sign":
        t = "Alert me when my balance changes by {v} EUR"
        n = rng.randrange(100, 2000, 50)
        return Lookalike(aspect, Fact(t, f"+{n}"), Fact(t, f"-{n}"))
    if aspect == "negation":
        day = rng.choice(DAYS)
        return Lookalike(
            aspect, Fact("I want a summary email on {v}", day), Fact("I do not want a summary email on {v}", day)
        )
    if aspect == "name":
        t = "{v}'s birthday is on May " + str(rng.randint(1, 28))
        a = rng.choice(NAMES)
        return Lookalike(aspect, Fact(t, a), Fact(t, _other(rng, NAMES, a)))
    if aspect == "unit":
        t = "Keep the nightly backups for " + str(rng.randint(2, 12)) + " {v}"
        return Lookalike(aspect, Fact(t, "days"), Fact(t, "weeks"))
    if aspect == "one letter":
        t, a, b = rng.choice(ONE_LETTER)
        return Lookalike(aspect, Fact(t, a), Fact(t, b))
    if aspect == "acronym":
        t, a, b = rng.choice(ACRONYMS)
        return Lookalike(aspect, Fact(t, a), Fact(t, b))
    city = rng.choice(CITIES)
    t = f"The {city} office is open until {_clock(rng, 17, 20)} on " + "{v}"
    return Lookalike(aspect, Fact(t, "weekdays"), Fact(t, "weekends"))


# Two names or two real words one letter apart: never a typo of each other.
ONE_LETTER = (
    ("Book the small meeting room for {v} on Thursdays", "Maria", "Mario"),
    ("Book the small meeting room for {v} on Thursdays", "Anna", "Anne"),
    ("Send the quarterly numbers to {v} before the review", "Jon", "Joe"),
    ("My neighbour looks after the {v} when I travel", "cat", "car"),
    ("Fill in the {v} field first when you draft my emails", "form", "from"),
    ("The bottle on the left of the shelf is {v}", "mine", "wine"),
    ("The release build links against {v} statically", "libssl", "libssh"),
)

# An acronym and the lowercase word it spells: never the same.
ACRONYMS = (
    ("Send the signed invoices to {v} by Friday", "US", "us"),
    ("I report broken laptops to {v} first", "IT", "it"),
    ("Check {v} published the travel vaccine schedule", "WHO", "who"),
    ("The deploy script calls {v} directly", "AWS", "aws"),
    ("Read the {v} notes before you change the API", "REST", "rest"),
)

ASPECTS = ("number", "currency", "sign", "negation", "name", "unit", "qualifier", "one letter", "acronym")


# ------------------------------------------------------------------ cascades: a fact that depends on another

# (head template, dependent template, value kind): the dependent names the head's value.
CASCADES: tuple[tuple[str, str, str], ...] = (
    ("I live in {v}", "My commute from {v} to the office takes 25 minutes", "city"),
    ("My manager is {v}", "I have a weekly one-to-one with {v} on Thursdays", "name"),
    ("Our production database runs PostgreSQL {v}", "The backup scripts use the PostgreSQL {v} client", "pg"),
    ("My office is in room {v}", "The printer next to room {v} is the one I use", "room"),
    ("The team offsite is in {v}", "I booked a hotel in {v} for the team offsite", "city"),
)

TEMPORARY = (
    "I am working from the {v} office for the next {n} days",
    "I am visiting {v} for the next {n} days, so meetings should be remote",
    "For the next {n} days I am in {v} and reachable only by email",
)

SYLLABLES = ("ka", "lo", "vi", "ren", "to", "mar", "zu", "bel", "qui", "dor", "sa", "nex", "ul", "fi")


def codename(rng: random.Random) -> str:
    """A made-up word no other body contains: what an erasure check looks for."""
    return "".join(rng.choice(SYLLABLES) for _ in range(4)).capitalize() + str(rng.randint(10, 99))


DELETIONS = ("The code name of my side project is {v}", "My locker combination is kept under {v}")


def plain(body: str, rng: random.Random) -> str:
    """A new value stated the way the first was (the tuning split's updates)."""
    return body


@dataclass(frozen=True, slots=True)
class Words:
    """Everything one split of the corpus draws from (see docs/consolidation-quality.md, "Splits")."""

    templates: tuple[tuple[str, str], ...]
    values: dict[str, Callable[[random.Random], str]]
    rewordings: dict[str, Callable[[str, str, random.Random], str | None]]
    aspects: tuple[str, ...]
    lookalike: Callable[[random.Random, str], Lookalike]
    cascades: tuple[tuple[str, str, str], ...]
    temporary: tuple[str, ...]
    deletions: tuple[str, ...]
    restate: Callable[[str, random.Random], str]  # how a later value of an update is said


TUNING = Words(TEMPLATES, VALUES, REWORDINGS, ASPECTS, lookalike, CASCADES, TEMPORARY, DELETIONS, plain)
"""The split the offline harness's rules were written against."""
