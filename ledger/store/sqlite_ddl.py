"""The SQLite schema the tables cannot state (:data:`OBJECTS`): full-text search, the proposals' index and the triggers.

The tables and their indexes are the Core tables of :mod:`ledger.models`; what is here is
written once, in SQLite's own words, and every path that makes a schema takes it from here:
the migrations that create or re-create an object (its latest revision), and the test that
compares a migrated database with these statements and those tables
(``tests/ledger/test_schema_ddl.py``). SQLite keeps a trigger's text as written, so the
statements are compared as they are. A change here needs a migration that re-creates the
object on existing databases (the test holds each statement's digest and the revision that
created it, and fails until both are updated); a batch ``ALTER`` of ``memory_records`` drops
its triggers, and must re-create them from here (:func:`on_table`).
"""

from __future__ import annotations

from ledger.store.schema_object import SchemaObject

# FTS5 external-content index over *active* bodies only, stemmed (``porter``) as PostgreSQL's
# ``english`` configuration is. The delete command of an external-content table must carry the
# old values, so every trigger passes old.body.
FTS = (
    SchemaObject(
        "table",
        "memory_fts",
        "",
        "CREATE VIRTUAL TABLE memory_fts USING fts5(body, content='memory_records', content_rowid='seq', "
        "tokenize='porter unicode61')",
    ),
    SchemaObject(
        "trigger",
        "memory_fts_ai",
        "memory_records",
        """CREATE TRIGGER memory_fts_ai AFTER INSERT ON memory_records WHEN new.status = 'active' BEGIN
             INSERT INTO memory_fts(rowid, body) VALUES (new.seq, new.body);
           END""",
    ),
    SchemaObject(
        "trigger",
        "memory_fts_ad",
        "memory_records",
        """CREATE TRIGGER memory_fts_ad AFTER DELETE ON memory_records WHEN old.status = 'active' BEGIN
             INSERT INTO memory_fts(memory_fts, rowid, body) VALUES ('delete', old.seq, old.body);
           END""",
    ),
    # One trigger, delete before insert: SQLite fires separate triggers newest first, so two
    # triggers would re-insert and then delete an active row that stays active (emptying its entry).
    SchemaObject(
        "trigger",
        "memory_fts_au",
        "memory_records",
        """CREATE TRIGGER memory_fts_au AFTER UPDATE OF status, body ON memory_records
           WHEN old.status = 'active' OR new.status = 'active' BEGIN
             INSERT INTO memory_fts(memory_fts, rowid, body)
               SELECT 'delete', old.seq, old.body WHERE old.status = 'active';
             INSERT INTO memory_fts(rowid, body) SELECT new.seq, new.body WHERE new.status = 'active';
           END""",
    ),
)

# A scope's proposals, whatever became of them (pending, rejected, expired unaccepted): the records whose interval is
# empty (ck_memory_records_proposal_empty). A save or an edit of an active record writes nothing here: an active
# record's interval is open, and closing it at a later instant leaves it non-empty. (Any other record closed at the
# instant it began is only one more entry: the queries that read this index name the statuses they want as well.)
# The active set needs no index of its own: ``valid_to IS NULL`` is exactly the active records
# (ck_memory_records_active_open), found through ix_memory_records_asof. In place of PostgreSQL's
# ix_memory_records_scope_status, which every save and edit wrote (one entry a save, three an edit).
PROPOSED = (
    SchemaObject(
        "index",
        "ix_memory_records_proposed",
        "memory_records",
        "CREATE INDEX ix_memory_records_proposed ON memory_records (scope_key) WHERE valid_to = valid_from",
    ),
)

# No row is ever deleted: the database refuses it.
NO_DELETE = (
    SchemaObject(
        "trigger",
        "memory_records_no_delete",
        "memory_records",
        """CREATE TRIGGER memory_records_no_delete BEFORE DELETE ON memory_records BEGIN
         SELECT RAISE(ABORT, 'memory_records rows are never deleted');
       END""",
    ),
)

_HELD = "('active','proposed')"

# Each scope's active and proposed counts, moved in the statement that changes a status.
COUNTS = (
    SchemaObject(
        "trigger",
        "memory_records_count_ai",
        "memory_records",
        f"""CREATE TRIGGER memory_records_count_ai AFTER INSERT ON memory_records
    WHEN new.status IN {_HELD} BEGIN
      UPDATE scope_settings SET active_count = active_count + (new.status = 'active'),
        proposed_count = proposed_count + (new.status = 'proposed')
      WHERE scope_key = new.scope_key;
    END""",
    ),
    SchemaObject(
        "trigger",
        "memory_records_count_au",
        "memory_records",
        f"""CREATE TRIGGER memory_records_count_au AFTER UPDATE OF status ON memory_records
    WHEN old.status <> new.status AND (old.status IN {_HELD} OR new.status IN {_HELD}) BEGIN
      UPDATE scope_settings SET
        active_count = active_count + (new.status = 'active') - (old.status = 'active'),
        proposed_count = proposed_count + (new.status = 'proposed') - (old.status = 'proposed')
      WHERE scope_key = new.scope_key;
    END""",
    ),
)

# Each scope's latest ``valid_to`` (an upper bound: it never moves back), moved in the statement that writes one.
# SQLite's writes read the clock after their lock and never need it; it is kept here so that the column means
# the same on both databases (PostgreSQL's one-statement writes check it).
_LATER = "(latest_closed_at IS NULL OR latest_closed_at < new.valid_to)"
CLOSED = (
    SchemaObject(
        "trigger",
        "memory_records_closed_ai",
        "memory_records",
        f"""CREATE TRIGGER memory_records_closed_ai AFTER INSERT ON memory_records
    WHEN new.valid_to IS NOT NULL BEGIN
      UPDATE scope_settings SET latest_closed_at = new.valid_to WHERE scope_key = new.scope_key AND {_LATER};
    END""",
    ),
    SchemaObject(
        "trigger",
        "memory_records_closed_au",
        "memory_records",
        f"""CREATE TRIGGER memory_records_closed_au AFTER UPDATE OF valid_to ON memory_records
    WHEN new.valid_to IS NOT NULL BEGIN
      UPDATE scope_settings SET latest_closed_at = new.valid_to WHERE scope_key = new.scope_key AND {_LATER};
    END""",
    ),
)

# Everything, in the order it can be created (the FTS table before its triggers).
OBJECTS: tuple[SchemaObject, ...] = (*FTS, *PROPOSED, *NO_DELETE, *COUNTS, *CLOSED)


def on_table(table: str) -> tuple[SchemaObject, ...]:
    """The triggers on ``table``: what a batch ``ALTER`` of it (a table rebuild) drops and must re-create."""
    return tuple(obj for obj in OBJECTS if obj.kind == "trigger" and obj.table == table)


def drop(obj: SchemaObject) -> str:
    """The statement that drops ``obj`` when it exists."""
    return f"DROP {obj.kind.upper()} IF EXISTS {obj.name}"


__all__ = ["CLOSED", "COUNTS", "FTS", "NO_DELETE", "OBJECTS", "PROPOSED", "drop", "on_table"]
