"""The first screen of ``memledger serve``: a few human lines on stdout before the JSON logs on stderr.

It answers what a newcomer asks first: which account is bound (and how to change it), where the
protocol reference is, and what a first request looks like. Only on a terminal by default
(``make run``); ``--banner``/``--no-banner`` force it either way.
"""

from __future__ import annotations

from worker.config import WorkerConfig

PROTOCOL_REFERENCE = "docs/protocol.md"


def banner_lines(config: WorkerConfig, *, host: str, port: int, run_worker: bool) -> list[str]:
    """The banner for a serve on ``host:port`` with ``config`` (no secret: URLs are redacted)."""
    shown_host = f"[{host}]" if ":" in host else host
    base = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else shown_host}:{port}"
    database = config.redacted()["database_url"]
    queue = "the embedded queue" if config.embedded else "Redis"
    worker = "with a worker" if run_worker else "API only, no worker"
    save = '{"jsonrpc":"2.0","id":1,"method":"memory/save_memory_record","params":{"body":"I prefer metric units"}}'
    return [
        f"memledger serve on {base} ({worker}, {queue})",
        "  Port: change it with `make run PORT=8081`, --port 8081 or MEMLEDGER_PORT=8081",
        f"  Bound account: {config.account} (scope account:{config.account}); "
        "change it with MEMLEDGER_ACCOUNT=<name> before starting",
        f"  Database: {database}",
        f"  Protocol: JSON-RPC 2.0 on POST {base}/rpc; every method is in {PROTOCOL_REFERENCE}",
        f"  Operator page: {base}/ops (this machine only)   Health: {base}/healthz   Metrics: {base}/metrics",
        "  First request (pin a fact):",
        f"    curl -s {base}/rpc -H 'Content-Type: application/json' \\",
        f"      -d '{save}'",
        "Logs follow on stderr as JSON (MEMLEDGER_LOG_FORMAT=console for a human rendering).",
    ]
