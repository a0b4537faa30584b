"""The replay benchmark: consolidation scored on generated episodes through the real pipeline.

>>> report = replay("offline", episodes=14, seed=0, split="tuning")
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

from consolidation.errors import ReplayStopped
from consolidation.pricing import PriceTable
from consolidation.replay.corpus import CLASSES, DEFAULT_EPISODES, SPLITS, generate
from consolidation.replay.runner import BASELINES, Progress, play_arm
from consolidation.replay.score import Tally

__all__ = ["ALL", "BASELINES", "CLASSES", "DEFAULT_EPISODES", "SPLITS", "ReplayReport", "ReplayStopped", "replay"]

ALL = "all"


@dataclass(frozen=True, slots=True)
class ReplayReport:
    harness: str
    model: str | None
    seed: int
    split: str  # "tuning", "heldout" or "all"
    by_split: dict[str, dict[str, Tally]]  # split -> arm (the harness and each baseline) -> figures

    @property
    def tallies(self) -> dict[str, Tally]:
        """Each arm's figures over every split played."""
        whole: dict[str, Tally] = {}
        for arms in self.by_split.values():
            for arm, tally in arms.items():
                whole.setdefault(arm, Tally()).absorb(tally)
        return whole

    def to_json(self) -> dict[str, Any]:
        """The harness's figures with the baselines' beside them: exactly the documented fields."""
        whole = self.tallies

        def figures(arm: str) -> dict[str, Any]:
            out = whole[arm].to_json()
            out["splits"] = {name: arms[arm].to_json() for name, arms in self.by_split.items()}
            return out

        out = {"split": self.split, **figures(self.harness)}
        out["baselines"] = {name: figures(name) for name in BASELINES}
        return out


def replay(
    harness: str,
    *,
    model: str | None = None,
    episodes: int = DEFAULT_EPISODES,
    seed: int = 0,
    split: str = ALL,
    database_url: str | None = None,
    prices: PriceTable | None = None,
    progress: Progress | None = None,
    service_kwargs: Mapping[str, Any] | None = None,
    target: Mapping[str, Any] | None = None,
) -> ReplayReport:
    """Generate ``episodes`` episodes per split from ``seed`` and score ``harness`` and both baselines on them.

    ``split``: ``tuning``, ``heldout`` or ``all`` (both, each ``episodes`` long, reported apart and
    together). ``database_url`` None plays each arm in a temporary SQLite file, deleted afterwards;
    otherwise every arm plays in fresh scopes of that database (migrated first). ``prices`` is the
    price table runs are charged by (default: the built-in one). ``service_kwargs`` are extra
    keyword arguments of the consolidation service: the worker passes the model keys and servers it
    read (unset: none but what the SDKs read themselves, and the target is not checked before playing;
    set: the harness's key and server are checked first, as ``memledger models check`` checks them).
    ``target`` are scope settings of the harness's scopes (``base_url``, the prices,
    ``wall_clock_cap_s``, ``max_output_tokens``, ...), checked as ``consolidation set`` checks them.

    Raises:
        InvalidSettings: the harness, model or settings cannot be used: no key, nothing answers at its
            server, a bad setting (nothing is played);
        ReplayStopped: runs kept failing for a cause other than the designed one;
        ValueError: ``episodes`` below 1, an unknown split; LedgerError.
    """
    splits = SPLITS if split == ALL else (split,)
    corpora = {name: generate(episodes, seed=seed, split=name) for name in splits}
    by_split: dict[str, dict[str, Tally]] = {name: {} for name in splits}
    with tempfile.TemporaryDirectory(prefix="memledger-replay-") as scratch:
        for arm in (harness, *BASELINES):
            for name, corpus in corpora.items():
                url = database_url or f"sqlite:///{Path(scratch) / arm}-{name}.db"
                by_split[name][arm] = play_arm(
                    corpus,
                    arm=arm,
                    database_url=url,
                    model=model,
                    prices=prices,
                    progress=progress,
                    service_kwargs=service_kwargs,
                    target=target,
                    check=service_kwargs is not None,
                )
    return ReplayReport(harness, model, seed, split, by_split)
