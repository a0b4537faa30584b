"""Whole-day dates for front matter (``2026-06-30``, quoted or not) and the audit date.

An entry's dates are calendar days in UTC, as in the reference memory-ledger tool:
an entry still holds *on* its ``expires`` / ``review-by`` day and is expired or
overdue only on a later day. Anything but a real ``YYYY-MM-DD`` day is refused
with a reason: an instant (``2026-06-30T09:00:00Z``), a time that YAML 1.1 would
read as a number (``12:30``), an impossible day (``2026-02-30``), a number, or
another spelling ``date.fromisoformat`` would happen to accept (``20260630``).

Into the database ledger, ``expires: D`` becomes ``expires_at`` = D + 1 day at
00:00 UTC (the first instant it no longer holds); :func:`expires_at_of` and
:func:`expires_day_of` convert both ways.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta

from ledger.errors import DateError
from ledger.files.model import When

_DATE_RE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")
_INSTANT_RE = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}")
_AWARE_RE = re.compile(
    r"^(?P<date>\d{4}-\d{2}-\d{2})[Tt ](?P<time>\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?)(?P<zone>[Zz]|[+-]\d{2}:\d{2})$"
)
_TIME_RE = re.compile(r"^\d{1,2}(?::\d{1,2}){1,2}(?:\.\d+)?$")

DATE_HINT = "write a whole day as YYYY-MM-DD (e.g. 2026-06-30); quoting it is fine"
ONE_DAY = timedelta(days=1)


def parse_day(text: str) -> date:
    """The calendar day ``YYYY-MM-DD``. Raises :class:`DateError` for anything else."""
    match = _DATE_RE.match(text)
    if not match:
        if _INSTANT_RE.match(text):
            raise DateError("date-format", f"{text!r} is an instant; dates here are whole days (YYYY-MM-DD)")
        if _TIME_RE.match(text):
            raise DateError("date-format", f"{text!r} is a time of day (YYYY-MM-DD expected)")
        raise DateError("date-format", f"{text!r} is not a real date in YYYY-MM-DD form")
    try:
        return date(int(match[1]), int(match[2]), int(match[3]))
    except ValueError:
        raise DateError("date-impossible", f"{text!r} is not a day of the calendar") from None


def parse_when(value: object) -> When:
    """Parse a front-matter date (text ``YYYY-MM-DD``; YAML leaves unquoted dates as text here).

    Raises :class:`DateError` (``check`` ``date-format`` or ``date-impossible``) for anything else.
    """
    if isinstance(value, bool) or not isinstance(value, str):
        shown = "empty" if value is None else f"{value!r} ({type(value).__name__})"
        raise DateError("date-format", f"{shown} is not a date in YYYY-MM-DD form")
    text = value.strip()
    day = parse_day(text)
    return When(midnight(day), text, True)


def midnight(day: date) -> datetime:
    """00:00 UTC of ``day``."""
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def parse_now(text: str) -> datetime:
    """``--now``: a day ``YYYY-MM-DD`` (00:00 UTC) or an RFC 3339 instant with ``Z`` or an offset.

    The audit date is the instant's UTC day. Raises :class:`DateError` for anything else.
    """
    value = text.strip()
    match = _AWARE_RE.match(value)
    if match:
        zone = match["zone"]
        normalized = f"{match['date']}T{match['time']}{'+00:00' if zone in 'Zz' else zone}"
        try:
            return datetime.fromisoformat(normalized).astimezone(UTC)
        except ValueError:
            raise DateError("date-impossible", f"{value!r} is not an instant of the calendar") from None
    if _INSTANT_RE.match(value):
        raise DateError("date-format", f"{value!r} has no time zone: add Z or an offset, or give a day YYYY-MM-DD")
    return midnight(parse_day(value))


def expires_at_of(day: date) -> datetime:
    """The database ``expires_at`` of ``expires: day``: the first instant it no longer holds."""
    return midnight(day) + ONE_DAY


def expires_day_of(expires_at: datetime) -> date:
    """The last day an entry may say it holds for a record that expires at ``expires_at``.

    The last whole day before ``expires_at``: ``2026-07-01T00:00Z`` → ``2026-06-30``. An
    instant inside a day (``2026-07-01T12:00Z``) also gives ``2026-06-30``: an entry must
    never claim a day on which the record stops holding (so import may shorten, never
    lengthen, a record's life by less than a day).
    """
    return expires_at.astimezone(UTC).date() - ONE_DAY


def _is_midnight(value: datetime) -> bool:
    v = value.astimezone(UTC)
    return v.hour == v.minute == v.second == v.microsecond == 0


def format_instant(value: datetime) -> str:
    """``2025-06-30`` for midnight UTC, else RFC 3339 with ``Z`` (microseconds only when present)."""
    value = value.astimezone(UTC)
    if _is_midnight(value):
        return value.strftime("%Y-%m-%d")
    if value.microsecond:
        return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")
