"""The ``memledger`` command line: one root group whose commands load on demand.

Each area's commands live in a module with a ``register(app)`` function (``worker.cli.ledger``,
``worker.cli.worker`` …). :data:`COMMANDS` names every top-level command, the module that
registers it and its one-line help, so ``memledger --help`` lists every command without
importing any of them, and ``memledger pins`` imports the ledger commands only — not the
model SDK, the job queue, the servers or the MCP SDK. Adding a command or a group is one line::

    "tokens": ("worker.cli.tokens", "API tokens for MEMLEDGER_AUTH=tokens: create, list, revoke."),
    "models": (
        "worker.cli.models",
        "List the harnesses and the priced models (USD per million tokens); any other model needs its prices set.",
    ),
    "bench": ("worker.cli.bench", "Benchmarks: `memledger bench replay` scores consolidation quality."),

(``tests/worker/test_cli_startup.py`` checks that every line's help is the command's own first line
and that the light commands stay light.) See docs/cli.md.
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import Any

import typer
from typer.core import TyperGroup

from worker.cli.conventions import ConventionGroup, install

# name -> (module whose register(app) attaches it, its one-line help), in the order --help lists them.
COMMANDS: dict[str, tuple[str, str]] = {
    "pin": ("worker.cli.ledger", "Pin a fact in the account scope (or edit one with --supersedes)."),
    "pins": ("worker.cli.ledger", "List the active pins of a scope (--limit and --cursor page through many)."),
    "unpin": (
        "worker.cli.ledger",
        "Forget a record: a tombstone that erases its body and its earlier revisions' bodies.",
    ),
    "history": ("worker.cli.ledger", "Show a record's whole revision chain, oldest first."),
    "as-of": ("worker.cli.ledger", "List the records that applied at an instant."),
    "search": ("worker.cli.ledger", "Full-text search over the active pins, best match first."),
    "sweep": ("worker.cli.ledger", "Expire every record whose expiry has passed (idempotent; run it from cron)."),
    "proposals": ("worker.cli.ledger", "List the proposals waiting for accept or reject."),
    "accept": ("worker.cli.ledger", "Accept a proposal: it becomes active now, closing what it supersedes."),
    "reject": ("worker.cli.ledger", "Reject a proposal; it never applies."),
    "budget": ("worker.cli.ledger", "Show a scope's budget and what it holds, or change it with --set."),
    "rpc": (
        "worker.cli.rpc",
        "Serve the record protocol (JSON-RPC 2.0) on stdin/stdout: one request per line, one response per line.",
    ),
    "serve": (
        "worker.cli.worker",
        "Serve POST /rpc, /healthz, /livez, /metrics and /ops; run the worker, janitor and sweep unless --no-worker.",
    ),
    "worker": (
        "worker.cli.worker",
        "Run dramatiq worker processes on the Redis broker, with the janitor; stop cleanly on SIGTERM.",
    ),
    "turn": ("worker.cli.consolidation", "Record a chat turn for the scope (debounced) and queue its run."),
    "runs": (
        "worker.cli.consolidation",
        "List runs of both jobs (consolidate, extract), newest first, every scope unless --scope (a table, or --json).",
    ),
    "status": (
        "worker.cli.status",
        "Show every scope's mode, budget use and month's spend, the backlog, the sweep's last run and recent runs.",
    ),
    "mcp": (
        "worker.cli.mcp",
        "Serve the MCP tools (list_pins, search_pins, pins_as_of, pin_history, get_packet, propose_pin) on stdio.",
    ),
    "db": ("worker.cli.ledger", "Database schema and upkeep: upgrade, compact, check, rebuild-index."),
    "consolidation": (
        "worker.cli.consolidation",
        "Per-scope consolidation: set, status, enable, disable, propose, run-due, run-now.",
    ),
    "extraction": (
        "worker.cli.extraction",
        "Per-scope extraction (proposals from conversations): set, status, run-now.",
    ),
    "tokens": ("worker.cli.tokens", "API tokens for MEMLEDGER_AUTH=tokens: create, list, revoke."),
    "models": (
        "worker.cli.models",
        "List the harnesses and the priced models (USD per million tokens); any other model needs its prices set.",
    ),
    "bench": ("worker.cli.bench", "Benchmarks: `memledger bench replay` scores consolidation quality."),
    "files": (
        "worker.cli.files",
        "Memory entries kept as markdown files: new, schema, validate, audit, export, import.",
    ),
}

_LISTING = "memledger.listing"


@cache
def module_commands(module: str) -> dict[str, Any]:
    """The commands ``module``'s ``register(app)`` attaches, by name (the module is imported here)."""
    area = typer.Typer()
    importlib.import_module(module).register(area)
    return dict(typer.main.get_group(area).commands)


def load_command(name: str) -> Any:
    """The real command ``name`` (importing its module), or None for an unknown name."""
    entry = COMMANDS.get(name)
    return None if entry is None else module_commands(entry[0]).get(name)


def every_command() -> dict[str, Any]:
    """Every top-level command, loaded (imports every area: for tests and documentation tools)."""
    return {name: load_command(name) for name in COMMANDS}


class LazyGroup(ConventionGroup):
    """The root group: lists :data:`COMMANDS` from their one-line help; imports a command's module only to run it."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        # Placeholders carrying the one-line help: the listing and "did you mean" use them.
        for name, (_module, short) in COMMANDS.items():
            self.commands[name] = TyperGroup(name=name, short_help=short, help=short)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in COMMANDS:
            return None
        if ctx.meta.get(_LISTING):
            return self.commands[cmd_name]
        return load_command(cmd_name)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        ctx.meta[_LISTING] = True
        try:
            super().format_help(ctx, formatter)
        finally:
            ctx.meta.pop(_LISTING, None)


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("memledger")
    except PackageNotFoundError:
        return "unknown"


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"memledger {package_version()}")
        raise typer.Exit()


def _root(
    show_version: bool = typer.Option(
        False,
        "--version",
        help="Print the installed version and exit.",
        is_eager=True,
        callback=_show_version,
    ),
) -> None:
    """Account memory ledger and its consolidation worker."""


@cache
def build_app() -> typer.Typer:
    """The command line (every command, each loaded when it runs)."""
    install()  # flags shown as flags in every help screen
    app = typer.Typer(
        cls=LazyGroup,
        name="memledger",
        help="Account memory ledger and its consolidation worker.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    app.callback()(_root)
    return app


def __getattr__(name: str) -> Any:
    # ``from worker.cli import app`` builds the app on first use (PEP 562).
    if name == "app":
        return build_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    build_app()()


if __name__ == "__main__":
    main()
