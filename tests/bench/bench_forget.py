"""What a forget costs on SQLite, with the ``VACUUM`` after it and without (``make bench``).

A forget merges the full-text index (``optimize``), commits, runs ``VACUUM`` (a rebalanced page
keeps old cell bytes in its gap: ``ledger/store/sqlite_files.py``) and checkpoints the WAL. Both
sides forget one record a round from copies of one database of 10,000 active records of 20 words;
the baseline skips the ``VACUUM``. Target: the ``VACUUM`` keeps a forget within 5x the time.
Figures in ``docs/performance.md``.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger import Ledger, open_ledger
from ledger.store import sqlite_files
from tests.bench.conftest import Sample, interleave, load, note, once, report

pytestmark = [pytest.mark.bench, pytest.mark.timeout(900)]

RECORDS = 10_000
WORDS_A_RECORD = 20
ROUNDS = 15
SCOPE = "account:local"


def build(path: Path) -> list[str]:
    """RECORDS active records of made-up words, in one transaction; their ids."""
    rng = random.Random(0)
    vocabulary = ["".join(rng.choice("bdfgklmnprstvz") + rng.choice("aeiou") for _ in range(3)) for _ in range(3000)]
    led = open_ledger(f"sqlite:///{path}")
    led.set_budget(SCOPE, RECORDS)
    with led.transaction() as tx:
        ids = [tx.save(" ".join(rng.choice(vocabulary) for _ in range(WORDS_A_RECORD))).id for _ in range(RECORDS)]
    led.close()
    return ids


@pytest.fixture
def no_vacuum(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, bool]]:
    """A switch: while ``off["vacuum"]`` is true, the scrub after a forget skips its ``VACUUM``."""
    off = {"vacuum": False}
    scrub = sqlite_files.scrub

    def switched(raw: Any, *, vacuum: bool, **kwargs: Any) -> bool:
        return scrub(raw, vacuum=vacuum and not off["vacuum"], **kwargs)

    monkeypatch.setattr(sqlite_files, "scrub", switched)
    yield off


def test_the_vacuum_after_a_forget(tmp_path: Path, no_vacuum: dict[str, bool]) -> None:
    # Given two copies of one database of RECORDS active records
    ids = build(tmp_path / "built.db")
    ledgers: dict[str, Ledger] = {}
    for side in ("vacuum", "none"):
        shutil.copy(tmp_path / "built.db", tmp_path / f"{side}.db")
        ledgers[side] = open_ledger(f"sqlite:///{tmp_path / side}.db")
    size_mb = (tmp_path / "built.db").stat().st_size / 1e6

    # When each round forgets the same record on both sides, one with the VACUUM and one without
    def forgetting(side: str) -> Callable[[int], Sample]:
        def one_round(r: int) -> Sample:
            no_vacuum["vacuum"] = side == "none"
            return once(lambda: ledgers[side].delete(ids[r]))

        return one_round

    samples = interleave({side: forgetting(side) for side in ledgers}, rounds=ROUNDS)

    # Then the VACUUM's share is what the target allows
    figure = report(
        f"forget among {RECORDS:,} records ({size_mb:.1f} MB), with vs without the VACUUM",
        samples["vacuum"],
        samples["none"],
        target=5.0,
        ours_label="with VACUUM",
        baseline_label="without",
    )
    note(f"load: {load()}")
    for led in ledgers.values():
        led.close()
    figure.check()
