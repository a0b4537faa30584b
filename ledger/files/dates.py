"""Strict dates for front matter: an ISO date (``2025-06-30``) or an aware ISO datetime.

Anything else is refused with a reason: a time that YAML 1.1 would read as a
sexagesimal number (``12:30``), a number, an impossible date (``2025-02-30``),
a naive datetime (no ``Z`` or offset), or any other spelling that
``datetime.fromisoformat`` would happen to accept (week dates, ``20250630``).
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime

from ledger.files.model import When

_DATE_RE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")
_DATETIME_RE = re.compile(
    r"^(?P<date>\d{4}-\d{2}-\d{2})[Tt ](?P<time>\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?)(?P<zone>[Zz]|[+-]\d{2}:\d{2})?$"
)
_TIME_RE = re.compile(r"^\d{1,2}(?::\d{1,2}){1,2}(?:\.\d+)?$")

DATE_HINT = "write a date as YYYY-MM-DD (e.g. 2025-06-30) or an instant with its offset (2025-06-30T09:00:00Z)"


class DateError(ValueError):
    """A front-matter value is not an acceptable date; ``check`` is the sub-rule id."""

    def __init__(self, check: str, message: str) -> None:
        super().__init__(message)
        self.check = check
        self.message = message


def parse_when(value: object) -> When:
    """Parse a front-matter date or aware datetime.

    Raises :class:`DateError` (``check`` one of ``date-format``, ``date-impossible``,
    ``date-naive``) for anything else.
    """
    if isinstance(value, bool) or not isinstance(value, str):
        shown = "empty" if value is None else f"{value!r} ({type(value).__name__})"
        raise DateError("date-format", f"{shown} is not a date")
    text = value.strip()
    match = _DATE_RE.match(text)
    if match:
        try:
            day = date(int(match[1]), int(match[2]), int(match[3]))
        except ValueError:
            raise DateError("date-impossible", f"{text!r} is not a day of the calendar") from None
        return When(datetime(day.year, day.month, day.day, tzinfo=UTC), text, True)
    match = _DATETIME_RE.match(text)
    if match:
        return _parse_datetime(text, match)
    if _TIME_RE.match(text):
        raise DateError("date-format", f"{text!r} is a time of day (YAML 1.1 reads it as a number), not a date")
    raise DateError("date-format", f"{text!r} is not an ISO date")


def _parse_datetime(text: str, match: re.Match[str]) -> When:
    zone = match["zone"]
    if zone is None:
        raise DateError("date-naive", f"{text!r} has no time zone; a naive datetime is ambiguous")
    normalized = f"{match['date']}T{match['time']}{'+00:00' if zone in 'Zz' else zone}"
    try:
        instant = datetime.fromisoformat(normalized)
    except ValueError:
        raise DateError("date-impossible", f"{text!r} is not an instant of the calendar") from None
    return When(instant.astimezone(UTC), text, False)


def parse_now(text: str) -> datetime:
    """Parse a ``--now`` value (a date or an aware datetime) into an aware UTC instant.

    Raises :class:`DateError` when it is neither.
    """
    return parse_when(text).instant


def format_instant(value: datetime) -> str:
    """``2025-06-30`` for midnight UTC, else RFC 3339 with ``Z`` (microseconds only when present)."""
    value = value.astimezone(UTC)
    if value.hour == value.minute == value.second == value.microsecond == 0:
        return value.strftime("%Y-%m-%d")
    if value.microsecond:
        return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")
