"""Alembic environment: runs on a connection handed in by ``ledger.db.upgrade`` or on ``sqlalchemy.url``."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine

config = context.config


def _run(connection: Connection) -> None:
    # FTS5 shadow tables and triggers are written by hand in the migrations; autogenerate
    # must not try to drop them, so only the SQLModel metadata tables are compared.
    def include_object(obj: object, name: str | None, type_: str, reflected: bool, compare_to: object) -> bool:
        return not (type_ == "table" and name is not None and name.startswith("memory_fts"))

    context.configure(
        connection=connection,
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
