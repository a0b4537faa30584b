"""One schema: a database migrated to head is exactly the Core tables plus the store's own DDL.

Two databases of one dialect side by side: one migrated to head, one made by the create-all
path (``METADATA.create_all`` and then the store's statements, :attr:`Store.ddl`). Their
tables, columns, types, indexes and constraints must be the same, and so must the objects
the tables cannot state (SQLite: the FTS5 table and the triggers, compared as SQLite keeps
their text, which is the store's statement itself; PostgreSQL: functions, triggers and the
GIN index as ``pg_get_functiondef``, ``pg_get_triggerdef`` and ``pg_get_indexdef`` render
them). A statement changed in one place only — in a migration, in the database, or in the
store — is reported; the self-tests below change one each way and see it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, create_engine, inspect, text

from ledger.db import make_engine, upgrade
from ledger.schema import load_every_table
from ledger.store import store_for
from ledger.store.schema_object import SchemaObject
from tests.conftest import PG_URL, pg_schema_url, service_missing
from tests.hygiene import schema_name

METADATA = load_every_table()  # every package's tables

Snapshot = dict[str, Any]


# --------------------------------------------------------------------------- the two databases
def _create_all(engine: Engine, ddl: tuple[SchemaObject, ...]) -> None:
    """The create-all path: the Core tables, then the store's statements."""
    METADATA.create_all(engine)
    with engine.begin() as conn:
        for obj in ddl:
            conn.exec_driver_sql(obj.sql)


@pytest.fixture(params=["sqlite", "postgres"])
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Engine, Engine]]:
    """Two empty databases of one dialect: ``(to_migrate, to_create)``."""
    if request.param == "sqlite":
        engines = (make_engine(f"sqlite:///{tmp_path / 'migrated.db'}"), make_engine(f"sqlite:///{tmp_path / 'd.db'}"))
        yield engines
        for engine in engines:
            engine.dispose()
        return
    pg_available = request.getfixturevalue("pg_available")
    if pg_available is not None:
        service_missing("PostgreSQL", pg_available)
    schemas = [schema_name() for _ in range(2)]
    admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        for schema in schemas:
            conn.execute(text(f"CREATE SCHEMA {schema}"))
    pg_engines = (make_engine(pg_schema_url(schemas[0])), make_engine(pg_schema_url(schemas[1])))
    try:
        yield pg_engines
    finally:
        for engine in pg_engines:
            engine.dispose()
        with admin.connect() as conn:
            for schema in schemas:
                conn.execute(text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
        admin.dispose()


# --------------------------------------------------------------------------- what a database holds
def _squeeze(sql: str) -> str:
    return " ".join(sql.split())


def _tables(engine: Engine) -> Snapshot:
    """Every table of the Core schema: columns with their types, keys, indexes and constraint names."""
    found = inspect(engine)
    dialect = engine.dialect
    out: Snapshot = {"tables": sorted(n for n in found.get_table_names() if n != "alembic_version")}
    for table in METADATA.sorted_tables:
        name = table.name
        out[name] = {
            # By name, not position: every statement names its columns, and a table class lists the fields it
            # inherits (ledger.columns) before its own, where the migrations added them in another order.
            "columns": sorted(
                (c["name"], c["type"].compile(dialect=dialect), c["nullable"]) for c in found.get_columns(name)
            ),
            "primary key": found.get_pk_constraint(name)["constrained_columns"],
            "unique": sorted(tuple(u["column_names"]) for u in found.get_unique_constraints(name)),
            "checks": sorted(c["name"] or "" for c in found.get_check_constraints(name)),
            "indexes": sorted(
                (i["name"] or "", tuple(str(c) for c in i["column_names"]), bool(i["unique"]))
                for i in found.get_indexes(name)
            ),
        }
    return out


def _sqlite_objects(conn: Connection) -> Snapshot:
    """``sqlite_master``'s text of every index, trigger and virtual table (and FTS5's shadow tables)."""
    rows = conn.exec_driver_sql(
        "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL AND "
        "(type IN ('index', 'trigger') OR sql LIKE 'CREATE VIRTUAL TABLE%' OR name LIKE 'memory_fts%')"
    )
    return {f"{kind} {name}": sql for kind, name, sql in rows}


_PG_OBJECTS = {
    "function": "SELECT p.proname, pg_get_functiondef(p.oid) FROM pg_proc p "
    "WHERE p.pronamespace = current_schema()::regnamespace",
    "trigger": "SELECT t.tgname, pg_get_triggerdef(t.oid) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
    "WHERE c.relnamespace = current_schema()::regnamespace AND NOT t.tgisinternal",
    "index": "SELECT c.relname, pg_get_indexdef(c.oid) FROM pg_class c "
    "WHERE c.relkind = 'i' AND c.relnamespace = current_schema()::regnamespace AND c.relname <> 'alembic_version_pkc'",
    "check": "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
    "WHERE contype = 'c' AND connamespace = current_schema()::regnamespace",
}


def _pg_objects(conn: Connection) -> Snapshot:
    """PostgreSQL's own rendering of every function, trigger, index and check, the schema's name taken out."""
    schema = conn.exec_driver_sql("SELECT current_schema()").scalar_one()
    out: Snapshot = {}
    for kind, query in _PG_OBJECTS.items():
        for name, definition in conn.exec_driver_sql(query):
            out[f"{kind} {name}"] = _squeeze(definition.replace(f"{schema}.", ""))
    return out


def snapshot(engine: Engine) -> Snapshot:
    """What the database holds, in the terms the comparison uses."""
    with engine.connect() as conn:
        objects = _sqlite_objects(conn) if engine.dialect.name == "sqlite" else _pg_objects(conn)
    if engine.dialect.name == "sqlite":  # index text: as SQLAlchemy and Alembic spell it, spacing aside
        objects = {k: _squeeze(v) if k.startswith("index ") else v for k, v in objects.items()}
    return {"tables": _tables(engine), "objects": objects}


# --------------------------------------------------------------------------- the comparisons
def drift(migrated: Snapshot, declared: Snapshot) -> list[str]:
    """Every difference between the migrated database and the declared one, by object."""
    diffs: list[str] = []
    pairs = [(f"objects: {k}", migrated["objects"].get(k), declared["objects"].get(k)) for k in migrated["objects"]]
    pairs += [(f"objects: {k}", None, v) for k, v in declared["objects"].items() if k not in migrated["objects"]]
    for table in sorted(set(migrated["tables"]) | set(declared["tables"])):
        left, right = migrated["tables"].get(table), declared["tables"].get(table)
        if isinstance(left, dict) and isinstance(right, dict):
            pairs += [(f"{table}: {aspect}", left[aspect], right[aspect]) for aspect in left]
        else:
            pairs.append((table, left, right))
    for where, left, right in sorted(pairs, key=lambda p: p[0]):
        if left != right:
            diffs.append(f"{where}: migrated {left!r} != declared {right!r}")
    return diffs


def statement_drift(engine: Engine, ddl: tuple[SchemaObject, ...]) -> list[str]:
    """Each store statement against the database's own record of it, and no object the store does not state.

    SQLite keeps the text of a trigger or a virtual table as it was written: it must be the
    statement. PostgreSQL keeps a function's body as written (``prosrc``): it must be the body
    between the statement's ``$$``; triggers and indexes are compared through :func:`drift`.
    """
    diffs: list[str] = []
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            kept = {
                (kind, name): sql
                for kind, name, sql in conn.exec_driver_sql(
                    "SELECT type, name, sql FROM sqlite_master WHERE type = 'trigger' "
                    "OR sql LIKE 'CREATE VIRTUAL TABLE%'"
                )
            }
            stated = {(obj.kind, obj.name): obj.sql for obj in ddl if obj.kind in ("trigger", "table")}
        else:
            kept = {
                ("function", name): body
                for name, body in conn.exec_driver_sql(
                    "SELECT proname, prosrc FROM pg_proc WHERE pronamespace = current_schema()::regnamespace"
                )
            }
            stated = {("function", obj.name): obj.sql.split("$$")[1] for obj in ddl if obj.kind == "function"}
    for key in sorted(set(kept) | set(stated)):
        if kept.get(key) != stated.get(key):
            diffs.append(f"{key[0]} {key[1]}: database {kept.get(key)!r} != store {stated.get(key)!r}")
    return diffs


def _check(migrated: Engine, declared: Engine, ddl: tuple[SchemaObject, ...]) -> list[str]:
    return drift(snapshot(migrated), snapshot(declared)) + statement_drift(migrated, ddl)


# --------------------------------------------------------------------------- the tests
def test_a_database_migrated_to_head_is_the_core_tables_plus_the_stores_ddl(pair: tuple[Engine, Engine]) -> None:
    # Given a database migrated to head and one made from the tables and the store's statements
    migrated, declared = pair
    upgrade(migrated)
    ddl = store_for(migrated).ddl
    _create_all(declared, ddl)
    # Then they hold the same schema, and the migrated one holds each store statement as written
    assert _check(migrated, declared, ddl) == []
    # and the comparison covered what the store states and what the tables state
    objects = snapshot(migrated)["objects"]
    assert all(any(key.endswith(f" {obj.name}") for key in objects) for obj in ddl)
    assert {"index ux_memory_records_conflict_active", "index ix_memory_records_due"} <= set(objects)


def _mutated(ddl: tuple[SchemaObject, ...], name: str, change: Callable[[str], str]) -> tuple[SchemaObject, ...]:
    found = [obj._replace(sql=change(obj.sql)) if obj.name == name else obj for obj in ddl]
    assert found != list(ddl), name
    return tuple(found)


# A trigger's or a function's body, still valid, one count moved by two instead of one.
_BUMP = {"sqlite": "memory_records_count_ai", "postgresql": "memory_records_count"}


def _bump(sql: str) -> str:
    return sql.replace("active_count = active_count + (new.status = 'active')", "active_count = active_count + 2", 1)


def _bump_pg(sql: str) -> str:
    return sql.replace("active_count + (NEW.status = 'active')::int,", "active_count + 2,", 1)


def test_a_statement_changed_in_the_store_only_is_reported(pair: tuple[Engine, Engine]) -> None:
    # Given a migrated database, and the store's statements with one of them changed
    migrated, declared = pair
    upgrade(migrated)
    name = _BUMP[migrated.dialect.name]
    ddl = _mutated(store_for(migrated).ddl, name, _bump if migrated.dialect.name == "sqlite" else _bump_pg)
    _create_all(declared, ddl)
    # Then the comparison names it
    found = _check(migrated, declared, ddl)
    assert found and all(name in line for line in found), found


def test_a_statement_changed_in_the_database_only_is_reported(pair: tuple[Engine, Engine]) -> None:
    # Given a migrated database whose trigger or function a later statement changed (as a migration
    # restating it by hand would), and the store's statements as they are
    migrated, declared = pair
    upgrade(migrated)
    ddl = store_for(migrated).ddl
    _create_all(declared, ddl)
    name = _BUMP[migrated.dialect.name]
    with migrated.begin() as conn:
        if migrated.dialect.name == "sqlite":
            trigger = next(o for o in ddl if o.name == name)
            conn.exec_driver_sql(f"DROP TRIGGER {name}")
            conn.exec_driver_sql(_bump(trigger.sql))
        else:
            fn = next(o for o in ddl if o.name == name and o.kind == "function")
            conn.exec_driver_sql(_bump_pg(fn.sql).replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1))
    # Then the comparison names it
    found = _check(migrated, declared, ddl)
    assert found and all(name in line for line in found), found


def test_an_index_or_column_changed_in_the_database_only_is_reported(pair: tuple[Engine, Engine]) -> None:
    # Given a migrated database with one partial index's predicate and one column changed
    migrated, declared = pair
    upgrade(migrated)
    _create_all(declared, store_for(migrated).ddl)
    with migrated.begin() as conn:
        conn.exec_driver_sql("DROP INDEX ix_memory_records_due")
        conn.exec_driver_sql(
            "CREATE INDEX ix_memory_records_due ON memory_records (expires_at) WHERE status = 'active'"
        )
        conn.exec_driver_sql("ALTER TABLE api_tokens ADD COLUMN stray INTEGER")
    # Then the comparison names both
    found = "\n".join(drift(snapshot(migrated), snapshot(declared)))
    assert "ix_memory_records_due" in found and "stray" in found, found


def test_the_dialect_objects_each_have_a_distinct_name() -> None:
    from ledger.store import postgres_ddl, sqlite_ddl

    for ddl in (sqlite_ddl.OBJECTS, postgres_ddl.OBJECTS):
        keys = [(obj.kind, obj.name) for obj in ddl]
        assert len(set(keys)) == len(keys)
        for obj in ddl:
            assert re.match(rf"CREATE (OR REPLACE )?(VIRTUAL TABLE|{obj.kind.upper()}) {obj.name}\b", obj.sql), obj.name
    assert [o.name for o in sqlite_ddl.on_table("memory_records")] == [
        o.name for o in sqlite_ddl.OBJECTS if o.kind == "trigger"
    ]


# --------------------------------------------------------------------------- existing databases
# Each statement as the migration that creates it on an existing database last created it: the
# revision, and the statement's SHA-256 (its first 16 hex digits). A fresh database follows the
# store (the migrations take its statements), but one already past that revision keeps the old
# object: changing a statement needs a migration that drops and re-creates it (the older revision
# then keeps the old text, as 0001_ledger keeps its unstemmed FTS5 table); then update the entry.
CREATED = {
    ("sqlite", "memory_fts"): ("0004_store", "23453ed042ac0f2e"),
    ("sqlite", "memory_fts_ai"): ("0004_store", "5de72617b5ac3eef"),
    ("sqlite", "memory_fts_ad"): ("0004_store", "b1ea559b7f79e8aa"),
    ("sqlite", "memory_fts_au"): ("0004_store", "1116e44f1b533e34"),
    ("sqlite", "memory_records_no_delete"): ("0001_ledger", "c3455217ec2f7706"),
    ("sqlite", "memory_records_count_ai"): ("0009_scope_counts", "0050c1eaf0a0e1e5"),
    ("sqlite", "memory_records_count_au"): ("0009_scope_counts", "5a401d7b0d5e2fee"),
    ("sqlite", "memory_records_closed_ai"): ("0018_write_checks", "81b44a32a4c9021e"),
    ("sqlite", "memory_records_closed_au"): ("0018_write_checks", "027cd5e83405bb49"),
    ("sqlite", "ix_memory_records_proposed"): ("0020_sqlite_status_index", "a7e05b45e515dad7"),
    ("postgresql", "ix_memory_records_fts"): ("0001_ledger", "c7fd6a8d30b311c8"),
    ("postgresql", "ix_memory_records_due_scope"): ("0018_write_checks", "b4aec97855228292"),
    ("postgresql", "ix_memory_records_scope_status"): ("0001_ledger", "e2693ac7c461e990"),
    ("postgresql", "memory_records_no_delete"): ("0001_ledger", "8d60cce7670d672a 225ee6203bd604eb"),
    ("postgresql", "memory_records_count"): ("0019_scope_row", "219fefe030736018 62d3cbba1102d2d4"),
    ("postgresql", "memledger_save"): ("0019_scope_row", "cbe64f3d4c79cd57"),
    ("postgresql", "memledger_edit"): ("0019_scope_row", "058175a38f3bb10a"),
}


def _digests(ddl: tuple[SchemaObject, ...]) -> dict[str, str]:
    import hashlib

    found: dict[str, list[str]] = {}
    for obj in ddl:
        found.setdefault(obj.name, []).append(hashlib.sha256(obj.sql.encode()).hexdigest()[:16])
    return {name: " ".join(digests) for name, digests in found.items()}


def test_a_changed_statement_comes_with_a_migration_that_re_creates_it() -> None:
    from ledger.db import MIGRATIONS_DIR
    from ledger.store import postgres_ddl, sqlite_ddl

    found = {
        (dialect, name): digest
        for dialect, ddl in (("sqlite", sqlite_ddl.OBJECTS), ("postgresql", postgres_ddl.OBJECTS))
        for name, digest in _digests(ddl).items()
    }
    assert set(found) == set(CREATED), "a new object: add it here with the migration that creates it"
    for key, (revision, digest) in CREATED.items():
        assert found[key] == digest, (
            f"{key[1]} ({key[0]}) changed since {revision} created it: an existing database keeps the old one. "
            "Write a migration that drops and re-creates it, and record that migration and the new digest here."
        )
        assert (MIGRATIONS_DIR / "versions" / f"{revision}.py").exists(), revision


def test_the_digest_check_sees_a_changed_statement() -> None:
    from ledger.store import sqlite_ddl

    changed = _mutated(sqlite_ddl.OBJECTS, "memory_records_count_ai", _bump)
    assert _digests(changed)["memory_records_count_ai"] != CREATED[("sqlite", "memory_records_count_ai")][1]
    assert _digests(sqlite_ddl.OBJECTS)["memory_records_count_ai"] == CREATED[("sqlite", "memory_records_count_ai")][1]
