"""One command-line convention for every ``memledger`` command, enforced in one place.

* ``--json`` on every read prints camelCase JSON (the protocol's casing) on stdout; the ``files``
  commands keep ``--format json`` (the same shapes).
* Under ``--json`` (or ``--format json``) errors are JSON too, on stderr::

      {"error": {"message": "no memory record 'mem_x'", "reason": "not_found", "exitCode": 1}}

  usage errors included (``"reason": "usage"``, exit status 2). Without it they are red text.
* ``--scope`` everywhere a command acts on one scope, validated the same way by :data:`ScopeOption`
  (a bad key is a usage error naming the expected form, before the database is opened).
* ``--database-url`` on every command that opens the database (:data:`DbUrl`).
* Boolean flags are shown as flags: Typer prints a ``<bool>`` type after ``--json`` although it
  takes no value; :func:`install` drops it for every flag.

:class:`ConventionGroup` is the root command's class (``typer.Typer(cls=ConventionGroup)``); the
convention test (``tests/worker/test_cli_conventions.py``) walks every command's ``--help`` and
``--json`` output.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Sequence
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup, TyperOption


def wants_json(argv: Sequence[str]) -> bool:
    """True when the command line asks for JSON output: ``--json``, ``--format json`` or ``--format=json``."""
    args = list(argv)
    if "--" in args:
        args = args[: args.index("--")]
    if "--json" in args or "--format=json" in args:
        return True
    return any(arg == "--format" and nxt == "json" for arg, nxt in itertools.pairwise(args))


class ConventionGroup(TyperGroup):
    """The root group: under ``--json`` every error, usage errors included, is one JSON object on stderr."""

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        if not wants_json(argv):
            return super().main(argv, prog_name, complete_var, standalone_mode, **extra)
        from worker.cli.output import emit_json_error, json_errors

        with json_errors():
            try:
                code = super().main(argv, prog_name, complete_var, False, **extra)
            except Exception as exc:  # click's usage errors carry their own message and exit status
                message = getattr(exc, "format_message", None)
                if message is None or not hasattr(exc, "exit_code"):
                    raise
                emit_json_error(message(), reason="usage", code=int(exc.exit_code))
                code = int(exc.exit_code)
        code = code if isinstance(code, int) else 0
        if standalone_mode:
            sys.exit(code)
        return code


def check_scope_option(value: str | None) -> str | None:
    """A ``--scope`` callback: the same validation (and usage error) for every command."""
    if value is None:
        return None
    from ledger import check_scope
    from ledger.errors import ScopeError

    try:
        return check_scope(value)
    except ScopeError as exc:
        raise typer.BadParameter(exc.message) from None


ScopeOption = Annotated[
    str | None,
    typer.Option(
        "--scope",
        help="Scope key, e.g. account:local (default: the bound account's scope).",
        show_default=False,
        callback=check_scope_option,
    ),
]

DbUrl = Annotated[
    str | None,
    typer.Option(
        "--database-url", help="Database URL (default: $MEMLEDGER_DATABASE_URL or ./memledger.db).", show_default=False
    ),
]

ScopePositional = Annotated[
    str | None,
    typer.Argument(
        metavar="[SCOPE]",
        help="The scope, as --scope (the positional form is kept for scripts).",
        show_default=False,
        callback=check_scope_option,
    ),
]


def pick_scope(positional: str | None, option: str | None, *, default: str) -> str:
    """The scope a command acts on: ``--scope``, else the positional SCOPE, else ``default``.

    Raises:
        typer.BadParameter: both were given and they differ.
    """
    if positional is not None and option is not None and positional != option:
        raise typer.BadParameter(f"SCOPE {positional!r} and --scope {option!r} differ: give one", param_hint="--scope")
    return option or positional or default


_installed = False


def _whole_option_names() -> None:
    """Help tables never cut an option's name: a column of names keeps its width, the help column wraps.

    Typer's options table lets Rich shrink every column alike when the terminal is narrow, which
    cut ``--max-output-tokens`` to ``--max-output-tok…`` at 80 columns. Done when a help screen
    is drawn (the table module is not imported otherwise).
    """
    from rich.text import Text
    from typer import rich_utils

    base = getattr(rich_utils, "Table")  # noqa: B009 - not in the module's exported names
    if getattr(base, "keeps_names", False):
        return

    class NamesTable(base):  # type: ignore[misc,valid-type]
        keeps_names = True

        def add_row(self, *renderables: Any, **kwargs: Any) -> None:
            super().add_row(*renderables, **kwargs)
            for column, cell in zip(self.columns, renderables, strict=False):
                if isinstance(cell, Text) and cell.plain.startswith("-"):
                    column.no_wrap = True
            for item in getattr(renderables[-1], "renderables", ()) if renderables else ():
                if isinstance(item, Text):
                    item.overflow = "fold"  # a long word of help (an env var) breaks, never cut

    setattr(rich_utils, "Table", NamesTable)  # noqa: B010


def install() -> None:
    """Show boolean flags as flags, and option names whole, in every help screen (idempotent)."""
    global _installed
    if _installed:
        return
    display = TyperOption.display_type_rich

    def flag_display(self: TyperOption, ctx: Any) -> str | None:
        return None if self.is_flag else display(self, ctx)

    TyperOption.display_type_rich = flag_display  # type: ignore[method-assign]
    for cls in (TyperCommand, TyperGroup):
        drawn = cls.format_help

        def format_help(self: Any, ctx: Any, formatter: Any, _drawn: Any = drawn) -> None:
            _whole_option_names()
            _drawn(self, ctx, formatter)

        cls.format_help = format_help  # type: ignore[method-assign]
    _installed = True
