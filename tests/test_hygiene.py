"""The suite touches only what it makes (tests/hygiene.py): Redis keys, PostgreSQL databases, processes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
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
    """No ``FLUSHDB``/``FLUSHALL`` anywhere (a test deletes the keys of its own prefix, even on a server it started);
    ``subprocess.Popen`` only through :func:`tests.hygiene.popen` (``subprocess.run`` waits for its process; the
    run's check sees any left)."""
    found = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        if name in ("tests/hygiene.py", "tests/test_hygiene.py") or name.startswith("tests/bench/"):
            continue
        text = path.read_text(encoding="utf-8")
        if re.search(r"\.flush(db|all)\(", text):
            found.append(f"{name}: FLUSHDB/FLUSHALL")
        if re.search(r"subprocess\.Popen\(", text):
            found.append(f"{name}: subprocess.Popen (use tests.hygiene.popen)")
    assert found == []
