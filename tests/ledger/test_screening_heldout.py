"""Screening measured on the held-out corpus (tests/ledger/screening_heldout/): recall and precision.

The held-out corpus is never tuned on: rules change against the tuning corpora only. Cost: one
screening pass over ~375 bodies, well under a second.
"""

from __future__ import annotations

from collections import Counter

from ledger.screening import find_credential
from tests.ledger.screening_corpus import CORPUS as FIRST_CORPUS
from tests.ledger.screening_corpus_tuning import LOOKALIKES_TUNING, SECRETS_TUNING
from tests.ledger.screening_corpus_world import LOOKALIKES_WORLD, SECRETS_WORLD
from tests.ledger.screening_heldout.corpus import HELDOUT, HELDOUT_INNOCENT, HELDOUT_SECRETS

MIN_RECALL = 0.95
MIN_PRECISION = 0.98


def test_the_held_out_corpus_is_large_varied_and_apart_from_the_tuning_corpora() -> None:
    assert len(HELDOUT_SECRETS) >= 150 and len(HELDOUT_INNOCENT) >= 150
    assert len({s.body for s in HELDOUT}) == len(HELDOUT), "duplicate bodies"
    assert all(s.value and s.value in s.body for s in HELDOUT_SECRETS)
    assert len({s.lang for s in HELDOUT_SECRETS}) >= 40
    tuning = {s.body for s in (*FIRST_CORPUS, *SECRETS_WORLD, *LOOKALIKES_WORLD, *SECRETS_TUNING, *LOOKALIKES_TUNING)}
    assert not tuning & {s.body for s in HELDOUT}, "a held-out body is also in a tuning corpus"


def test_recall_and_precision_on_the_held_out_corpus() -> None:
    # Given every held-out body
    flagged = {s.body: find_credential(s.body) is not None for s in HELDOUT}

    # When they are counted
    tp = sum(flagged[s.body] for s in HELDOUT_SECRETS)
    fn = len(HELDOUT_SECRETS) - tp
    fp = sum(flagged[s.body] for s in HELDOUT_INNOCENT)
    tn = len(HELDOUT_INNOCENT) - fp
    recall = tp / (tp + fn)
    precision = tp / (tp + fp) if tp + fp else 0.0
    missed = Counter(s.category for s in HELDOUT_SECRETS if not flagged[s.body])
    false_alarms = Counter(s.category for s in HELDOUT_INNOCENT if flagged[s.body])
    print(
        f"\nscreening held-out: n={len(HELDOUT)} tp={tp} fp={fp} fn={fn} tn={tn} "
        f"precision={precision:.3f} recall={recall:.3f}\n  missed: {dict(missed)}\n  false alarms: {dict(false_alarms)}"
    )

    # Then recall and precision reach the thresholds
    assert recall >= MIN_RECALL, f"recall {recall:.3f} < {MIN_RECALL}; missed by category: {dict(missed)}"
    assert precision >= MIN_PRECISION, f"precision {precision:.3f} < {MIN_PRECISION}: {dict(false_alarms)}"
