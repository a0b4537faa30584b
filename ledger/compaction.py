"""``memledger db compact``: make erasure reach the database files (docs/operations.md).

A forget erases a body in the rows, but on PostgreSQL the old row versions (dead tuples)
stay in the table's files until a ``VACUUM FULL`` rewrites them, and the WAL holds them
until a checkpoint lets its segments be recycled. On SQLite a forget already scrubs
(``secure_delete``, FTS optimize, ``VACUUM``, a truncating checkpoint); compacting also
returns the freed pages of other deletions to the file system.

:func:`compact` rewrites every table of the ledger's schema (PostgreSQL ``VACUUM FULL``
each, then ``CHECKPOINT``; SQLite ``VACUUM`` then ``wal_checkpoint(TRUNCATE)``). It takes
an exclusive lock per table while it runs: run it in a quiet hour. What it cannot reach
(WAL segments not yet recycled, WAL archives, replicas' lag, backups) is described in
docs/operations.md. The dialect mechanics are the stores' (``Store.compact``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import Engine, inspect

from ledger.store import store_for


@dataclass(frozen=True, slots=True)
class CompactReport:
    """What :func:`compact` did: the tables rewritten and the database's size before and after."""

    dialect: str
    tables: list[str]
    checkpoint: bool
    bytes_before: int
    bytes_after: int
    notes: list[str] = field(default_factory=list)
    search_index: str | None = None  # what is wrong with the full-text index afterwards (None: sound)

    def to_json(self) -> dict[str, object]:
        return {
            "dialect": self.dialect,
            "tables": list(self.tables),
            "checkpoint": self.checkpoint,
            "bytesBefore": self.bytes_before,
            "bytesAfter": self.bytes_after,
            "notes": list(self.notes),
            "searchIndex": self.search_index or "ok",
        }


def _ledger_tables(engine: Engine) -> list[str]:
    return sorted(name for name in inspect(engine).get_table_names() if name != "alembic_version")


def compact(engine: Engine) -> CompactReport:
    """Rewrite the ledger's tables so no erased body survives in their files, then checkpoint; then check the
    full-text index (a rewrite copies the index as it is: damage would survive it, and is reported).

    Safe beside live writers: they wait for each table's rewrite (SQLite: for the whole ``VACUUM``).

    Raises:
        sqlalchemy.exc.DBAPIError: the database refused (the CLI reports it).
    """
    store = store_for(engine)
    tables = _ledger_tables(engine)
    before = store.size_bytes(tables)
    checkpoint, notes = store.compact(tables)
    after = store.size_bytes(tables)
    index = store.search_index_problem(thorough=True) if "memory_records" in tables else None  # else: no ledger yet
    return CompactReport(store.dialect, tables, checkpoint, before, after, notes, index)
