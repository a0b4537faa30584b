"""Forgetting: erase a chain's bodies from the rows, the FTS index, free pages and the WAL."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, Engine, bindparam, text
from sqlalchemy.exc import DBAPIError

from ledger import rows
from ledger.audit import scrub_audits
from ledger.db import BUSY_TIMEOUT_MS, execute
from ledger.derived import erase_derived

log = logging.getLogger(__name__)

_ERASE = text(
    "UPDATE memory_records SET body = NULL, rationale = NULL, erased_at = :n, updated_at = :n WHERE id IN :ids"
).bindparams(bindparam("ids", expanding=True))


def erase_chain(conn: Connection, head: Mapping[Any, Any], now_us: int) -> tuple[list[str], list[str]]:
    """Null the body and rationale of ``head`` and every predecessor. Returns (ids, erased bodies).

    The head must already be ``deleted`` so that the FTS trigger has removed its
    active body; predecessors are superseded and were never indexed. Proposals that
    would supersede a record of the chain are forgotten too (status ``deleted``).
    """
    chain = [head, *rows.ancestors(conn, head)]
    chain += _dependent_proposals(conn, head["scope_key"], [row["id"] for row in chain], now_us)
    ids = [row["id"] for row in chain]
    bodies = [row["body"] for row in chain if row["body"]]
    bodies += [row["rationale"] for row in chain if row["rationale"]]
    conn.execute(_ERASE, {"n": now_us, "ids": ids})
    erase_derived(conn, ids)
    scrub_audits(conn, ids)  # the ledger's own audit format: only the forgotten entries lose their body
    if conn.dialect.name == "sqlite":
        # Rewrite the FTS segments without the deleted entries, inside the delete's own
        # transaction (so it is retried with it); secure_delete zeroes the freed pages.
        execute(conn, "INSERT INTO memory_fts(memory_fts) VALUES ('optimize')", {})
    return ids, bodies


def _dependent_proposals(conn: Connection, scope: str, ids: list[str], now_us: int) -> list[Mapping[Any, Any]]:
    """Proposals (open, rejected, or expired unaccepted) that would supersede an erased record: built from its
    body (a consolidation merge restates it), so they are forgotten with it. They could never be
    accepted anyway, since their target is no longer active."""
    clauses = " OR ".join(f"supersedes LIKE :p{n}" for n in range(len(ids)))
    params: dict[str, Any] = {f"p{n}": f'%"{rid}"%' for n, rid in enumerate(ids)}
    found = rows.fetch_where(
        conn,
        f"scope_key = :s AND valid_to = valid_from AND status IN ('proposed', 'rejected', 'expired') AND ({clauses})",
        {**params, "s": scope},
    )
    if found:
        conn.execute(
            text("UPDATE memory_records SET status = 'deleted', updated_at = :n WHERE id IN :ids").bindparams(
                bindparam("ids", expanding=True)
            ),
            {"n": now_us, "ids": [r["id"] for r in found]},
        )
    return found


def scrub_files(engine: Engine) -> bool:
    """SQLite, after a delete commits: checkpoint the WAL so old page images of erased text leave the files.

    Best effort, never waits and never raises: the delete has committed. ``TRUNCATE`` is
    tried without a busy handler (a checkpoint that waits for readers holds the write
    lock meanwhile and would stall every writer); when a reader holds a snapshot it falls
    back to ``PASSIVE``, which copies what it can, and the next checkpoint overwrites the
    rest of the frames. Returns whether the truncating checkpoint completed.
    """
    try:
        with engine.connect() as conn:
            raw = conn.connection.dbapi_connection
            assert raw is not None
            raw.execute("PRAGMA busy_timeout=0")
            try:
                busy, _log, _done = raw.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                if busy == 0:
                    return True
                raw.execute("PRAGMA wal_checkpoint(PASSIVE)")
            finally:
                raw.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    except (sqlite3.Error, DBAPIError) as exc:
        log.warning("erasure checkpoint failed (%s); the next checkpoint will finish it", type(exc).__name__)
        return False
    log.info("erasure checkpoint could not truncate: a reader held the WAL; the next checkpoint finishes it")
    return False
