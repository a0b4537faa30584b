"""The shape of consolidation/ beyond the checks of every package (tests/test_structure.py): each module over
400 lines has its reason, run states are named by the enum only, and every move of a run's state is allowed by
the one transitions table."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from consolidation import runs
from consolidation.models import TRANSITIONS, RunState
from consolidation.tables import RUNS
from tests.test_structure import SOFT_MODULE_LINES, package_modules

ROOT = Path(__file__).resolve().parents[2]
# Modules over the soft limit, each with the reason it stays whole.
LONG_MODULES: dict[str, str] = {
    "consolidation.fake_model": "the loopback fake model server both fakes share (scripts, drips, drops), one file",
    "consolidation.pricing": "the price table and the arithmetic of spend, one unit with its verified rates",
    "consolidation.service": "the one object worker/ drives: both jobs' settings, turns, runs, run-now and retry",
    "consolidation.runs": "every write of a run row, of both jobs, each one conditional statement: one place to "
    "read what can move a run",
    "consolidation.harnesses.openai": "one SDK's whole call: its three answer formats and their fallback, the "
    "scope's call options, a streamed or a whole reply",
    "consolidation.harnesses.offline_updates": "one rule (single-valued statements) and the word lists it reads",
}


def _modules() -> dict[str, Path]:
    return package_modules(ROOT, "consolidation")


def test_every_module_over_400_lines_has_its_reason() -> None:
    modules = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in _modules().items()}
    assert sorted(name for name, n in modules.items() if n > SOFT_MODULE_LINES) == sorted(LONG_MODULES)


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the string constants that are docstrings (module, class, function, attribute)."""
    ids = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            for stmt in body:
                if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                    ids.add(id(stmt.value))
    return ids


def test_run_states_are_named_by_the_enum_only() -> None:
    states = {state.value for state in RunState}
    bare: list[str] = []
    for name, path in _modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = _docstrings(tree)
        enum = next((n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "RunState"), None)
        inside_enum = {id(n) for n in ast.walk(enum)} if enum is not None else set()
        constants = (n for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in states)
        bare.extend(f"{name}:{n.lineno} {n.value!r}" for n in constants if id(n) not in docs | inside_enum)
    assert bare == []


def test_the_schema_allows_the_states_of_the_enum() -> None:
    """The ledger's table states the run states in its CHECK constraint (the ledger cannot import the enum)."""
    (check,) = [c for c in RUNS.constraints if c.name == "ck_consolidation_runs_state"]
    assert set(re.findall(r"'([a-z_]+)'", str(check.sqltext))) == {state.value for state in RunState}


def test_the_transitions_table_allows_the_life_of_a_run_and_nothing_else() -> None:
    allowed = {state: set(following) for state, following in TRANSITIONS.items()}
    assert allowed == {
        RunState.PENDING: {RunState.RUNNING, RunState.SETTLED},
        RunState.RUNNING: {RunState.SETTLED},
        RunState.SETTLED: set(),
    }
    guard, values = runs.move(RunState.PENDING, RunState.RUNNING)
    assert values == {"state": "running"} and "state" in str(guard)
    for src, dst in [(RunState.SETTLED, RunState.PENDING), (RunState.RUNNING, RunState.PENDING)]:
        with pytest.raises(ValueError, match=f"cannot move from {src} to {dst}"):
            runs.move(src, dst)


def test_every_state_write_in_consolidation_goes_through_the_transitions_table() -> None:
    """A ``state=`` keyword (an UPDATE's new state) appears only in the move builder and in new pending rows."""
    writes = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            for keyword in node.keywords:
                if keyword.arg != "state":
                    continue
                value = ast.unparse(keyword.value)
                if value == "RunState.PENDING.value" and ast.unparse(node.func).startswith("insert("):
                    continue  # a new run is born pending: no move
                if isinstance(node.func, ast.Name) and node.func.id in {"ConsolidationRun", "replace"}:
                    continue  # a value object, not a row
                writes.append(f"{name}:{node.lineno} state={value}")
    assert writes == []
