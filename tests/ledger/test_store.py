"""The store boundary: one schema (no drift), dialect mechanics, error translation, sharing, derived text."""

from __future__ import annotations

import os
import re
import sqlite3
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import insert, select, update
from sqlalchemy.dialects.sqlite import dialect as sqlite_dialect

from consolidation.tables import RUNS
from ledger import InvalidArgument, Ledger, LedgerBusy, LedgerError, open_ledger
from ledger.compaction import compact
from ledger.schema import SCOPES, load_every_table
from ledger.store import include_object
from ledger.store.sqlite import BUSY_TIMEOUT_MS

METADATA = load_every_table()  # every package's tables

SCOPE = "account:local"


def test_the_migrations_build_exactly_the_declared_schema(led: Ledger) -> None:
    """Alembic's autogenerate comparison of the migrated database against the declared tables finds nothing."""
    with led.engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"include_object": include_object, "compare_type": True})
        diffs = compare_metadata(ctx, METADATA)
    assert diffs == []


@pytest.fixture
def own_led(empty_db_url: str) -> Iterator[Ledger]:
    """A ledger on a database of its own, migrated by Alembic: for a test that changes its schema."""
    led = open_ledger(empty_db_url, migrate=True)
    yield led
    led.close()


def test_the_comparison_sees_drift(own_led: Ledger) -> None:
    """The check above can fail: a column the models do not have is reported."""
    led = own_led
    with led.engine.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE scope_settings ADD COLUMN stray INTEGER")
    with led.engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"include_object": include_object})
        diffs = compare_metadata(ctx, METADATA)
    assert any(d[0] == "remove_column" and d[3].name == "stray" for d in diffs), diffs


def test_a_database_error_inside_a_transaction_is_a_ledger_error(led: Ledger) -> None:
    led.save("kept")
    with pytest.raises(LedgerError) as caught, led.transaction(SCOPE) as tx:
        tx.execute(update(SCOPES).where(SCOPES.c.scope_key == SCOPE).values(max_records=-1))  # a CHECK fails
    assert type(caught.value) is LedgerError and "refused" in str(caught.value)
    assert led.budget(SCOPE).max_records == 200 and [r.body for r in led.list(SCOPE)] == ["kept"]


_REFUSE_WORD = {
    "sqlite": [
        "CREATE TRIGGER test_refuse BEFORE INSERT ON memory_records WHEN NEW.body LIKE '%quillon%' "
        "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
    ],
    "postgresql": [
        "CREATE FUNCTION test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF strpos(NEW.body, 'quillon') > 0 "
        "THEN RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; END $$",
        "CREATE TRIGGER test_refuse BEFORE INSERT ON memory_records FOR EACH ROW EXECUTE FUNCTION test_refuse()",
    ],
}


def test_a_write_the_database_refuses_leaves_no_body_in_its_traceback(own_led: Ledger) -> None:
    """What a log line prints for a failed write (its traceback, causes included) never holds the body: the
    statement's values are not in the error's text, on the direct path or through SQLAlchemy."""
    # Given a database that refuses a record with a word (as a full disk or a lost connection would refuse)
    led = own_led
    first = led.save("the orchard gate faces north")
    with led.engine.begin() as conn:
        for statement in _REFUSE_WORD[led.engine.dialect.name]:
            conn.exec_driver_sql(statement)
    body = " ".join(["the", "quillon", "orchard gate faces south"])  # never whole in this file's source lines
    writes = {
        "edit": lambda: led.save(body, supersedes=first.id),
        "save": lambda: led.save(body),
        "save with a request id": lambda: led.save(body, request_id="k1"),
        "proposal": lambda: led.propose(body),
    }
    for name, write in writes.items():
        # When the write is refused
        with pytest.raises(LedgerError) as refused:
            write()
        # Then neither its message nor its traceback (what log.exception writes) holds the body
        printed = "".join(traceback.format_exception(refused.value))
        assert "refused by the test" in printed, name
        assert body not in printed and "quillon orchard" not in printed, (name, printed)


def test_in_memory_sqlite_shared_by_threads_is_serialized() -> None:
    led = open_ledger("sqlite://")
    errors: list[BaseException] = []
    saved: list[str] = []

    def work(i: int) -> None:
        for n in range(40):
            try:
                saved.append(led.save(f"thread {i} note {n}").id)
                led.list(SCOPE)
            except BaseException as exc:
                errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert sorted(r.id for r in led.list(SCOPE)) == sorted(saved) and len(saved) == 160
    led.close()


def test_a_forget_never_waits_on_a_reader_holding_a_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    led = open_ledger(f"sqlite:///{path}")
    try:
        led.set_budget(SCOPE, 100_000)
        recs = [led.save(f"note number {n}") for n in range(20)]
        reader = sqlite3.connect(path, isolation_level=None)
        reader.execute("BEGIN")
        reader.execute("SELECT COUNT(*) FROM memory_records").fetchone()  # holds a snapshot
        saves: list[float] = []
        stop = threading.Event()

        def keep_saving() -> None:
            while not stop.is_set():
                started = time.monotonic()
                led.save("a concurrent save")
                saves.append(time.monotonic() - started)

        saver = threading.Thread(target=keep_saving)
        saver.start()
        started = time.monotonic()
        led.delete(recs[0].id)
        forget_s = time.monotonic() - started
        time.sleep(0.2)
        stop.set()
        saver.join(10)
        reader.execute("COMMIT")
        reader.close()
        # A checkpoint that waited for the reader would wait out the busy timeout (5 s) at least
        # once; half of it is far above a forget or save that does not wait (tens of ms).
        bound = BUSY_TIMEOUT_MS / 1000 / 2
        assert forget_s < bound, forget_s
        assert saves and max(saves) < bound, max(saves)
        assert led.get(recs[0].id).body is None
    finally:
        led.close()


def _run_row(led: Ledger, run_id: str, prompt: str) -> None:
    with led.transaction(SCOPE) as tx:
        tx.execute(
            insert(RUNS).values(
                id=run_id,
                scope_key=SCOPE,
                state="settled",
                outcome="cancelled",
                turns=1,
                created_at=tx.now_us,
                due_at=tx.now_us,
                settled_at=tx.now_us,
            )
        )
        tx.execute(update(RUNS).where(RUNS.c.id == run_id).values(prompt=prompt, answer_raw=prompt))


def _prompt(led: Ledger, run_id: str) -> Any:
    with led.reading() as r:
        return r.execute(select(RUNS.c.prompt, RUNS.c.answer_raw).where(RUNS.c.id == run_id)).one()


def test_forget_erases_registered_derived_text_and_nothing_else(led: Ledger) -> None:
    a = led.save("the quokka lives in Perth")
    b = led.save("unrelated note")
    _run_row(led, "run_a", "text built from the quokka")
    _run_row(led, "run_b", "text built from the unrelated note")
    with led.transaction(SCOPE) as tx:
        tx.register_derived(RUNS, "run_a", record_ids=[a.id, b.id], columns=("prompt", "answer_raw"))
        tx.register_derived(RUNS, "run_b", record_ids=[b.id], columns=("prompt",))
    edited = led.save("the quokka lives in Rottnest", supersedes=a.id)
    led.delete(edited.id)  # the head: the chain (a included) is forgotten
    assert tuple(_prompt(led, "run_a")) == (None, None)
    assert tuple(_prompt(led, "run_b")) == ("text built from the unrelated note",) * 2


def test_registering_text_of_an_already_forgotten_record_erases_it_at_once(led: Ledger) -> None:
    a = led.save("a passing thought")
    led.delete(a.id)
    _run_row(led, "run_late", "built before the forget, stored after")
    with led.transaction(SCOPE) as tx:
        tx.register_derived(RUNS, "run_late", record_ids=[a.id], columns=("prompt", "answer_raw"))
    assert tuple(_prompt(led, "run_late")) == (None, None)


@pytest.mark.parametrize(
    "bad",
    [
        lambda tx: tx.register_derived("runs; DROP TABLE x", "k", record_ids=["m"], columns=("prompt",)),
        lambda tx: tx.register_derived(RUNS, "k", record_ids=["m"], columns=("no_such_column",)),
        lambda tx: tx.register_derived(RUNS, "k", record_ids=["m"], columns=()),
    ],
)
def test_a_bad_derived_registration_is_refused(led: Ledger, bad: Callable[[Any], None]) -> None:
    with pytest.raises(InvalidArgument), led.transaction(SCOPE) as tx:
        bad(tx)


def test_consolidation_reaches_the_database_only_through_the_ledgers_public_surface() -> None:
    """consolidation/ imports no ledger.db or store module and never touches an engine."""
    import ast

    root = Path(__file__).resolve().parents[2] / "consolidation"
    offenders = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("ledger.db", "ledger.store")):
                offenders.append(f"{path.name}: from {node.module}")
            if isinstance(node, ast.Import) and any(
                a.name.startswith(("ledger.db", "ledger.store")) for a in node.names
            ):
                offenders.append(f"{path.name}: import")
            if isinstance(node, ast.Attribute) and node.attr == "engine":
                offenders.append(f"{path.name}:{node.lineno} .engine")
    assert offenders == []


_SQL_WORD = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|WITH|PRAGMA|CREATE|DROP|ALTER|VACUUM|BEGIN|COMMIT)\b")
_DIALECT_ONLY = ("exec_driver_sql", "driver_connection", "dbapi_connection")


def _sql_offences(root: Path, skip: tuple[str, ...]) -> list[str]:
    import ast

    offenders = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(skip):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and _SQL_WORD.match(node.value):
                offenders.append(f"{rel}:{node.lineno} SQL text {node.value[:40]!r}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "text":
                offenders.append(f"{rel}:{node.lineno} text()")
            if isinstance(node, ast.Attribute) and node.attr in _DIALECT_ONLY:
                offenders.append(f"{rel}:{node.lineno} .{node.attr}")
            if isinstance(node, ast.Attribute) and node.attr == "name" and getattr(node.value, "attr", "") == "dialect":
                offenders.append(f"{rel}:{node.lineno} dialect.name")
    return offenders


def test_sql_text_and_dialect_branches_live_only_in_the_store_modules() -> None:
    """ledger/ builds every statement from the declared tables; raw SQL and dialect checks are the stores'
    (and the migrations', which write triggers and FTS by hand)."""
    root = Path(__file__).resolve().parents[2]
    found = _sql_offences(root / "ledger", ("store/", "migrations/"))
    # The schema's own DDL predicates (partial-index WHERE clauses) are written once, in the declared tables.
    assert [f for f in found if not (f.startswith("schema.py:") and f.endswith(" text()"))] == []
    assert _sql_offences(root / "consolidation", ()) == []


def test_the_sql_check_sees_raw_sql(tmp_path: Path) -> None:
    """The check above can fail: each kind of offence it looks for is reported."""
    (tmp_path / "bad.py").write_text(
        "from sqlalchemy import text\n"
        "Q = 'SELECT id FROM memory_records'\n"
        "F = f'UPDATE memory_records SET body = {1}'\n"
        "T = text('x')\n"
        "def f(conn, engine):\n"
        "    conn.exec_driver_sql('x')\n"
        "    return engine.dialect.name\n",
        encoding="utf-8",
    )
    found = sorted(_sql_offences(tmp_path, ()))
    assert [f.split(" ", 1)[0] for f in found] == ["bad.py:2", "bad.py:3", "bad.py:4", "bad.py:6", "bad.py:7"], found


def test_every_prepared_ledger_statement_takes_sqlites_direct_path() -> None:
    """Each module-level statement compiles to a plan the SQLite store runs on the cursor (none falls back)."""
    import importlib

    from ledger.store import Prepared
    from ledger.store.sqlite import _Plan

    dialect = sqlite_dialect()
    seen = 0
    modules = ("ledger.record_rows", "ledger.statements", "ledger.reads", "ledger.sweep", "ledger.erasure")
    for name in (*modules, "ledger.store.scope", "ledger.derived_text"):
        for attr, value in vars(importlib.import_module(name)).items():
            if isinstance(value, Prepared):
                seen += 1
                assert _Plan.build(value, dialect) is not None, f"{name}.{attr}"
    assert seen >= 31


def test_a_new_rows_values_are_in_the_order_records_are_read() -> None:
    """The record a write returns is built from the values it inserted, in the read's column order."""
    from ledger.models import Kind, Provenance, Status
    from ledger.record_rows import NAMES, NewRecord, new_row, record_of_new_row

    new = NewRecord("b", Kind.FACT, Provenance.USER_EXPLICIT, Status.ACTIVE)
    values = new_row("mem_x", SCOPE, new, 1, [])
    assert tuple(values) == NAMES[1:]
    assert (record_of_new_row(values).id, record_of_new_row(values).body) == ("mem_x", "b")


def test_each_thread_keeps_its_write_connection_and_an_idle_one_holds_nothing(tmp_path: Path) -> None:
    """A thread's writes reuse one connection; an idle kept connection blocks no truncating checkpoint;
    it is closed when its thread is gone and when the ledger closes."""
    import gc

    from ledger.store import SQLiteStore, store_for

    led = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    store = store_for(led.engine)
    assert isinstance(store, SQLiteStore)

    def dbapi_of_a_write() -> int:
        with led.transaction(SCOPE) as tx:
            return id(tx.conn.connection.dbapi_connection)

    assert dbapi_of_a_write() == dbapi_of_a_write()
    kept = dbapi_of_a_write()
    with pytest.raises(RuntimeError), led.transaction(SCOPE) as tx:
        tx.save("rolled back")
        raise RuntimeError("the caller's own error")
    assert dbapi_of_a_write() == kept and led.list(SCOPE) == []  # rolled back, the connection still kept
    parked, release = threading.Event(), threading.Event()
    seen: list[int] = []

    def writer() -> None:
        seen.append(dbapi_of_a_write())
        led.save("from the other thread")
        parked.set()
        release.wait(30)

    thread = threading.Thread(target=writer)
    thread.start()
    assert parked.wait(30)
    assert seen[0] != dbapi_of_a_write() and len(store._kept) == 2
    # The other thread's kept connection is idle: a forget's checkpoint still truncates the WAL.
    led.delete(led.save("forget me").id)
    assert store.scrub_files() is True
    assert (tmp_path / "ledger.db-wal").stat().st_size == 0
    release.set()
    thread.join(30)
    del thread
    gc.collect()
    assert len(store._kept) == 1  # the finished thread's connection was closed
    led.close()
    assert store._kept == set()


def _save_in_child(led: Ledger) -> None:
    led.save("saved by the forked child")


def test_a_child_forked_while_a_parent_thread_waits_to_write_has_a_write_queue_of_its_own(tmp_path: Path) -> None:
    # A parent thread waiting to write holds the queue's lock; forked then, the child would find it
    # held for ever and its writes would wait out the queue's timeout and the whole retry budget.
    # (Another *process* holds SQLite's lock: a fork while a thread of this one held it would copy
    # SQLite's own lock state into the child, which no queue can mend.)
    import multiprocessing
    import subprocess
    import sys

    from tests.hygiene import kill_group, popen

    path = tmp_path / "ledger.db"
    led = open_ledger(f"sqlite:///{path}")
    hold = (
        "import sqlite3, sys, time\n"
        "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "c.execute('BEGIN IMMEDIATE'); print('held', flush=True); time.sleep(1.5); c.execute('COMMIT')\n"
    )
    holder = popen([sys.executable, "-c", hold, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        waiter = threading.Thread(target=led.save, args=("saved by a parent thread that waited",))
        waiter.start()
        time.sleep(0.3)  # the waiter holds the queue and waits in SQLite's busy handler
        child = multiprocessing.get_context("fork").Process(target=_save_in_child, args=(led,))
        child.start()
        child.join(20)
        waiter.join(10)
        assert child.exitcode == 0
        assert sorted(r.body or "" for r in led.list(SCOPE)) == [
            "saved by a parent thread that waited",
            "saved by the forked child",
        ]
    finally:
        holder.wait(10)
        kill_group(holder)
        assert holder.stdout is not None
        holder.stdout.close()
        led.close()


def test_a_forked_child_writes_on_a_connection_of_its_own(tmp_path: Path) -> None:
    """The kept write connection is the parent's: a forked child opens its own, and the parent's still works."""
    import multiprocessing

    led = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    led.save("saved by the parent before the fork")
    child = multiprocessing.get_context("fork").Process(target=_save_in_child, args=(led,))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    led.save("saved by the parent after the fork")
    assert sorted(r.body or "" for r in led.list(SCOPE)) == [
        "saved by the forked child",
        "saved by the parent after the fork",
        "saved by the parent before the fork",
    ]
    led.close()


def test_a_writer_waits_for_this_process_s_other_writers_as_long_as_for_other_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Writers of one process queue on a lock before BEGIN IMMEDIATE; the wait is bounded like the
    # busy handler's, then LedgerBusy (which Ledger.run retries inside its budget).
    import ledger.store.sqlite as sqlite_store

    monkeypatch.setattr(sqlite_store, "BUSY_TIMEOUT_MS", 300)
    led = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    try:
        holding, release = threading.Event(), threading.Event()

        def hold() -> None:
            with led.transaction(SCOPE) as tx:
                tx.save("held open by another thread")
                holding.set()
                release.wait(10)

        holder = threading.Thread(target=hold)
        holder.start()
        assert holding.wait(10)
        started = time.monotonic()
        with pytest.raises(LedgerBusy) as busy, led.transaction(SCOPE) as tx:
            tx.save("never stored")
        assert time.monotonic() - started >= 0.25
        assert busy.value.__cause__ is None, "refused by the queue, not by SQLite's busy handler"
        release.set()
        holder.join(10)
        assert [r.body for r in led.list(SCOPE)] == ["held open by another thread"]
        with led.transaction(SCOPE) as tx:  # the queue is free again
            tx.save("stored once the holder committed")
        assert len(led.list(SCOPE)) == 2
    finally:
        led.close()


def test_a_relative_sqlite_path_is_the_same_file_after_a_chdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's URL holds the absolute path: what the store reads by path (the file's size, the WAL index
    the checkpointer reads) is the ledger's own file after the process changed its directory."""
    (tmp_path / "home").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "home")
    led = open_ledger("sqlite:///ledger.db")
    try:
        led.save("a note saved before the chdir")
        monkeypatch.chdir(tmp_path / "elsewhere")
        assert led.engine.url.database == str(tmp_path / "home" / "ledger.db")
        assert compact(led.engine).bytes_before >= os.path.getsize(tmp_path / "home" / "ledger.db") > 0
        assert not (tmp_path / "elsewhere" / "ledger.db").exists()
    finally:
        led.close()
