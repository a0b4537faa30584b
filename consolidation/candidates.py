"""The bounded candidate list: which active records one run sends, so its cost does not grow with the scope.

See docs/consolidation.md.

Pure: the caller passes the records, what each costs in the prompt, which changed since
the scope's last settled run, a ``similar(record) -> ids`` callable (the service backs it
with the ledger's full-text search) and the scope's rotation cursor; nothing here reads
a database or a clock.

The order of filling, within ``max_chars``:

1. a scope that fits is sent whole (in the order given);
2. every changed record, each followed by up to :data:`SIMILAR_PER_CHANGED` of the
   records most similar to it, so a new near-duplicate is sent in the same run as the
   old record it repeats;
3. then the rotation: the scope's records in id order, a ring, starting just after the
   cursor the previous run left — the records seen longest ago by the rotation come
   first. The rotation stops at the first record that does not fit, and the cursor
   moves to the last record it sent, so no record is skipped: every active record is
   sent within ``ceil(scope / bound) + 1`` runs.

Why a cursor rather than a "last seen" instant per record: one value per scope, no write
per record per run, and the same guarantee (records the rotation has not reached since
it last passed them are exactly the oldest-seen ones).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

DEFAULT_MAX_PROMPT_CHARS = 16_000
SIMILAR_PER_CHANGED = 3


class HasId(Protocol):
    @property
    def id(self) -> str: ...


R = TypeVar("R", bound=HasId)


@dataclass(frozen=True, slots=True)
class Selection(Generic[R]):
    """What one run sends. ``cursor`` is the rotation position to store for the next run."""

    records: list[R]
    cursor: str | None
    whole: bool


def select_candidates(
    records: Sequence[R],
    *,
    max_chars: int,
    cost: Callable[[R], int],
    changed: Collection[str],
    similar: Callable[[R], Sequence[str]],
    cursor: str | None,
) -> Selection[R]:
    """The records to send this run, at most ``max_chars`` of them by ``cost`` (see the module docstring).

    ``changed`` holds the ids of records saved or changed since the last settled run (ids
    not in ``records`` are ignored); ``similar`` is asked only about changed records, and
    only ids among ``records`` count. Deterministic for the same inputs.
    """
    costs = {r.id: cost(r) for r in records}
    if sum(costs.values()) <= max_chars:
        return Selection(list(records), cursor, whole=True)
    by_id = {r.id: r for r in records}
    picked: dict[str, R] = {}
    used = 0

    def take(record: R) -> bool:
        nonlocal used
        if record.id in picked:
            return True
        if used + costs[record.id] > max_chars:
            return False
        picked[record.id] = record
        used += costs[record.id]
        return True

    for record in records:
        if record.id not in changed or not take(record):
            continue
        near = [by_id[i] for i in similar(record) if i in by_id and i != record.id]
        for neighbour in near[:SIMILAR_PER_CHANGED]:
            take(neighbour)
    ring = sorted(by_id)
    start = 0 if cursor is None else bisect.bisect_right(ring, cursor)
    new_cursor = cursor
    for offset in range(len(ring)):
        record_id = ring[(start + offset) % len(ring)]
        if record_id not in picked and not take(by_id[record_id]):
            break
        new_cursor = record_id
    return Selection(list(picked.values()), new_cursor, whole=False)
