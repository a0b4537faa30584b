"""Supersession chains: follow ``superseded-by`` from each chain's root to its end.

Only valid entries take part (an invalid entry's links are not trusted, and a link
to an invalid entry finds no target). ``superseded-by`` names an entry by its id
(its path relative to the audited directory) or, failing that, by a basename that
exactly one valid entry has.

Each chain is listed once, from its root (a superseded entry that no other
superseded entry points to) to where it ends: a head (no ``superseded-by``), a
missing target, or the entry at which it returns on itself (a cycle). A cycle
that no root leads into is listed from its first id. Chains that merge are
listed once per root; each broken chain is reported once, on its root. Chains are
listed in the order of their roots' ids (docs/file-ledger.md; the reference tool lists a
cycle that no root leads into after the rooted chains).
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field

MISSING = "missing"
CYCLE = "cycle"


@dataclass(frozen=True, slots=True)
class Chain:
    """One chain: ``ids`` from root to end; ``broken`` is None, ``missing`` or ``cycle``.

    ``target`` is the name that does not exist (``missing``) or the id the cycle returns to (``cycle``).
    """

    ids: tuple[str, ...]
    broken: str | None = None
    target: str | None = None

    @property
    def root(self) -> str:
        return self.ids[0]


@dataclass(frozen=True, slots=True)
class Chains:
    """The resolved chains of one directory.

    ``links``: id → the id its ``superseded-by`` resolves to, or the raw name when it resolves to nothing.
    ``missing``: id → the raw name that resolves to nothing.
    ``cycle_of``: id → the cycle it is a member of (ids in link order).
    ``superseded``: the ids of the valid entries that have a ``superseded-by``, in the order of ``links``.
    """

    chains: tuple[Chain, ...]
    links: Mapping[str, str]
    missing: Mapping[str, str]
    superseded: tuple[str, ...]
    cycle_of: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    feeders: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def broken(self) -> tuple[Chain, ...]:
        return tuple(c for c in self.chains if c.broken is not None)

    def path_from(self, name: str) -> list[str]:
        """The ids visited from ``name`` following links, stopping at a head, a missing name or a repeat."""
        seen: list[str] = [name]
        current = name
        while current in self.links:
            current = self.links[current]
            seen.append(current)
            if current in self.missing or seen.count(current) > 1:
                break
        return seen

    def predecessors(self, head: str) -> list[str]:
        """Every id (other than ``head``) whose links lead to ``head``, sorted."""
        found: set[str] = set()
        todo = [head]
        while todo:
            for earlier in self.feeders.get(todo.pop(), ()):
                if earlier != head and earlier not in found:
                    found.add(earlier)
                    todo.append(earlier)
        return sorted(found)


def resolve_chains(links: Mapping[str, str | None]) -> Chains:
    """Resolve the chains of valid entries: ``links[id]`` is the raw ``superseded-by`` of entry ``id`` (or None).

    ``links`` is in the order of the sorted entry ids; chains are listed in the order of their roots.
    """
    by_basename: dict[str, str | None] = {}
    for name in links:
        base = posixpath.basename(name)
        by_basename[base] = None if base in by_basename else name

    resolved: dict[str, str] = {}
    missing: dict[str, str] = {}
    for name, target in links.items():
        if target is None:
            continue
        hit = target if target in links else by_basename.get(target)
        if hit is None:
            missing[name] = target
            resolved[name] = target
        else:
            resolved[name] = hit

    order = {name: i for i, name in enumerate(links)}
    superseded = tuple(n for n in links if links[n] is not None)
    targeted = {resolved[n] for n in superseded if n not in missing}
    roots = [n for n in superseded if n not in targeted]
    chains: list[Chain] = []
    cycle_of: dict[str, tuple[str, ...]] = {}
    visited: set[str] = set()
    for start in (*roots, *superseded):
        if start in visited:
            continue
        chain = _walk(start, resolved, missing)
        chains.append(chain)
        visited.update(n for n in chain.ids if links.get(n) is not None)
        if chain.broken == CYCLE and chain.target is not None:
            loop = chain.ids[chain.ids.index(chain.target) : -1]
            for member in loop:
                cycle_of.setdefault(member, loop)
    # Walked roots first (so a cycle is entered from its lead-in), listed in the order of the ids (docs/file-ledger.md).
    chains.sort(key=lambda c: order[c.root])
    feeders: dict[str, list[str]] = {}
    for name, target in resolved.items():
        if name not in missing:
            feeders.setdefault(target, []).append(name)
    frozen = {k: tuple(v) for k, v in feeders.items()}
    return Chains(tuple(chains), resolved, missing, superseded, cycle_of, frozen)


def _walk(start: str, resolved: Mapping[str, str], missing: Mapping[str, str]) -> Chain:
    ids = [start]
    seen = {start}
    current = start
    while current in resolved:
        if current in missing:
            return Chain(tuple(ids), MISSING, missing[current])
        nxt = resolved[current]
        ids.append(nxt)
        if nxt in seen:
            return Chain(tuple(ids), CYCLE, nxt)
        seen.add(nxt)
        current = nxt
    return Chain(tuple(ids))
