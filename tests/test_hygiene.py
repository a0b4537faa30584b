"""The suite touches only what it makes (tests/hygiene.py): Redis keys, PostgreSQL databases, processes."""

from __future__ import annotations

import ast
import io
import os
import re
import subprocess
import sys
import tokenize
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests import hygiene
from tests.conftest import PG_CONNINFO, REDIS_URL, service_missing
from tests.worker.conftest import start_process, wait_until

ROOT = Path(__file__).resolve().parents[1]


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def test_a_killed_child_takes_the_processes_it_started_with_it(tmp_path: Path) -> None:
    # Given a child process that started one of its own (as `memledger worker --processes 2` does)
    code = "import subprocess, time; p = subprocess.Popen(['sleep', '300']); print(p.pid, flush=True); time.sleep(300)"
    proc = start_process("parent", [sys.executable, "-c", code], dict(os.environ), tmp_path)
    grandchild = int(wait_until(lambda: proc.out.read_text().strip(), timeout_s=30))
    assert _alive(grandchild)
    # When the test's teardown kills the child
    proc.kill()
    # Then the grandchild is gone too: it was in the child's process group
    wait_until(lambda: not _alive(grandchild), timeout_s=10)


def test_the_end_of_a_test_process_kills_the_groups_still_alive() -> None:
    child = hygiene.popen(["sleep", "300"])
    assert child.pid in hygiene.kill_every_group()
    assert child.wait(10) == -9
    # a group whose leader has ended and been reaped is not killed again: its number may be someone else's now
    ended = hygiene.popen(["true"])
    ended.wait(10)
    assert ended.pid not in hygiene.kill_every_group()


@pytest.mark.redis
def test_the_redis_fixture_keeps_the_keys_of_others_and_leaves_none_of_its_user(redis_url: str) -> None:
    import redis

    from tests import conftest

    client = redis.Redis.from_url(redis_url)
    theirs = f"someone-else-{uuid.uuid4().hex[:8]}"
    client.set(theirs, "theirs")
    try:
        # Given a test with the Redis fixture which writes under its namespace (as a runtime's queue does)
        with conftest.redis_for_a_test() as url:
            namespace = hygiene.redis_namespace()
            client.set(f"{namespace}:memledger.msgs", "queued")
        # When the test has ended (the block), then the key of someone else in the same database is still there,
        # and none of the test's
        assert url == redis_url and client.get(theirs) == b"theirs"
        assert list(client.scan_iter(match=f"{namespace}*")) == []
    finally:
        client.delete(theirs)
        client.close()


@pytest.mark.redis
def test_the_run_check_names_and_removes_what_a_run_left(redis_url: str, pg_available: BaseException | None) -> None:
    if pg_available is not None:
        service_missing("PostgreSQL", pg_available)
    import redis

    run = uuid.uuid4().hex[:8]  # a run of its own: the check of this one is not disturbed
    client = redis.Redis.from_url(redis_url)
    theirs = f"memledger-selfcheck-{uuid.uuid4().hex[:8]}"  # stands for a key of another user
    their_db = f"memledger_selfcheck_{uuid.uuid4().hex[:8]}"
    ours_db = f"memledger_test_{run}_{uuid.uuid4().hex[:8]}"
    sleeper = None
    try:
        client.set(theirs, "x")
        with psycopg.connect(PG_CONNINFO, autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(their_db)))
        leftovers = hygiene.Leftovers(REDIS_URL, PG_CONNINFO, run=run)
        leftovers.snapshot()
        # Given a run that deleted a key and a database it did not make, left a key, a database and a process of
        # its own, and made a key outside its prefix
        client.delete(theirs)
        client.set(f"memledger-test-{run}-gw0-abc:x", "1")
        stray = f"memledger-stray-{uuid.uuid4().hex[:8]}"
        client.set(stray, "1")
        with psycopg.connect(PG_CONNINFO, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE {}").format(sql.Identifier(their_db)))
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(ours_db)))
        sleeper = subprocess.Popen(["sleep", "300"], env={**os.environ, hygiene.RUN_ENV: run})
        # When the run's check runs
        problems = "\n".join(leftovers.check(wait_s=0))
        # Then it names each, and removes what is the run's own
        assert f"process {sleeper.pid} still running" in problems
        assert sleeper.wait(10) == -9
        assert "1 Redis key(s) of this run left" in problems
        assert not client.exists(f"memledger-test-{run}-gw0-abc:x")
        assert re.search(rf"made during the run outside the test prefix: .*{stray}", problems)
        assert re.search(rf"that were there before the run are gone: .*{theirs}", problems)
        assert f"PostgreSQL database {ours_db} of this run left" in problems
        assert re.search(rf"database\(s\) that were there before the run are gone: .*{their_db}", problems)
        with psycopg.connect(PG_CONNINFO, autocommit=True) as admin:
            names = {n for (n,) in admin.execute("SELECT datname FROM pg_database").fetchall()}
        assert ours_db not in names
        client.delete(stray)
        # And a clean run finds nothing of it (others' runs on the same servers may meanwhile drop their own)
        clean = hygiene.Leftovers(REDIS_URL, PG_CONNINFO, run=run)
        clean.snapshot()
        mine = (run, theirs, their_db, stray)
        assert [p for p in clean.check(wait_s=0) if any(name in p for name in mine)] == []
    finally:
        if sleeper is not None and sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait(10)
        client.delete(theirs, f"memledger-test-{run}-gw0-abc:x")
        client.close()
        with psycopg.connect(PG_CONNINFO, autocommit=True) as admin:
            for name in (their_db, ours_db):
                admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def test_no_test_flushes_a_shared_redis_or_starts_a_process_outside_a_group_of_its_own() -> None:
    """No ``FLUSHDB``/``FLUSHALL`` anywhere, benchmarks and the cluster harness included (a test deletes the keys of
    its own prefix, even on a server it started): no call, no command string, no ``redis-cli`` line;
    ``subprocess.Popen`` in tests only through :func:`tests.hygiene.popen` (``subprocess.run`` waits for its
    process; the run's check sees any left)."""
    found = [f"{name}: FLUSHDB/FLUSHALL" for name in _flushes()]
    for path in sorted((ROOT / "tests").rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        if name in ("tests/hygiene.py", "tests/test_hygiene.py") or name.startswith("tests/bench/"):
            continue
        if re.search(r"subprocess\.Popen\(", path.read_text(encoding="utf-8")):
            found.append(f"{name}: subprocess.Popen (use tests.hygiene.popen)")
    assert found == []


_FLUSH = re.compile(r"flush_?(db|all)\b", re.IGNORECASE)


def _flushes() -> list[str]:
    """Files that flush a Redis database: Python code (a name or a string that is not a docstring or a comment)
    and the shell around the suite (Makefile, .ci/run, deploy/)."""
    names = []
    for package in ("ledger", "consolidation", "worker", "tools", "tests"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name != "test_hygiene.py" and _flushing_tokens(path):
                names.append(path.relative_to(ROOT).as_posix())
    shell = [ROOT / "Makefile", ROOT / ".ci" / "run", *sorted((ROOT / "deploy").rglob("*.sh"))]
    names += [p.relative_to(ROOT).as_posix() for p in shell if p.is_file() and _FLUSH.search(p.read_text("utf-8"))]
    return names


def _flushing_tokens(path: Path) -> bool:
    code = path.read_text(encoding="utf-8")
    if not _FLUSH.search(code):
        return False
    docstrings = {
        (node.body[0].lineno, node.body[0].col_offset)
        for node in ast.walk(ast.parse(code))
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
        and isinstance(node.body[0].value.value, str)
    }
    for token in tokenize.generate_tokens(io.StringIO(code).readline):
        if token.type == tokenize.NAME and _FLUSH.fullmatch(token.string):
            return True
        if token.type == tokenize.STRING and token.start not in docstrings and _FLUSH.search(token.string):
            return True
    return False


def test_the_flush_check_finds_a_call_and_a_command_string_and_not_prose(tmp_path: Path) -> None:
    calls = {
        "client.flushall()\n": True,
        'client.execute_command("FLUSHDB")\n': True,
        '"""Never a FLUSHDB: keys of our prefix."""\n# nor a FLUSHALL\n': False,
    }
    for i, (code, flushes) in enumerate(calls.items()):
        path = tmp_path / f"m{i}.py"
        path.write_text(code, encoding="utf-8")
        assert _flushing_tokens(path) is flushes, code
