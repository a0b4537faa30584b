"""Full-text search over active bodies: FTS5 + bm25 on SQLite, tsvector + GIN on PostgreSQL.

Any user text is a valid query: on SQLite each word becomes a quoted FTS5 string (so no
operator or syntax error can escape); on PostgreSQL the words go to ``websearch_to_tsquery``,
which never raises on user text. Words are OR-ed and ranked. The statements are the stores'.
"""

from __future__ import annotations

from sqlalchemy import Connection, RowMapping

from ledger.store import store_for
from ledger.store.sqlite import MAX_TERMS, fts5_query

__all__ = ["MAX_TERMS", "fts5_query", "search_active"]


def search_active(conn: Connection, scope: str, query: str, *, limit: int, now_us: int) -> list[RowMapping]:
    return store_for(conn.engine).search(conn, scope, query, limit=limit, now_us=now_us)
