"""Serving commands: ``memledger tokens create|list|revoke`` and ``memledger db compact``.

``tokens create ACCOUNT`` prints the new token once (stdout, nothing else on that line,
so ``TOKEN=$(memledger tokens create alice)`` works); only its hash is stored. ``tokens list``
shows ids, accounts and times, never a token. ``tokens revoke ID`` takes effect on the
next request that carries the token.

``db compact`` rewrites the ledger's tables so erased bodies leave the database files
(PostgreSQL ``VACUUM FULL`` + ``CHECKPOINT``; SQLite ``VACUUM`` + a truncating checkpoint).

Exit status: 0 done; 1 refused or failed; 2 usage.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from worker.cli.conventions import DbUrl
from worker.cli.ledger import Json, cli_ledger
from worker.cli.output import emit_json, instant_text, print_message, print_table
from worker.http.tokens import TokenStore

tokens_app = typer.Typer(no_args_is_help=True, help="API tokens for MEMLEDGER_AUTH=tokens: create, list, revoke.")


@tokens_app.command("create")
def tokens_create(
    account: Annotated[str, typer.Argument(help="The account the token speaks for (its scope is account:<ACCOUNT>).")],
    database_url: DbUrl = None,
    as_json: Json = False,
) -> None:
    """Create a token for ACCOUNT and print it once; store it where the client keeps secrets."""
    with cli_ledger(database_url) as led:
        token, secret = TokenStore.for_ledger(led).create(account)
    if as_json:
        emit_json({**token.to_json(), "token": secret})
        return
    typer.echo(secret)
    typer.echo(f"token {token.id} for account:{account}: shown once; only its hash is stored", err=True)


@tokens_app.command("list")
def tokens_list(
    account: Annotated[str | None, typer.Option("--account", help="Only this account's tokens.")] = None,
    database_url: DbUrl = None,
    as_json: Json = False,
) -> None:
    """Every token's id, account and times (revoked ones too); never the tokens themselves."""
    with cli_ledger(database_url) as led:
        found = TokenStore.for_ledger(led).list(account)
    if as_json:
        emit_json([t.to_json() for t in found])
        return
    table = Table(title="API tokens")
    for column in ("id", "account", "created", "last used", "revoked"):
        table.add_column(column)
    for t in found:
        table.add_row(
            t.id, t.account, instant_text(t.created_at), instant_text(t.last_used_at), instant_text(t.revoked_at)
        )
    print_table(table)


@tokens_app.command("revoke")
def tokens_revoke(
    token_id: Annotated[str, typer.Argument(help="The token's id (tok_…, from `memledger tokens list`).")],
    database_url: DbUrl = None,
    as_json: Json = False,
) -> None:
    """Revoke a token: the next request that carries it is refused (401). Safe to repeat."""
    with cli_ledger(database_url) as led:
        token = TokenStore.for_ledger(led).revoke(token_id)
    if as_json:
        emit_json(token.to_json())
        return
    print_message(f"token {token.id} of account:{token.account} is revoked.", style="green")


def register(app: typer.Typer) -> None:
    """Attach ``tokens`` to the top-level app."""
    app.add_typer(tokens_app, name="tokens")
