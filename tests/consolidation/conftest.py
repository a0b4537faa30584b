"""Consolidation fixtures: a service on the parametrized backend with the offline harness."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from consolidation import ConsolidationService
from ledger import Ledger

SCOPE = "account:local"


@pytest.fixture
def make_service(make_ledger: Callable[..., Ledger]) -> Callable[..., ConsolidationService]:
    def factory(led: Ledger | None = None, **kwargs: object) -> ConsolidationService:
        kwargs.setdefault("api_key", "")
        kwargs.setdefault("base_url", "")
        return ConsolidationService(led or make_ledger(), **kwargs)  # type: ignore[arg-type]

    return factory


@pytest.fixture
def svc(make_service: Callable[..., ConsolidationService]) -> ConsolidationService:
    return make_service()
