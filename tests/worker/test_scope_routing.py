"""Every statement on a ledger or run table names one scope, so the tables can be spread over machines by scope.

A distributed PostgreSQL (Citus, or native partitioning by hash of the scope) sends a statement to one node when
it pins its distributed table to one value of the distribution column, and joins two such tables only on it.
This runs every door's work on PostgreSQL (the record protocol's methods and the worker's, a consolidation run
applied and one proposed, an extraction run, a forget, the sweep, the janitor, the operator's overview,
tokens), records each statement psycopg sends, and checks each from its parse tree: a reference to a scoped table
is pinned to one scope (``scope_key = <value>`` outside any OR, or the column given in an INSERT), directly or
through an equality with another pinned reference's scope. The statements that are not are listed in
:data:`UNROUTED`, each with how a distributed database runs it (docs/operations.md, "Beyond one primary").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
import sqlglot
from sqlglot import exp

from ledger.protocol import handle
from worker.http.tokens import TokenStore
from worker.rpc.methods import extra_methods
from worker.runtime import Runtime
from worker.snapshot import take_snapshot

# The tables distributed by scope (each has a scope_key column); api_tokens and ops_sweep are small tables
# read by every node (reference tables), alembic_version the schema's own.
SCOPED = frozenset(
    {
        "memory_records",
        "scope_settings",
        "ledger_events",
        "consolidation_settings",
        "consolidation_runs",
        "packet_audits",
        "memory_injection",
        "extraction_settings",
        "extraction_digests",
        "derived_texts",
        "save_requests",
    }
)

# What is not pinned to one scope, by a pattern of its text (whitespace folded), and how it is routed.
UNROUTED: dict[str, str] = {
    # Across scopes on purpose: the operator's and the scheduler's views of every account.
    r"^SELECT memory_records\.seq FROM memory_records WHERE .*expires_at <= .* ORDER BY": (
        "the sweep's scan for due records in every scope: every shard in parallel, each by its expiry index"
    ),
    r"FROM consolidation_runs WHERE consolidation_runs\.state = .*due_at": (
        "the due-run scan (janitor, run-due): every shard, each by its state index"
    ),
    r"FROM consolidation_runs WHERE consolidation_runs\.state = \S+ ORDER BY consolidation_runs\.started_at": (
        "the janitor's scan for runs left running: every shard, each by its state index"
    ),
    r"FROM consolidation_runs WHERE consolidation_runs\.settled_at >=": "the overview's refusals: every shard",
    r"FROM consolidation_settings$": "the overview's settings of every scope: every shard",
    r"FROM scope_settings$": "the overview's budgets of every scope: every shard",
    r"GROUP BY (memory_records|consolidation_runs)\.scope_key": "the overview's counts per scope: every shard",
    r"FROM consolidation_runs ORDER BY .* LIMIT": "the operator's newest runs: every shard, merged by the coordinator",
    # By a primary key that is unique across scopes (records' and runs' ids are random): every shard probes its
    # index for at most one row. Each runs inside a transaction that already holds the scope's lock.
    r"WHERE memory_records\.id (=|IN|= ANY)": "a record by its id: every shard, one index probe each",
    r"WHERE consolidation_runs\.id =": "a run by its id (a queue message carries only the id): every shard",
}


def recorded_statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every statement psycopg is given from now on (SQLAlchemy's and the stores' own)."""
    seen: list[str] = []
    execute, executemany = psycopg.Cursor.execute, psycopg.Cursor.executemany

    def text_of(cursor: Any, query: Any) -> str:
        return query if isinstance(query, str) else query.as_string(cursor)

    def recorded_execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(text_of(self, query))
        return execute(self, query, *args, **kwargs)

    def recorded_executemany(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(text_of(self, query))
        return executemany(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", recorded_execute)
    monkeypatch.setattr(psycopg.Cursor, "executemany", recorded_executemany)
    return seen


def _bare(node: exp.Expression) -> exp.Expression:
    while isinstance(node, exp.Cast):
        node = node.this
    return node


def _scope_of(node: exp.Expression, default: str) -> str | None:
    """The reference whose ``scope_key`` ``node`` is (``default`` when unqualified), else None."""
    node = _bare(node)
    if isinstance(node, exp.Column) and node.name == "scope_key":
        return node.table or default
    return None


def _is_value(node: exp.Expression) -> bool:
    return isinstance(_bare(node), exp.Placeholder | exp.Parameter | exp.Literal)


def _level(node: exp.Expression) -> exp.Expression | None:
    return node.find_ancestor(exp.Select, exp.Update, exp.Delete, exp.Insert)


def _conjunct(node: exp.Expression, query: exp.Expression) -> bool:
    """``node`` must hold for every row of ``query`` (no OR or NOT above it)."""
    parent = node.parent
    while parent is not None and parent is not query:
        if isinstance(parent, exp.Or | exp.Not):
            return False
        parent = parent.parent
    return True


def unpinned_tables(sql: str) -> list[str]:
    """The scoped tables ``sql`` reads or writes without pinning them to one scope."""
    unpinned: list[str] = []
    trees = [tree for tree in sqlglot.parse(sql, read="postgres") if tree is not None]  # ";" is the pool's ping
    queries = [query for tree in trees for query in tree.find_all(exp.Select, exp.Update, exp.Delete, exp.Insert)]
    for query in queries:
        refs = {t.alias_or_name: t.name for t in query.find_all(exp.Table) if t.name in SCOPED and _level(t) is query}
        if not refs:
            continue
        default = next(iter(refs))
        pinned: set[str] = set()
        into = query.this if isinstance(query, exp.Insert) else None
        if isinstance(into, exp.Schema) and "scope_key" in {c.name for c in into.expressions}:
            pinned.add(into.this.name)
        equal: list[tuple[str, str]] = []
        for eq in query.find_all(exp.EQ):
            if _level(eq) is not query or not _conjunct(eq, query):
                continue
            left, right = _scope_of(eq.left, default), _scope_of(eq.right, default)
            if left is not None and _is_value(eq.right):
                pinned.add(left)
            if right is not None and _is_value(eq.left):
                pinned.add(right)
            if left is not None and right is not None:
                equal.append((left, right))
        for _ in equal:  # a chain of equalities carries the pin along
            pinned |= {name for pair in equal if pinned & set(pair) for name in pair}
        unpinned += [name for alias, name in refs.items() if alias not in pinned]
    return unpinned


def routed_by(sql: str) -> str | None:
    folded = " ".join(sql.split())
    return next((how for pattern, how in UNROUTED.items() if re.search(pattern, folded)), None)


@pytest.mark.parametrize(
    ("sql", "unpinned"),
    [
        ("SELECT id FROM memory_records WHERE scope_key = %(s)s AND status = 'active'", []),
        (";", []),
        ("SELECT id FROM memory_records WHERE id = %(id)s", ["memory_records"]),
        ("SELECT id FROM memory_records WHERE scope_key = %(s)s OR id = %(id)s", ["memory_records"]),
        ("INSERT INTO ledger_events (scope_key, event) VALUES (%(s)s, 'saved')", []),
        ("INSERT INTO ledger_events (event) VALUES ('saved')", ["ledger_events"]),
        (
            "SELECT m.id FROM memory_records m JOIN consolidation_runs r ON r.scope_key = m.scope_key "
            "WHERE m.scope_key = %(s)s::VARCHAR",
            [],
        ),
        (
            "SELECT m.id FROM memory_records m JOIN consolidation_runs r ON r.id = m.id WHERE m.scope_key = %(s)s",
            ["consolidation_runs"],
        ),
        (
            "SELECT * FROM memory_records WHERE scope_key IN (SELECT scope_key FROM scope_settings)",
            ["memory_records", "scope_settings"],
        ),
    ],
)
def test_the_check_tells_a_pinned_statement_from_one_that_is_not(sql: str, unpinned: list[str]) -> None:
    assert sorted(unpinned_tables(sql)) == sorted(unpinned)


def every_door(runtime: Runtime, now: Callable[[], Any]) -> Iterator[None]:
    """The work of every door, one step at a time (the caller records around each)."""
    led = runtime.ledger
    methods = extra_methods(runtime, operator=True)

    def call(method: str, params: dict[str, Any] | None = None) -> Any:
        request: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}
        answer = handle(led, request, extra_methods=methods)
        assert "error" not in answer, answer
        return answer["result"]

    first = call("memory/save_memory_record", {"body": "I prefer metric units", "kind": "preference"})
    call("memory/save_memory_record", {"body": "I prefer metric units", "kind": "preference"})
    edit = {"body": "I drink tea", "supersedes": first["id"], "requestId": "edit-1"}
    edited = call("memory/save_memory_record", edit)
    assert call("memory/save_memory_record", edit)["id"] == edited["id"]  # sent again: found by its requestId
    call("memory/save_memory_record", {"body": "Standup at 9:15", "conflictGroup": "standup"})
    later = (now() + timedelta(days=1)).isoformat().replace("+00:00", "Z")
    call("memory/save_memory_record", {"body": "A passing note", "expiresAt": later})
    for method, params in [
        ("memory/get_memory_record", {"id": edited["id"]}),
        ("memory/get_memory_record_history", {"id": edited["id"]}),
        ("memory/list_memory_records", {"limit": 1}),
        ("memory/list_memory_records_as_of", {"asOf": later}),
        ("memory/search_memory_records", {"query": "metric"}),
        ("memory/build_packet", {"maxChars": 2000, "sessionId": "chat-1"}),
        ("memory/get_packet_audit", {"sessionId": "chat-1"}),
        ("memory/set_memory_injection", {"enabled": True}),
        ("memory/get_memory_injection", None),
        ("memory/get_memory_capabilities", None),
        ("memory/handle_slash_command", {"text": "/memories"}),
        ("memory/get_consolidation_settings", None),
        ("memory/update_extraction_settings", {"mode": "propose", "harness": "offline", "debounceS": 0}),
        ("memory/get_extraction_settings", None),
    ]:
        call(method, params)
    yield
    # A consolidation run proposed, then applied; an extraction run from a session's messages.
    call("memory/save_memory_record", {"body": "I prefer metric units", "kind": "preference"})
    call("memory/update_consolidation_settings", {"mode": "propose", "harness": "offline", "debounceS": 0})
    messages = [{"role": "user", "text": "Remember that my dog is called Rex"}]
    turn = call("memory/notify_turn", {"sessionId": "chat-1", "messages": messages})
    for job in ("consolidation", "extraction"):
        runtime.service.execute(turn[job]["runId"])
    yield
    proposals = call("memory/list_proposed_memory_records", {})["records"]
    assert proposals, "the runs proposed nothing: the workload does not reach accept and reject"
    call("memory/accept_proposed_memory_record", {"id": proposals[0]["id"]})
    for proposal in proposals[1:]:
        call("memory/reject_proposed_memory_record", {"id": proposal["id"]})
    call("memory/save_memory_record", {"body": "I live in Porto"})
    call("memory/save_memory_record", {"body": "I live in Porto"})
    call("memory/update_consolidation_settings", {"mode": "apply"})
    turn = call("consolidation/notify_turn")
    runtime.service.execute(turn["runId"])
    yield
    call("memory/delete_memory_record", {"id": edited["id"]})
    led.sweep_expired(now())
    runtime.service.run_due()
    runtime.janitor.run_once()
    take_snapshot(led, runtime.service)
    tokens = TokenStore.for_ledger(led)
    _, secret = tokens.create("alice")
    tokens.authenticate(secret)
    yield


def test_every_statement_on_a_scoped_table_names_one_scope_or_is_listed(
    pg_migrated: str, make_runtime: Callable[..., Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = make_runtime(database_url=pg_migrated)
    seen = recorded_statements(monkeypatch)
    for _ in every_door(runtime, runtime.ledger.now):
        pass
    # ";" is the pool's liveness check of a connection that sat idle (PostgresStore.ping_after_idle_s): no table
    statements = [sql for sql in dict.fromkeys(seen) if sql.strip(" ;")]
    assert len(statements) > 40, statements  # the workload reached the stores (else the check says nothing)
    unlisted = [sql for sql in statements if unpinned_tables(sql) and routed_by(sql) is None]
    assert not unlisted, "\n\n".join(" ".join(sql.split()) for sql in unlisted)
    used = {pattern for pattern in UNROUTED for sql in statements if re.search(pattern, " ".join(sql.split()))}
    assert used == set(UNROUTED), f"listed but never run: {set(UNROUTED) - used}"
