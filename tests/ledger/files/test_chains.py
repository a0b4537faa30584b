"""Supersession chains of valid entries: roots, ends, merges, cycles, basenames (ledger.files.chains)."""

from __future__ import annotations

from ledger.files.chains import CYCLE, MISSING, resolve_chains


def test_chains_start_at_roots_and_end_at_heads() -> None:
    chains = resolve_chains({"a.md": "b.md", "b.md": "c.md", "c.md": None, "x.md": "c.md"})
    assert [(c.ids, c.broken) for c in chains.chains] == [(("a.md", "b.md", "c.md"), None), (("x.md", "c.md"), None)]
    assert chains.superseded == ("a.md", "b.md", "x.md")
    assert chains.predecessors("c.md") == ["a.md", "b.md", "x.md"]
    assert chains.path_from("a.md") == ["a.md", "b.md", "c.md"]


def test_missing_target_and_its_path() -> None:
    chains = resolve_chains({"a.md": "gone.md"})
    [chain] = chains.chains
    assert (chain.ids, chain.broken, chain.target) == (("a.md",), MISSING, "gone.md")
    assert chains.missing == {"a.md": "gone.md"} and chains.path_from("a.md") == ["a.md", "gone.md"]


def test_cycle_without_a_root_is_listed_once_from_its_first_id() -> None:
    chains = resolve_chains({"c.md": "a.md", "a.md": "b.md", "b.md": "c.md", "h.md": None})
    [chain] = chains.chains
    assert (chain.ids, chain.broken, chain.target) == (("c.md", "a.md", "b.md", "c.md"), CYCLE, "c.md")
    assert set(chains.cycle_of) == {"a.md", "b.md", "c.md"}
    assert chains.path_from("a.md") == ["a.md", "b.md", "c.md", "a.md"]
    assert chains.predecessors("h.md") == []


def test_two_roots_into_one_cycle_report_it_from_each_root() -> None:
    chains = resolve_chains({"p.md": "a.md", "q.md": "a.md", "a.md": "b.md", "b.md": "a.md"})
    assert [(c.root, c.broken) for c in chains.chains] == [("p.md", CYCLE), ("q.md", CYCLE)]
    assert chains.cycle_of["a.md"] == ("a.md", "b.md")


def test_links_resolve_by_id_then_by_a_unique_basename() -> None:
    links = {"a.md": "new.md", "t/new.md": None, "b.md": "x.md", "d1/x.md": None, "d2/x.md": None, "c.md": "d1/x.md"}
    chains = resolve_chains(links)
    assert chains.links["a.md"] == "t/new.md"
    assert chains.missing == {"b.md": "x.md"}  # two entries are called x.md: no target
    assert chains.links["c.md"] == "d1/x.md"  # superseded-by never holds "/" in a valid entry; ids still resolve


def test_long_chain_is_linear() -> None:
    n = 2_000
    links: dict[str, str | None] = {f"e{i:05d}.md": f"e{i + 1:05d}.md" for i in range(n)}
    links[f"e{n:05d}.md"] = None
    chains = resolve_chains(links)
    assert len(chains.chains) == 1 and len(chains.chains[0].ids) == n + 1
    assert len(chains.predecessors(f"e{n:05d}.md")) == n
