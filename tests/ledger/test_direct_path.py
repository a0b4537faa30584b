"""The stores' direct paths (SQLite's cursor, psycopg's pipeline): SQLAlchemy's public API only, and the
same rows as SQLAlchemy's own path, on both databases."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from sqlalchemy import select, update

from ledger import Ledger
from ledger.schema import RECORDS
from ledger.store import Prepared, lit, param, store_for

STORE = Path(__file__).resolve().parents[2] / "ledger" / "store"

M = RECORDS.c
_BODIES = select(M.body).order_by(M.seq)
CASES: dict[str, tuple[Prepared, dict[str, Any]]] = {
    "IN list": (Prepared(_BODIES.where(M.id.in_(param("ids", expanding=True)))), {"ids": ["mem_b", "mem_a", "x"]}),
    "empty IN list": (Prepared(_BODIES.where(M.id.in_(param("ids", expanding=True)))), {"ids": []}),
    "NOT IN list": (Prepared(_BODIES.where(M.id.not_in(param("ids", expanding=True)))), {"ids": ["mem_b"]}),
    "empty NOT IN list": (Prepared(_BODIES.where(M.id.not_in(param("ids", expanding=True)))), {"ids": []}),
    "literals": (
        Prepared(_BODIES.where(M.status.in_(lit(("active", "proposed"))), M.kind != lit("decision"))),
        {},
    ),
    "IN list and a parameter twice": (
        Prepared(_BODIES.where(M.id.in_(param("ids", expanding=True)), M.scope_key == param("s"), M.seq > param("n"))),
        {"ids": ["mem_a", "mem_b"], "s": "account:local", "n": 0},
    ),
}


def test_each_case_takes_the_direct_path_and_reads_what_sqlalchemy_reads(led: Ledger) -> None:
    # Given two records
    a, b = led.save("alpha"), led.save("beta")
    store = store_for(led.engine)
    with store.write() as conn:
        for old, new in ((a.id, "mem_a"), (b.id, "mem_b")):
            conn.execute(update(RECORDS).where(M.id == old).values(id=new))
    # Then each statement reads the same rows through the store as through SQLAlchemy
    kind = "sqlite" if led.engine.dialect.name == "sqlite" else "postgresql"
    with store.read() as conn:
        for name, (prepared, params) in CASES.items():
            expected = [tuple(row) for row in conn.execute(prepared.statement, params)]
            assert store.rows(conn, prepared, params) == expected, name
            assert prepared.plans.get(kind) is not None, f"{name}: not on the direct path"
        prepared, params = CASES["IN list"]
        assert store.rows(conn, prepared, params) == [("alpha",), ("beta",)]


def _private_reads(path: Path, own: set[str]) -> list[str]:
    """``x._name`` read in ``path`` where ``_name`` is no attribute the store's own modules define."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        name = node.attr if isinstance(node, ast.Attribute) else None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr":
            arg = node.args[1] if len(node.args) > 1 else None
            name = arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None
        if name and name.startswith("_") and not name.startswith("__") and name not in own:
            found.append(f"{path.name}:{node.lineno}: .{name}")
    return found


def _own_attributes(paths: list[Path]) -> set[str]:
    """Attributes the store's modules set (``self._x = …``), declare (``__slots__``) or define (methods)."""
    own: set[str] = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for part in ast.walk(target):
                        if isinstance(part, ast.Attribute):
                            own.add(part.attr)
                        elif isinstance(part, ast.Name) and part.id == "__slots__" and node.value is not None:
                            own |= {c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant)}
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                own.add(node.name)
    return own


def test_the_direct_paths_read_no_private_sqlalchemy_attribute() -> None:
    """A private SQLAlchemy attribute can change in any release; the direct paths use the public API only."""
    own = _own_attributes(sorted(STORE.glob("*.py")))
    found = [line for name in ("sqlite.py", "postgres.py") for line in _private_reads(STORE / name, own)]
    assert found == [], found


def test_the_private_attribute_check_sees_one(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "def f(c):\n    return c._result_columns, c.binds, getattr(c, '_bind_processors')\n",
        encoding="utf-8",
    )
    assert sorted(_private_reads(bad, _own_attributes([bad]))) == [
        "bad.py:2: ._bind_processors",
        "bad.py:2: ._result_columns",
    ]
