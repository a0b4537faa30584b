"""The replay benchmark: consolidation scored on generated episodes through the real pipeline.

>>> report = replay("offline", episodes=14, seed=0)
>>> report.to_json()["baselines"]["keep_all"]["false_merges"]
0

:mod:`~consolidation.replay.corpus` generates the episodes from a seed,
:mod:`~consolidation.replay.runner` plays them (one fresh scope each) for the harness and
for the two baselines, and :mod:`~consolidation.replay.score` reads the score from the
ledger. docs/consolidation-quality.md describes the corpus and every metric.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from consolidation.pricing import PriceTable
from consolidation.replay.corpus import CLASSES, DEFAULT_EPISODES, generate
from consolidation.replay.runner import BASELINES, Progress, play_arm
from consolidation.replay.score import Tally

__all__ = ["BASELINES", "CLASSES", "DEFAULT_EPISODES", "ReplayReport", "replay"]


@dataclass(frozen=True, slots=True)
class ReplayReport:
    harness: str
    model: str | None
    seed: int
    tallies: dict[str, Tally]  # the harness's and each baseline's

    def to_json(self) -> dict[str, Any]:
        """The harness's figures with the baselines' beside them: exactly the documented fields."""
        out = self.tallies[self.harness].to_json()
        out["baselines"] = {name: self.tallies[name].to_json() for name in BASELINES}
        return out


def replay(
    harness: str,
    *,
    model: str | None = None,
    episodes: int = DEFAULT_EPISODES,
    seed: int = 0,
    database_url: str | None = None,
    prices: PriceTable | None = None,
    progress: Progress | None = None,
    service_kwargs: Mapping[str, Any] | None = None,
) -> ReplayReport:
    """Generate ``episodes`` episodes from ``seed`` and score ``harness`` and both baselines on them.

    ``database_url`` None plays each arm in a temporary SQLite file, deleted afterwards;
    otherwise every arm plays in fresh scopes of that database (migrated first). ``prices``
    is the price table runs are charged by (default: the built-in one). ``service_kwargs`` are
    extra keyword arguments of the consolidation service: the worker passes the model keys and
    servers it read (unset: none but what the SDKs read themselves).

    Raises:
        InvalidSettings: the harness or model cannot be used (nothing is played);
        ValueError: ``episodes`` below 1; LedgerError.
    """
    corpus = generate(episodes, seed=seed)
    tallies: dict[str, Tally] = {}
    with tempfile.TemporaryDirectory(prefix="memledger-replay-") as scratch:
        for arm in (harness, *BASELINES):
            url = database_url or f"sqlite:///{Path(scratch) / arm}.db"
            tallies[arm] = play_arm(
                corpus,
                arm=arm,
                database_url=url,
                model=model,
                prices=prices,
                progress=progress,
                service_kwargs=service_kwargs,
            )
    return ReplayReport(harness, model, seed, tallies)
