"""Supersession chains: follow ``superseded-by`` from every entry to the end of its chain.

Each entry names at most one successor, so the links form a functional graph:
every walk either reaches a *head* (an entry with no successor), falls off at a
*dangling* name (no such file), or enters a *cycle*. :func:`resolve_chains`
classifies every entry in one pass, O(entries).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Chains:
    """The resolved chains of one directory.

    ``links``: entry → the successor it names (existing or not).
    ``missing``: entry → the successor it names that is not in the directory.
    ``cycles``: every cycle, each starting at its smallest name, in link order.
    ``ends``: entry → the head its chain reaches, or None when it dangles or loops.
    """

    links: Mapping[str, str]
    missing: Mapping[str, str]
    cycles: tuple[tuple[str, ...], ...]
    ends: Mapping[str, str | None]
    cycle_of: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    feeders: Mapping[str, list[str]] = field(default_factory=dict)

    def path_from(self, name: str) -> list[str]:
        """The names visited from ``name`` following links, stopping at a head, a missing name or a repeat."""
        seen: list[str] = [name]
        current = name
        while current in self.links:
            current = self.links[current]
            if current in seen:
                seen.append(current)
                break
            seen.append(current)
        return seen

    def predecessors(self, head: str) -> list[str]:
        """Every entry (other than ``head``) whose chain ends at ``head``, sorted."""
        return sorted(self.feeders.get(head, ()))


def resolve_chains(names: Iterable[str], links: Mapping[str, str]) -> Chains:
    """Resolve the chains of the entries ``names``, where ``links[a] == b`` means a is superseded by b."""
    present = set(names)
    missing = {a: b for a, b in links.items() if b not in present}
    ends: dict[str, str | None] = {}
    cycles: list[tuple[str, ...]] = []
    cycle_of: dict[str, tuple[str, ...]] = {}
    for start in sorted(present):
        if start in ends:
            continue
        path: list[str] = []
        on_path: dict[str, int] = {}
        current = start
        while current not in ends:
            if current in on_path:  # a new cycle: everything from its first visit loops
                cycle = _rotate(path[on_path[current] :])
                cycles.append(cycle)
                for member in cycle:
                    cycle_of[member] = cycle
                    ends[member] = None
                break
            on_path[current] = len(path)
            path.append(current)
            nxt = links.get(current)
            if nxt is None:
                ends[current] = current
                break
            if nxt not in present:
                ends[current] = None
                break
            current = nxt
        end = ends[current]
        for name in path:
            ends.setdefault(name, end)
    feeders: dict[str, list[str]] = {}
    for name, end in ends.items():
        if end is not None and end != name:
            feeders.setdefault(end, []).append(name)
    return Chains(dict(links), missing, tuple(sorted(cycles)), ends, cycle_of, feeders)


def _rotate(cycle: list[str]) -> tuple[str, ...]:
    """Start a cycle at its smallest name, keeping link order."""
    first = cycle.index(min(cycle))
    return tuple(cycle[first:] + cycle[:first])
