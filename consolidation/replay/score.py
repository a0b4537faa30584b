"""Scoring: what the ledger holds, judged against an episode's gold states.

Everything here reads the ledger's records (never a model's text). A handle is carried
by the *head* of its record's revision chain (follow ``superseded_by``); handles whose
heads are one record were merged, superseded or grouped together. The metrics are
defined in docs/consolidation-quality.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from consolidation.replay.corpus import ACTIVE, CLASSES, EXPIRED, FORGOTTEN, STALE, Gold
from ledger import MemoryRecord, Status


@dataclass(frozen=True, slots=True)
class Observed:
    state: str  # active | expired | forgotten
    partners: frozenset[str]
    body: str | None  # the head's body (None once forgotten)

    @property
    def positive(self) -> bool:
        return self.state != ACTIVE or len(self.partners) > 1


def _head(record: MemoryRecord, by_id: Mapping[str, MemoryRecord]) -> MemoryRecord:
    seen = set()
    while record.superseded_by is not None and record.superseded_by in by_id and record.id not in seen:
        seen.add(record.id)
        record = by_id[record.superseded_by]
    return record


def _state(head: MemoryRecord, at: datetime) -> str:
    if head.status == Status.DELETED:
        return FORGOTTEN
    if head.status == Status.EXPIRED or (head.expires_at is not None and head.expires_at <= at):
        return EXPIRED
    return ACTIVE if head.status == Status.ACTIVE else head.status.value


def observe(records: Iterable[MemoryRecord], ids: Mapping[str, str], at: datetime) -> dict[str, Observed]:
    """For each handle (``ids``: handle → record id), what the ledger holds for it at ``at``."""
    by_id = {r.id: r for r in records}
    heads = {h: _head(by_id[rid], by_id) for h, rid in ids.items() if rid in by_id}
    together: dict[str, set[str]] = {}
    for h, head in heads.items():
        together.setdefault(head.id, set()).add(h)
    return {
        h: Observed(_state(head, at), frozenset(together[head.id]), head.body if not head.erased else None)
        for h, head in heads.items()
    }


def _carries(body: str | None, marker: str | None) -> bool:
    return marker is None or (body is not None and marker.casefold() in body.casefold())


def matches(gold: Gold, seen: Observed) -> bool:
    """Whether what the ledger holds for a handle is the gold outcome."""
    if gold.state == STALE:
        return seen.state in (EXPIRED, FORGOTTEN) or (seen.state == ACTIVE and not _carries(seen.body, gold.marker))
    if gold.state != ACTIVE:
        return seen.state == gold.state
    return seen.state == ACTIVE and seen.partners == gold.partners and _carries(seen.body, gold.marker)


@dataclass
class ClassTally:
    """Items of one class: *together* pairs (two handles one active record should carry) and *end states*
    (a handle that should be expired, forgotten or stale). See docs/consolidation-quality.md."""

    episodes: int = 0
    tp: int = 0  # a gold item the ledger shows
    fp: int = 0  # an item the ledger shows that the gold does not (a wrong merge, a fact lost)
    gold: int = 0  # gold items

    def add(self, golds: Sequence[Gold], seen: Mapping[str, Observed]) -> None:
        """Score one checkpoint: ``golds`` against what the ledger holds (``seen``, by handle)."""
        active = {g.handle: g for g in golds if g.state == ACTIVE}
        for g in golds:
            s = seen.get(g.handle)
            if g.state != ACTIVE:
                hit = s is not None and matches(g, s)
                self.gold += 1
                self.tp += hit
                self.fp += s is not None and s.state != ACTIVE and not hit
            elif s is None or s.state != ACTIVE or (len(g.partners) == 1 and not _carries(s.body, g.marker)):
                self.fp += 1  # a fact that should still read as it was said no longer does
        names = sorted(active)
        for i, x in enumerate(names):
            for y in names[i + 1 :]:
                sx, want = seen.get(x), y in active[x].partners
                together = sx is not None and y in sx.partners
                if want:
                    self.gold += 1
                    hit = together and sx is not None and matches(active[x], replace(sx, partners=active[x].partners))
                    self.tp += hit
                    self.fp += together and not hit
                elif together:
                    self.fp += 1

    def precision(self) -> float:
        return 1.0 if self.tp + self.fp == 0 else self.tp / (self.tp + self.fp)

    def recall(self) -> float:
        return 1.0 if self.gold == 0 else self.tp / self.gold


FORGOTTEN_WHILE_THINKING = "forgotten_while_thinking"
"""The one designed failure: the user forgot a record while the run waited for its model."""
FIRST_ERRORS = 5

# (cause, words of a run's error that say it), first match wins; the errors are the harnesses' own messages.
_CAUSES = (
    (FORGOTTEN_WHILE_THINKING, ("stored answer was erased",)),
    ("no_key", ("api key", "api_key", "credential")),
    ("timeout", ("timed out", "cap ran out")),
    ("unavailable", ("still unavailable",)),
    ("connection", ("connection",)),
    ("cut_off", ("cut off",)),
    ("unparseable", ("unparseable",)),
    ("refused", ("refused",)),
    ("http_error", ("answered",)),
    ("apply_error", ("apply error",)),
)


def failure_cause(error: str | None) -> str:
    """The cause of a failed run, read from its error: a stable name for the report (``other`` when unknown)."""
    text = (error or "").casefold()
    return next((cause for cause, words in _CAUSES if any(w in text for w in words)), "other")


@dataclass
class Tally:
    """Every figure of one arm (the harness, or a baseline) over a corpus."""

    classes: dict[str, ClassTally] = field(default_factory=lambda: {c: ClassTally() for c in CLASSES})
    false_merges: int = 0
    as_of_reads: int = 0
    as_of_exact_reads: int = 0
    erased_leaks: int = 0
    runs: int = 0
    tokens: int = 0
    spend_micro_usd: int = 0
    run_wall_s: list[float] = field(default_factory=list)
    failed_runs: int = 0
    failed_by_cause: dict[str, int] = field(default_factory=dict)
    run_errors: list[str] = field(default_factory=list)  # the first few distinct errors of failed runs
    ops_proposed: int = 0
    ops_applied: int = 0
    ops_refused: int = 0
    refusals: dict[str, int] = field(default_factory=dict)  # the gate's reasons, summed over runs
    leak_places: list[str] = field(default_factory=list)

    def fail(self, error: str | None) -> None:
        """Count one failed run by its cause, keeping the first few distinct errors."""
        self.failed_runs += 1
        cause = failure_cause(error)
        self.failed_by_cause[cause] = self.failed_by_cause.get(cause, 0) + 1
        text = error or "failed"
        if len(self.run_errors) < FIRST_ERRORS and text not in self.run_errors:
            self.run_errors.append(text)

    @property
    def undesigned_failures(self) -> int:
        """Failed runs of any cause but the designed forget-while-the-model-thinks."""
        return self.failed_runs - self.failed_by_cause.get(FORGOTTEN_WHILE_THINKING, 0)

    def absorb(self, other: Tally) -> None:
        """Add ``other``'s figures to these (one split's tally into the whole corpus's)."""
        for name, c in other.classes.items():
            mine = self.classes[name]
            mine.episodes, mine.tp, mine.fp, mine.gold = (
                mine.episodes + c.episodes, mine.tp + c.tp, mine.fp + c.fp, mine.gold + c.gold
            )  # fmt: skip
        for name in (
            "false_merges", "as_of_reads", "as_of_exact_reads", "erased_leaks", "runs", "tokens", "spend_micro_usd",
            "failed_runs", "ops_proposed", "ops_applied", "ops_refused",
        ):  # fmt: skip
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for mine_counts, theirs in ((self.failed_by_cause, other.failed_by_cause), (self.refusals, other.refusals)):
            for key, count in theirs.items():
                mine_counts[key] = mine_counts.get(key, 0) + count
        self.run_wall_s += other.run_wall_s
        self.run_errors += [e for e in other.run_errors if e not in self.run_errors][
            : max(0, FIRST_ERRORS - len(self.run_errors))
        ]
        self.leak_places += other.leak_places

    @property
    def episodes(self) -> int:
        return sum(c.episodes for c in self.classes.values())

    def as_of_exact(self) -> float:
        return 1.0 if self.as_of_reads == 0 else self.as_of_exact_reads / self.as_of_reads

    def read(self, exact: bool) -> None:
        self.as_of_reads += 1
        self.as_of_exact_reads += exact

    def to_json(self) -> dict[str, Any]:
        """The report's fields, exactly (docs/consolidation-quality.md)."""
        return {
            "episodes": self.episodes,
            "classes": {
                name: {"episodes": c.episodes, "precision": round(c.precision(), 4), "recall": round(c.recall(), 4)}
                for name, c in self.classes.items()
                if c.episodes
            },
            "false_merges": self.false_merges,
            "as_of_exact": round(self.as_of_exact(), 4),
            "erased_leaks": self.erased_leaks,
            "runs": self.runs,
            "failed_runs": self.failed_runs,
            "failed_by_cause": dict(sorted(self.failed_by_cause.items())),
            "first_errors": list(self.run_errors),
            "ops_proposed": self.ops_proposed,
            "ops_applied": self.ops_applied,
            "ops_refused": self.ops_refused,
            "refusals": dict(sorted(self.refusals.items())),
            "tokens": self.tokens,
            "spend_micro_usd": self.spend_micro_usd,
        }


def count_false_merges(apart: Sequence[tuple[str, str]], seen: Mapping[str, Observed]) -> int:
    """Look-alike pairs one record carries together (merged, superseded or grouped into one)."""
    return sum(1 for a, b in apart if a in seen and b in seen and b in seen[a].partners)


def find_secrets(texts: Iterable[str], secrets: Sequence[str]) -> list[str]:
    """The secrets (case-insensitive) that occur in any of ``texts``."""
    wanted = {s.casefold(): s for s in secrets}
    found: set[str] = set()
    for text in texts:
        folded = text.casefold()
        found.update(s for key, s in wanted.items() if key in folded)
    return sorted(found)
