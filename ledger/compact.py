"""``memledger db compact``: make erasure reach the database files (SPEC 3.3 forget, issue 9 part 9).

A forget erases a body in the rows, but on PostgreSQL the old row versions (dead tuples)
stay in the table's files until a ``VACUUM FULL`` rewrites them, and the WAL holds them
until a checkpoint lets its segments be recycled. On SQLite a forget already scrubs
(``secure_delete``, FTS optimize, a truncating checkpoint); ``VACUUM`` also returns the
freed pages to the file system.

:func:`compact` rewrites every table of the ledger's schema (PostgreSQL ``VACUUM FULL``
each, then ``CHECKPOINT``; SQLite ``VACUUM`` then ``wal_checkpoint(TRUNCATE)``). It takes
an exclusive lock per table while it runs: run it in a quiet hour. What it cannot reach
(WAL segments not yet recycled, WAL archives, replicas' lag, backups) is described in
docs/operations.md. Dialect SQL lives here until ``ledger/store/`` takes it.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from sqlalchemy import Engine, inspect, text
from sqlalchemy.exc import DBAPIError

from ledger.db import is_sqlite

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CompactReport:
    """What :func:`compact` did: the tables rewritten and the database's size before and after."""

    dialect: str
    tables: list[str]
    checkpoint: bool
    bytes_before: int
    bytes_after: int
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {
            "dialect": self.dialect,
            "tables": list(self.tables),
            "checkpoint": self.checkpoint,
            "bytesBefore": self.bytes_before,
            "bytesAfter": self.bytes_after,
            "notes": list(self.notes),
        }


def _ledger_tables(engine: Engine) -> list[str]:
    return sorted(name for name in inspect(engine).get_table_names() if name != "alembic_version")


def _sqlite_bytes(engine: Engine) -> int:
    path = engine.url.database or ""
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if path and os.path.exists(p))


def _pg_bytes(engine: Engine, tables: list[str]) -> int:
    with engine.connect() as conn:
        return sum(int(conn.execute(text("SELECT pg_total_relation_size(:t)"), {"t": t}).scalar_one()) for t in tables)


def compact(engine: Engine) -> CompactReport:
    """Rewrite the ledger's tables so no erased body survives in their files, then checkpoint.

    Raises:
        sqlalchemy.exc.DBAPIError: the database refused (the CLI reports it).
    """
    tables = _ledger_tables(engine)
    notes: list[str] = []
    if is_sqlite(engine):
        before = _sqlite_bytes(engine)
        # On the DB-API connection itself: the engine begins a transaction for every SQLAlchemy
        # connection (ledger.db), and VACUUM cannot run inside one.
        raw = engine.raw_connection()
        try:
            raw.driver_connection.execute("VACUUM")  # type: ignore[union-attr]
            raw.driver_connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()  # type: ignore[union-attr]
        finally:
            raw.close()
        return CompactReport("sqlite", tables, True, before, _sqlite_bytes(engine), notes)
    before = _pg_bytes(engine, tables)
    quote = engine.dialect.identifier_preparer.quote
    checkpoint = True
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        for table in tables:
            log.info("VACUUM FULL %s", table)
            conn.exec_driver_sql(f"VACUUM FULL {quote(table)}")
        try:
            conn.exec_driver_sql("CHECKPOINT")
        except DBAPIError:
            checkpoint = False
            notes.append(
                "CHECKPOINT needs a superuser or the pg_checkpoint role; the next scheduled checkpoint "
                "(checkpoint_timeout) does the same"
            )
    return CompactReport("postgresql", tables, checkpoint, before, _pg_bytes(engine, tables), notes)
