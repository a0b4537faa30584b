"""PostgreSQL's one-statement plain save (``memledger_save``) against the write transaction.

The function stands in for :meth:`Transaction.save` on the common case, so the two must write
the same rows: two ledgers on two schemas, one with the function and one without, make the
same saves at the same clock readings and their raw rows are compared. Every case the function
must leave to the transaction is checked to write nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Connection, create_engine, text

from ledger import Ledger, MemoryRecord, open_ledger
from ledger.errors import BudgetExceeded, InvalidInstant, InvalidTransition, RecordNotFound
from ledger.store import Store
from tests.conftest import PG_URL, T0, Clock, leased_pg_schema

pytestmark = pytest.mark.usefixtures("pg_available")


@pytest.fixture
def two_schemas(pg_migrated: str) -> Iterator[str]:
    """A second migrated schema beside ``pg_migrated``."""
    with leased_pg_schema() as url:
        yield url


class Calls:
    """What each call of the store's ``save_plain`` (or ``edit_plain``) answered (the real call, counted)."""

    def __init__(self, store: Store, method: str = "save_plain") -> None:
        self.answers: list[Any] = []
        real: Callable[[Any], Any] = getattr(store, method)

        def counted(params: Any) -> Any:
            answer = real(params)
            self.answers.append(answer)
            return answer

        setattr(store, method, counted)


@pytest.fixture
def fast(pg_migrated: str, clock: Clock) -> Iterator[Ledger]:
    led = open_ledger(pg_migrated, migrate=True, clock=clock)
    yield led
    led.close()


def _raw(led: Ledger) -> dict[str, list[tuple[Any, ...]]]:
    """Every row a save touches, ids replaced by their order of appearance (the only difference allowed)."""
    with led.engine.connect() as conn:
        records = conn.execute(text("SELECT * FROM memory_records ORDER BY seq")).mappings().all()
        events = conn.execute(text("SELECT * FROM ledger_events ORDER BY seq")).mappings().all()
        scopes = conn.execute(
            text(
                "SELECT scope_key, latest_at, max_records, active_count, proposed_count, latest_closed_at "
                "FROM scope_settings"
            )
        ).all()
    order = {row["id"]: f"record {n}" for n, row in enumerate(records)}

    def named(value: Any) -> Any:  # an id, also inside a JSON text (supersedes, an event's detail)
        if not isinstance(value, str):
            return value
        for record_id, name in order.items():
            value = value.replace(record_id, name)
        return value

    return {
        "records": [tuple(named(v) for k, v in row.items() if k != "seq") for row in records],
        "events": [tuple(named(v) for k, v in row.items() if k != "seq") for row in events],
        "scopes": [tuple(row) for row in scopes],
    }


def _script(led: Ledger, clock: Clock) -> list[MemoryRecord]:
    """Saves of every plain shape, at clock readings that move forward, stand still and go back."""
    kept = [led.save("the first pin creates the scope's row")]
    steps: list[tuple[timedelta, dict[str, Any]]] = [
        (timedelta(seconds=1), {}),
        (timedelta(0), {"kind": "preference"}),  # the same reading: latest + 1 µs
        (timedelta(seconds=-5), {"kind": "constraint"}),  # a clock that went back: latest + 1 µs
        (timedelta(seconds=9), {"source_session_id": "chat-7"}),
        (timedelta(microseconds=3), {"expires_at": T0 + timedelta(days=30)}),
        (timedelta(seconds=2), {"kind": "fact", "source_session_id": "chat-8"}),
    ]
    for n, (step, args) in enumerate(steps):
        clock.advance(seconds=step.total_seconds())
        kept.append(led.save(f"plain pin {n}: the deploy region is eu-west-1", **args))
    return kept


def test_a_plain_save_writes_the_rows_the_transaction_writes(fast: Ledger, clock: Clock, two_schemas: str) -> None:
    # Given two ledgers on the same clock readings, one without the one-statement save
    other_clock = Clock()
    slow = open_ledger(two_schemas, migrate=True, clock=other_clock)
    slow.store.saves_plain = False  # type: ignore[misc]
    calls = Calls(fast.store)
    try:
        # When both make the same saves
        returned = _script(fast, clock)
        _script(slow, other_clock)
        # Then every save after the first went through the function, and wrote the transaction's rows
        assert len(calls.answers) == 7
        assert calls.answers[0] is None  # no settings row yet: the transaction creates it
        assert all(answer is not None for answer in calls.answers[1:])
        assert _raw(fast) == _raw(slow)
        # And the records it returned are the ones read back
        assert returned == [fast.get(r.id) for r in returned]
    finally:
        slow.close()


def _edits(led: Ledger, clock: Clock) -> list[MemoryRecord]:
    """Edits of every plain shape (the first save and the grouped one go through the transaction)."""
    first = led.save("the office is in Porto", kind="decision", source_session_id="chat-1")
    grouped = led.save("the deploy region is eu-west-1", conflict_group="region")
    steps: list[tuple[timedelta, str, dict[str, Any]]] = [
        (timedelta(seconds=1), first.id, {}),  # keeps the target's kind, drops its session
        (timedelta(0), grouped.id, {}),  # keeps the target's conflict group; the same reading: latest + 1 µs
        (timedelta(seconds=-5), "", {"kind": "constraint"}),  # a clock that went back; a kind of its own
        (timedelta(seconds=9), "", {"source_session_id": "chat-7", "expires_at": T0 + timedelta(days=30)}),
    ]
    kept = [first, grouped]
    for n, (step, target, args) in enumerate(steps):
        clock.advance(seconds=step.total_seconds())
        kept.append(led.save(f"edit {n}", supersedes=target or kept[-1].id, **args))
        assert kept[-1] == led.get(kept[-1].id)  # what the edit returned is what was written
    return kept


def test_a_plain_edit_writes_the_rows_the_transaction_writes(fast: Ledger, clock: Clock, two_schemas: str) -> None:
    # Given two ledgers on the same clock readings, one without the one-statement edit
    other_clock = Clock()
    slow = open_ledger(two_schemas, migrate=True, clock=other_clock)
    slow.store.saves_plain = False  # type: ignore[misc]
    calls = Calls(fast.store, "edit_plain")
    try:
        # When both make the same edits
        returned = _edits(fast, clock)
        _edits(slow, other_clock)
        # Then every edit went through the function, and wrote the transaction's rows
        assert len(calls.answers) == 4 and all(answer is not None for answer in calls.answers)
        assert _raw(fast) == _raw(slow)
        assert [r.kind for r in returned[2:]] == ["decision", "fact", "constraint", "constraint"]
    finally:
        slow.close()


def test_an_edit_the_function_declines_gets_the_transactions_answer(fast: Ledger, clock: Clock) -> None:
    # Given a record already edited, one of another account, and one due to expire
    old = fast.save("the office is in Porto")
    fast.save("the office is in Lisbon", supersedes=old.id)
    other = fast.for_account("someone-else").save("their pin")
    due = fast.save("short-lived", expires_at=clock.now + timedelta(seconds=10))
    calls = Calls(fast.store, "edit_plain")
    before = _counts(fast)
    # When each is edited, Then the function writes nothing and the transaction refuses as it always has
    with pytest.raises(InvalidTransition, match="superseded, not active"):
        fast.save("the office is in Faro", supersedes=old.id)
    with pytest.raises(RecordNotFound):
        fast.save("not mine to edit", supersedes=other.id)
    with pytest.raises(RecordNotFound):
        fast.save("no such record", supersedes="mem_" + "cd" * 12)
    with pytest.raises(InvalidInstant, match="expires_at must be after now"):
        fast.save("already expired", supersedes=due.id, expires_at=clock.now)
    assert calls.answers == [None] * 4
    assert _counts(fast) == before
    # And an edit of a record past its expiry: the transaction expires it first, then refuses the edit
    clock.advance(seconds=11)
    with pytest.raises(InvalidTransition, match="expired, not active"):
        fast.save("too late", supersedes=due.id)
    assert calls.answers[-1] is None
    assert fast.history(due.id)[-1].status == "expired"


def _counts(led: Ledger) -> tuple[int, int, int]:
    with led.engine.connect() as conn:
        return (
            conn.execute(text("SELECT count(*) FROM memory_records")).scalar_one(),
            conn.execute(text("SELECT count(*) FROM ledger_events")).scalar_one(),
            conn.execute(
                text("SELECT latest_at FROM scope_settings WHERE scope_key = :s"), {"s": led.scope_key}
            ).scalar_one(),
        )


def _call(led: Ledger, clock_us: int, **overrides: Any) -> int | None:
    params = {
        "s": led.scope_key,
        "clock": clock_us,
        "default_max": led.default_max_records,
        "id": "mem_" + "ab" * 12,
        "kind": "fact",
        "body": "a plain pin",
        "session": None,
        "expires": None,
        "detail": '{"provenance": "user_explicit", "supersedes": []}',
        **overrides,
    }
    return led.store.save_plain(params)


def test_the_last_slot_and_a_refusal_are_the_transactions(fast: Ledger) -> None:
    # Given a scope whose budget leaves two slots, and a budget hook
    fast.save("first")
    fast.set_budget(fast.scope_key, 3)
    reached: list[str] = []
    fast.set_budget_hook("test", lambda tx: reached.append(tx.scope_key) or None)
    calls = Calls(fast.store)
    fast.save("second: room to spare")
    # When a save takes the last slot, the transaction writes it and calls the hook
    fast.save("third: the last slot")
    assert calls.answers[0] is not None and calls.answers[1] is None
    assert reached == [fast.scope_key]
    # And a save past the budget is refused with the transaction's words, and recorded
    with pytest.raises(BudgetExceeded, match="holds 3 of 3"):
        fast.save("fourth: no room")
    assert calls.answers[2] is None
    assert [r.body for r in fast.list()] == ["first", "second: room to spare", "third: the last slot"]


def test_an_expiry_not_after_the_instant_is_the_transactions_refusal(fast: Ledger, clock: Clock) -> None:
    fast.save("first")
    before = _counts(fast)
    assert _call(fast, int(clock.now.timestamp() * 1e6) + 10, expires=int(clock.now.timestamp() * 1e6) + 10) is None
    assert _counts(fast) == before
    with pytest.raises(InvalidInstant, match="expires_at must be after now"):
        fast.save("already expired", expires_at=clock.now)
    assert _counts(fast) == before


def test_a_record_due_to_expire_is_swept_by_the_transaction(fast: Ledger, clock: Clock) -> None:
    # Given a record that expires in ten seconds
    due = fast.save("short-lived", expires_at=clock.now + timedelta(seconds=10))
    calls = Calls(fast.store)
    clock.advance(seconds=11)
    # When a plain save comes after its expiry
    fast.save("after the expiry")
    # Then the function left it to the transaction, which expired the record first
    assert calls.answers == [None]
    assert fast.history(due.id)[-1].status == "expired"
    assert [r.body for r in fast.list()] == ["after the expiry"]


def test_a_record_closed_after_the_clock_reading_sends_the_save_to_the_transaction(fast: Ledger, clock: Clock) -> None:
    # Given a record expired by a sweep at an instant later than a writer's clock reading
    fast.save("short-lived", expires_at=clock.now + timedelta(seconds=10))
    fast.sweep_expired(clock.now + timedelta(seconds=20))
    before = _counts(fast)
    # When the function is called with that earlier reading, it writes nothing
    assert _call(fast, int((clock.now + timedelta(seconds=5)).timestamp() * 1e6)) is None
    assert _counts(fast) == before
    # And with a reading past it, it writes
    assert _call(fast, int((clock.now + timedelta(seconds=30)).timestamp() * 1e6)) is not None


def test_a_record_closed_after_the_clock_reading_sends_the_edit_to_the_transaction(fast: Ledger, clock: Clock) -> None:
    # Given a record to edit, and another expired by a sweep at an instant later than a writer's clock reading
    target = fast.save("the office is in Porto")
    fast.save("short-lived", expires_at=clock.now + timedelta(seconds=10))
    fast.sweep_expired(clock.now + timedelta(seconds=20))
    before = _counts(fast)
    params = {
        "s": fast.scope_key,
        "target": target.id,
        "id": "mem_" + "ef" * 12,
        "kind": None,
        "body": "the office is in Lisbon",
        "session": None,
        "expires": None,
        "supersedes": f'["{target.id}"]',
        "closed_detail": '{"superseded_by": "mem_' + "ef" * 12 + '"}',
        "detail": '{"provenance": "user_explicit", "supersedes": ["' + target.id + '"]}',
    }
    # When the edit's function is called with that earlier reading, it writes nothing
    assert fast.store.edit_plain({**params, "clock": int((clock.now + timedelta(seconds=5)).timestamp() * 1e6)}) is None
    assert _counts(fast) == before
    # And with a reading past it, it writes
    late = int((clock.now + timedelta(seconds=30)).timestamp() * 1e6)
    assert fast.store.edit_plain({**params, "clock": late}) == (late, "fact", None)


# The call blocked by this test's own lock holder (other runs share the server and wait on locks of their own).
_WAITING_CALL = (
    "SELECT pid FROM pg_stat_activity WHERE query LIKE :q AND wait_event_type = 'Lock' "
    "AND :holder = ANY(pg_blocking_pids(pid))"
)


@contextmanager
def _holding_the_scope_lock(led: Ledger) -> Iterator[Connection]:
    """A connection whose open transaction holds ``led``'s scope lock; closed (rolled back unless committed) after."""
    holder = led.engine.connect()
    try:
        holder.begin()
        holder.execute(text("SELECT 1 FROM scope_settings WHERE scope_key = :s FOR UPDATE"), {"s": led.scope_key})
        yield holder
    finally:
        holder.close()


def _waiting_calls(holder: Connection, call: str) -> list[int]:
    """The server processes running ``call`` (a LIKE pattern) that wait for ``holder``'s lock, once there are any
    (waited for up to 5 s; none then)."""
    holder_pid = holder.execute(text("SELECT pg_backend_pid()")).scalar_one()
    admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            for _ in range(500):
                pids = list(conn.execute(text(_WAITING_CALL), {"q": call, "holder": holder_pid}).scalars())
                if pids:
                    return pids
                threading.Event().wait(0.01)
    finally:
        admin.dispose()
    return []


@pytest.mark.parametrize("edit", [False, True], ids=["save", "edit"])
def test_a_connection_lost_during_the_call_writes_the_pin_once(fast: Ledger, edit: bool) -> None:
    # Given a plain save (or edit) whose call waits for the scope's lock, held by another transaction
    first = fast.save("first")
    saved: list[Any] = []
    options = {"supersedes": first.id} if edit else {}
    worker = threading.Thread(target=lambda: saved.append(fast.save("saved once", **options)))
    with _holding_the_scope_lock(fast) as holder:
        worker.start()
        # When the server ends the waiting call's connection
        pids = _waiting_calls(holder, "SELECT * FROM memledger_edit%" if edit else "SELECT memledger_save%")
        assert len(pids) == 1
        holder.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pids[0]})
    worker.join(timeout=30)
    # Then the save finds it was not written, writes it, and it is there once
    assert [r.body for r in saved] == ["saved once"]
    assert [r.body for r in fast.list()] == (["saved once"] if edit else ["first", "saved once"])
    assert saved[0] == fast.get(saved[0].id)


def _kept_counts(led: Ledger) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The scope row's counts and latest ``valid_to``, and the same counted from its records."""
    with led.engine.connect() as conn:
        kept = conn.execute(
            text("SELECT active_count, proposed_count, latest_closed_at FROM scope_settings WHERE scope_key = :s"),
            {"s": led.scope_key},
        ).one()
        counted = conn.execute(
            text(
                "SELECT count(*) FILTER (WHERE status = 'active'), count(*) FILTER (WHERE status = 'proposed'), "
                "max(valid_to) FROM memory_records WHERE scope_key = :s"
            ),
            {"s": led.scope_key},
        ).one()
    return tuple(kept), tuple(counted)


def _while_locked(led: Ledger, call: str, change: str, values: dict[str, Any], write: Callable[[], Any]) -> list[Any]:
    """Run ``write`` on a thread while another transaction holds the scope's lock; once ``write``'s call (``call``,
    a LIKE pattern) waits for it, that transaction makes ``change`` and commits. What ``write`` returned or raised."""
    done: list[Any] = []

    def run() -> None:
        try:
            done.append(write())
        except Exception as exc:  # handed to the test, which expects one
            done.append(exc)

    worker = threading.Thread(target=run)
    with _holding_the_scope_lock(led) as holder:
        worker.start()
        if not _waiting_calls(holder, call):
            raise AssertionError("the call never waited for the lock")
        holder.execute(text(change), values)
        holder.commit()
    worker.join(timeout=30)
    return done


def test_a_record_due_while_the_save_waited_for_the_lock_goes_to_the_transaction(fast: Ledger, clock: Clock) -> None:
    # Given a record that expires in ten seconds, and a plain save waiting for the scope's lock
    short = fast.save("short-lived", expires_at=clock.now + timedelta(seconds=10))
    calls = Calls(fast.store)
    # When the lock's holder makes that record due at the save's clock reading, and commits
    now_us = int(clock.now.timestamp() * 1e6)
    done = _while_locked(
        fast,
        "SELECT memledger_save%",
        "UPDATE memory_records SET expires_at = :e WHERE id = :id",
        {"e": now_us, "id": short.id},
        lambda: fast.save("saved after the wait"),
    )
    # Then the function, having found it after the lock, wrote nothing: the transaction expired it, then saved
    assert calls.answers == [None]
    assert [r.body for r in done] == ["saved after the wait"]
    assert fast.history(short.id)[-1].status == "expired"
    assert [r.body for r in fast.list()] == ["saved after the wait"]
    kept, counted = _kept_counts(fast)
    assert kept[:2] == counted[:2] == (1, 0)


def test_a_target_closed_while_the_edit_waited_for_the_lock_gets_the_transactions_answer(fast: Ledger) -> None:
    # Given a record, and a plain edit of it waiting for the scope's lock
    target = fast.save("the office is in Porto")
    calls = Calls(fast.store, "edit_plain")
    # When the lock's holder deletes the record (closing it at its own instant) and commits
    done = _while_locked(
        fast,
        "SELECT * FROM memledger_edit%",
        "UPDATE memory_records SET status = 'deleted', valid_to = valid_from WHERE id = :id",
        {"id": target.id},
        lambda: fast.save("the office is in Lisbon", supersedes=target.id),
    )
    # Then the function wrote nothing, and the transaction refused the edit as it always has
    assert calls.answers == [None]
    assert len(done) == 1 and isinstance(done[0], InvalidTransition)
    assert fast.list() == []
    kept, counted = _kept_counts(fast)
    assert kept == counted == (0, 0, int(target.valid_from.timestamp() * 1e6))


def test_the_scope_row_counts_what_every_path_wrote(fast: Ledger, clock: Clock) -> None:
    # Given saves and edits through the functions and through the transactions (a conflict group, a proposal,
    # a forget, an expiry), each path on connections that never set the functions' setting and on one that did
    _edits(fast, clock)
    proposal = fast.propose("a proposal to accept")
    fast.accept(proposal.id)
    fast.propose("a proposal left waiting")
    fast.delete(fast.save("to forget").id)
    fast.save("short-lived", expires_at=clock.now + timedelta(seconds=5))
    clock.advance(seconds=6)
    fast.save("after the expiry")
    # Then the scope's row holds what its records say
    kept, counted = _kept_counts(fast)
    assert kept == counted
