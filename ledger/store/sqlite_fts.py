"""SQLite's full-text index (FTS5 ``memory_fts``): erase from it, check it, rebuild it from the records.

A forget merges the whole index (FTS5 ``optimize``) so that the erased body's words leave its
segments. SQLite before 3.44 adds empty levels to the index's structure record on every such
merge (two per forget in the ledger's use) and never removes them; past 2,000 levels FTS5 refuses
to read the record, and every statement that touches the index fails ("database disk image is
malformed", then "vtable constructor failed: memory_fts", after a restart too). A busy ledger
reached that after about a thousand forgets. So a forget that leaves more than
:data:`MAX_LEVELS` levels rebuilds the index from the active records (``delete-all`` writes a
fresh structure): about three merges' work, once every few dozen forgets. Where SQLite bounds the
levels itself the rebuild never runs.

Every function takes the sqlite3 connection of a transaction the caller holds (the store's).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from ledger.store.base import REBUILD_INDEX_HINT

# The row of ``memory_fts_data`` that lists the index's levels and segments (FTS5_STRUCTURE_ROWID).
_STRUCTURE_ROWID = 10
# The marker newer SQLite writes after the structure record's 4-byte cookie (FTS5_STRUCTURE_V2).
_STRUCTURE_V2 = b"\xff\x00\x00\x01"
# The structure record of an empty index, as FTS5 writes it when it creates one: cookie 0, no level, no
# segment, write counter 0.
_EMPTY_STRUCTURE = bytes(7)
# FTS5's own bound on levels where it has one; far below the 2,000 past which it cannot read the record.
MAX_LEVELS = 64

_OPTIMIZE = "INSERT INTO memory_fts(memory_fts) VALUES ('optimize')"
# Rebuilding: every entry dropped (the segments' rows deleted, zeroed by secure_delete, and a fresh structure
# written), then the active records indexed again. Not FTS5's 'rebuild': it would index every row of
# memory_records, superseded bodies too, which no trigger removes from the index when their chain is forgotten.
_DELETE_ALL = "INSERT INTO memory_fts(memory_fts) VALUES ('delete-all')"
_INDEX_ACTIVE = "INSERT INTO memory_fts(rowid, body) SELECT seq, body FROM memory_records WHERE status = 'active'"
# A word no body is likely to hold: the probe opens the index and reads its structure, and finds nothing.
_PROBE = "SELECT rowid FROM memory_fts WHERE memory_fts MATCH '\"memledgerprobe\"' LIMIT 1"
# Every entry of the index well formed and where its term says. (With rank 1 FTS5 would also compare the index
# with every row of memory_records, but the index holds the active rows only, by design.)
_INTEGRITY = "INSERT INTO memory_fts(memory_fts) VALUES ('integrity-check')"
# The indexed documents (one docsize row each) are the active records: none missing, none left over. The active
# records are the open ones (ck_memory_records_active_open): read so, from ix_memory_records_asof alone.
_ACTIVE_SEQS = "SELECT seq FROM memory_records WHERE valid_to IS NULL"
_DOCUMENTS_DIFFER = (
    f"SELECT EXISTS (SELECT id FROM memory_fts_docsize EXCEPT {_ACTIVE_SEQS}) "
    f"OR EXISTS ({_ACTIVE_SEQS} EXCEPT SELECT id FROM memory_fts_docsize)"
)


def erase(raw: sqlite3.Connection) -> None:
    """Merge the index's segments without the deleted entries; rebuild it when its levels pile up."""
    raw.execute(_OPTIMIZE)
    if levels(raw) > MAX_LEVELS:
        _reindex(raw)


def _reindex(raw: sqlite3.Connection) -> None:
    raw.execute(_DELETE_ALL)
    raw.execute(_INDEX_ACTIVE)


def levels(raw: sqlite3.Connection) -> int:
    """How many levels the index's structure record lists (0 when it has none yet)."""
    row = raw.execute("SELECT block FROM memory_fts_data WHERE id = ?", (_STRUCTURE_ROWID,)).fetchone()
    if row is None or not isinstance(row[0], bytes) or len(row[0]) < 5:
        return 0
    block: bytes = row[0]
    return _varint(block, 8 if block[4:8] == _STRUCTURE_V2 else 4)


def _varint(data: bytes, pos: int) -> int:
    """SQLite's variable-length integer at ``data[pos:]``: 7 bits a byte, high bit set while more follow."""
    value = 0
    for i in range(pos, min(pos + 9, len(data))):
        byte = data[i]
        if i == pos + 8:
            return (value << 8) | byte
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            break
    return value


def problem(raw: sqlite3.Connection, *, thorough: bool, busy: Callable[[BaseException], bool]) -> str | None:
    """What is wrong with the index, or None when it is sound.

    The quick check opens the index and reads its structure (what every save, forget and search
    does first), and that it has not grown towards the levels SQLite cannot read. ``thorough``
    also checks every entry (FTS5 ``integrity-check``, which reads the whole index and needs the
    caller's transaction to hold the write lock) and that the indexed documents are exactly the
    active records.

    Raises:
        sqlite3.OperationalError: the database is busy (``busy`` says which errors are; not a damage).
    """
    try:
        raw.execute(_PROBE).fetchall()
        grown = levels(raw)
        if grown > 2 * MAX_LEVELS:  # what a forget leaves is at most MAX_LEVELS; saves add a few
            return (
                f"the full-text index's structure has grown to {grown} levels (SQLite before 3.44 adds some at "
                f"every forget, and cannot read the index past 2,000); {REBUILD_INDEX_HINT}"
            )
        if thorough:
            raw.execute(_INTEGRITY)
            if raw.execute(_DOCUMENTS_DIFFER).fetchone()[0]:
                return f"the full-text index does not list exactly the active records; {REBUILD_INDEX_HINT}"
    except sqlite3.DatabaseError as exc:
        if busy(exc):
            raise
        return f"the full-text index is damaged ({exc}); {REBUILD_INDEX_HINT}"
    return None


def rebuild(raw: sqlite3.Connection, *, busy: Callable[[BaseException], bool]) -> None:
    """Build the index again from the active records, whatever state it is in.

    When the index cannot even be opened (its structure record unreadable: "vtable constructor
    failed"), no FTS5 command can run on it; the structure record is first set to that of an
    empty index, which the rebuild then discards with every other entry.
    """
    try:
        _reindex(raw)
    except sqlite3.DatabaseError as exc:
        if busy(exc):
            raise
        raw.execute(
            "INSERT OR REPLACE INTO memory_fts_data(id, block) VALUES (?, ?)", (_STRUCTURE_ROWID, _EMPTY_STRUCTURE)
        )
        _reindex(raw)
