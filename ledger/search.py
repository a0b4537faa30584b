"""Full-text search over active bodies: FTS5 + bm25 on SQLite, tsvector + GIN on PostgreSQL.

Any user text is a valid query: on SQLite each word becomes a quoted FTS5 string
(so no operator or syntax error can escape); on PostgreSQL the words go to
``websearch_to_tsquery``, which never raises on user text. Words are OR-ed and ranked.
"""

from __future__ import annotations

import re

from sqlalchemy import Connection, RowMapping, text

from ledger.rows import COLUMNS

MAX_TERMS = 32
_WORD = re.compile(r"\w+", re.UNICODE)
_PREFIXED = ", ".join(f"m.{c.strip()}" for c in COLUMNS.split(","))
_LIVE = "m.scope_key = :s AND m.status = 'active' AND (m.expires_at IS NULL OR m.expires_at > :n)"


def fts5_query(query: str) -> str:
    """Quote every word and OR them: ``"deploy" OR "region"``; bm25 ranks records matching more words first.

    Empty when the query has no word at all.
    """
    return " OR ".join(f'"{word}"' for word in _WORD.findall(query)[:MAX_TERMS])


def search_active(conn: Connection, scope: str, query: str, *, limit: int, now_us: int) -> list[RowMapping]:
    if conn.dialect.name == "sqlite":
        match = fts5_query(query)
        if not match:
            return []
        sql = (
            f"SELECT {_PREFIXED} FROM memory_fts f JOIN memory_records m ON m.seq = f.rowid "
            f"WHERE memory_fts MATCH :q AND {_LIVE} ORDER BY bm25(memory_fts), m.seq LIMIT :lim"
        )
        return list(conn.execute(text(sql), {"q": match, "s": scope, "n": now_us, "lim": limit}).mappings())
    words = _WORD.findall(query)[:MAX_TERMS]
    if not words:
        return []
    cleaned = " or ".join(words)
    vector = "to_tsvector('english', coalesce(m.body, ''))"
    sql = (
        f"SELECT {_PREFIXED} FROM memory_records m WHERE {_LIVE} "
        f"AND {vector} @@ websearch_to_tsquery('english', :q) "
        f"ORDER BY ts_rank({vector}, websearch_to_tsquery('english', :q)) DESC, m.seq LIMIT :lim"
    )
    return list(conn.execute(text(sql), {"q": cleaned, "s": scope, "n": now_us, "lim": limit}).mappings())
