"""Forgetting: erase a chain's bodies from the rows, the FTS index, free pages and the WAL."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, case, func, or_, update

from ledger import record_rows as rows
from ledger.audit import scrub_audits
from ledger.derived_text import erase_derived
from ledger.models import Status
from ledger.schema import RECORDS, SAVE_REQUESTS
from ledger.store import Prepared, lit, param, store_for

log = logging.getLogger(__name__)
M = RECORDS.c
_N = param("n")
_IDS = param("ids", expanding=True)
# The source_session_id of a proposal imported from an entry file (ledger.files.exchange.import_key): the file's
# name and a digest of its fact, so it goes with the body (a forgotten body leaves no hash to test guesses against).
IMPORT_KEY_PREFIX = "file:"
# Case-sensitive on both databases: SQLite's LIKE (what startswith() makes) ignores ASCII case, so a conversation's
# session id such as "File:chat-42" would go too.
_IMPORTED = func.substr(M.source_session_id, 1, len(IMPORT_KEY_PREFIX)) == IMPORT_KEY_PREFIX
_ERASE = Prepared(
    update(RECORDS)
    .where(M.id.in_(_IDS))
    .values(
        body=None,
        rationale=None,
        source_session_id=case((_IMPORTED, None), else_=M.source_session_id),
        erased_at=_N,
        updated_at=_N,
    )
)
# A save's fingerprint hashes its body: a forgotten body leaves no hash to test guesses against.
_ERASE_FINGERPRINTS = Prepared(
    update(SAVE_REQUESTS)
    .where(SAVE_REQUESTS.c.scope_key == param("s"), SAVE_REQUESTS.c.record_id.in_(_IDS))
    .values(fingerprint=None)
)
_FORGET_PROPOSALS = Prepared(update(RECORDS).where(M.id.in_(_IDS)).values(status=Status.DELETED.value, updated_at=_N))
# A proposal's interval is empty; these are the ones never accepted.
_UNACCEPTED = (Status.PROPOSED.value, Status.REJECTED.value, Status.EXPIRED.value)


def erase_chain(conn: Connection, head: Mapping[Any, Any], now_us: int) -> tuple[list[str], list[str]]:
    """Null the body and rationale of ``head`` and every predecessor (and an entry file's import key, and the
    fingerprints of the saves that wrote them, :mod:`ledger.request_ids`). Returns (ids, erased bodies).

    The head must already be ``deleted`` so that the FTS trigger has removed its
    active body; predecessors are superseded and were never indexed. Proposals that
    would supersede a record of the chain are forgotten too (status ``deleted``).
    """
    chain = [head, *rows.ancestors(conn, head)]
    chain += _dependent_proposals(conn, head["scope_key"], [row["id"] for row in chain], now_us)
    ids = [row["id"] for row in chain]
    bodies = [row["body"] for row in chain if row["body"]]
    bodies += [row["rationale"] for row in chain if row["rationale"]]
    store = store_for(conn.engine)
    store.run(conn, _ERASE, {"n": now_us, "ids": ids})
    store.send(conn, _ERASE_FINGERPRINTS, {"s": head["scope_key"], "ids": ids})
    erase_derived(conn, head["scope_key"], ids)
    scrub_audits(conn, head["scope_key"], ids)  # the ledger's own audit format: only forgotten entries lose their body
    store.erase_in_transaction(conn)
    return ids, bodies


def _dependent_proposals(conn: Connection, scope: str, ids: list[str], now_us: int) -> list[Mapping[Any, Any]]:
    """Proposals (open, rejected, or expired unaccepted) that would supersede an erased record: built from its
    body (a consolidation merge restates it), so they are forgotten with it. They could never be
    accepted anyway, since their target is no longer active."""
    stmt = rows.SELECT_RECORDS.where(
        M.scope_key == scope,
        M.valid_to == M.valid_from,
        M.status.in_(lit(_UNACCEPTED)),
        or_(*(M.supersedes.like(f'%"{rid}"%') for rid in ids)),
    ).order_by(M.valid_from, M.seq)
    found: list[Mapping[Any, Any]] = list(rows.fetch_rows(conn, stmt, {}))
    if found:
        store_for(conn.engine).run(conn, _FORGET_PROPOSALS, {"n": now_us, "ids": [r["id"] for r in found]})
    return found
