"""Processes x threads on one scope with a small budget, on the real clock: commit order is time order.

Every process opens its own ``Ledger`` on the same database; every thread of a process shares
that one. Each thread runs a random mix of save, edit, group save, delete, propose, accept and
saves that expire within moments, while one thread per process sweeps every scope. Afterwards
the raw rows are checked (docs/ledger.md): no spurious refusal (no ``InvalidInstant``,
no ``LedgerBusy``), no raw driver error, every acknowledged write stored and no refused one,
instants in commit order, never two live members of one group at one instant, the budget never
exceeded at any instant, no gap or overlap in any chain, the scope's kept counts equal to its
rows (the sweep and the writers move them concurrently). The short run is in ``make test``; the
long one is behind ``-m soak``.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from ledger import BudgetExceeded, InvalidInstant, InvalidTransition, LedgerError, open_ledger, to_micros
from tests import hygiene

SCOPE = "account:local"
BUDGET = 6
GROUPS = ("g1", "g2")
OPS = ("save", "edit", "group", "delete", "propose", "accept", "expiring")
# The longest expiry an "expiring" save gets: a sweep this long after the last write finds them all expired.
LONGEST_EXPIRY_MS = 300
Outcome = tuple[str, str, str, Any]  # (op, result, token or error type, (record id, instant in µs) / error)
ROOT = Path(__file__).resolve().parents[2]


def _one(led: Any, rng: random.Random, token: str) -> tuple[str, str, Any]:
    """One random operation. Returns (op, "ok", (id, valid_from)) or raises."""
    op = rng.choice(OPS)
    body = f"note about {token}"
    if op in ("edit", "delete"):
        # Saves that expire are left to expire (and to the sweep) while others remain to edit.
        live = [r for r in led.list(SCOPE) if r.expires_at is None] or led.list(SCOPE)
        if not live:
            op = "save"
        else:
            target = rng.choice(live).id
            rec = led.save(body, supersedes=target) if op == "edit" else led.delete(target)
            return op, "ok", (rec.id, to_micros(rec.valid_from if op == "edit" else rec.updated_at))
    if op == "accept":
        waiting = led.proposals(SCOPE)
        if not waiting:
            op = "propose"
        else:
            rec = led.accept(rng.choice(waiting).id)
            return op, "ok", (rec.id, to_micros(rec.valid_from))
    if op == "propose":
        rec = led.propose(body, kind="fact", confidence_bps=5000, rationale="r", conflict_group=rng.choice(GROUPS))
        return op, "ok", (rec.id, to_micros(rec.valid_from))
    if op == "expiring":
        # Refused (not spurious) when the scope's lock came after the expiry: that instant had passed.
        rec = led.save(body, expires_at=datetime.now(UTC) + timedelta(milliseconds=rng.randint(30, LONGEST_EXPIRY_MS)))
        return op, "ok", (rec.id, to_micros(rec.valid_from))
    group = rng.choice(GROUPS) if op == "group" else None
    rec = led.save(body, conflict_group=group)
    return op, "ok", (rec.id, to_micros(rec.valid_from))


def _thread(led: Any, seed: int, deadline: float, max_ops: int, out: list[Outcome]) -> None:
    rng = random.Random(seed)
    for n in range(max_ops):
        if time.monotonic() > deadline:
            return
        token = f"t{seed}x{n}z"
        try:
            op, result, value = _one(led, rng, token)
            out.append((op, result, token, value))
        except (BudgetExceeded, InvalidTransition) as exc:  # a user can cause these; a race too
            out.append(("?", "refused", token, type(exc).__name__))
        except InvalidInstant as exc:
            passed = "expires_at must be after now" in str(exc)
            out.append(("?", "refused" if passed else "spurious", token, f"InvalidInstant: {exc}"))
        except LedgerError as exc:
            out.append(("?", "spurious", token, f"{type(exc).__name__}: {exc}"))
        except Exception as exc:
            out.append(("?", "raw", token, f"{type(exc).__module__}.{type(exc).__name__}: {exc}"))


def _sweeper(led: Any, deadline: float, writers_done: threading.Event, out: list[Outcome]) -> None:
    """The cron's sweep of every scope, again and again while the writers run, and once more after the last
    save that expires has expired (the writers stop at their deadline or after their operations)."""
    last = False
    while not last:
        if writers_done.wait(0.02) or time.monotonic() >= deadline:
            time.sleep(LONGEST_EXPIRY_MS / 1000)
            last = True
        try:
            led.sweep_expired(datetime.now(UTC))
        except LedgerError as exc:
            out.append(("sweep", "spurious", "", f"{type(exc).__name__}: {exc}"))
        except Exception as exc:
            out.append(("sweep", "raw", "", f"{type(exc).__module__}.{type(exc).__name__}: {exc}"))


def worker(url: str, proc: int, threads: int, seconds: float, max_ops: int) -> list[Outcome]:
    """One writing process: its threads' outcomes."""
    led = open_ledger(url, migrate=False)
    out: list[Outcome] = []
    deadline = time.monotonic() + seconds
    writers = [
        threading.Thread(target=_thread, args=(led, proc * 100 + t, deadline, max_ops, out)) for t in range(threads)
    ]
    writers_done = threading.Event()
    sweeper = threading.Thread(target=_sweeper, args=(led, deadline, writers_done, out))
    for t in [*writers, sweeper]:
        t.start()
    for t in writers:
        t.join()
    writers_done.set()
    sweeper.join()
    led.close()
    return out


def _run(url: str, processes: int, threads: int, seconds: float, max_ops: int) -> list[Outcome]:
    led = open_ledger(url, migrate=True)
    led.set_budget(SCOPE, BUDGET)
    led.close()
    # Plain processes running this module (no multiprocessing: its resource tracker outlives the test).
    procs = [
        hygiene.popen(
            [
                sys.executable,
                "-m",
                "tests.ledger.test_commit_order",
                url,
                str(p),
                str(threads),
                str(seconds),
                str(max_ops),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for p in range(processes)
    ]
    outcomes: list[Outcome] = []
    for proc in procs:
        out, _ = proc.communicate(timeout=seconds + 120)
        assert proc.returncode == 0, out[-2000:]
        outcomes += [tuple(o) for o in json.loads(out)]
    return outcomes


def _rows(url: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    engine = create_engine(url)
    with engine.connect() as conn:
        records = [dict(r) for r in conn.execute(text("SELECT * FROM memory_records ORDER BY seq")).mappings()]
        events = [dict(r) for r in conn.execute(text("SELECT * FROM ledger_events ORDER BY seq")).mappings()]
        scope = conn.execute(text("SELECT * FROM scope_settings WHERE scope_key = :s"), {"s": SCOPE}).mappings().one()
    engine.dispose()
    return records, events, dict(scope)


def check(url: str, outcomes: list[Outcome]) -> None:
    records, events, scope = _rows(url)
    # No spurious refusal, no raw driver error.
    bad = [o for o in outcomes if o[1] in ("spurious", "raw")]
    assert bad == [], bad[:5]
    ok = [o for o in outcomes if o[1] == "ok"]
    assert ok, "nothing was written"
    by_id = {r["id"]: r for r in records}
    # Nothing acknowledged and missing; nothing refused and stored.
    created = [o for o in ok if o[0] in ("save", "edit", "group", "propose", "expiring")]
    assert all(o[3][0] in by_id for o in created)
    assert len(records) == len(created)
    refused_tokens = {o[2] for o in outcomes if o[1] == "refused"}
    stored_bodies = " ".join(r["body"] or "" for r in records)
    assert not any(f"note about {t}" in stored_bodies for t in refused_tokens)
    # Every acknowledged write had its own instant (one transaction each, strictly increasing).
    instants = [o[3][1] for o in ok]
    assert len(set(instants)) == len(instants)
    # Instants in commit order: the event log (appended under the scope's lock) never goes back.
    # (An ``expired`` event is at the instant the sweep was given, not a write's instant.)
    scope_events = [e["at"] for e in events if e["scope_key"] == SCOPE and e["event"] != "expired"]
    assert scope_events == sorted(scope_events)
    # Chains: exact supersession, no gap, no overlap.
    for r in records:
        if r["superseded_by"] is not None:
            nxt = by_id[r["superseded_by"]]
            assert r["status"] == "superseded" and r["valid_to"] == nxt["valid_from"], r["id"]
    _check_groups_and_budget(records)
    # The counts the budget reads are the rows' counts.
    statuses = [r["status"] for r in records if r["scope_key"] == SCOPE]
    assert (scope["active_count"], scope["proposed_count"]) == (statuses.count("active"), statuses.count("proposed"))
    assert any(o[0] == "expiring" for o in ok) and any(r["status"] == "expired" for r in records)


def _end(r: dict[str, Any]) -> int | None:
    ends = [e for e in (r["valid_to"], r["expires_at"]) if e is not None]
    return min(ends) if ends else None


def _live_at(r: dict[str, Any], t: int) -> bool:
    end = _end(r)
    return r["valid_from"] <= t and (end is None or t < end)


def _pending_at(r: dict[str, Any], t: int) -> bool:
    """A proposal counts from its creation until it is decided (accept moves valid_from to the accept)."""
    if r["provenance"] == "user_explicit":
        return False
    if r["status"] == "proposed":
        return r["created_at"] <= t
    decided = r["valid_from"] if r["valid_from"] != r["created_at"] else r["updated_at"]
    if r["status"] == "expired" and r["expires_at"] is not None:
        decided = min(decided, r["expires_at"])
    return r["created_at"] <= t < decided


def _check_groups_and_budget(records: list[dict[str, Any]]) -> None:
    instants = sorted({r["valid_from"] for r in records} | {r["created_at"] for r in records})
    for t in instants:
        live = [r for r in records if _live_at(r, t)]
        for g in GROUPS:
            members = [r["id"] for r in live if r["conflict_group"] == g]
            assert len(members) <= 1, (t, g, members)
        held = len(live) + sum(_pending_at(r, t) and not _live_at(r, t) for r in records)
        assert held <= BUDGET, (t, held)


URLS = ["sqlite", "postgres"]


@pytest.fixture(params=URLS)
def shared_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    return str(request.getfixturevalue("pg_migrated"))


def test_processes_and_threads_on_one_scope_keep_commit_order(shared_url: str) -> None:
    # Each thread stops after its operations (or at the deadline, on a machine too loaded to finish them).
    outcomes = _run(shared_url, processes=2, threads=3, seconds=20, max_ops=25)
    check(shared_url, outcomes)


@pytest.mark.soak
@pytest.mark.timeout(900)  # a minute of writes, then the quadratic checks over every instant
def test_soak_processes_and_threads_on_one_scope_keep_commit_order(shared_url: str) -> None:
    outcomes = _run(shared_url, processes=4, threads=4, seconds=60, max_ops=100_000)
    check(shared_url, outcomes)


if __name__ == "__main__":
    URL, PROC, THREADS, SECONDS, MAX_OPS = sys.argv[1:]
    print(json.dumps(worker(URL, int(PROC), int(THREADS), float(SECONDS), int(MAX_OPS))))
