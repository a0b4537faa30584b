"""The seams between the packages, read from the source (ast): a test fails when one gives way.

* The environment is read and written only in ``worker/config.py`` and ``worker/ledger_access.py`` (the ledger
  commands' three variables, read without pydantic-settings); pydantic-settings, whose classes read it, is imported
  only there.
* The worker reads and writes the database through the ledger (its store), never its engine.
* Every exception class of a package is defined in its ``errors.py``.
* Each protocol method the worker adds is named by one constant, in one module.
* Imports go one way, worker -> consolidation -> ledger, and never reach a private module or name
  of another package (``from ledger.statements import _S``), at any level of the code.
* consolidation/ and worker/ import the ledger only through its public modules (:data:`PUBLIC_LEDGER`).
* worker/ and tools/ import consolidation only through its surface: ``from consolidation import X``, X one of
  ``consolidation.__all__`` (:data:`SURFACE`); ``import consolidation`` imports none of its modules.
"""

from __future__ import annotations

import ast
import builtins
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("ledger", "consolidation", "worker")
USERS = ("worker", "tools")  # what is built on the packages: it may import them all, through their surfaces
ENVIRONMENT_NAMES = frozenset({"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"})
CONFIG_MODULES = ("worker/config.py", "worker/ledger_access.py")


@dataclass(frozen=True)
class Module:
    path: str  # relative to the repository, e.g. "worker/config.py"
    tree: ast.Module

    @property
    def package(self) -> str:
        return self.path.split("/", 1)[0]


def modules(packages: tuple[str, ...] = PACKAGES) -> Iterator[Module]:
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            yield Module(relative, ast.parse(path.read_text(encoding="utf-8"), filename=relative))


def environment_uses(tree: ast.Module) -> list[tuple[int, str]]:
    """Every read or write of the process environment through ``os``: ``os.environ``, ``os.getenv``,
    ``from os import environ`` ... (under any name ``os`` is imported as); and every import of pydantic-settings,
    whose classes read it."""
    os_names = {"os"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            os_names |= {alias.asname or alias.name for alias in node.names if alias.name == "os"}
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "os":
            found += [(node.lineno, f"from os import {a.name}") for a in node.names if a.name in ENVIRONMENT_NAMES]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "pydantic_settings":
            found.append((node.lineno, f"from {node.module} import"))
        elif isinstance(node, ast.Import):
            found += [
                (node.lineno, f"import {a.name}") for a in node.names if a.name.split(".")[0] == "pydantic_settings"
            ]
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in ENVIRONMENT_NAMES
            and isinstance(node.value, ast.Name)
            and node.value.id in os_names
        ):
            found.append((node.lineno, f"{node.value.id}.{node.attr}"))
        elif isinstance(node, ast.Call):  # a command-line option read from the environment: typer.Option(envvar=...)
            found += [(node.lineno, f"{k.arg}=") for k in node.keywords if k.arg in ("envvar", "auto_envvar_prefix")]
    return found


def test_the_scan_sees_every_form_of_reading_the_environment() -> None:
    source = (
        "import os\nimport os as system\nfrom os import getenv, putenv\n"
        "a = os.environ['A']\nb = system.getenv('B')\nos.environ['C'] = '1'\nenviron = {}\nenviron.get('D')\n"
        "port = typer.Option('--port', envvar='PORT')\n"
        "from pydantic_settings import BaseSettings\nimport pydantic_settings.sources\n"
    )
    assert sorted(line for line, _ in environment_uses(ast.parse(source))) == [3, 3, 4, 5, 6, 9, 10, 11]


def test_only_the_configuration_reads_the_environment() -> None:
    uses = [
        f"{module.path}:{line}: {what}"
        for module in modules()
        if module.path not in CONFIG_MODULES
        for line, what in environment_uses(module.tree)
    ]
    assert uses == [], "read the environment in worker/config.py and pass the value in:\n" + "\n".join(uses)


def engine_transactions(tree: ast.Module) -> list[tuple[int, str]]:
    """Every ``<...>.engine.begin(...)`` / ``<...>.engine.connect(...)``: a transaction past the store."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("begin", "connect")
            and isinstance(node.func.value, ast.Attribute)
            and node.func.value.attr == "engine"
        ):
            found.append((node.lineno, f"engine.{node.func.attr}()"))
    return found


def test_the_scan_sees_a_transaction_past_the_store() -> None:
    source = "with led.engine.begin() as c: pass\nwith self.ledger.engine.connect() as c: pass\nled.reading()\n"
    assert [line for line, _ in engine_transactions(ast.parse(source))] == [1, 2]


def test_the_worker_reads_and_writes_through_the_ledger_store() -> None:
    uses = [
        f"{module.path}:{line}: {what}"
        for module in modules()
        if module.package == "worker"
        for line, what in engine_transactions(module.tree)
    ]
    assert uses == [], "use led.reading(), led.writing() / led.write() or led.transaction():\n" + "\n".join(uses)


BUILTIN_EXCEPTIONS = frozenset(
    name for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, BaseException)
)
# Exception classes still defined beside their code, each in a file other work is changing now.
NOT_YET_IN_ERRORS: frozenset[str] = frozenset()


def exception_classes(trees: dict[str, ast.Module]) -> list[tuple[str, int, str]]:
    """Every class, in any of ``trees`` (path -> module), that derives from an exception, directly or through
    another class of ``trees`` (bases are matched by their last name: ``ledger.errors.LedgerError``)."""
    defined = [
        (path, node) for path, tree in trees.items() for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
    ]
    exceptions = set(BUILTIN_EXCEPTIONS)
    grew = True
    while grew:
        grew = False
        for _, node in defined:
            bases = {ast.unparse(base).rsplit(".", 1)[-1] for base in node.bases}
            if node.name not in exceptions and bases & exceptions:
                exceptions.add(node.name)
                grew = True
    return [(path, node.lineno, node.name) for path, node in defined if node.name in exceptions]


def test_the_scan_sees_an_exception_through_its_bases() -> None:
    trees = {
        "p/errors.py": ast.parse("class Root(Exception): pass\n"),
        "p/a.py": ast.parse("class Bad(errors.Root): pass\nclass Worse(Bad): pass\nclass Fine: pass\n"),
        "p/b.py": ast.parse("class Refused(ValueError): pass\n"),
    }
    found = [(path, name) for path, _, name in exception_classes(trees)]
    assert found == [("p/errors.py", "Root"), ("p/a.py", "Bad"), ("p/a.py", "Worse"), ("p/b.py", "Refused")]


def test_every_exception_class_is_in_its_packages_errors_module() -> None:
    every = {module.path: module.tree for module in modules()}
    outside = {
        f"{path}: {name}" for path, _, name in exception_classes(every) if path != f"{path.split('/', 1)[0]}/errors.py"
    }
    assert sorted(outside - NOT_YET_IN_ERRORS) == [], "define it in the package's errors.py"
    assert sorted(NOT_YET_IN_ERRORS - outside) == [], "moved: take it off NOT_YET_IN_ERRORS"


METHOD_NAME = re.compile(r"[a-z]+/[a-z_]+")


def method_name_constants(tree: ast.Module) -> list[tuple[int, str]]:
    """Module-level constants holding a protocol method's name (``NOTIFY_TURN = "consolidation/notify_turn"``)."""
    return [
        (node.lineno, node.value.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
        and METHOD_NAME.fullmatch(node.value.value)
    ]


def test_the_scan_sees_a_method_name_constant() -> None:
    source = 'A = "consolidation/notify_turn"\nB = "not a method"\ndef f():\n    C = "memory/get"\n'
    assert method_name_constants(ast.parse(source)) == [(1, "consolidation/notify_turn")]


def test_each_worker_method_is_named_in_one_module() -> None:
    where: dict[str, list[str]] = {}
    for module in modules():
        if module.package == "worker":
            for line, name in method_name_constants(module.tree):
                where.setdefault(name, []).append(f"{module.path}:{line}")
    twice = {name: places for name, places in where.items() if len(places) > 1}
    assert twice == {}, "import the one constant instead of stating the name again"


MAY_IMPORT = {
    "ledger": {"ledger"},
    "consolidation": {"consolidation", "ledger"},
    "worker": set(PACKAGES),
    "tools": set(PACKAGES),
}
# The ledger's public modules: its front door (``ledger/__init__.py``), the column helpers, the lazy loader,
# the tables, the errors, the record protocol and the file ledger. Every other ledger module is the ledger's own
# (docs/architecture.md).
PUBLIC_LEDGER = frozenset(
    {"ledger", "ledger.columns", "ledger.lazy", "ledger.schema", "ledger.errors", "ledger.protocol", "ledger.files"}
)


def declared_names(path: Path) -> frozenset[str]:
    """The names a module declares in its ``__all__ = [...]``, read from the source."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return frozenset(ast.literal_eval(node.value))
    return frozenset()


# Consolidation's surface: the names of ``consolidation/__init__.py``'s ``__all__``, the only ones worker/ and
# tools/ may import from it (and from nowhere inside it: every other consolidation module is its own).
SURFACE = declared_names(ROOT / "consolidation" / "__init__.py")


def imports(tree: ast.Module) -> list[tuple[int, str, str]]:
    """Every absolute import anywhere in ``tree`` (functions and ``TYPE_CHECKING`` blocks too), as
    (line, module, name): ``from a.b import c`` gives ("a.b", "c"), ``import a.b`` gives ("a.b", "")."""
    found: list[tuple[int, str, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, "") for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [(node.lineno, node.module, alias.name) for alias in node.names]
    return found


def crossings(package: str, tree: ast.Module, surface: frozenset[str] | None = None) -> list[tuple[int, str]]:
    """The imports of a module of ``package`` that go the wrong way, reach another package's privates, or pass
    by its surface: a ledger module not public, consolidation's modules, a name not in its ``surface``."""
    surface = SURFACE if surface is None else surface
    found: list[tuple[int, str]] = []
    for line, module, name in imports(tree):
        target = module.split(".", 1)[0]
        if target not in PACKAGES or target == package:
            continue
        shown = f"{module}:{name}" if name else module
        if target not in MAY_IMPORT[package]:
            found.append((line, f"{shown} (wrong way: {package} must not import {target})"))
        elif any(part.startswith("_") and part != "__init__" for part in (*module.split("."), name) if part):
            found.append((line, f"{shown} (private to {target})"))
        elif target == "ledger" and module not in PUBLIC_LEDGER:
            found.append((line, f"{shown} (not a public ledger module: use one of {sorted(PUBLIC_LEDGER)})"))
        elif target == "consolidation" and module != "consolidation":
            found.append((line, f"{shown} (inside consolidation: import it from consolidation, add it to __all__)"))
        elif target == "consolidation" and name and name not in surface:
            found.append((line, f"{shown} (not in consolidation.__all__: declare it there first)"))
    return found


def test_the_scan_sees_wrong_way_and_private_imports() -> None:
    source = (
        "from ledger.statements import _S\nimport ledger._private\nfrom ledger import Ledger\n"
        "def f():\n    from worker.config import load_config\n    from consolidation import X\n"
    )
    assert [line for line, _ in crossings("consolidation", ast.parse(source))] == [1, 2, 5]
    assert [line for line, _ in crossings("ledger", ast.parse(source))] == [5, 6]


def test_the_scan_sees_an_import_of_a_ledger_module_that_is_not_public() -> None:
    source = (
        "from ledger.tx import Transaction\nimport ledger.db\nfrom ledger.files.audit import audit_directory\n"
        "from ledger import Transaction\nfrom ledger.schema import RUNS\nfrom ledger.errors import LedgerError\n"
        "import ledger.protocol\nfrom ledger.files import audit_directory\n"
        "def f():\n    from ledger.store import store_for\n"
        "if TYPE_CHECKING:\n    from ledger.core import Ledger\n"
    )
    for package in ("consolidation", "worker"):
        assert [line for line, _ in crossings(package, ast.parse(source))] == [1, 2, 3, 10, 12]
    assert crossings("ledger", ast.parse(source)) == []  # inside the ledger, its own modules are its own


def test_the_scan_sees_an_import_past_consolidations_surface() -> None:
    source = (
        "from consolidation import ConsolidationService\nfrom consolidation.pricing import PriceTable\n"
        "import consolidation.limits\nimport consolidation\nfrom consolidation import runs\n"
        "def f():\n    from consolidation.replay.score import Tally\n"
    )
    surface = frozenset({"ConsolidationService"})
    for package in USERS:
        assert [line for line, _ in crossings(package, ast.parse(source), surface)] == [2, 3, 5, 7]
    assert crossings("consolidation", ast.parse(source), surface) == []  # inside, its modules are its own


def test_consolidations_surface_is_declared_and_every_name_of_it_loads() -> None:
    import consolidation

    # Given the surface as tests read it (ast) and as the package declares it
    assert SURFACE == frozenset(consolidation.__all__) == frozenset(consolidation._WHERE)
    # Then no name of it is a submodule's (importing the submodule would replace the name), and each loads
    submodules = {path.stem for path in (ROOT / "consolidation").iterdir()}
    assert sorted(SURFACE & submodules) == [], "name it otherwise on the surface (module:name in _WHERE)"
    assert [name for name in sorted(SURFACE) if getattr(consolidation, name, None) is None] == []


def test_importing_consolidation_imports_none_of_its_modules() -> None:
    code = "import sys, consolidation; print([m for m in sys.modules if m.startswith('consolidation.')])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.strip() == "[]"


def test_the_ledgers_surface_is_declared_and_every_name_of_it_loads() -> None:
    import ledger

    # Given the surface the package declares, each name loaded from its module on first use
    assert frozenset(ledger.__all__) == frozenset(ledger._WHERE) | {"open_ledger"}
    # Then no name of it is a submodule's (importing the submodule would replace the name), and each loads
    submodules = {path.stem for path in (ROOT / "ledger").iterdir()}
    assert sorted(frozenset(ledger.__all__) & submodules) == [], "rename the module: the surface keeps the name"
    assert [name for name in sorted(ledger.__all__) if getattr(ledger, name, None) is None] == []


def test_the_ledgers_errors_load_without_its_database_layer() -> None:
    # The configuration takes the ledger's errors (worker.errors), and `memledger mcp` answers with no more
    code = (
        "import sys, ledger.errors, ledger\n"
        "print(sorted(m for m in sys.modules if m.startswith(('ledger', 'sqlalchemy', 'sqlmodel', 'alembic'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.strip() == "['ledger', 'ledger.errors', 'ledger.instants', 'ledger.lazy']"


def test_imports_go_one_way_and_never_to_another_packages_privates() -> None:
    found = [
        f"{module.path}:{line}: {what}"
        for module in modules((*PACKAGES, "tools"))
        for line, what in crossings(module.package, module.tree)
    ]
    assert found == [], "use the other package's public names:\n" + "\n".join(found)
