"""What the suite makes outside its own processes, named so that it finds it again and removes only that.

A run of the suite has a tag (``RUN``, in the environment as ``PYTEST_MEMLEDGER_RUN`` so that the pytest-xdist
processes and every child inherit it). With it:

* Redis keys: every namespace a test uses starts with ``memledger-test-<run>-<process>-``
  (:func:`redis_namespace`); a test deletes its process's keys by that prefix, never a whole database's;
* PostgreSQL: a database of a test is ``memledger_test_<run>_<hex>`` (:func:`database_name`), a schema
  ``t_<run>_<hex>`` (:func:`schema_name`), dropped by the test that made it;
* processes: a child starts in a process group of its own (:func:`popen`), and the group is killed at the
  test's teardown, so a process it started in turn (a worker's supervised children) goes with it; each test
  process kills the groups still alive at its end.

:class:`Leftovers` is the check of the whole run (``tests/conftest.py`` runs it in the controlling pytest
process): what it finds at the end — a process carrying the run's tag, a Redis key under the run's prefix, a
database of the run, a key or a database that was there before and is gone — is removed where it is the
run's own, named in the summary, and fails the run.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RUN_ENV = "PYTEST_MEMLEDGER_RUN"
RUN = os.environ.setdefault(RUN_ENV, uuid.uuid4().hex[:8])
PROCESS = os.environ.get("PYTEST_XDIST_WORKER", "main")
# The prefix of every Redis key of the run, and of this test process's keys
REDIS_RUN_PREFIX = f"memledger-test-{RUN}-"
REDIS_PREFIX = f"{REDIS_RUN_PREFIX}{PROCESS}-"
TEST_PREFIXES = ("memledger-test-",)  # keys of any run of the suite: another run's are its own to remove
DATABASE_PREFIX = f"memledger_test_{RUN}_"


def redis_namespace() -> str:
    """A Redis namespace of its own under this process's prefix (``MEMLEDGER_REDIS_NAMESPACE``)."""
    return REDIS_PREFIX + uuid.uuid4().hex[:8]


def database_name() -> str:
    """The name of a new PostgreSQL database of this run."""
    return DATABASE_PREFIX + uuid.uuid4().hex[:12]


def schema_name(kind: str = "t") -> str:
    """The name of a new PostgreSQL schema of this run (``kind`` is ``t`` or ``tpl``)."""
    return f"{kind}_{RUN}_{uuid.uuid4().hex[:10]}"


def delete_keys(client: Any, prefix: str) -> int:
    """Delete every key that starts with ``prefix`` (SCAN, then UNLINK in batches); the number deleted."""
    deleted = 0
    batch: list[bytes] = []
    for key in client.scan_iter(match=_glob_escape(prefix) + "*", count=1000):
        batch.append(key)
        if len(batch) >= 500:
            deleted += int(client.unlink(*batch))
            batch.clear()
    if batch:
        deleted += int(client.unlink(*batch))
    return deleted


def lose_namespace(redis_url: str, namespace: str) -> None:
    """Delete every key of the Redis ``namespace``: what a Redis restarted without its data would have lost of
    it (the rest of the database, other tests' and others' keys, is not touched)."""
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        delete_keys(client, f"{namespace}:")
    finally:
        client.close()


def _a_test_database(name: str) -> bool:
    """A database of another run of the suite (its own to drop), or of an older version of it (``compact_``
    and twelve hex digits) that a run of an older checkout may be making and dropping meanwhile."""
    return name.startswith("memledger_test_") or re.fullmatch(r"compact_[0-9a-f]{12}", name) is not None


def _glob_escape(text: str) -> str:
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in text)


# ---------------------------------------------------------------------------------------------- processes
_groups: dict[int, subprocess.Popen[Any]] = {}


def popen(args: Any, **kwargs: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen`` in a process group of its own, killed by :func:`kill_group` or at this process's end."""
    kwargs.setdefault("process_group", 0)
    proc: subprocess.Popen[Any] = subprocess.Popen(args, **kwargs)
    _groups[proc.pid] = proc
    return proc


def kill_group(proc: subprocess.Popen[Any], timeout_s: float = 10.0) -> None:
    """SIGKILL ``proc``'s whole process group (whatever it started too), and reap ``proc``."""
    _killpg(proc)
    _groups.pop(proc.pid, None)
    if proc.poll() is None:
        proc.wait(timeout_s)


def kill_every_group() -> list[int]:
    """Kill the process groups of this process's children still alive; their ids."""
    alive = [pgid for pgid, proc in sorted(_groups.items()) if _killpg(proc)]
    _groups.clear()
    return alive


def _killpg(proc: subprocess.Popen[Any]) -> bool:
    """SIGKILL the group ``proc`` leads. Once the leader is reaped its number may be reused: the group is then
    killed only while a process of this run is still in it (a pid is not reused while a group has that id)."""
    if proc.poll() is not None and not any(_group_of(pid) == proc.pid for pid in tagged_processes()):
        return False
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _group_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[2])
    except (OSError, ValueError, IndexError):
        return None


def tagged_processes(run: str = RUN) -> dict[int, str]:
    """Processes (pid -> command line) whose environment carries ``run``'s tag, other than this one and its
    ancestors: what the run started and is still alive (zombies excluded: they have no environment)."""
    tag = f"{RUN_ENV}={run}".encode()
    mine = _ancestors()
    found = {}
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if not entry.name.isdigit() or int(entry.name) in mine:
            continue
        try:
            if tag not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        found[int(entry.name)] = command[:200]
    return found


def _ancestors() -> set[int]:
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids


# ---------------------------------------------------------------------------------------------- the run's check
@dataclass
class Leftovers:
    """What the run found left behind, and what it removed of it."""

    redis_url: str
    pg_conninfo: str
    run: str = RUN
    databases_before: set[str] = field(default_factory=set)
    keys_before: list[bytes] = field(default_factory=list)  # keys of others, without expiry, at the start
    others_before: set[bytes] = field(default_factory=set)  # every key of others at the start
    problems: list[str] = field(default_factory=list)

    def snapshot(self) -> None:
        """What others have, before the run: every database, and the Redis keys without expiry."""
        self.databases_before = set(self._databases() or ())
        client = self._redis()
        if client is None:
            return
        try:
            keys = [k for _, k in zip(range(10_000), client.scan_iter(count=1000), strict=False)]
            keys = [k for k in keys if not k.decode(errors="replace").startswith(TEST_PREFIXES)]
            self.others_before = set(keys)
            pipe = client.pipeline(transaction=False)
            for key in keys:
                pipe.ttl(key)
            self.keys_before = [k for k, ttl in zip(keys, pipe.execute(), strict=True) if ttl == -1]
        finally:
            client.close()

    def check(self, wait_s: float = 15.0) -> list[str]:
        """Find, name and remove what the run left; the problems found (none when the run was clean)."""
        self._processes(wait_s)
        self._keys()
        self._postgres()
        return self.problems

    def _processes(self, wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        while (left := tagged_processes(self.run)) and time.monotonic() < deadline:
            time.sleep(0.2)  # the test processes themselves are still exiting
        for pid, command in left.items():
            self.problems.append(f"process {pid} still running (killed now): {command}")
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def _keys(self) -> None:
        client = self._redis()
        if client is None:
            return
        try:
            prefix = f"memledger-test-{self.run}-"
            ours = sorted(client.scan_iter(match=_glob_escape(prefix) + "*", count=1000))
            if ours:
                self.problems.append(
                    f"{len(ours)} Redis key(s) of this run left (deleted now), e.g. {ours[0].decode(errors='replace')}"
                )
                delete_keys(client, prefix)
            # A key the run made outside its prefix cannot be told from one another user made meanwhile: named,
            # not deleted
            made = [
                key
                for _, key in zip(range(10_000), client.scan_iter(count=1000), strict=False)
                if key not in self.others_before and not key.decode(errors="replace").startswith(TEST_PREFIXES)
            ]
            if made:
                names = ", ".join(sorted(k.decode(errors="replace") for k in made)[:5])
                self.problems.append(f"{len(made)} Redis key(s) made during the run outside the test prefix: {names}")
            pipe = client.pipeline(transaction=False)
            for key in self.keys_before:
                pipe.exists(key)
            gone = [k for k, n in zip(self.keys_before, pipe.execute(), strict=True) if not n]
            if gone:
                names = ", ".join(k.decode(errors="replace") for k in gone[:5])
                self.problems.append(f"{len(gone)} Redis key(s) that were there before the run are gone: {names}")
        finally:
            client.close()

    def _postgres(self) -> None:
        import psycopg
        from psycopg import sql

        after = self._databases()
        if after is None:
            return
        gone = {d for d in self.databases_before - set(after) if not _a_test_database(d)}
        if gone:
            self.problems.append(f"PostgreSQL database(s) that were there before the run are gone: {sorted(gone)}")
        with psycopg.connect(self.pg_conninfo, autocommit=True, connect_timeout=5) as conn:
            for name in (d for d in after if d.startswith(f"memledger_test_{self.run}_")):
                self.problems.append(f"PostgreSQL database {name} of this run left (dropped now)")
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
            # A schema a test process could not drop at its end (a lock held past its wait) is dropped here;
            # the run's own database keeps nothing of the run.
            for (schema,) in conn.execute(
                "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %s) OR starts_with(nspname, %s)",
                [f"t_{self.run}_", f"tpl_{self.run}_"],
            ).fetchall():
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(str(schema))))

    def _databases(self) -> list[str] | None:
        import psycopg

        try:
            with psycopg.connect(self.pg_conninfo, autocommit=True, connect_timeout=5) as conn:
                return [str(name) for (name,) in conn.execute("SELECT datname FROM pg_database").fetchall()]
        except psycopg.Error:
            return None  # no server: nothing of the run's there

    def _redis(self) -> Any:
        import redis

        client = redis.Redis.from_url(self.redis_url, socket_connect_timeout=2, socket_timeout=10)
        try:
            client.ping()
        except redis.RedisError:
            client.close()
            return None
        return client
