"""A seeded scope for the operator page: a chain with an edit, an expiry and a forget, and a run."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from consolidation import ConsolidationService
from ledger import Ledger

SCOPE = "account:local"
FORGOTTEN_BODY = "my old locker code is in the blue notebook"
FORGOTTEN_EARLIER_BODY = "my old locker is number 12"
EDITED_BODY = "I prefer metric units"
EDIT_BODY = "I prefer metric units, except for beer"
EXPIRING_BODY = "deploy region is eu-west-1 this week"


@dataclass(frozen=True)
class Seeded:
    original: str
    edit: str
    expiring: str
    forgotten_first: str
    forgotten: str
    run_id: str


def seed_scope(led: Ledger, service: ConsolidationService, *, t0: datetime | None = None) -> Seeded:
    """Given: an edit (original → edit), an expiring pin swept, a forgotten two-revision chain, one settled run.

    Everything happens in the ten minutes before now (default ``t0``), so it falls in this month's figures
    unless the month turned over in between.
    """
    t0 = t0 or datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=10)
    minute = timedelta(minutes=1)
    original = led.save(EDITED_BODY, now=t0)
    expiring = led.save(EXPIRING_BODY, expires_at=t0 + 6 * minute, now=t0 + minute)
    first = led.save(FORGOTTEN_EARLIER_BODY, now=t0 + 2 * minute)
    second = led.save(FORGOTTEN_BODY, supersedes=first.id, now=t0 + 3 * minute)
    edit = led.save(EDIT_BODY, supersedes=original.id, now=t0 + 4 * minute)
    led.delete(second.id, now=t0 + 5 * minute)
    led.sweep_expired(t0 + 7 * minute)
    service.update_settings(SCOPE, mode="apply", harness="offline", debounce_s=0, now=t0 + 8 * minute)
    run = service.notify_turn(SCOPE, now=t0 + 8 * minute)
    assert run is not None
    service.run_due(now=t0 + 9 * minute)
    return Seeded(original.id, edit.id, expiring.id, first.id, second.id, run.id)
