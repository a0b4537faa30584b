"""The derived-text registry: text built from records (run prompts and answers, packet audits,
extraction digests) is registered by whoever stores it, keyed by the record ids it contains.

Forgetting a record erases, in the delete's own transaction, every registered text that holds
a record of the forgotten chain: the registered columns of that row are set to NULL. The
ledger never parses another package's text; the registry is data (``derived_texts``), so any
program that deletes — the service, the command line, a library caller — erases through it,
whether or not the package that wrote the text was ever imported.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence

from sqlalchemy import Connection, Table, column, insert, select, table, update

from ledger.errors import InvalidArgument
from ledger.schema import DERIVED, RECORDS
from ledger.store import Prepared, param, run
from ledger.store import rows as store_rows

_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_INSERT = Prepared(insert(DERIVED), column_keys=("scope_key", "owner", "key", "record_id", "columns", "created_at"))
_IDS = param("ids", expanding=True)
_ANY_ERASED = Prepared(
    select(RECORDS.c.id)
    .where(RECORDS.c.scope_key == param("s"), RECORDS.c.id.in_(_IDS), RECORDS.c.erased_at.is_not(None))
    .limit(1)
)


def _spec(owner: Table | str, key_column: str, columns: Sequence[str]) -> tuple[str, str]:
    name = owner.name if isinstance(owner, Table) else owner
    names = [name, key_column, *columns]
    if not columns or any(not isinstance(n, str) or not _NAME.match(n) for n in names):
        raise InvalidArgument("a derived text names a table, its key column and at least one text column")
    if isinstance(owner, Table) and any(c not in owner.c for c in ["scope_key", key_column, *columns]):
        raise InvalidArgument(f"{name} has no column among {['scope_key', key_column, *columns]}")
    return name, json.dumps({"key_column": key_column, "columns": list(columns)}, sort_keys=True)


def register(
    conn: Connection,
    *,
    scope_key: str,
    owner: Table | str,
    key: str,
    record_ids: Iterable[str],
    columns: Sequence[str],
    key_column: str = "id",
    now_us: int,
) -> None:
    """Record that ``owner``'s row ``key`` holds, in ``columns``, text derived from ``record_ids`` of ``scope_key``.

    If one of the records is already erased (forgotten while the text was being built), the
    text is erased at once.
    """
    name, spec = _spec(owner, key_column, columns)
    ids = sorted(set(record_ids))
    if not ids:
        return
    rows = [
        {"scope_key": scope_key, "owner": name, "key": key, "record_id": rid, "columns": spec, "created_at": now_us}
        for rid in ids
    ]
    run(conn, _INSERT, rows)
    if store_rows(conn, _ANY_ERASED, {"s": scope_key, "ids": ids}):
        _erase(conn, scope_key, name, spec, key)


def erase_derived(conn: Connection, scope_key: str, record_ids: Sequence[str]) -> int:
    """Erase every registered text of ``scope_key`` that holds one of ``record_ids``. Returns how many rows."""
    if not record_ids:
        return 0
    found = conn.execute(
        select(DERIVED.c.owner, DERIVED.c.columns, DERIVED.c.key)
        .where(DERIVED.c.scope_key == scope_key, DERIVED.c.record_id.in_(list(record_ids)))
        .distinct()
    ).all()
    for owner, spec, key in found:
        _erase(conn, scope_key, owner, spec, key)
    return len(found)


def _erase(conn: Connection, scope_key: str, owner: str, spec: str, key: str) -> None:
    parsed = json.loads(spec)
    key_column, columns = parsed["key_column"], parsed["columns"]
    target = table(owner, column("scope_key"), column(key_column), *(column(c) for c in columns))
    where = (target.c.scope_key == scope_key, target.c[key_column] == key)
    conn.execute(update(target).where(*where).values(dict.fromkeys(columns)))
