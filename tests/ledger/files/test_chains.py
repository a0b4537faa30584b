"""Chain resolution over superseded-by links."""

from __future__ import annotations

from ledger.files.chains import resolve_chains


def test_heads_dangling_and_cycles_in_one_pass() -> None:
    names = ["a", "b", "c", "d", "e", "f", "g", "h", "x"]
    links = {"a": "b", "b": "c", "d": "d", "e": "f", "f": "e", "g": "e", "h": "zz", "x": "h"}
    chains = resolve_chains(names, links)
    assert chains.ends == {
        "a": "c",
        "b": "c",
        "c": "c",
        "d": None,
        "e": None,
        "f": None,
        "g": None,
        "h": None,
        "x": None,
    }
    assert chains.cycles == (("d",), ("e", "f"))
    assert set(chains.cycle_of) == {"d", "e", "f"}  # g leads into the loop but is not part of it
    assert chains.missing == {"h": "zz"}
    assert chains.predecessors("c") == ["a", "b"]
    assert chains.path_from("g") == ["g", "e", "f", "e"]
    assert chains.path_from("x") == ["x", "h", "zz"]


def test_cycle_is_rotated_to_its_smallest_name() -> None:
    chains = resolve_chains(["c", "a", "b"], {"c": "a", "a": "b", "b": "c"})
    assert chains.cycles == (("a", "b", "c"),)


def test_long_chain_is_linear() -> None:
    names = [f"n{i:05d}" for i in range(5000)]
    links = {names[i]: names[i + 1] for i in range(len(names) - 1)}
    chains = resolve_chains(names, links)
    assert set(chains.ends.values()) == {names[-1]}
    assert len(chains.predecessors(names[-1])) == len(names) - 1
