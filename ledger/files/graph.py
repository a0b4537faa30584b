"""``audit --graph dot|mermaid``: the supersession chains of a directory.

Every entry is a node and every ``superseded-by`` an edge (old → new). Node
classes: ``candidate`` (a head eligible to consider), ``head`` (the current end of
a chain), ``stale-head`` (a head that is expired or overdue for review),
``superseded``, ``invalid``, ``cycle`` (a member of a loop) and ``missing`` (a
name that ``superseded-by`` points to but no file has; drawn dashed).
"""

from __future__ import annotations

from dataclasses import dataclass

from ledger.files.audit import AuditReport
from ledger.files.model import EXPIRED, INVALID, MISSING_SOURCE, OUT_OF_SCOPE, REVIEW_OVERDUE

_DOT_STYLE = {
    "candidate": 'color="#1a7f37", penwidth=3, style=filled, fillcolor="#dafbe1"',
    "head": 'color="#1a7f37", penwidth=2',
    "stale-head": 'color="#9a6700", style="filled,dashed", fillcolor="#fff8c5"',
    "superseded": 'color="#6e7781", fontcolor="#6e7781"',
    "invalid": 'color="#cf222e", style=filled, fillcolor="#ffebe9"',
    "cycle": 'color="#cf222e", penwidth=2',
    "missing": 'color="#cf222e", style=dashed, fontcolor="#cf222e"',
}
_MERMAID_STYLE = {
    "candidate": "stroke:#1a7f37,stroke-width:3px,fill:#dafbe1",
    "head": "stroke:#1a7f37,stroke-width:2px",
    "stale-head": "stroke:#9a6700,stroke-dasharray:4 3,fill:#fff8c5",
    "superseded": "stroke:#6e7781,color:#6e7781",
    "invalid": "stroke:#cf222e,fill:#ffebe9",
    "cycle": "stroke:#cf222e,stroke-width:2px",
    "missing": "stroke:#cf222e,stroke-dasharray:4 3,color:#cf222e",
}


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    cls: str
    label: str


def graph_nodes(report: AuditReport) -> tuple[list[Node], list[tuple[str, str, bool]]]:
    """The nodes and edges (old, new, in_cycle_or_dangling) to draw, in a stable order."""
    chains = report.chains
    candidates = {c.entry.name for c in report.candidates}
    rules: dict[str, set[str]] = {}
    for f in report.findings:
        rules.setdefault(f.file, set()).add(f.rule)
    nodes: list[Node] = []
    for name, entry in report.entries.items():
        own = rules.get(name, set())
        if name in chains.cycle_of:
            cls, note = "cycle", "cycle"
        elif own & {INVALID, MISSING_SOURCE}:
            cls, note = "invalid", "invalid" if INVALID in own else "missing source"
        elif entry.superseded_by is not None:
            cls, note = "superseded", "superseded"
        elif name in candidates:
            cls, note = "candidate", "candidate"
        elif own & {EXPIRED, REVIEW_OVERDUE}:
            cls, note = "stale-head", "expired head" if EXPIRED in own else "review overdue"
        else:
            cls, note = "head", "head" + (", out of scope" if OUT_OF_SCOPE in own else "")
        nodes.append(Node(name, cls, f"{name}\n{note}"))
    for target in sorted(set(chains.missing.values()) - set(report.entries)):
        nodes.append(Node(target, "missing", f"{target}\nmissing"))
    edges = [(old, new, old in chains.cycle_of or old in chains.missing) for old, new in sorted(chains.links.items())]
    return nodes, edges


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def graph_dot(report: AuditReport) -> str:
    """The chains as Graphviz DOT."""
    nodes, edges = graph_nodes(report)
    ids = {n.name: f"{'m' if n.cls == 'missing' else 'e'}{i}" for i, n in enumerate(nodes)}
    lines = ["digraph memory_chains {", "  rankdir=LR;", '  node [shape=box, fontname="Helvetica"];']
    for n in nodes:
        lines.append(f"  {ids[n.name]} [label={_quote(n.label)}, {_DOT_STYLE[n.cls]}];")
    for old, new, broken in edges:
        style = ' [color="#cf222e"]' if broken else ""
        lines.append(f"  {ids[old]} -> {ids[new]}{style};")
    lines.append("}")
    return "\n".join(lines)


def _mermaid_label(text: str) -> str:
    escaped = text.replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;").replace("\n", "<br/>")
    return f'"{escaped}"'


def graph_mermaid(report: AuditReport) -> str:
    """The chains as a Mermaid flowchart."""
    nodes, edges = graph_nodes(report)
    ids = {n.name: f"n{i}" for i, n in enumerate(nodes)}
    lines = ["flowchart LR"]
    for n in nodes:
        lines.append(f"  {ids[n.name]}[{_mermaid_label(n.label)}]:::{n.cls.replace('-', '_')}")
    for i, (old, new, broken) in enumerate(edges):
        lines.append(f"  {ids[old]} --> {ids[new]}")
        if broken:
            lines.append(f"  linkStyle {i} stroke:#cf222e,stroke-width:2px")
    for cls, style in _MERMAID_STYLE.items():
        lines.append(f"  classDef {cls.replace('-', '_')} {style}")
    return "\n".join(lines)
