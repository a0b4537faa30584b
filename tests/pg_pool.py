"""Migrated PostgreSQL schemas kept by one test process and handed to one test after another.

Making a schema and replaying the migrations into it was most of a PostgreSQL test's own work. A pooled
schema is instead brought back to the state the migrations left, when it is handed out:

* every backend still connected to it from the previous test is ended (the URLs carry the schema's name
  as ``application_name``), and the schema gets a new name, so a thread or process a test left behind
  finds no tables rather than the next test's rows;
* its catalog is compared with the migrated one (tables, columns, defaults, constraints, indexes,
  triggers, functions, sequences, types): a test that changed it gets a newly migrated schema instead;
* every table with any page is emptied (TRUNCATE), the rows the migrations insert are copied back and
  every sequence is set back where the migrations left it.

A lock the reset cannot get within ``LOCK_TIMEOUT`` (a backend that holds it and is not ours to end) ends
the backends holding locks in the schema and tries once more; failing that, the schema is dropped and a
new one made. ``tests/test_pg_pool.py`` compares a reset schema with one Alembic migrated.
"""

from __future__ import annotations

import atexit
from collections.abc import Callable
from dataclasses import dataclass

import psycopg
from psycopg import sql

from tests.hygiene import schema_name

LOCK_TIMEOUT = "5s"
TERMINATE_WAIT_MS = 5000

# One line per catalog fact of the schema (search_path is the schema); definitions without the schema's name.
FINGERPRINT = """
WITH ns AS (SELECT current_schema()::regnamespace AS oid, quote_ident(current_schema()) || '.' AS prefix),
rels AS (SELECT c.* FROM pg_class c, ns WHERE c.relnamespace = ns.oid)
SELECT md5(coalesce(string_agg(item, E'\\n' ORDER BY item), '')) FROM (
  SELECT format('class %s %s %s %s %s %s', relname, relkind, relpersistence, relrowsecurity, relacl, reloptions)
    AS item FROM rels
  UNION ALL
  SELECT format('column %s.%s %s %s %s %s %s %s %s', r.relname, a.attname, a.attnum,
                format_type(a.atttypid, a.atttypmod), a.attnotnull, a.attidentity, a.attgenerated,
                a.attisdropped, pg_get_expr(d.adbin, d.adrelid))
    FROM rels r JOIN pg_attribute a ON a.attrelid = r.oid AND a.attnum > 0
    LEFT JOIN pg_attrdef d ON d.adrelid = r.oid AND d.adnum = a.attnum
  UNION ALL
  SELECT format('constraint %s %s %s', r.relname, k.conname, replace(pg_get_constraintdef(k.oid), ns.prefix, ''))
    FROM pg_constraint k JOIN rels r ON r.oid = k.conrelid, ns
  UNION ALL
  SELECT format('index %s', replace(pg_get_indexdef(i.indexrelid), ns.prefix, ''))
    FROM pg_index i JOIN rels r ON r.oid = i.indrelid, ns
  UNION ALL
  SELECT format('trigger %s %s', replace(pg_get_triggerdef(t.oid), ns.prefix, ''), t.tgenabled)
    FROM pg_trigger t JOIN rels r ON r.oid = t.tgrelid, ns WHERE NOT t.tgisinternal
  UNION ALL
  SELECT format('rule %s %s', r.relname, md5(replace(pg_get_ruledef(w.oid), ns.prefix, '')))
    FROM pg_rewrite w JOIN rels r ON r.oid = w.ev_class, ns
  UNION ALL
  SELECT format('sequence %s %s %s %s %s %s %s', r.relname, s.seqtypid::regtype, s.seqstart, s.seqincrement,
                s.seqmin, s.seqmax, s.seqcycle)
    FROM pg_sequence s JOIN rels r ON r.oid = s.seqrelid
  UNION ALL
  SELECT format('function %s(%s) %s %s %s %s %s', p.proname, pg_get_function_identity_arguments(p.oid),
                p.prorettype::regtype, p.provolatile, p.prosecdef, p.proconfig, md5(p.prosrc))
    FROM pg_proc p, ns WHERE p.pronamespace = ns.oid
  UNION ALL
  SELECT format('type %s %s', t.typname, t.typtype) FROM pg_type t, ns WHERE t.typnamespace = ns.oid
  UNION ALL
  SELECT format('policy %s %s', r.relname, p.polname) FROM pg_policy p JOIN rels r ON r.oid = p.polrelid
) facts
"""
# The tables with any page: the ones a test wrote to (or tried to); a table the migrations made has none.
WRITTEN = """
SELECT c.relname FROM pg_class c
 WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p') AND pg_relation_size(c.oid) > 0
"""
TABLES = "SELECT relname FROM pg_class WHERE relnamespace = current_schema()::regnamespace AND relkind IN ('r', 'p')"
SEQUENCES = "SELECT relname FROM pg_class WHERE relnamespace = current_schema()::regnamespace AND relkind = 'S'"
END_OUR_BACKENDS = (
    "SELECT pg_terminate_backend(pid, %s) FROM pg_stat_activity WHERE application_name = %s AND pid <> pg_backend_pid()"
)
END_LOCK_HOLDERS = """
SELECT pg_terminate_backend(l.pid, %s) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
 WHERE c.relnamespace = %s::regnamespace AND l.pid <> pg_backend_pid()
"""


@dataclass(frozen=True)
class Migrated:
    """What the migrations leave in a schema: its catalog's fingerprint, the rows they insert, the sequences."""

    fingerprint: str
    rows: dict[str, bytes]  # table -> COPY text, for the tables the migrations fill
    sequences: tuple[tuple[str, int, bool], ...]  # (sequence, last_value, is_called)


def new_name() -> str:
    return schema_name()


class SchemaPool:
    """Migrated schemas of this process; :meth:`lease` hands one out reset, :meth:`give_back` takes it back."""

    def __init__(self, conninfo: str, migrate: Callable[[str], None], *, lock_timeout: str = LOCK_TIMEOUT) -> None:
        self._conninfo = conninfo
        self._lock_timeout = lock_timeout
        self._migrate = migrate  # brings an empty schema (by name) to head
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None
        self._migrated: Migrated | None = None
        self._idle: list[str] = []
        self.leased: set[str] = set()
        self.replaced = 0  # schemas a test changed or locked for good, dropped and made anew
        atexit.register(self.close)

    # ------------------------------------------------------------------ public
    def lease(self) -> str:
        """The name of a schema at the migrated state, to be given back after the test."""
        name = None
        while self._idle and name is None:
            name = self._reset(self._idle.pop())
        if name is None:
            name = self._make()
        self.leased.add(name)
        return name

    def give_back(self, name: str) -> None:
        self.leased.discard(name)
        self._idle.append(name)

    def migrated(self) -> Migrated:
        if self._migrated is None:
            self.give_back(self.lease())  # the first schema made takes the snapshot
        assert self._migrated is not None
        return self._migrated

    def close(self) -> None:
        if self._conn is None:
            return
        for name in [*self._idle, *self.leased]:
            self._drop(name)
        self._idle.clear()
        self.leased.clear()
        self._conn.close()
        self._conn = None

    # ------------------------------------------------------------------ making and resetting
    def _admin(self) -> psycopg.Connection[tuple[object, ...]]:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = psycopg.connect(self._conninfo, options="-csynchronous_commit=off")
        return self._conn

    def _make(self) -> str:
        name = new_name()
        conn = self._admin()
        with conn.transaction():
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        self._migrate(name)
        if self._migrated is None:
            self._migrated = self._snapshot(name)
        return name

    def _snapshot(self, name: str) -> Migrated:
        conn = self._admin()
        with conn.transaction():
            conn.execute(sql.SQL("SET LOCAL search_path = {}").format(sql.Identifier(name)))
            fingerprint = str(conn.execute(FINGERPRINT).fetchone()[0])  # type: ignore[index]
            rows = {}
            for (table,) in conn.execute(WRITTEN).fetchall():
                copied = bytearray()
                with conn.cursor().copy(sql.SQL("COPY {} TO STDOUT").format(sql.Identifier(str(table)))) as copy:
                    for chunk in copy:
                        copied += chunk
                rows[str(table)] = bytes(copied)
            sequences = []
            for (seq,) in conn.execute(SEQUENCES).fetchall():
                found = conn.execute(sql.SQL("SELECT last_value, is_called FROM {}").format(sql.Identifier(str(seq))))
                last_value, is_called = found.fetchone()  # type: ignore[misc]
                sequences.append((str(seq), int(last_value), bool(is_called)))
        return Migrated(fingerprint, rows, tuple(sequences))

    def _reset(self, name: str) -> str | None:
        """``name``'s schema under a new name, at the migrated state; None when it could not be (it is dropped)."""
        conn = self._admin()
        conn.execute(END_OUR_BACKENDS, [TERMINATE_WAIT_MS, name])
        conn.commit()
        for attempt in range(2):
            try:
                return self._reset_once(name)
            except psycopg.errors.LockNotAvailable:
                conn.rollback()
                if attempt == 0:
                    conn.execute(END_LOCK_HOLDERS, [TERMINATE_WAIT_MS, name])
                    conn.commit()
            except _Changed:
                conn.rollback()
                break
        self.replaced += 1
        self._drop(name)
        return None

    def _reset_once(self, name: str) -> str:
        conn = self._admin()
        migrated = self.migrated()
        renamed = new_name()
        with conn.transaction():
            conn.execute(f"SET LOCAL lock_timeout = '{self._lock_timeout}'")
            conn.execute(sql.SQL("ALTER SCHEMA {} RENAME TO {}").format(sql.Identifier(name), sql.Identifier(renamed)))
            conn.execute(sql.SQL("SET LOCAL search_path = {}").format(sql.Identifier(renamed)))
            if conn.execute(FINGERPRINT).fetchone()[0] != migrated.fingerprint:  # type: ignore[index]
                raise _Changed(name)
            written = {str(table) for (table,) in conn.execute(WRITTEN).fetchall()} | set(migrated.rows)
            if written:
                tables = sql.SQL(", ").join(sql.Identifier(table) for table in sorted(written))
                conn.execute(sql.SQL("TRUNCATE {} CASCADE").format(tables))
            for table, copied in migrated.rows.items():
                with conn.cursor().copy(sql.SQL("COPY {} FROM STDIN").format(sql.Identifier(table))) as copy:
                    copy.write(copied)
            if migrated.sequences:
                setvals = sql.SQL(", ").join(
                    sql.SQL("setval({}, {}, {})").format(sql.Literal(seq), sql.Literal(value), sql.Literal(called))
                    for seq, value, called in migrated.sequences
                )
                conn.execute(sql.SQL("SELECT {}").format(setvals))
        return renamed

    def _drop(self, name: str) -> None:
        conn = self._admin()
        try:
            conn.execute(END_OUR_BACKENDS, [TERMINATE_WAIT_MS, name])
            conn.execute(f"SET lock_timeout = '{self._lock_timeout}'")
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
            conn.commit()
        except psycopg.errors.LockNotAvailable:
            conn.rollback()  # left behind under its name; a later run's tests never use it
        finally:
            conn.execute("RESET lock_timeout")
            conn.commit()


class _Changed(Exception):
    """The schema's catalog is not the migrated one."""
