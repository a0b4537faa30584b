"""The replay corpus: episodes generated from a seed, each a timed stream of steps with gold states.

An episode plays in a scope of its own. Its steps (``save``, ``turn``, ``forget``) name
records by *handles* (``a``, ``b``, ...). Its checkpoints say, for each handle, what
the ledger should hold at that instant (:class:`Gold`), and its as-of reads say what
:meth:`ledger.Ledger.list_as_of` must return at given instants, whatever consolidation
decided later. Same seed, same corpus: nothing is downloaded and nothing reads a clock.
See docs/consolidation-quality.md for the classes and the gold states.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from consolidation.replay import facts

MINUTE = 60.0
HOUR = 3600.0
DAY = 86_400.0
CLASSES = ("duplicate", "lookalike", "update", "deletion", "conflict", "expiry", "cascade")
DEFAULT_EPISODES = 210
TUNING, HELDOUT = "tuning", "heldout"
SPLITS = (TUNING, HELDOUT)
NUMBER_NAMES = {2: "two", 3: "three", 4: "four", 5: "five"}

ACTIVE, EXPIRED, FORGOTTEN, STALE = "active", "expired", "forgotten", "stale"


@dataclass(frozen=True, slots=True)
class Step:
    """One thing the user does at ``at_s`` seconds into the episode."""

    at_s: float
    action: str  # "save" | "turn" | "forget"
    handle: str | None = None  # save: the new record's handle
    body: str | None = None
    supersedes: str | None = None  # save: an edit of this handle's record
    expires_at_s: float | None = None
    group: str | None = None
    session: str | None = None
    forget: tuple[str, ...] = ()  # forget: every active record carrying one of these handles
    during_run: bool = False  # forget: while the next consolidation run waits for its model


@dataclass(frozen=True, slots=True)
class Gold:
    """What one handle should be at a checkpoint.

    ``state``: ``active`` (carried by an active record), ``expired``, ``forgotten``, or ``stale``
    (no longer carried with ``marker``: expired, forgotten, or rewritten without it). For
    ``active``: ``partners`` are the handles one active record carries together (merged,
    superseded or grouped into it; the handle alone when nothing should change), and that
    record's body must contain ``marker``.
    """

    state: str
    partners: frozenset[str] = frozenset()
    marker: str | None = None
    handle: str = ""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    at_s: float
    gold: tuple[Gold, ...]


@dataclass(frozen=True, slots=True)
class AsOf:
    """At ``at_s`` the scope held exactly these handles; ``visible`` says whose body still reads (not forgotten)."""

    at_s: float
    visible: tuple[tuple[str, bool], ...]


@dataclass(frozen=True, slots=True)
class Episode:
    id: str
    klass: str
    variant: str
    steps: tuple[Step, ...]
    checkpoints: tuple[Checkpoint, ...]
    as_of: tuple[AsOf, ...]
    apart: tuple[tuple[str, str], ...] = ()  # look-alike pairs that must never share a record
    secrets: tuple[str, ...] = ()  # words of forgotten bodies that must be found nowhere
    split: str = TUNING


@dataclass
class _Builder:
    klass: str
    variant: str
    steps: list[Step] = field(default_factory=list)
    checkpoints: list[Checkpoint] = field(default_factory=list)
    as_of: list[AsOf] = field(default_factory=list)
    apart: list[tuple[str, str]] = field(default_factory=list)
    secrets: list[str] = field(default_factory=list)

    def save(self, at: float, handle: str, body: str, **kw: object) -> None:
        self.steps.append(Step(at, "save", handle=handle, body=body, **kw))  # type: ignore[arg-type]

    def turn(self, at: float, session: str | None = None) -> None:
        self.steps.append(Step(at, "turn", session=session))

    def forget(self, at: float, *handles: str, during_run: bool = False) -> None:
        self.steps.append(Step(at, "forget", forget=handles, during_run=during_run))

    def check(self, at: float, **gold: Gold) -> None:
        self.checkpoints.append(Checkpoint(at, tuple(Gold(g.state, g.partners, g.marker, h) for h, g in gold.items())))

    def held(self, at: float, *handles: str, hidden: tuple[str, ...] = ()) -> None:
        self.as_of.append(AsOf(at, tuple((h, h not in hidden) for h in handles)))

    def build(self, eid: str, split: str) -> Episode:
        return Episode(
            eid,
            self.klass,
            self.variant,
            tuple(sorted(self.steps, key=lambda s: s.at_s)),
            tuple(self.checkpoints),
            tuple(self.as_of),
            tuple(self.apart),
            tuple(self.secrets),
            split,
        )


def active(*partners: str, marker: str | None = None) -> Gold:
    return Gold(ACTIVE, frozenset(partners), marker)


# ------------------------------------------------------------------ one generator per class


def _duplicate(rng: random.Random, words: facts.Words) -> _Builder:
    f = facts.fact(rng, words=words)
    copies = rng.choice((1, 1, 2))
    bodies, kinds = [f.body], []
    for _ in range(copies):
        kind, body = facts.reword(f, rng, avoid=set(bodies), words=words)
        bodies.append(body)
        kinds.append(kind)
    b = _Builder("duplicate", "+".join(kinds))
    handles = [f"d{i}" for i in range(len(bodies))]
    for i, (h, body) in enumerate(zip(handles, bodies, strict=True)):
        b.save(10.0 * i, h, body)
    other = facts.fact(rng, words=words)
    while other.template == f.template:
        other = facts.fact(rng, words=words)
    b.save(5.0, "x", other.body)
    b.turn(30.0)
    b.held(45.0, *handles, "x")
    b.check(HOUR, x=active("x", marker=other.value), **{h: active(*handles, marker=f.value) for h in handles})
    return b


def _lookalike(rng: random.Random, words: facts.Words) -> _Builder:
    pair = words.lookalike(rng, rng.choice(words.aspects))
    _, reworded = facts.reword(pair.a, rng, avoid={pair.a.body, pair.b.body}, words=words)
    b = _Builder("lookalike", pair.aspect)
    b.save(0.0, "a", pair.a.body)
    b.save(10.0, "b", pair.b.body)
    b.save(20.0, "a2", reworded)
    b.turn(30.0)
    b.held(45.0, "a", "b", "a2")
    b.apart += [("a", "b"), ("a2", "b")]
    same = active("a", "a2", marker=pair.a.value)
    b.check(HOUR, a=same, a2=same, b=active("b", marker=pair.b.value))
    return b


def _update(rng: random.Random, words: facts.Words) -> _Builder:
    f = facts.fact(rng, words=words)
    values = [f.value]
    for _ in range(rng.choice((1, 1, 2))):
        values.append(facts.fact(rng, template=f.template, avoid=values[-1], words=words).value)
    edit = rng.random() < 0.3
    b = _Builder("update", "edit" if edit else "new pin")
    handles = [f"v{i}" for i in range(len(values))]
    for i, (h, value) in enumerate(zip(handles, values, strict=True)):
        at = i * DAY
        body = facts.Fact(f.template, value).body
        b.save(at, h, words.restate(body, rng) if i else body, supersedes=handles[i - 1] if edit and i else None)
        b.turn(at + 10.0)
        if edit or i == 0:  # after a run, what a new pin sits beside depends on what the run did
            b.held(at + 30.0, handles[i])
        gold = active(*handles[: i + 1], marker=value)
        b.check(at + HOUR, **{h: gold for h in handles[: i + 1]})
    return b


def _deletion(rng: random.Random, words: facts.Words) -> _Builder:
    secret = facts.codename(rng)
    f = facts.Fact(rng.choice(words.deletions), secret)
    _, reworded = facts.reword(f, rng, avoid={f.body}, words=words)
    other = facts.fact(rng, words=words)
    during = rng.random() < 0.5
    b = _Builder("deletion", "forgotten while a run thinks" if during else "forgotten after the merge")
    b.secrets.append(secret)
    b.save(0.0, "s", f.body)
    b.save(10.0, "s2", reworded)
    b.save(20.0, "x", other.body)
    b.turn(30.0)
    b.held(45.0, "s", "s2", "x", hidden=("s", "s2"))
    at = 31.0 if during else DAY
    b.forget(at, "s", "s2", during_run=during)
    b.turn(at + HOUR)
    gone = Gold(FORGOTTEN)
    b.check(at + 2 * HOUR, s=gone, s2=gone, x=active("x", marker=other.value))
    return b


def _conflict(rng: random.Random, words: facts.Words) -> _Builder:
    f = facts.fact(rng, words=words)
    values = [f.value]
    for _ in range(rng.choice((1, 2))):
        values.append(facts.fact(rng, template=f.template, avoid=values[-1], words=words).value)
    grouped = rng.random() < 0.3
    b = _Builder("conflict", "saved into one group" if grouped else "competing pins")
    handles = [f"c{i}" for i in range(len(values))]
    for i, (h, value) in enumerate(zip(handles, values, strict=True)):
        b.save(15.0 * i, h, facts.Fact(f.template, value).body, session=f"s{i}", group="subject" if grouped else None)
        b.turn(15.0 * i + 1, session=f"s{i}")
    b.held(50.0, *(handles[-1:] if grouped else handles))
    gold = active(*handles, marker=values[-1])
    b.check(HOUR, **{h: gold for h in handles})
    return b


def _expiry(rng: random.Random, words: facts.Words) -> _Builder:
    if rng.random() < 0.5:
        f = facts.fact(rng, words=words)
        _, reworded = facts.reword(f, rng, avoid={f.body}, words=words)
        b = _Builder("expiry", "pinned with an expiry, twice")
        ends = 2 * DAY
        b.save(0.0, "e", f.body, expires_at_s=ends)
        b.save(10.0, "e2", reworded, expires_at_s=ends)
        b.turn(20.0)
        b.held(40.0, "e", "e2")
        b.held(ends + HOUR)
        b.check(HOUR, e=active("e", "e2", marker=f.value), e2=active("e", "e2", marker=f.value))
        b.check(ends + HOUR, e=Gold(EXPIRED), e2=Gold(EXPIRED))
        return b
    days = rng.randint(2, 5)
    city = rng.choice(facts.CITIES)
    body = rng.choice(words.temporary).format(v=city, n=days, nw=NUMBER_NAMES[days])
    other = facts.fact(rng, words=words)
    b = _Builder("expiry", "true for a few days")
    b.save(0.0, "t", body)
    b.save(10.0, "x", other.body)
    b.turn(20.0)
    b.held(40.0, "t", "x")
    # An hour past the first day: a model that expires it after one day has expired it too early.
    b.check(DAY + HOUR, t=active("t", marker=city), x=active("x", marker=other.value))
    b.check((days + 2) * DAY, t=Gold(EXPIRED), x=active("x", marker=other.value))
    return b


def _cascade(rng: random.Random, words: facts.Words) -> _Builder:
    head, dependent, kind = rng.choice(words.cascades)
    old = words.values[kind](rng)
    new = words.values[kind](rng)
    while new == old:
        new = words.values[kind](rng)
    edit = rng.random() < 0.5
    b = _Builder("cascade", "edited" if edit else "new pin")
    b.save(0.0, "h", head.format(v=old))
    b.save(10.0, "dep", dependent.format(v=old))
    b.turn(20.0)
    b.held(40.0, "h", "dep")
    b.save(DAY, "h2", words.restate(head.format(v=new), rng), supersedes="h" if edit else None)
    b.turn(DAY + 10.0)
    moved = active("h", "h2", marker=new)
    b.check(DAY + HOUR, h=moved, h2=moved)
    b.check(3 * DAY, h=moved, h2=moved, dep=Gold(STALE, marker=old))
    return b


GENERATORS: dict[str, Callable[[random.Random, facts.Words], _Builder]] = {
    "duplicate": _duplicate,
    "lookalike": _lookalike,
    "update": _update,
    "deletion": _deletion,
    "conflict": _conflict,
    "expiry": _expiry,
    "cascade": _cascade,
}


def generate(episodes: int = DEFAULT_EPISODES, *, seed: int = 0, split: str = TUNING) -> list[Episode]:
    """``episodes`` episodes of one split, the classes in turn (so every class has ``episodes // 7`` or one more).

    ``split``: ``tuning`` (the words the offline harness's rules were written against) or
    ``heldout`` (templates and phrasings kept out of tuning, :mod:`consolidation.replay.heldout`).
    Deterministic: the same ``(episodes, seed, split)`` gives the same corpus, and the first ``n``
    episodes of a larger corpus are the corpus of ``n``.

    Raises:
        ValueError: ``episodes`` below 1, or an unknown split.
    """
    if episodes < 1:
        raise ValueError("episodes must be at least 1")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of: {', '.join(SPLITS)}")
    from consolidation.replay.heldout import HELDOUT

    words = facts.TUNING if split == TUNING else HELDOUT
    out: list[Episode] = []
    secrets: set[str] = set()
    for i in range(episodes):
        klass = CLASSES[i % len(CLASSES)]
        rng = random.Random(f"{seed}:{i}" if split == TUNING else f"{split}:{seed}:{i}")
        built = GENERATORS[klass](rng, words)
        while secrets & set(built.secrets):  # one made-up word per forgotten fact
            built = GENERATORS[klass](rng, words)
        secrets.update(built.secrets)
        prefix = "" if split == TUNING else f"{split}-"
        out.append(built.build(f"{prefix}{klass}-{i:04d}", split))
    return out
