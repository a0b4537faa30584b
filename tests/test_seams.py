"""The seams between the packages, read from the source (ast): a test fails when one gives way.

* The environment is read and written only in ``worker/config.py``.
* The worker reads and writes the database through the ledger (its store), never its engine.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("ledger", "consolidation", "worker")
ENVIRONMENT_NAMES = frozenset({"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"})
CONFIG_MODULE = "worker/config.py"


@dataclass(frozen=True)
class Module:
    path: str  # relative to the repository, e.g. "worker/config.py"
    tree: ast.Module

    @property
    def package(self) -> str:
        return self.path.split("/", 1)[0]


def modules() -> Iterator[Module]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            yield Module(relative, ast.parse(path.read_text(encoding="utf-8"), filename=relative))


def environment_uses(tree: ast.Module) -> list[tuple[int, str]]:
    """Every read or write of the process environment through ``os``: ``os.environ``, ``os.getenv``,
    ``from os import environ`` ... (under any name ``os`` is imported as)."""
    os_names = {"os"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            os_names |= {alias.asname or alias.name for alias in node.names if alias.name == "os"}
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "os":
            found += [(node.lineno, f"from os import {a.name}") for a in node.names if a.name in ENVIRONMENT_NAMES]
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in ENVIRONMENT_NAMES
            and isinstance(node.value, ast.Name)
            and node.value.id in os_names
        ):
            found.append((node.lineno, f"{node.value.id}.{node.attr}"))
    return found


def test_the_scan_sees_every_form_of_reading_the_environment() -> None:
    source = (
        "import os\nimport os as system\nfrom os import getenv, putenv\n"
        "a = os.environ['A']\nb = system.getenv('B')\nos.environ['C'] = '1'\nenviron = {}\nenviron.get('D')\n"
    )
    assert [line for line, _ in environment_uses(ast.parse(source))] == [3, 3, 4, 5, 6]


def test_only_the_configuration_reads_the_environment() -> None:
    uses = [
        f"{module.path}:{line}: {what}"
        for module in modules()
        if module.path != CONFIG_MODULE
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
