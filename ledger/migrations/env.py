"""Alembic environment: runs on a connection handed in by ``ledger.db.upgrade`` or on ``sqlalchemy.url``."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine

from ledger.schema import load_every_table
from ledger.store.ddl import include_object

config = context.config


def _run(connection: Connection) -> None:
    # The FTS5 shadow tables and the PostgreSQL GIN index are written by hand in the migrations;
    # autogenerate compares everything else against every package's tables (the one schema).
    context.configure(
        connection=connection,
        target_metadata=load_every_table(),
        render_as_batch=connection.dialect.name == "sqlite",
        include_object=include_object,
        transaction_per_migration=False,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("no database: pass a connection or set sqlalchemy.url")
    engine = create_engine(url)
    with engine.begin() as conn:
        _run(conn)
    engine.dispose()


if context.is_offline_mode():
    raise RuntimeError("offline SQL generation is not supported; run `memledger db upgrade`")
run_migrations_online()
