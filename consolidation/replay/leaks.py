"""Erased leaks: a word of a forgotten body found anywhere it could hide.

Two places are searched: every text and JSON column of every ledger table (records of
any status, runs' prompts and answers, events, packet audits, digests, derived texts),
read through :meth:`ledger.Ledger.reading`; and, for a SQLite ledger, the bytes of the
database file and its WAL (free pages and FTS segments included).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import JSON, String, Table, Text, select
from sqlalchemy.engine import make_url

from consolidation.replay.score import find_secrets
from ledger import Ledger
from ledger.schema import load_every_table


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _tables() -> list[Table]:
    return list(load_every_table().sorted_tables)  # every package's tables, wherever a secret could land


def _texts(led: Ledger, table: Table, scope_prefix: str) -> Iterator[str]:
    columns = [c for c in table.c if isinstance(c.type, String | Text | JSON)]
    if not columns:
        return
    query = select(*columns)
    if "scope_key" in table.c:
        query = query.where(table.c.scope_key.startswith(scope_prefix, autoescape=True))
    with led.reading() as db:
        for row in db.execute(query):
            yield from (t for t in map(_text, row) if t)


def scan_tables(led: Ledger, secrets: Sequence[str], *, scope_prefix: str) -> list[str]:
    """``table: secret`` for every secret found in a table (rows of scopes starting ``scope_prefix``)."""
    places = []
    for table in _tables():
        places += [f"{table.name}: {s}" for s in find_secrets(_texts(led, table, scope_prefix), secrets)]
    return places


def scan_files(database_url: str, secrets: Sequence[str]) -> list[str]:
    """``file: secret`` for every secret whose bytes (as written, or lower-cased as FTS keeps them) are in the
    SQLite database file or its WAL; nothing for another database."""
    url = make_url(database_url)
    if not url.drivername.startswith("sqlite") or not url.database or url.database == ":memory:":
        return []
    places = []
    for path in (Path(url.database), Path(url.database + "-wal")):
        if not path.exists():
            continue
        data = path.read_bytes()
        for secret in secrets:
            if secret.encode() in data or secret.lower().encode() in data:
                places.append(f"{path.name}: {secret}")
    return places
