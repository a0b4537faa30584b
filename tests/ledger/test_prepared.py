"""Prepared statements on the SQLite store's direct path: the same rows as SQLAlchemy's own path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Column, Connection, Float, Integer, MetaData, Table, Text, insert, select, update

from ledger import open_ledger
from ledger.store import Prepared, SQLiteStore, lit, param, store_for
from ledger.store.sqlite import _Plan

META = MetaData()
T = Table("t", META, Column("k", Integer, primary_key=True), Column("s", Text), Column("f", Float))


@pytest.fixture
def db() -> Iterator[tuple[SQLiteStore, Connection]]:
    led = open_ledger("sqlite://")
    store = store_for(led.engine)
    assert isinstance(store, SQLiteStore)
    META.create_all(led.engine)
    with store.write() as conn:
        yield store, conn
    led.close()


def test_prepared_binds_by_name_renders_literals_and_expands_lists(
    db: tuple[SQLiteStore, Connection],
) -> None:
    store, conn = db
    insert_one = Prepared(insert(T), column_keys=("k", "s", "f"))
    assert store.run(conn, insert_one, [{"k": n, "s": f"v{n}", "f": n / 2} for n in range(5)]) == 5
    pick = Prepared(
        select(T.c.k, T.c.f).where(T.c.k.in_(param("ks", expanding=True)), T.c.s != lit("v3")).order_by(T.c.k)
    )
    plan = _Plan.build(pick, store.engine.dialect)
    assert plan is not None and "'v3'" in plan.bind({"ks": [1, 3]})[0]  # the literal is in the text, not bound
    assert store.rows(conn, pick, {"ks": [1, 3, 4]}) == [(1, 0.5), (4, 2.0)]
    assert store.rows(conn, pick, {"ks": []}) == []  # IN () matches nothing


def test_a_floats_bind_processor_is_applied_and_constants_are_bound(db: tuple[SQLiteStore, Connection]) -> None:
    store, conn = db
    store.run(conn, Prepared(insert(T), column_keys=("k", "s", "f")), {"k": 1, "s": "a", "f": 0.0})
    bump = Prepared(update(T).where(T.c.k == param("key")).values(f=param("to"), s="fixed"))
    plan = _Plan.build(bump, store.engine.dialect)
    assert plan is not None
    values = plan.bind({"key": 1, "to": 3})[1]
    assert values == ["fixed", 3.0, 1] and type(values[1]) is float  # the constant bound; Float's to_float
    assert store.run(conn, bump, {"key": 1, "to": 3}) == 1
    assert store.rows(conn, Prepared(select(T.c.s, T.c.f)), {}) == [("fixed", 3.0)]


def test_a_missing_parameter_is_an_error_not_a_null(db: tuple[SQLiteStore, Connection]) -> None:
    store, conn = db
    with pytest.raises(KeyError):
        store.rows(conn, Prepared(select(T.c.k).where(T.c.k == param("key"))), {})


def test_every_statement_of_a_save_takes_the_direct_path_on_sqlite(tmp_path: Path) -> None:
    # Given a SQLite ledger whose save has run once, and once inside a caller's transaction (each statement is
    # planned on first use; the budget-and-due read comes back with the scope's stamp in the first, alone in the second)
    led = open_ledger(f"sqlite:///{tmp_path / 'l.db'}", migrate=True)
    try:
        led.save("I prefer tea")
        with led.transaction() as tx:
            tx.save("I prefer coffee")
        store = store_for(led.engine)
        assert isinstance(store, SQLiteStore)
        # Then no statement a save built for this store fell back to SQLAlchemy's path (a
        # boolean column once did: about 90 us more per save)
        built = {build.__name__: prepared.plans.get("sqlite") for build, prepared in store._built.items()}
        assert {"stamp_and_usage", "usage_and_due"} <= set(built)
        assert [name for name, plan in built.items() if plan is None] == []
    finally:
        led.close()
