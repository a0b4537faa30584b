"""Forgetting: erase a chain's bodies from the rows, the FTS index, free pages and the WAL."""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, Engine, bindparam, text
from sqlalchemy.exc import DBAPIError

from ledger import rows as R
from ledger.audit import scrub_audits
from ledger.db import execute
from ledger.derived import scrub_digests, scrub_runs

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
    chain = [head, *R.ancestors(conn, head)]
    chain += _dependent_proposals(conn, head["scope_key"], [row["id"] for row in chain], now_us)
    ids = [row["id"] for row in chain]
    bodies = [row["body"] for row in chain if row["body"]]
    bodies += [row["rationale"] for row in chain if row["rationale"]]
    conn.execute(_ERASE, {"n": now_us, "ids": ids})
    scrub_runs(conn, ids, bodies)
    scrub_audits(conn, ids, bodies)
    scrub_digests(conn, head["scope_key"], bodies)
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
    rows = R.fetch_where(
        conn,
        f"scope_key = :s AND valid_to = valid_from AND status IN ('proposed', 'rejected', 'expired') AND ({clauses})",
        {**params, "s": scope},
    )
    if rows:
        conn.execute(
            text("UPDATE memory_records SET status = 'deleted', updated_at = :n WHERE id IN :ids").bindparams(
                bindparam("ids", expanding=True)
            ),
            {"n": now_us, "ids": [r["id"] for r in rows]},
        )
    return rows


def scrub_files(engine: Engine, *, attempts: int = 20) -> bool:
    """SQLite, after a delete commits: truncate the WAL so old page images of erased text leave the files.

    Best effort and never raises: the delete has committed. Returns whether the
    checkpoint completed (a long-lived reader or another writer can hold it off; the
    next checkpoint then overwrites those frames).
    """
    try:
        with engine.connect() as conn:
            raw = conn.connection.dbapi_connection
            assert raw is not None
            for _ in range(attempts):
                busy, _log, _done = raw.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                if busy == 0:
                    return True
                time.sleep(0.05)
    except (sqlite3.Error, DBAPIError) as exc:
        log.warning("erasure checkpoint failed (%s); the next checkpoint will finish it", type(exc).__name__)
        return False
    log.warning("erasure checkpoint could not complete: a reader held the WAL; it will finish at the next checkpoint")
    return False
