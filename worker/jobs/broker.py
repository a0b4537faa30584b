"""The dramatiq broker: Redis when ``MEMLEDGER_REDIS_URL`` is set, else the in-process one.

Delivery is at-least-once either way and the broker may lose messages (a Redis
restart without persistence, the embedded queue on any restart): nothing here is a
source of truth. The database is; the janitor re-sends what the queue lost
(:class:`QueueSentinel` tells it when everything was lost).

The middleware set is dramatiq's default (age and time limits, shutdown
notifications, callbacks, pipelines, retries) plus :class:`~worker.metrics.DramatiqPrometheus`.
Retries are owned by each actor's explicit ``max_retries`` (see :mod:`worker.jobs.actors`).
"""

from __future__ import annotations

import logging
import threading
import uuid

import dramatiq
import redis
from dramatiq.brokers.redis import RedisBroker
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware import default_middleware

from worker.config import WorkerConfig
from worker.metrics import DramatiqPrometheus

log = logging.getLogger(__name__)

QUEUE_NAME = "memledger"
# Connecting must fail fast (the chat path waits on a send); a fetch is a short Lua call.
REDIS_CONNECT_TIMEOUT_S = 1.0
REDIS_SOCKET_TIMEOUT_S = 5.0
SENTINEL_KEY = "memledger-queue-epoch"


def build_broker(config: WorkerConfig) -> dramatiq.Broker:
    """A new broker for ``config`` (not installed as dramatiq's global broker).

    No connection is made here: a Redis that is down at start-up does not stop
    ``memledger serve`` from answering the record protocol.
    """
    middleware = [factory() for factory in default_middleware]
    middleware.append(DramatiqPrometheus())
    if config.redis_url is None:
        return StubBroker(middleware=middleware)
    return RedisBroker(  # type: ignore[no-untyped-call]
        client=redis_client(config.redis_url),
        namespace=config.redis_namespace,
        middleware=middleware,
    )


def redis_client(url: str) -> redis.Redis:
    """A client whose connects and reads time out quickly instead of hanging on a dead server."""
    pool = redis.ConnectionPool.from_url(
        url,
        socket_connect_timeout=REDIS_CONNECT_TIMEOUT_S,
        socket_timeout=REDIS_SOCKET_TIMEOUT_S,
        health_check_interval=30,
    )
    return redis.Redis(connection_pool=pool)


class QueueSentinel:
    """Tells the janitor when the queue may have lost every message.

    Redis: a key under the broker's namespace that is set once (``SET NX``); when it is
    missing — the first start, a Redis restart without persistence, a ``FLUSHDB`` — the
    caller that recreates it gets ``True`` and re-sends every pending run. Several
    janitors may race: exactly one wins the ``SET NX``, and duplicates would be harmless
    anyway. In-process: ``True`` once per process (the queue started empty).

    Raises nothing: an unreachable Redis answers ``False`` (nothing can be re-sent now).
    """

    def __init__(self, broker: dramatiq.Broker) -> None:
        self._broker = broker
        self._lock = threading.Lock()
        self._seen = False

    def lost(self) -> bool:
        if isinstance(self._broker, RedisBroker):
            key = f"{self._broker.namespace}:{SENTINEL_KEY}"
            try:
                return bool(self._broker.client.set(key, uuid.uuid4().hex, nx=True))
            except redis.RedisError as exc:
                log.warning("cannot check the queue sentinel (%s): Redis unreachable", type(exc).__name__)
                return False
        with self._lock:
            first, self._seen = not self._seen, True
            return first


def ping(broker: dramatiq.Broker) -> bool:
    """True when the broker answers (always for the in-process broker)."""
    if isinstance(broker, RedisBroker):
        try:
            return bool(broker.client.ping())
        except redis.RedisError:
            return False
    return True
