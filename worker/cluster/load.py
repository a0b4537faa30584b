"""The load: K client threads, each an account saving pairs of pins through the API processes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from worker.cluster.processes import WAIT_S
from worker.cluster.report import ClusterPlan


@dataclass
class Client:
    """One account: its token, the ids of the saves it was answered for, and its latencies."""

    account: str
    token: str
    acknowledged: list[str] = field(default_factory=list)
    latencies: list[tuple[float, float]] = field(default_factory=list)  # (when, seconds)


def merge_duplicates(request: dict[str, Any]) -> list[dict[str, Any]]:
    from consolidation import request_records

    by_body: dict[str, list[str]] = {}
    for record in request_records(request):
        by_body.setdefault(record.body, []).append(record.id)
    return [
        {"op": "merge", "targets": ids, "body": body, "rationale": "the same words"}
        for body, ids in by_body.items()
        if len(ids) > 1
    ]


class Load:
    """K client threads saving pairs of pins and reporting turns, until stopped."""

    def __init__(self, clients: list[Client], ports: Callable[[], list[int]], plan: ClusterPlan) -> None:
        self.clients = clients
        self.ports = ports
        self.rate = plan.client_rate
        self.notes = plan.notes
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []

    def __enter__(self) -> Load:
        for n, client in enumerate(self.clients):
            thread = threading.Thread(target=self._loop, args=(n, client), daemon=True)
            thread.start()
            self.threads.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(WAIT_S)

    def _post(self, http: Any, n: int, client: Client, body: dict[str, Any]) -> Any:
        """The answer of the first API process that answers (None when none did)."""
        import httpx

        ports = self.ports()
        for attempt in range(len(ports)):
            port = ports[(n + attempt) % len(ports)]
            try:
                response = http.post(
                    f"http://127.0.0.1:{port}/rpc", json=body, headers={"Authorization": f"Bearer {client.token}"}
                )
            except httpx.HTTPError:
                continue
            if response.status_code == 200:
                return response.json()
        return None

    def _loop(self, n: int, client: Client) -> None:
        import httpx

        period = 1.0 / self.rate
        with httpx.Client(timeout=10) as http:
            pair = 0
            while not self.stopping.is_set():
                began = time.monotonic()
                body = f"{client.account} keeps note {pair % self.notes}"  # a merge restates it: the scope stays small
                request = {"jsonrpc": "2.0", "id": 1, "method": "memory/save_memory_record", "params": {"body": body}}
                for _ in range(2):
                    start = time.monotonic()
                    answer = self._post(http, n, client, request)
                    if answer is not None and "result" in answer:
                        client.acknowledged.append(answer["result"]["id"])
                        client.latencies.append((time.time(), time.monotonic() - start))
                self._post(http, n, client, {"jsonrpc": "2.0", "id": 2, "method": "consolidation/notify_turn"})
                pair += 1
                self.stopping.wait(max(0.0, period - (time.monotonic() - began)))
