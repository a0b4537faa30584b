"""The held-out split's words: templates, phrasings and look-alikes kept out of tuning.

Written before the offline harness's update, conflict and cascade rules were, and never
used to tune them: a rule that scores well on the tuning split but not here learned the
corpus, not the language. Every value is one token a scorer can look for (a number, a
capitalised name, or, for a diet, one lowercase word), as in :mod:`consolidation.replay.facts`.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

from consolidation.replay import facts

COMPANIES = ("Acme", "Globex", "Initech", "Hooli", "Vandelay", "Umbrella", "Soylent", "Cyberdyne")
TEAMS = ("Payments", "Search", "Platform", "Billing", "Growth", "Identity", "Mobile")
ZONES = ("CET", "EET", "PST", "EST", "JST", "UTC", "IST")
DIETS = ("vegetarian", "vegan", "pescatarian", "omnivorous", "halal", "kosher")
MONTHS = ("January", "March", "April", "June", "September", "October", "November")
LANGUAGES = ("French", "German", "Spanish", "Italian", "Dutch", "Polish", "Portuguese")

VALUES: dict[str, Callable[[random.Random], str]] = {
    **facts.VALUES,
    "company": lambda r: r.choice(COMPANIES),
    "team": lambda r: r.choice(TEAMS),
    "age": lambda r: str(r.randint(21, 64)),
    "zone": lambda r: r.choice(ZONES),
    "extension": lambda r: str(r.randint(2000, 7999)),
    "diet": lambda r: r.choice(DIETS),
    "month": lambda r: r.choice(MONTHS),
    "ubuntu": lambda r: r.choice(("18", "20", "22", "24")),
    "spot": lambda r: str(r.randint(10, 299)),
}

TEMPLATES: tuple[tuple[str, str], ...] = (
    ("I work at {v}", "company"),
    ("My employer is {v}", "company"),
    ("I am on the {v} team", "team"),
    ("I am {v} years old", "age"),
    ("My timezone is {v}", "zone"),
    ("My desk phone extension is {v}", "extension"),
    ("My diet is {v}", "diet"),
    ("I report to {v}", "name"),
    ("The quarterly review is in {v}", "month"),
    ("I usually wake up at {v}", "clock"),
    ("The nightly backup job starts at {v}", "evening"),
    ("The build server runs Ubuntu {v}", "ubuntu"),
    ("My parking spot is number {v}", "spot"),
    ("I am based in {v}", "city"),
    ("The daily standup is at {v}", "clock"),
    ("My team lead is {v}, and I sit next to the kitchen", "name"),
)


# ------------------------------------------------------------------ phrasings kept out of tuning


def _lowered(body: str) -> str:
    return body if body.startswith("I ") else body[0].lower() + body[1:]


def typo_drop(body: str, marker: str, rng: random.Random) -> str | None:
    """One letter left out of a lowercase word of six letters or more (never the marker)."""
    words = [m for m in re.finditer(r"\b[a-z]{6,}\b", body) if m.group(0) != marker.lower()]
    if not words:
        return None
    word = rng.choice(words)
    i = rng.randint(1, len(word.group(0)) - 2)
    return body[: word.start() + i] + body[word.start() + i + 1 :]


def aside(body: str, marker: str, rng: random.Random) -> str | None:
    return rng.choice((f"FYI: {body}", f"For the record, {_lowered(body)}", f"Kindly note that {_lowered(body)}"))


def closing(body: str, marker: str, rng: random.Random) -> str | None:
    return rng.choice((f"{body}. Thank you!", f"{body}!", f"{body}. Thanks"))


def shouting(body: str, marker: str, rng: random.Random) -> str | None:
    """Capitals for one word of four letters or more (not the marker), as a user stressing it would."""
    words = [m for m in re.finditer(r"\b[a-z]{4,}\b", body) if m.group(0) != marker.lower()]
    if not words:
        return None
    word = rng.choice(words)
    return body[: word.start()] + word.group(0).upper() + body[word.end() :]


REWORDINGS: dict[str, Callable[[str, str, random.Random], str | None]] = {
    "typo_drop": typo_drop,
    "aside": aside,
    "closing": closing,
    "contraction": facts.contraction,
    "word_order": facts.word_order,
    "shouting": shouting,
}


def restate(body: str, rng: random.Random) -> str:
    """A new value said the way people announce a change (sometimes not at all)."""
    choice = rng.randrange(6)
    if choice == 0:
        return f"{body} now"
    if choice == 1 and " is " in body:
        return body.replace(" is ", " is now ", 1)
    if choice == 2:
        return f"Actually, {_lowered(body)}"
    if choice == 3:
        return f"As of this week, {_lowered(body)}"
    if choice == 4:
        return f"Update: {body}"
    return body


# ------------------------------------------------------------------ look-alikes: two facts held at once


def _two(rng: random.Random, pool: tuple[str, ...]) -> tuple[str, str]:
    a, b = rng.sample(pool, 2)
    return a, b


def lookalike(rng: random.Random, aspect: str) -> facts.Lookalike:
    """Two facts the user holds at once that differ only in ``aspect``; the marker of each is what differs."""
    if aspect == "relative":
        city = rng.choice(facts.CITIES)
        return facts.Lookalike(
            aspect, facts.Fact("My {v} lives in " + city, "sister"), facts.Fact("My {v} lives in " + city, "brother")
        )
    if aspect == "environment":
        t = "The {v} database runs PostgreSQL " + str(rng.randint(12, 17))
        return facts.Lookalike(aspect, facts.Fact(t, "staging"), facts.Fact(t, "production"))
    if aspect == "day_in_subject":
        a, b = _two(rng, facts.DAYS)
        t = "The {v} meeting starts at " + facts.VALUES["clock"](rng)
        return facts.Lookalike(aspect, facts.Fact(t, a), facts.Fact(t, b))
    if aspect == "languages":
        a, b = _two(rng, LANGUAGES)
        return facts.Lookalike(aspect, facts.Fact("I speak {v}", a), facts.Fact("I speak {v}", b))
    if aspect == "pets":
        a, b = _two(rng, facts.NAMES)
        t = "I have a " + rng.choice(("cat", "dog")) + " called {v}"
        return facts.Lookalike(aspect, facts.Fact(t, a), facts.Fact(t, b))
    if aspect == "companion":
        a, b = _two(rng, facts.NAMES)
        t = "I play tennis with {v} on Saturdays"
        return facts.Lookalike(aspect, facts.Fact(t, a), facts.Fact(t, b))
    if aspect == "paid_invoice":
        n = rng.randint(1000, 9899)
        day = rng.choice(facts.DAYS)
        t = "I paid invoice {v} on " + day
        return facts.Lookalike(aspect, facts.Fact(t, str(n)), facts.Fact(t, str(n + rng.randint(1, 99))))
    a, b = _two(rng, ("peanuts", "shellfish", "penicillin", "pollen", "latex"))
    return facts.Lookalike(aspect, facts.Fact("I am allergic to {v}", a), facts.Fact("I am allergic to {v}", b))


ASPECTS = ("relative", "environment", "day_in_subject", "languages", "pets", "companion", "paid_invoice", "allergy")

# (head template, dependent template, value kind): the dependent names the head's value.
CASCADES: tuple[tuple[str, str, str], ...] = (
    ("I work at {v}", "I take the shuttle to the {v} campus every morning", "company"),
    ("My line manager is {v}", "I send my weekly status report to {v}", "name"),
    ("The build server runs Ubuntu {v}", "Our install scripts target Ubuntu {v}", "ubuntu"),
    ("I am on the {v} team", "I go to the planning meeting of the {v} team on Mondays", "team"),
    ("I am based in {v}", "My gym membership is for the {v} branch", "city"),
    ("My parking spot is number {v}", "My charging cable is kept at parking spot {v}", "spot"),
)

TEMPORARY = (
    "I am at a conference in {v} for the coming {n} days",
    "For {n} more days I am working from {v}",
    "I am staying in {v} over the next {nw} days, so please schedule calls in the afternoon",
)

DELETIONS = ("My safe deposit box is filed under {v}", "The nickname I use on the forum is {v}")

HELDOUT = facts.Words(TEMPLATES, VALUES, REWORDINGS, ASPECTS, lookalike, CASCADES, TEMPORARY, DELETIONS, restate)
"""The split kept out of tuning."""
