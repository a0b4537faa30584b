"""Process commands: ``serve`` and ``worker``, and the plumbing every worker command shares.

Configuration comes from :func:`worker.config.load_config` (``MEMLEDGER_*`` and the
optional TOML file), read once per command (:func:`cli_config`); a bad value is reported with every
other bad value and exit status 2, never a traceback. :func:`cli_runtime` builds the runtime of a
short command inside :func:`worker.cli.ledger.cli_errors`, the command line's one translation of errors.
This module loads neither the ledger nor Rich until a command needs them: ``memledger mcp`` reads its
configuration here before it answers ``initialize``.

Exit status: 0 done; 1 refused or failed (a red message on stderr); 2 usage or configuration.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from worker.cli.conventions import DbUrl
from worker.config import WorkerConfig, load_config
from worker.errors import BindRefused, ConfigError, PortUnavailable

if TYPE_CHECKING:
    from worker.runtime import Runtime


# ---------------------------------------------------------------------- plumbing
def cli_config(database_url: str | None = None) -> WorkerConfig:
    """The validated configuration (``--database-url`` over ``MEMLEDGER_DATABASE_URL``), or every problem
    on stderr and exit status 2."""
    try:
        config = load_config()
    except ConfigError as exc:
        _refuse(f"memledger: {exc}", reason="configuration")
    if database_url is None:
        return config
    try:
        url = WorkerConfig._database_url(database_url)
    except ValueError as exc:
        _refuse(f"memledger: --database-url: {exc}", reason="usage")
    return config.model_copy(update={"database_url": url})


def _refuse(message: str, *, reason: str) -> NoReturn:
    """``message`` on stderr and exit status 2 (the output module loads Rich: only when there is something to say)."""
    from worker.cli.output import fail

    fail(message, code=2, reason=reason)


def bound_scope(config: WorkerConfig) -> str:
    """The bound account's scope, the default of every ``--scope``."""
    return f"account:{config.account}"


@contextmanager
def cli_runtime(*, log_level: str = "WARNING", database_url: str | None = None) -> Iterator[Runtime]:
    """A runtime for one short command (nothing started), closed at the end; errors become messages."""
    from worker.cli.ledger import cli_errors
    from worker.logging import configure_logging

    config = cli_config(database_url)
    configure_logging(fmt=config.log_format, level=log_level)
    with cli_errors():
        from worker.runtime import build_runtime

        runtime = build_runtime(config)
        try:
            yield runtime
        finally:
            runtime.close(timeout_s=0)


# ---------------------------------------------------------------------- processes
def serve(
    host: Annotated[str, typer.Option("--host", help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[
        int | None,
        typer.Option("--port", help="TCP port (default: MEMLEDGER_PORT, else 8080).", min=0, max=65535),
    ] = None,
    no_worker: Annotated[
        bool, typer.Option("--no-worker", help="API node only: no dramatiq worker here (needs MEMLEDGER_REDIS_URL).")
    ] = False,
    banner: Annotated[
        bool | None,
        typer.Option(
            "--banner/--no-banner",
            help="Print the first screen (account, protocol reference, a first curl); default: on a terminal.",
            show_default=False,
        ),
    ] = None,
    database_url: DbUrl = None,
) -> None:
    """Serve POST /rpc, /healthz, /livez, /metrics and /ops; run the worker, janitor and sweep unless --no-worker."""
    from worker.cli.banner import banner_lines
    from worker.cli.ledger import cli_errors
    from worker.cli.output import fail, is_terminal
    from worker.http.admission import check_bind
    from worker.http.server import listen, run_server
    from worker.logging import configure_logging
    from worker.runtime import build_runtime

    config = cli_config(database_url)
    port = port if port is not None else config.port
    if no_worker and config.embedded:
        fail("--no-worker needs MEMLEDGER_REDIS_URL: with the embedded queue, serve is the only worker", code=2)
    try:
        check_bind(host, auth=config.auth)
    except BindRefused as exc:
        fail(f"memledger serve: {exc}", code=2)
    try:
        sock = listen(host, port)  # before anything starts: a port in use is one line and exit status 1
    except PortUnavailable as exc:
        fail(f"memledger serve: {exc}", code=1)
    if banner if banner is not None else is_terminal():
        typer.echo("\n".join(banner_lines(config, host=host, port=port, run_worker=not no_worker)))
    configure_logging(fmt=config.log_format, level=config.log_level)
    with cli_errors():
        try:
            runtime = build_runtime(config)
        except BaseException:
            sock.close()
            raise
    run_server(runtime, host=host, port=port, run_worker=not no_worker, sock=sock)


def worker(
    processes: Annotated[
        int | None, typer.Option("--processes", "-p", min=1, max=64, help="Worker processes (default: config).")
    ] = None,
    threads: Annotated[
        int | None, typer.Option("--threads", "-t", min=1, max=256, help="Threads per process (default: config).")
    ] = None,
    database_url: DbUrl = None,
) -> None:
    """Run dramatiq worker processes on the Redis broker, with the janitor; stop cleanly on SIGTERM."""
    from worker.cli.output import fail
    from worker.jobs.supervisor import run_worker, supervise

    config = cli_config(database_url)  # refuses a bad URL here, with the other usage errors
    if config.embedded:
        fail(
            "memledger worker needs MEMLEDGER_REDIS_URL; with the embedded queue, memledger serve runs the worker",
            code=2,
        )
    count = processes or config.worker_processes
    if count == 1:
        raise typer.Exit(run_worker(threads=threads, config=config))
    from worker.gauges import OpsCollector, lazy_database_source
    from worker.logging import configure_logging

    configure_logging(fmt=config.log_format, level=config.log_level)
    ops = OpsCollector(
        lazy_database_source(config.database_url, account=config.account, sqlite_synchronous=config.sqlite_synchronous),
        max_scopes=config.ops_metrics_max_scopes,
    )
    raise typer.Exit(
        supervise(
            processes=count,
            threads=threads or config.worker_threads,
            metrics_port=config.metrics_listen_port,
            shutdown_timeout_s=config.shutdown_timeout_s,
            extra_collectors=[ops],
            operator_token=config.operator_token,
            child_settings={"MEMLEDGER_DATABASE_URL": database_url} if database_url is not None else None,
        )
    )


def register(app: typer.Typer) -> None:
    """Attach ``serve`` and ``worker`` to the top-level app."""
    app.command("serve")(serve)
    app.command("worker")(worker)
