"""The benchmark's own PostgreSQL schema, and the counts read from it afterwards."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

from worker.cluster.load import Client
from worker.errors import ClusterError


def schema_url(url: str, schema: str) -> str:
    """``url`` with search_path at ``schema`` (every process of the benchmark opens that URL)."""
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}options={quote(f'-csearch_path={schema}')}"


@contextmanager
def own_schema(url: str) -> Iterator[str]:
    """A new schema, migrated, for the benchmark; dropped at the end. Yields its URL."""
    from sqlalchemy import create_engine, text

    from ledger import open_ledger

    schema = "memledger_cluster_" + secrets.token_hex(6)
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f"CREATE SCHEMA {schema}"))
    except Exception as exc:
        admin.dispose()
        raise ClusterError(f"cannot create a schema in {url!r}: {type(exc).__name__}: {exc}") from exc
    try:
        target = schema_url(url, schema)
        open_ledger(target, migrate=True).close()
        yield target
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
        admin.dispose()


def _micros(wall: float) -> int:
    return int(wall * 1_000_000)


def count_runs(led: Any, since: float, until: float) -> tuple[int, list[float]]:
    from sqlalchemy import text

    sql = text(
        "SELECT settled_at - due_at FROM consolidation_runs WHERE job = 'consolidate' AND state = 'settled' "
        "AND outcome = 'applied' AND settled_at >= :a AND settled_at < :b"
    )
    with led.reading() as conn:
        rows = conn.execute(sql, {"a": _micros(since), "b": _micros(until)}).all()
    return len(rows), [row[0] / 1_000_000 for row in rows]


def count_faults(led: Any, clients: list[Client]) -> dict[str, Any]:
    """The three numbers that must be zero, read from the database."""
    from sqlalchemy import text

    acknowledged = [rid for client in clients for rid in client.acknowledged]
    with led.reading() as conn:
        found = {
            row[0]
            for row in conn.execute(text("SELECT id FROM memory_records WHERE id = ANY(:ids)"), {"ids": acknowledged})
        }
        double = conn.execute(
            text(
                "SELECT count(*) FROM consolidation_runs r WHERE r.ops_applied < (SELECT count(*) FROM ledger_events e "
                "WHERE e.run_id = r.id AND e.event = 'consolidation_op_applied')"
            )
        ).scalar_one()
        unsettled = conn.execute(text("SELECT count(*) FROM consolidation_runs WHERE state <> 'settled'")).scalar_one()
        outcomes = dict(
            conn.execute(text("SELECT coalesce(outcome, state), count(*) FROM consolidation_runs GROUP BY 1")).all()
        )
        errors = [
            row[0]
            for row in conn.execute(
                text("SELECT DISTINCT error FROM consolidation_runs WHERE error IS NOT NULL LIMIT 5")
            )
        ]
    return {
        "outcomes": outcomes,
        "errors": errors,
        "acknowledged_saves": len(acknowledged),
        "lost_saves": len(set(acknowledged) - found),
        "double_applied": int(double),
        "unsettled": int(unsettled),
    }


def drained(led: Any) -> bool:
    from sqlalchemy import text

    with led.reading() as conn:
        return not conn.execute(text("SELECT count(*) FROM consolidation_runs WHERE state <> 'settled'")).scalar_one()
