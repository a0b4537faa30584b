"""Consolidation fixtures: a service on the parametrized backend (offline harness), the loopback fake Messages API."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta

import pytest

from consolidation import ConsolidationRun, ConsolidationService
from consolidation.fake_anthropic import FakeAnthropic
from ledger import Ledger
from tests.conftest import T0

SCOPE = "account:local"


def at(seconds: float) -> datetime:
    """The instant ``seconds`` after the tests' clock start ``T0``."""
    return T0 + timedelta(seconds=seconds)


def race_execute(
    services: Sequence[ConsolidationService], run_id: str, *, now: datetime, threads: int = 8
) -> list[ConsolidationRun | None]:
    """``threads`` threads, spread over ``services``, all call ``execute(run_id)`` at once; what each returned."""
    barrier = threading.Barrier(threads)
    results: list[ConsolidationRun | None] = []

    def race(svc: ConsolidationService) -> None:
        barrier.wait()
        results.append(svc.execute(run_id, now=now))

    racers = [threading.Thread(target=race, args=(services[n % len(services)],)) for n in range(threads)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(timeout=20)
    return results


@pytest.fixture
def make_service(make_ledger: Callable[..., Ledger]) -> Callable[..., ConsolidationService]:
    def factory(led: Ledger | None = None, **kwargs: object) -> ConsolidationService:
        kwargs.setdefault("api_key", "")
        kwargs.setdefault("base_url", "")
        kwargs.setdefault("openai_api_key", "")
        kwargs.setdefault("openai_base_url", "")
        return ConsolidationService(led or make_ledger(), **kwargs)  # type: ignore[arg-type]

    return factory


@pytest.fixture
def svc(make_service: Callable[..., ConsolidationService]) -> ConsolidationService:
    return make_service()


@pytest.fixture
def fake_anthropic() -> Iterator[FakeAnthropic]:
    """The loopback fake Anthropic Messages API, stopped after the test."""
    with FakeAnthropic() as server:
        yield server
