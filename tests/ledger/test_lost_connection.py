"""A write whose connection to PostgreSQL is lost after ``COMMIT`` was sent: reported as unknown, never as refused,
and a save retried with its ``requestId`` is applied once.

The connection goes through a loopback proxy (``tests/ledger/cut_proxy.py``) that forwards the
write's ``COMMIT`` (or the plain save's one statement), drops the server's answer, lets the server
finish, then ends the server's process with ``pg_terminate_backend``: the write is committed and
the client sees only a lost connection. Each cut costs well under a second.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from ledger import Ledger, LedgerError, OutcomeUnknown, Status, open_ledger
from ledger.protocol import handle
from ledger.store import postgres
from tests.ledger.cut_proxy import CutProxy, cut_proxy

pytestmark = pytest.mark.usefixtures("pg_available")


@pytest.fixture
def proxy() -> Iterator[CutProxy]:
    with cut_proxy() as found:
        yield found


@pytest.fixture
def proxied_led(pg_migrated: str, proxy: CutProxy) -> Iterator[Ledger]:
    opened = open_ledger(proxy.url(pg_migrated), migrate=True)
    yield opened
    opened.close()


def _cut_during(proxy: CutProxy, marker: bytes, write: Callable[[], Any]) -> Any:
    """Run ``write`` while its connection is lost right after ``marker`` was sent; what it returned or raised."""
    proxy.arm(marker)
    got: list[Any] = []

    def attempt() -> None:
        try:
            got.append(write())
        except Exception as exc:
            got.append(exc)

    worker = threading.Thread(target=attempt)
    worker.start()
    proxy.cut()
    worker.join(30)
    assert not worker.is_alive() and len(got) == 1
    return got[0]


def _rpc_save(led: Ledger, **params: Any) -> dict[str, Any]:
    answer = handle(led, {"jsonrpc": "2.0", "id": 1, "method": "memory/save_memory_record", "params": params})
    assert answer is not None
    return answer


@pytest.mark.parametrize("write", ["save", "edit"])
def test_a_commit_whose_answer_is_lost_is_unknown_and_its_retry_applies_once(
    proxied_led: Ledger, proxy: CutProxy, write: str
) -> None:
    # Given: a pin, and a save or an edit of it sent over JSON-RPC with a requestId
    first = proxied_led.save("I live in Lisbon")
    params: dict[str, Any] = {"body": "I live in Porto", "requestId": "move-2026-12"}
    if write == "edit":
        params["supersedes"] = first.id
    # When: the server commits it and the connection is lost before its answer comes back
    answer = _cut_during(proxy, b"COMMIT", lambda: _rpc_save(proxied_led, **params))
    # Then: the answer says the outcome is unknown, names the record to read and the requestId retry
    error = answer["error"]
    assert error["code"] == -32006 and error["data"]["reason"] == "outcome_unknown", error
    record_id = error["data"]["recordId"]
    assert record_id in error["message"] and "requestId" in error["message"] and "refused" not in error["message"]
    # And: it was applied (as the message says to check)
    assert proxied_led.get(record_id).body == "I live in Porto"
    # When: the client retries with the same requestId
    again = _rpc_save(proxied_led, **params)
    # Then: the record it wrote comes back, and nothing is written twice
    assert again["result"]["id"] == record_id, again
    bodies = sorted(r.body or "" for r in proxied_led.list())
    assert bodies == (["I live in Porto"] if write == "edit" else ["I live in Lisbon", "I live in Porto"])
    assert sum(1 for r in proxied_led.records(proxied_led.scope_key) if r.body == "I live in Porto") == 1
    # And: the same requestId with another body is refused, naming the record, and writes nothing
    other = _rpc_save(proxied_led, **{**params, "body": "I live in Faro"})
    assert other["error"]["code"] == -32007 and other["error"]["data"]["reason"] == "request_id_reused"
    assert other["error"]["data"]["recordId"] == record_id
    assert all(r.body != "I live in Faro" for r in proxied_led.records(proxied_led.scope_key))


def test_a_plain_save_that_cannot_learn_its_outcome_is_unknown(
    proxied_led: Ledger, proxy: CutProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given: the database cannot be reached again for a while after the plain save's call is lost
    monkeypatch.setattr(postgres, "CHECK_AFTER_LOSS_S", 0.3)
    proxied_led.save("warm the pool")

    def save_then_unreachable() -> Any:
        return proxied_led.save("I have a cat named Miso")

    proxy.arm(b"memledger_save")
    got: list[Any] = []
    worker = threading.Thread(target=lambda: got.append(_attempt(save_then_unreachable)))
    worker.start()
    proxy.refusing = True  # the check on a new connection cannot connect
    proxy.cut()
    worker.join(30)
    proxy.refusing = False
    # Then: unknown, naming the record, never "refused" and never written a second time
    (error,) = got
    assert isinstance(error, OutcomeUnknown), error
    assert error.record_id is not None and error.record_id in error.message
    assert proxied_led.get(error.record_id).body == "I have a cat named Miso"
    assert [r.body for r in proxied_led.list()].count("I have a cat named Miso") == 1


def _attempt(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except LedgerError as exc:
        return exc


def test_the_command_line_and_mcp_say_unknown(
    proxied_led: Ledger, proxy: CutProxy, pg_migrated: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from worker.cli import app
    from worker.mcp.tools import call_tool

    first = proxied_led.save("Standup is at 9:30")
    # The command line: an edit whose COMMIT's answer is lost exits 3, reason outcome_unknown
    monkeypatch.setenv("MEMLEDGER_DATABASE_URL", proxy.url(pg_migrated))
    args = ["pin", "Standup is at 10:00", "--supersedes", first.id, "--request-id", "standup-1", "--json"]
    result = _cut_during(proxy, b"COMMIT", lambda: CliRunner().invoke(app, args))
    assert result.exit_code == 3, result.output
    assert '"reason": "outcome_unknown"' in result.stderr and "refused" not in result.stderr
    # ... and run again with the same key, it is applied once
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    assert [r.body for r in proxied_led.list()] == ["Standup is at 10:00"]
    # MCP: a proposal whose COMMIT's answer is lost is a tool error with the reason
    tool = _cut_during(proxy, b"COMMIT", lambda: call_tool(proxied_led, "propose_pin", {"body": "Prefers tea"}))
    assert tool.is_error
    meta = (tool.meta or {}).get("memledger/error") or {}
    assert meta.get("reason") == "outcome_unknown" and meta.get("recordId"), tool
    assert tool.content[0].text.startswith("outcome_unknown: ")
    assert [r.body for r in proxied_led.proposals(proxied_led.scope_key) if r.status == Status.PROPOSED] == [
        "Prefers tea"
    ]


def _writes_while_backends_die(pg_migrated: str, *, seconds: float, every_s: float) -> dict[str, int]:
    """Saves, keyed saves and edits while every server process of the ledger is ended every ``every_s``; the
    counts of what was answered and of what the answers got wrong."""
    from sqlalchemy import create_engine, make_url, text

    from tests.conftest import PG_URL

    app = dict(part.split("=", 1) for part in make_url(pg_migrated).query["options"].split() if "=" in part)
    name = app["-capplication_name"]
    led = open_ledger(pg_migrated, migrate=True)
    led.set_budget(led.scope_key, 100_000)
    admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    stop, pause = threading.Event(), threading.Event()
    ended = [0]

    def killer() -> None:
        with admin.connect() as conn:
            while not stop.wait(every_s):
                if pause.is_set():
                    continue
                ended[0] += conn.execute(
                    text("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = :a"),
                    {"a": name},
                ).scalar_one()

    counts = {"writes": 0, "ok": 0, "unknown": 0, "refused": 0, "refused_but_applied": 0}
    thread = threading.Thread(target=killer)
    thread.start()
    try:
        deadline = threading.Event()
        threading.Timer(seconds, deadline.set).start()
        last = None
        while not deadline.is_set():
            counts["writes"] += 1
            i = counts["writes"]
            body = f"note number {i}"
            options: dict[str, Any] = {"request_id": f"r{i}"} if i % 2 else {}
            if i % 3 == 0 and last is not None:
                options["supersedes"] = last
            try:
                last = led.save(body, **options).id
                counts["ok"] += 1
            except OutcomeUnknown:
                counts["unknown"] += 1
            except LedgerError:
                counts["refused"] += 1
                pause.set()  # read with the database left alone
                counts["refused_but_applied"] += any(r.body == body for r in led.records(led.scope_key))
                pause.clear()
    finally:
        stop.set()
        thread.join()
        admin.dispose()
    bodies = [r.body for r in led.records(led.scope_key)]
    counts["duplicated"] = len(bodies) - len(set(bodies))
    counts["backends_ended"] = ended[0]
    led.close()
    return counts


def test_writes_while_backends_are_ended_are_never_refused_when_applied(pg_migrated: str) -> None:
    # Given/When: three seconds of writes, every server process of the ledger ended every 0.3 s (about 10 times)
    counts = _writes_while_backends_die(pg_migrated, seconds=3, every_s=0.3)
    # Then: no write reported refused had been applied, and none was written twice
    assert counts["refused_but_applied"] == 0 and counts["duplicated"] == 0, counts
    assert counts["ok"] > 0 and counts["backends_ended"] > 0, counts


@pytest.mark.soak
@pytest.mark.timeout(300)
def test_writes_while_backends_are_ended_every_1_5_s_for_two_minutes(pg_migrated: str) -> None:
    counts = _writes_while_backends_die(pg_migrated, seconds=120, every_s=1.5)
    assert counts["refused_but_applied"] == 0 and counts["duplicated"] == 0, counts
