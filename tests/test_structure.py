"""The shape of the three packages, read from the source (ast): a test fails when one grows out of it.

* No import cycle inside ``ledger/``, ``consolidation/`` or ``worker/`` (each package on its own). An import
  anywhere counts: module level, inside a function (a lazy import), under ``if TYPE_CHECKING:``.
* No module over 600 lines, no function or method over 50: past them is a sign to split.
* No import under a one-letter name (``import runs as R``, ``from a import b as B``), in the packages, ``tools/``
  or the tests: a module is read by its own name.
* No fixture name defined in two places under ``tests/``: one name per meaning, a shared fixture in the nearest
  ``conftest.py`` (``FIXTURES_REDEFINED`` lists a deliberate override, with its reason).

The offenders other work is taking apart now are listed in the ``*_NOT_YET`` tables below, each checked
to offend still, so an entry goes once it is fixed; ``consolidation/`` has none. The figures of all four
measures (with the modules over 400 lines and the private imports across packages) print with
``python -m tests.test_structure [CHECKOUT]``.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_seams import crossings

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("ledger", "consolidation", "worker")
ALIAS_CHECKED = (*PACKAGES, "tools", "tests")  # every Python directory of the project
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 50
SOFT_MODULE_LINES = 400  # only counted (the figures); a package may hold its own list of modules over it

# Import cycles (each the sorted modules of one strongly connected component) being broken by other work.
CYCLES_NOT_YET: dict[str, list[list[str]]] = {"ledger": [], "consolidation": [], "worker": []}
# Modules over MAX_MODULE_LINES being split by other work (path -> lines when listed).
MODULES_NOT_YET: dict[str, int] = {}
# Functions over MAX_FUNCTION_LINES being split by other work (path:qualname -> lines when listed).
FUNCTIONS_NOT_YET: dict[str, int] = {}
# Fixture names defined in more than one place on purpose (name -> the files, sorted), each with its reason.
FIXTURES_REDEFINED: dict[str, tuple[str, ...]] = {
    # A module of per-vendor tests runs each (harness, backend) stack on that stack's backend, not on both:
    # the same meaning, a ledger's database, overridden (tests/consolidation/vendors.py, stack_fixtures).
    "ledger_url": ("tests/conftest.py", "tests/consolidation/vendors.py"),
}


# ---------------------------------------------------------------------------------------------- reading


def package_modules(root: Path, package: str) -> dict[str, Path]:
    """Every module of ``package`` under ``root`` by dotted name (a package by its own name, not ``__init__``)."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that module ``name`` imports anywhere (module level, functions, TYPE_CHECKING).

    ``from pkg import sub`` imports the submodule ``pkg.sub``; ``from pkg import name`` the package ``pkg``;
    relative imports are resolved against ``name``'s package. A string naming a module (``"pkg.sub"``, or
    ``"pkg.sub:Name"`` as import tables write it) counts too: it is there to be imported by name (a dotted one only).
    """
    out: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(_parse(path)):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = parts[: len(parts) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            out.update(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "." in node.value:
            out.add(node.value.partition(":")[0])  # a dotted name: a bare "ledger" is more often a word
    return {module for module in out if module in known and module != name}


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    known = package_modules(root, package)
    return {name: imported(name, path, known) for name, path in known.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def cycle_path(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One closed import path through ``component`` (first module to itself), to show where to cut."""
    members = set(component)
    start = component[0]
    # Breadth-first from start's successors back to start, inside the component.
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w in sorted(graph[v] & members):
                if w == start:
                    path = [w, v]
                    while v != start:
                        v = previous[v]
                        path.append(v)
                    return path[::-1]
                if w not in previous:
                    previous[w] = v
                    following.append(w)
        frontier = following
    return []


def functions(tree: ast.AST, prefix: str) -> Iterator[tuple[str, int]]:
    """Every function and method (nested ones too) as (qualified name, lines from ``def`` to its end)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            assert node.end_lineno is not None
            yield f"{prefix}.{node.name}", node.end_lineno - node.lineno + 1
            yield from functions(node, f"{prefix}.{node.name}")
        elif isinstance(node, ast.ClassDef):
            yield from functions(node, f"{prefix}.{node.name}")


def module_lines(root: Path, package: str) -> dict[str, int]:
    """Lines of every module of ``package``, by path relative to ``root``."""
    return {
        path.relative_to(root).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in package_modules(root, package).values()
    }


def function_lines(root: Path, package: str) -> dict[str, int]:
    """Lines of every function of ``package``, by ``path:qualname`` (``worker/server.py:serve.handler``)."""
    found: dict[str, int] = {}
    for path in package_modules(root, package).values():
        relative = path.relative_to(root).as_posix()
        for qualname, lines in functions(_parse(path), ""):
            found[f"{relative}:{qualname[1:]}"] = lines
    return found


def over(sizes: dict[str, int], limit: int) -> dict[str, int]:
    return {name: lines for name, lines in sizes.items() if lines > limit}


def one_letter_aliases(tree: ast.Module) -> list[tuple[int, str]]:
    """Every import anywhere in ``tree`` bound to a one-letter name: ``import x as y``, ``from a import b as y``."""
    return [
        (node.lineno, f"{alias.name} as {alias.asname}")
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
        if alias.asname is not None and len(alias.asname) == 1
    ]


def aliases_under(root: Path, folders: tuple[str, ...]) -> list[str]:
    """The one-letter import aliases of every module under ``folders`` of ``root``, as ``path:line: what``."""
    return [
        f"{path.relative_to(root).as_posix()}:{line}: {what}"
        for folder in folders
        for path in sorted((root / folder).rglob("*.py"))
        for line, what in one_letter_aliases(_parse(path))
    ]


def _is_fixture(decorator: ast.expr) -> bool:
    called = decorator.func if isinstance(decorator, ast.Call) else decorator
    return ast.unparse(called) in ("pytest.fixture", "fixture")


def fixture_definitions(root: Path) -> dict[str, list[str]]:
    """Every fixture defined under ``root``'s ``tests/``, by the name a test asks for, with where each definition
    is (``path:line``). A fixture is a function decorated ``@pytest.fixture`` or ``@pytest.fixture(...)`` at any
    level: one a factory makes for the modules that call it counts once, where it is written."""
    found: dict[str, list[str]] = {}
    for path in sorted((root / "tests").rglob("*.py")):
        for node in ast.walk(_parse(path)):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for decorator in node.decorator_list:
                if _is_fixture(decorator):
                    named = [k.value for k in getattr(decorator, "keywords", []) if k.arg == "name"]
                    name = named[0].value if named and isinstance(named[0], ast.Constant) else node.name
                    found.setdefault(name, []).append(f"{path.relative_to(root).as_posix()}:{node.lineno}")
    return found


def redefined_fixtures(root: Path) -> dict[str, tuple[str, ...]]:
    """The fixture names defined in more than one place, with the files that define them."""
    return {
        name: tuple(sorted({where.partition(":")[0] for where in places}))
        for name, places in fixture_definitions(root).items()
        if len(places) > 1
    }


# ---------------------------------------------------------------------------------------------- self-tests


def _package(root: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def test_the_cycle_check_sees_lazy_type_checking_relative_and_by_name_imports(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg.b import x\n",
            "pkg/b.py": "def x():\n    from pkg import a\n    return a\n",
            "pkg/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.sub.d import D\n",
            "pkg/sub/__init__.py": "",
            "pkg/sub/d.py": "from .. import c\n",
            "pkg/e.py": "import pkg.a\n",
            "pkg/f.py": "import importlib\nTABLE = {'g': 'pkg.g:G'}\n",
            "pkg/g.py": "def h():\n    import pkg.f\n",
        },
    )
    graph = import_graph(root, "pkg")
    assert cycles(graph) == [["pkg.a", "pkg.b"], ["pkg.c", "pkg.sub.d"], ["pkg.f", "pkg.g"]]
    assert cycle_path(graph, ["pkg.a", "pkg.b"]) == ["pkg.a", "pkg.b", "pkg.a"]


def test_the_size_check_sees_a_long_module_and_a_long_method(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES - 1))
    root = _package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/long.py": "x = 1\n" * (MAX_MODULE_LINES + 1),
            "pkg/ok.py": "x = 1\n" * MAX_MODULE_LINES,
            "pkg/m.py": f"class C:\n    def long(self):\n    {body.replace(chr(10), chr(10) + '    ')}"
            f"    return 1\n\ndef fits():\n{body}",
        },
    )
    assert over(module_lines(root, "pkg"), MAX_MODULE_LINES) == {"pkg/long.py": MAX_MODULE_LINES + 1}
    assert over(function_lines(root, "pkg"), MAX_FUNCTION_LINES) == {"pkg/m.py:C.long": MAX_FUNCTION_LINES + 1}


def test_the_alias_check_sees_a_one_letter_name_in_either_form_at_any_level() -> None:
    source = (
        "import consolidation.runs as R\nimport numpy as np\nfrom consolidation import limits as L, runs\n"
        "def f():\n    from ledger import validate as V\nif TYPE_CHECKING:\n    from a import B as b\n"
    )
    assert [line for line, _ in one_letter_aliases(ast.parse(source))] == [1, 3, 5, 7]


def test_the_fixture_check_sees_an_override_a_renamed_fixture_and_one_made_by_a_factory(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "tests/conftest.py": "import pytest\n@pytest.fixture\ndef url(): ...\n@pytest.fixture\ndef once(): ...\n",
            "tests/a/test_m.py": "import pytest\n@pytest.fixture(name='url')\ndef _url(): ...\ndef helper(url): ...\n",
            "tests/a/made.py": "import pytest\ndef made():\n    @pytest.fixture(scope='module')\n    def url(): ...\n",
        },
    )
    assert fixture_definitions(root)["once"] == ["tests/conftest.py:5"]
    assert redefined_fixtures(root) == {"url": ("tests/a/made.py", "tests/a/test_m.py", "tests/conftest.py")}


# ---------------------------------------------------------------------------------------------- the checks


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle_inside_a_package(package: str) -> None:
    graph = import_graph(ROOT, package)
    found = cycles(graph)
    allowed = CYCLES_NOT_YET[package]
    new = [f"{', '.join(c)} (e.g. {' -> '.join(cycle_path(graph, c))})" for c in found if c not in allowed]
    assert new == [], f"an import cycle in {package}/ (cut one of these imports):\n" + "\n".join(new)
    assert [c for c in allowed if c not in found] == [], "gone or changed: update CYCLES_NOT_YET"


def test_consolidation_has_no_allowance() -> None:
    assert CYCLES_NOT_YET["consolidation"] == []
    assert [name for name in (*MODULES_NOT_YET, *FUNCTIONS_NOT_YET) if name.startswith("consolidation/")] == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_over_600_lines(package: str) -> None:
    long = over(module_lines(ROOT, package), MAX_MODULE_LINES)
    allowed = {name for name in MODULES_NOT_YET if name.startswith(f"{package}/")}
    assert sorted(set(long) - allowed) == [], "split it into modules with one job each"
    assert sorted(allowed - set(long)) == [], "short enough now: take it off MODULES_NOT_YET"


@pytest.mark.parametrize("package", PACKAGES)
def test_no_function_over_50_lines(package: str) -> None:
    long = over(function_lines(ROOT, package), MAX_FUNCTION_LINES)
    allowed = {name for name in FUNCTIONS_NOT_YET if name.startswith(f"{package}/")}
    assert sorted(set(long) - allowed) == [], "split it into functions with one job each"
    assert sorted(allowed - set(long)) == [], "short enough now: take it off FUNCTIONS_NOT_YET"


def test_no_one_letter_import_alias() -> None:
    found = aliases_under(ROOT, ALIAS_CHECKED)
    assert found == [], "import the module by its own name (from consolidation import runs):\n" + "\n".join(found)


def test_no_fixture_name_is_defined_twice() -> None:
    found = redefined_fixtures(ROOT)
    new = [
        f"{name}: {', '.join(files)}" for name, files in sorted(found.items()) if FIXTURES_REDEFINED.get(name) != files
    ]
    assert new == [], (
        "a fixture name defined in more than one place: name each meaning for itself, and move a fixture two "
        "modules share to the nearest conftest.py:\n" + "\n".join(new)
    )
    assert sorted(set(FIXTURES_REDEFINED) - set(found)) == [], "defined once now: take it off FIXTURES_REDEFINED"


# ---------------------------------------------------------------------------------------------- figures


def private_imports(root: Path) -> list[str]:
    """Imports that reach another package's private module or name (or go the wrong way), as tests/test_seams.py."""
    found = []
    for package in PACKAGES:
        for path in package_modules(root, package).values():
            relative = path.relative_to(root).as_posix()
            found += [f"{relative}:{line}: {what}" for line, what in crossings(package, _parse(path))]
    return found


def figures(root: Path) -> dict[str, object]:
    """The measures of a checkout: per package, modules over 400 and 600 lines, functions over 50, cycles."""
    out: dict[str, object] = {}
    for package in PACKAGES:
        modules = module_lines(root, package)
        graph = import_graph(root, package)
        out[package] = {
            "modules": len(modules),
            f"modules over {SOFT_MODULE_LINES}": over(modules, SOFT_MODULE_LINES),
            f"modules over {MAX_MODULE_LINES}": over(modules, MAX_MODULE_LINES),
            f"functions over {MAX_FUNCTION_LINES}": over(function_lines(root, package), MAX_FUNCTION_LINES),
            "cycles": [f"{', '.join(c)} (e.g. {' -> '.join(cycle_path(graph, c))})" for c in cycles(graph)],
        }
    out["private imports across packages"] = private_imports(root)
    return out


def _show(root: Path) -> None:
    every = figures(root)
    for package in PACKAGES:
        measures = every[package]
        assert isinstance(measures, dict)
        print(f"{package}/ ({measures.pop('modules')} modules)")
        for what, found in measures.items():
            print(f"  {what}: {len(found)}")
            items = found.items() if isinstance(found, dict) else ((line, None) for line in found)
            for name, lines in items:
                print(f"    {name}" + ("" if lines is None else f" ({lines})"))
    private = every["private imports across packages"]
    assert isinstance(private, list)
    print(f"private imports across packages: {len(private)}", *private, sep="\n  ")


if __name__ == "__main__":
    _show(Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT)
