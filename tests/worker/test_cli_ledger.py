"""The ledger commands of ``memledger``: output, ``--json``, exit codes, and ``memledger rpc`` over real pipes."""

from __future__ import annotations

import io
import json
import os
import selectors
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from typer.testing import CliRunner, Result

from ledger import format_rfc3339, open_ledger
from tests.hygiene import popen
from worker.cli import app
from worker.cli.ledger import parse_instant
from worker.rpc.stdio import serve_stdio

SCOPE = "account:local"
MEMLEDGER = Path(sys.executable).with_name("memledger")


@pytest.fixture
def db_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh SQLite ledger file, pointed at by MEMLEDGER_DATABASE_URL."""
    path = tmp_path / "cli.db"
    monkeypatch.setenv("MEMLEDGER_DATABASE_URL", f"sqlite:///{path}")
    monkeypatch.delenv("MEMLEDGER_ACCOUNT", raising=False)
    return path


def run(runner: CliRunner, *args: str, code: int = 0, input: str | None = None) -> Result:
    result = runner.invoke(app, list(args), input=input)
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr, result.exception)
    assert "Traceback" not in result.stdout + result.stderr
    return result


def run_json(runner: CliRunner, *args: str) -> Any:
    return json.loads(run(runner, *args, "--json").stdout)


def pin_id(runner: CliRunner, *args: str) -> str:
    record = run_json(runner, "pin", *args)
    return str(record["id"])


# ---------------------------------------------------------------------- pins
def test_pins_pages_with_limit_and_cursor(runner: CliRunner, db_file: Path) -> None:
    ids = [pin_id(runner, f"pin number {i}") for i in range(5)]
    first = run_json(runner, "pins", "--limit", "2")
    assert [r["id"] for r in first["records"]] == ids[:2] and first["scopeKey"] == SCOPE
    rest = run_json(runner, "pins", "--limit", "3", "--cursor", first["nextCursor"])
    assert [r["id"] for r in rest["records"]] == ids[2:] and rest["nextCursor"] is None
    table = run(runner, "pins", "--limit", "2")
    assert "More pins follow: memledger pins --limit 2 --cursor " in table.stdout
    bad = run(runner, "pins", "--cursor", "garbled", code=1)
    assert "cursor is not one this ledger issued" in bad.stdout + bad.stderr
    run(runner, "pins", "--limit", "0", code=2)
    assert [r["id"] for r in run_json(runner, "pins")] == ids  # without paging: the whole list, as before


def test_pin_and_pins(runner: CliRunner, db_file: Path) -> None:
    result = run(runner, "pin", "I prefer metric units", "--kind", "preference")
    assert "Pinned mem_" in result.stdout
    records = run_json(runner, "pins")
    assert [r["body"] for r in records] == ["I prefer metric units"]
    assert records[0]["kind"] == "preference" and records[0]["scopeKey"] == SCOPE
    assert set(records[0]) >= {"id", "scopeKey", "validFrom", "validTo", "expiresAt", "supersededBy", "erased"}
    assert records[0]["validFrom"].endswith("Z")
    table = run(runner, "pins").stdout
    assert records[0]["id"] in table and "I prefer metric units" in table


def test_pin_options(runner: CliRunner, db_file: Path) -> None:
    record = run_json(runner, "pin", "deploy region is eu-west-1", "--expires", "2099-01-01", "--group", "region",
                      "--kind", "decision")  # fmt: skip
    assert record["expiresAt"] == "2099-01-01T00:00:00.000000Z"
    assert (record["conflictGroup"], record["kind"]) == ("region", "decision")
    replaced = run_json(runner, "pin", "deploy region is us-east-1", "--group", "region")
    assert replaced["supersedes"] == [record["id"]]
    assert [r["id"] for r in run_json(runner, "pins")] == [replaced["id"]]


def test_a_group_with_a_control_character_is_refused_and_never_reaches_the_terminal(
    runner: CliRunner, db_file: Path
) -> None:
    # Given groups holding what the record protocol refuses in a group: ESC (a terminal escape), tab, NUL, a C1
    for group in ("\x1b[31mred", "a\tb", "a\x00b", "a\x9bb"):
        # When it is pinned, Then it is refused naming the group, and nothing is stored
        result = run(runner, "pin", "deploy region is eu-west-1", "--group", group, code=1)
        assert "conflict_group must be" in result.stderr and "control characters" in result.stderr, result.stderr
    assert run_json(runner, "pins") == []


def test_a_group_stored_with_a_control_character_before_they_were_refused_is_printed_escaped(
    runner: CliRunner, db_file: Path
) -> None:
    # Given a pin whose group holds an escape sequence and a tab, stored before such groups were refused
    pinned = run_json(runner, "pin", "deploy region is eu-west-1", "--group", "region")
    led = open_ledger(f"sqlite:///{db_file}")
    try:
        with led.engine.begin() as conn:
            conn.execute(
                text("UPDATE memory_records SET conflict_group = :g WHERE id = :i"),
                {"g": "\x1b]0;owned\x07re\tgion\x9b", "i": pinned["id"]},
            )
    finally:
        led.close()
    # When the pins are listed, Then the group's control characters are shown escaped, never sent to the terminal
    table = run(runner, "pins").stdout
    assert not any(char in table for char in "\x1b\x07\t\x9b"), repr(table)
    assert "\\u001b]0;owned\\u0007re\\u0009gion\\u009b" in table, table


def test_bodies_are_printed_literally_not_as_markup(runner: CliRunner, db_file: Path) -> None:
    run(runner, "pin", "use [bold]literal[/bold] brackets")
    assert "[bold]literal[/bold]" in run(runner, "pins").stdout


def test_edit_and_history(runner: CliRunner, db_file: Path) -> None:
    first = pin_id(runner, "office in Berlin")
    result = run(runner, "pin", "office in Paris", "--supersedes", first)
    assert f"replaces {first}" in result.stdout
    chain = run_json(runner, "history", first)
    assert [r["body"] for r in chain] == ["office in Berlin", "office in Paris"]
    assert chain[0]["status"] == "superseded" and chain[0]["validTo"] == chain[1]["validFrom"]
    table = run(runner, "history", first).stdout
    assert "superseded" in table and "office in Paris" in table


def test_unpin_erases(runner: CliRunner, db_file: Path) -> None:
    record_id = pin_id(runner, "forget the zebra")
    assert "Forgot" in run(runner, "unpin", record_id).stdout
    assert run_json(runner, "pins") == []
    chain = run_json(runner, "history", record_id)
    assert chain[0]["body"] is None and chain[0]["status"] == "deleted"
    assert "[erased]" in run(runner, "history", record_id).stdout


def test_empty_lists_say_so(runner: CliRunner, db_file: Path) -> None:
    assert "No pins" in run(runner, "pins").stdout
    assert "No proposals" in run(runner, "proposals").stdout
    assert run_json(runner, "proposals") == []
    assert "No match" in run(runner, "search", "anything").stdout


def test_scope_option(runner: CliRunner, db_file: Path) -> None:
    run(runner, "pin", "mine")
    assert run_json(runner, "pins", "--scope", "account:other") == []
    run(runner, "pins", "--scope", "not a scope", code=2)  # a usage error, the same for every --scope


# ---------------------------------------------------------------------- refusals and usage errors
def test_ledger_errors_exit_1_with_a_message(runner: CliRunner, db_file: Path) -> None:
    result = run(runner, "unpin", "mem_missing", code=1)
    assert "no memory record 'mem_missing'" in result.stderr and result.stdout == ""
    secret = "sk-ant-api03-" + "Zq7vX2mK9pL4nR8sT1wY6bC3dF5gH0jA" * 3
    result = run(runner, "pin", f"my key is {secret}", code=1)
    assert "credential" in result.stderr and secret not in result.stderr
    assert "empty" in run(runner, "pin", "   ", code=1).stderr
    first = pin_id(runner, "v1")
    run(runner, "pin", "v2", "--supersedes", first)
    assert "superseded" in run(runner, "unpin", first, code=1).stderr
    assert run_json(runner, "pins")[0]["body"] == "v2"


def test_usage_errors_exit_2(runner: CliRunner, db_file: Path) -> None:
    run(runner, "pin", code=2)
    run(runner, "pin", "x", "--kind", "opinion", code=2)
    run(runner, "pin", "x", "--expires", "next tuesday", code=2)
    run(runner, "as-of", "2026-01-01T10:00:00", code=2)  # no zone: ambiguous
    run(runner, "search", "x", "--limit", "0", code=2)
    run(runner, "budget", "--set", "-1", code=2)
    run(runner, "sweep", "--now", "soon", code=2)
    assert run_json(runner, "pins") == []


def test_bad_database_urls_exit_1_cleanly(runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMLEDGER_DATABASE_URL", "mysql://user:hunter2@db/ledger")
    result = run(runner, "pins", code=1)
    assert "unsupported database URL" in result.stderr and "hunter2" not in result.stderr
    result = run(runner, "pins", "--database-url", "postgresql+psycopg://u:hunter2@127.0.0.1:1/none", code=1)
    assert "database" in result.stderr and "hunter2" not in result.stderr
    run(runner, "pins", "--database-url", "not a url", code=1)


def test_a_database_path_that_is_not_utf8_is_a_clear_error(runner: CliRunner, tmp_path: Path) -> None:
    # Given a directory whose name is Latin-1 bytes, as argv or the environment hands it over (os.fsdecode)
    directory = tmp_path / os.fsdecode(b"caf\xe9")
    directory.mkdir()
    url = f"sqlite:///{directory / 'ledger.db'}"
    for command in (["pins"], ["pin", "x"], ["db", "upgrade"]):
        # When a command opens a ledger there, Then it says what is wrong, and no file is made
        result = run(runner, *command, "--database-url", url, code=1)
        assert "the database URL is not UTF-8 text" in result.stderr, result.stderr
    assert list(directory.iterdir()) == []


def test_database_url_option_overrides_the_environment(runner: CliRunner, db_file: Path, tmp_path: Path) -> None:
    other = f"sqlite:///{tmp_path / 'other.db'}"
    run(runner, "pin", "in the other file", "--database-url", other)
    assert run_json(runner, "pins") == []
    assert [r["body"] for r in run_json(runner, "pins", "--database-url", other)] == ["in the other file"]


def test_account_comes_from_the_environment(runner: CliRunner, db_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMLEDGER_ACCOUNT", "alice")
    assert run_json(runner, "pin", "hello")["scopeKey"] == "account:alice"
    monkeypatch.setenv("MEMLEDGER_ACCOUNT", "bad account!")
    run(runner, "pins", code=1)


# ---------------------------------------------------------------------- as-of, search, sweep
def test_as_of(runner: CliRunner, db_file: Path) -> None:
    record = run_json(runner, "pin", "present")
    assert run_json(runner, "as-of", "2000-01-01") == []
    assert [r["id"] for r in run_json(runner, "as-of", "2999-01-01T00:00:00+02:00")] == [record["id"]]
    assert [r["id"] for r in run_json(runner, "as-of", record["validFrom"])] == [record["id"]]
    assert "Nothing applied" in run(runner, "as-of", "2000-01-01").stdout


def test_search(runner: CliRunner, db_file: Path) -> None:
    run(runner, "pin", "deploy region is eu-west-1")
    run(runner, "pin", "deploy with blue green")
    run(runner, "pin", "tea, no sugar")
    found = run_json(runner, "search", "deploy region")
    assert found[0]["body"] == "deploy region is eu-west-1" and len(found) == 2
    assert len(run_json(runner, "search", "deploy", "--limit", "1")) == 1
    assert run_json(runner, "search", '"(*') == []


def test_a_query_the_protocol_refuses_is_refused_not_searched(runner: CliRunner, db_file: Path) -> None:
    run(runner, "pin", "deploy region is eu-west-1")
    # Given queries /rpc refuses: a byte that is not UTF-8 (a lone surrogate, as os.fsdecode hands it over), a
    # control character, a tab
    not_utf8 = os.fsdecode(b"\xff")
    for query, says in (
        ("deploy " + not_utf8, "not valid Unicode"),
        ("a\x1bb", "U+001B"),
        ("deploy\tregion", "U+0009"),
    ):
        # When one is searched for, Then it is refused naming the query (it answered "No match."), as invalid_params
        result = run(runner, "search", query, code=1)
        assert f"query {'is' if says == 'not valid Unicode' else 'holds'}" in result.stderr and says in result.stderr
        error = json.loads(run(runner, "search", query, "--json", code=1).stderr)["error"]
        assert error["reason"] == "invalid_params", error
    assert [r["body"] for r in run_json(runner, "search", "deploy region")] == ["deploy region is eu-west-1"]


def test_sweep(runner: CliRunner, db_file: Path) -> None:
    # Given a pin that expired a day ago (saved in the past) and one that expires in 2099
    led = open_ledger(f"sqlite:///{db_file}")
    try:
        past = datetime.now(UTC) - timedelta(days=2)
        gone = led.save("temporary", now=past, expires_at=past + timedelta(days=1))
        led.save("for later", now=past, expires_at=datetime(2099, 1, 1, tzinfo=UTC))
    finally:
        led.close()
    due = format_rfc3339(past + timedelta(days=1))
    result = run_json(runner, "sweep", "--now", due)
    assert result == {"expired": 1, "now": due}
    assert "Expired 0 records" in run(runner, "sweep").stdout
    chain = run_json(runner, "history", gone.id)
    assert chain[0]["status"] == "expired" and chain[0]["validTo"] == due


def test_sweep_refuses_an_instant_later_than_now(runner: CliRunner, db_file: Path) -> None:
    # Given a pin that applies until 2030
    run(runner, "pin", "A", "--expires", "2099-01-01T00:00:00Z")
    # When the sweep is asked to expire as of 2099, it refuses and expires nothing
    refused = run(runner, "sweep", "--now", "2099-01-01T00:00:00Z", code=2)
    assert "later than now" in refused.stderr and "omit --now" in refused.stderr
    # a minute ahead is refused too; a second ahead is inside the clock-skew allowance
    run(runner, "sweep", "--now", format_rfc3339(datetime.now(UTC) + timedelta(minutes=1)), code=2)
    run(runner, "sweep", "--now", format_rfc3339(datetime.now(UTC) + timedelta(seconds=1)))
    # Then `pins` and `as-of now` agree: A still applies
    assert [r["body"] for r in run_json(runner, "pins")] == ["A"]
    assert [r["body"] for r in run_json(runner, "as-of", format_rfc3339(datetime.now(UTC)))] == ["A"]


# ---------------------------------------------------------------------- proposals and budget
def test_proposals_accept_reject(runner: CliRunner, db_file: Path) -> None:
    led = open_ledger(f"sqlite:///{db_file}")
    try:
        keep = led.propose("I like jazz", kind="preference", confidence_bps=8000)
        drop = led.propose("I like noise", kind="preference")
    finally:
        led.close()
    waiting = run_json(runner, "proposals")
    assert [r["id"] for r in waiting] == [keep.id, drop.id] and waiting[0]["confidenceBps"] == 8000
    assert "Accepted" in run(runner, "accept", keep.id).stdout
    assert run_json(runner, "reject", drop.id)["status"] == "rejected"
    assert [r["id"] for r in run_json(runner, "pins")] == [keep.id]
    assert "not" in run(runner, "accept", drop.id, code=1).stderr


def test_proposals_show_what_a_merge_proposal_replaces(runner: CliRunner, db_file: Path) -> None:
    # Given two duplicate pins and a proposal to merge them (as consolidation in propose mode makes)
    led = open_ledger(f"sqlite:///{db_file}")
    try:
        first = led.save("I prefer metric units")
        second = led.save("i prefer metric units, always")
        merge = led.propose("I prefer metric units", supersedes=[first.id, second.id])
        plain = led.propose("I like jazz")
    finally:
        led.close()
    # When the user lists the proposals
    shown = " ".join(run(runner, "proposals").stdout.split())
    # Then the merge proposal names each pin it closes on accept, with its words
    assert "Replaces (closed on accept)" in shown
    assert f"{first.id}: I prefer metric units" in shown and f"{second.id}: i prefer metric units, always" in shown
    assert merge.id in shown and plain.id in shown
    # and --json keeps the ids in supersedes, as before
    assert run_json(runner, "proposals")[0]["supersedes"] == [first.id, second.id]


def test_budget(runner: CliRunner, db_file: Path) -> None:
    usage = run_json(runner, "budget")
    assert usage == {"scopeKey": SCOPE, "maxRecords": 200, "active": 0, "proposed": 0, "held": 0}
    assert run_json(runner, "budget", SCOPE, "--set", "1")["maxRecords"] == 1
    first = pin_id(runner, "the only one")
    result = run(runner, "pin", "one too many", code=1)
    assert "holds 1 of 1" in result.stderr
    run(runner, "pin", "edited", "--supersedes", first)
    assert "holds 1 of 1 (1 active, 0 proposed)" in run(runner, "budget").stdout


def test_a_full_scope_is_refused_with_one_whole_true_message_by_pin_and_rpc(runner: CliRunner, db_file: Path) -> None:
    # Given a full scope with consolidation on
    run(runner, "budget", "--set", "1")
    run(runner, "consolidation", "set", "--mode", "propose", "--harness", "offline")
    run(runner, "pin", "I prefer tea")
    # When `memledger pin` and the record protocol both try one more
    pinned = " ".join(run(runner, "pin", "I prefer coffee", code=1).stderr.split())
    request = {"jsonrpc": "2.0", "id": 1, "method": "memory/save_memory_record", "params": {"body": "I prefer cocoa"}}
    answered = json.loads(run(runner, "rpc", input=json.dumps(request) + "\n").stdout)["error"]["message"]
    # Then both say the same whole thing: a run is scheduled, what else makes room, nothing cut
    assert pinned == answered, (pinned, answered)
    assert "Consolidation is on: run run_" in answered and answered.endswith("or raise the budget.")
    assert "turn on consolidation" not in answered and "…" not in answered
    [pending] = [r for r in run_json(runner, "runs") if r["state"] == "pending"]
    assert pending["id"] in answered and pending["turns"] == 0
    # With consolidation off, turning it on is one of the ways
    run(runner, "consolidation", "disable")
    off = " ".join(run(runner, "pin", "I prefer coffee", code=1).stderr.split())
    assert "turn on consolidation to merge duplicates" in off and "Consolidation is on" not in off


def test_the_budget_refusal_is_never_cut() -> None:
    from ledger import BudgetExceeded
    from ledger.protocol import _ledger_error

    scope = "a" * 32 + ":" + "b" * 200  # the longest scope key
    note = "Consolidation is on: run run_0123456789abcdef01234567, due 2026-01-01T00:00:00.000000Z, will merge"
    exc = BudgetExceeded.refusal(scope_key=scope, budget=1_000_000, active=999_999, proposed=1, notes=(note,))
    assert _ledger_error(exc).message == exc.message and len(exc.message) > 400


# ---------------------------------------------------------------------- db upgrade
def test_db_upgrade(runner: CliRunner, db_file: Path) -> None:
    result = run(runner, "db", "upgrade")
    assert "(head)" in result.stdout and db_file.exists()
    assert "(head)" in run(runner, "db", "upgrade").stdout  # idempotent


def test_db_upgrade_on_postgres(runner: CliRunner, pg_schema: str) -> None:
    result = run(runner, "db", "upgrade", "--database-url", pg_schema)
    assert "(head)" in result.stdout
    assert run_json(runner, "pin", "on postgres", "--database-url", pg_schema)["body"] == "on postgres"


# ---------------------------------------------------------------------- rpc
def rpc_line(request_id: Any, method: str, params: dict[str, Any] | None = None) -> str:
    request: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        request["params"] = params
    return json.dumps(request)


def test_parse_instant() -> None:
    assert parse_instant("2026-03-04").isoformat() == "2026-03-04T00:00:00+00:00"
    assert parse_instant("2026-03-04T05:06:07.5-01:00").isoformat() == "2026-03-04T06:06:07.500000+00:00"


def test_rpc_in_process(runner: CliRunner, db_file: Path) -> None:
    lines = [
        rpc_line(1, "memory/save_memory_record", {"body": "via rpc"}),
        "",
        rpc_line(2, "memory/list_memory_records", {"scopeKey": SCOPE}),
    ]
    result = run(runner, "rpc", input="\n".join(lines) + "\n")
    out = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["id"] for r in out] == [1, 2]
    assert [r["body"] for r in out[1]["result"]["records"]] == ["via rpc"]


@pytest.fixture
def rpc_env(db_file: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["MEMLEDGER_DATABASE_URL"] = f"sqlite:///{db_file}"
    return env


def test_rpc_subprocess_answers_one_line_per_request(rpc_env: dict[str, str]) -> None:
    lines = [
        rpc_line(1, "memory/save_memory_record", {"body": "piped pin"}).encode(),
        b"this is not json",
        b"",
        b'{"jsonrpc": "2.0", "method": "memory/save_memory_record", "params": {"body": "notified"}}',
        b"[]",  # an empty batch: one -32600 object
        b"\xff\xfe not utf-8",
        rpc_line(2, "memory/nope").encode(),
        rpc_line(3, "memory/save_memory_record", {"body": 5}).encode(),
        rpc_line(4, "memory/get_memory_record", {"id": "mem_missing"}).encode(),
        rpc_line(5, "memory/list_memory_records", {"scopeKey": SCOPE}).encode(),
        b'{"jsonrpc": "2.0", "id": 6, "method": "memory/list_memory_records", "params": {"scopeKey": "account:local"}}',
    ]
    done = subprocess.run(
        [str(MEMLEDGER), "rpc"], input=b"\n".join(lines) + b"\n", env=rpc_env, capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert b"Traceback" not in done.stderr
    out = [json.loads(line) for line in done.stdout.decode().splitlines()]
    assert len(out) == 9  # no line for the blank line or the notification
    assert [r.get("id") for r in out] == [1, None, None, None, 2, 3, 4, 5, 6]
    codes = [r["error"]["code"] if "error" in r else 0 for r in out]
    assert codes == [0, -32700, -32600, -32700, -32601, -32602, -32003, 0, 0]
    assert sorted(r["body"] for r in out[7]["result"]["records"]) == ["notified", "piped pin"]


def test_rpc_lines_hold_no_character_splitlines_breaks_on(db_file: Path) -> None:
    # Given requests whose bodies and names hold the line breaks JSON leaves raw (U+2028, U+2029, U+0085)
    body = "tea\u2028then\u2029coffee"
    lines = [
        rpc_line(1, "memory/save_memory_record", {"body": body}),
        rpc_line(2, "memory/list_memory_records", {"scopeKey": SCOPE}),
        rpc_line(3, "memory/nope\u2028\u0085"),
        rpc_line(4, "memory/save_memory_record", {"body": "bad\u0085body\u2029"}),
    ]
    # When `memledger rpc`'s loop answers them
    out_stream = io.BytesIO()
    led = open_ledger(f"sqlite:///{db_file}", migrate=True)
    try:
        answered = serve_stdio(led, io.BytesIO("\n".join(lines).encode() + b"\n"), out_stream)
    finally:
        led.close()
    # Then a client that splits with splitlines() reads exactly one response per request, intact
    text = out_stream.getvalue().decode()
    assert answered == 4 and text.count("\n") == 4
    out = [json.loads(line) for line in text.splitlines()]
    assert [r["id"] for r in out] == [1, 2, 3, 4]
    assert [r["body"] for r in out[1]["result"]["records"]] == [body]
    assert "error" in out[2] and "error" in out[3]
    for breaker in ("\u2028", "\u2029", "\x85", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"):
        assert breaker not in text


def test_rpc_subprocess_flushes_each_response(rpc_env: dict[str, str]) -> None:
    with popen(
        [str(MEMLEDGER), "rpc"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=rpc_env
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        for request_id in (1, 2):
            proc.stdin.write(rpc_line(request_id, "memory/list_memory_records", {"scopeKey": SCOPE}).encode() + b"\n")
            proc.stdin.flush()
            # The answer arrives while stdin is still open: the server flushed it.
            response = json.loads(next(_read_lines(proc.stdout, timeout_s=60)))
            assert response["id"] == request_id
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
        assert proc.stdout.read() == b""
        assert proc.stderr is not None and b"Traceback" not in proc.stderr.read()


def _read_lines(stream: Any, *, timeout_s: float) -> Iterator[bytes]:
    with selectors.DefaultSelector() as sel:
        sel.register(stream, selectors.EVENT_READ)
        if not sel.select(timeout=timeout_s):
            raise AssertionError("no response line within the timeout: the server did not flush")
        yield stream.readline()
