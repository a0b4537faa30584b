"""Hand-written writes on the ``sqlite3`` module for ``bench_ledger.py``: the ledger's rows, no ledger around them.

:class:`RawSqlite` is what a careful program saving the same rows would do; :class:`LedgerStatements`
replays the exact statements ``Ledger.save`` runs (a save, and an edit of one record), so the
database's share of a write is measured apart from the ledger's Python. Both open a database made
by the project's migration (same tables, indexes, CHECKs and FTS triggers), with the pragmas the
ledger sets on its connections, at the ``synchronous`` level asked for.
"""

from __future__ import annotations

import secrets
import sqlite3
from pathlib import Path

from ledger import open_ledger

# The pragmas ledger.store.sqlite sets on every SQLite connection, so the baseline pays the same.
PRAGMAS = (
    "PRAGMA journal_mode=WAL",
    "PRAGMA secure_delete=ON",
    "PRAGMA busy_timeout=5000",
    "PRAGMA foreign_keys=ON",
)


class RawSqlite:
    """What a hand-written save on the sqlite3 module does: the same rows, in one transaction.

    The database comes from the project's migration (same tables, indexes, CHECKs and
    FTS triggers), so the record insert fires the same FTS insert as the ledger's.
    """

    # The schema keeps each scope's counts (triggers, migration 0009): a hand-written save reads them.
    BUDGET = "SELECT max_records, active_count + proposed_count FROM scope_settings WHERE scope_key = ?"
    INSERT = (
        "INSERT INTO memory_records (id, scope_key, kind, body, provenance, status, source_session_id, supersedes, "
        "superseded_by, confidence_bps, rationale, valid_from, valid_to, expires_at, conflict_group, erased_at, "
        "created_at, updated_at) VALUES (?, ?, 'fact', ?, 'user_explicit', 'active', NULL, '[]', NULL, NULL, NULL, "
        "?, NULL, NULL, NULL, NULL, ?, ?)"
    )
    EVENT = (
        "INSERT INTO ledger_events (at, scope_key, event, record_id, reason, run_id, detail) "
        "VALUES (?, ?, 'saved', ?, NULL, NULL, '{\"supersedes\": []}')"
    )

    def __init__(self, path: Path, *, checkpoints_aside: bool = False, synchronous: str = "normal") -> None:
        open_ledger(f"sqlite:///{path}").close()  # the migration, nothing else
        self.conn = sqlite3.connect(path, isolation_level=None)
        for pragma in PRAGMAS:
            self.conn.execute(pragma)
        self.conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
        # The ledger checkpoints the WAL in a thread of its own (ledger/store/sqlite_wal.py), not in a commit:
        # checkpoints_aside leaves the baseline's checkpoints out of its saves too, run between rounds instead.
        self.checkpoints_aside = checkpoints_aside
        if checkpoints_aside:
            self.conn.execute("PRAGMA wal_autocheckpoint=0")

    def checkpoint(self) -> None:
        """Between rounds, untimed: the checkpoint the saves of a baseline with ``checkpoints_aside`` left."""
        if self.checkpoints_aside:
            self.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def add_scope(self, scope: str, max_records: int) -> None:
        self.conn.execute(
            "INSERT INTO scope_settings (scope_key, max_records, created_at, updated_at) VALUES (?, ?, 0, 0)",
            (scope, max_records),
        )

    def save(self, scope: str, body: str, now_us: int) -> str:
        record_id = "mem_" + secrets.token_hex(12)
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            budget, held = conn.execute(self.BUDGET, (scope,)).fetchone()
            if held + 1 > budget:
                raise RuntimeError(f"{scope} is full")
            conn.execute(self.INSERT, (record_id, scope, body, now_us, now_us, now_us))
            conn.execute(self.EVENT, (now_us, scope, record_id))
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return record_id

    def count(self, sql: str) -> int:
        return int(self.conn.execute(sql).fetchone()[0])

    def close(self) -> None:
        self.conn.close()


class LedgerStatements(RawSqlite):
    """The exact statements ``Ledger.save`` runs, replayed on raw sqlite3: the database's share of a save or an edit."""

    # The scope's stamp, returning the budget, the counts and whether anything is due at the instant.
    STAMP = (
        "INSERT INTO scope_settings (scope_key, max_records, created_at, updated_at, latest_at) "
        "VALUES (?, 200, ?, ?, ?) ON CONFLICT (scope_key) DO UPDATE SET latest_at = CASE "
        "WHEN scope_settings.latest_at IS NULL OR scope_settings.latest_at < excluded.latest_at "
        "THEN excluded.latest_at WHEN 1 = 1 THEN scope_settings.latest_at ELSE scope_settings.latest_at + 1 END "
        "RETURNING latest_at, max_records, active_count, proposed_count, EXISTS (SELECT * FROM memory_records "
        "WHERE status IN ('active', 'proposed') AND expires_at IS NOT NULL AND expires_at <= "
        "CASE WHEN 1 = 1 THEN ? ELSE scope_settings.latest_at END AND +memory_records.scope_key = ?)"
    )
    STATEMENTS = 5  # BEGIN IMMEDIATE, the stamp, the two inserts, COMMIT
    # An edit's: the target read by id, its closing with its event, then the new record's insert naming it.
    TARGET = "SELECT * FROM memory_records WHERE id = ?"
    CLOSE = (
        "UPDATE memory_records SET status = 'superseded', superseded_by = ?, valid_to = ?, updated_at = ? "
        "WHERE id = ? AND status = 'active'"
    )
    CLOSED = (
        "INSERT INTO ledger_events (at, scope_key, event, record_id, reason, run_id, detail) "
        "VALUES (?, ?, 'superseded', ?, NULL, NULL, ?)"
    )
    SUCCESSOR = (
        "INSERT INTO memory_records (id, scope_key, kind, body, provenance, status, source_session_id, supersedes, "
        "superseded_by, confidence_bps, rationale, valid_from, valid_to, expires_at, conflict_group, erased_at, "
        "created_at, updated_at) VALUES (?, ?, 'fact', ?, 'user_explicit', 'active', NULL, ?, NULL, NULL, NULL, "
        "?, NULL, NULL, NULL, NULL, ?, ?)"
    )
    SAVED = (
        "INSERT INTO ledger_events (at, scope_key, event, record_id, reason, run_id, detail) "
        "VALUES (?, ?, 'saved', ?, NULL, NULL, ?)"
    )
    EDIT_STATEMENTS = 8  # BEGIN IMMEDIATE, the stamp, the read, the closing, two events, the insert, COMMIT

    def save(self, scope: str, body: str, now_us: int) -> str:
        record_id = "mem_" + secrets.token_hex(12)
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(self.STAMP, (scope, now_us, now_us, now_us, now_us, scope)).fetchone()
        conn.execute(self.INSERT, (record_id, scope, body, now_us, now_us, now_us))
        conn.execute(self.EVENT, (now_us, scope, record_id))
        conn.execute("COMMIT")
        return record_id

    def edit(self, scope: str, target: str, body: str, now_us: int) -> str:
        """Supersede ``target`` with ``body`` at ``now_us``: the new record's id."""
        record_id = "mem_" + secrets.token_hex(12)
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(self.STAMP, (scope, now_us, now_us, now_us, now_us, scope)).fetchone()
        conn.execute(self.TARGET, (target,)).fetchall()
        conn.execute(self.CLOSE, (record_id, now_us, now_us, target))
        conn.execute(self.CLOSED, (now_us, scope, target, f'{{"superseded_by": "{record_id}"}}'))
        conn.execute(self.SUCCESSOR, (record_id, scope, body, f'["{target}"]', now_us, now_us, now_us))
        detail = f'{{"provenance": "user_explicit", "supersedes": ["{target}"]}}'
        conn.execute(self.SAVED, (now_us, scope, record_id, detail))
        conn.execute("COMMIT")
        return record_id
