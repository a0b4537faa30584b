"""Front-matter dates are whole days; the audit date comes from --as-of or --now; expires ↔ expires_at."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.files.dates import DateError, expires_at_of, expires_day_of, format_instant, parse_now, parse_when


@pytest.mark.parametrize(
    ("text", "day"),
    [("2025-06-30", date(2025, 6, 30)), ("2024-02-29", date(2024, 2, 29)), (" 2025-01-01 ", date(2025, 1, 1))],
)
def test_accepted(text: str, day: date) -> None:
    when = parse_when(text)
    assert when.day == day and when.instant == datetime(day.year, day.month, day.day, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "check"),
    [
        ("12:30", "date-format"),
        ("190:20:30", "date-format"),
        ("20250630", "date-format"),
        ("2025-W26-1", "date-format"),
        ("30/06/2025", "date-format"),
        ("June 30, 2025", "date-format"),
        ("YYYY-MM-DD", "date-format"),
        ("2025-06-30T09:00:00Z", "date-format"),
        ("2025-06-30 09:00", "date-format"),
        (20250630, "date-format"),
        (750, "date-format"),
        (True, "date-format"),
        (None, "date-format"),
        ("2025-02-30", "date-impossible"),
        ("2025-13-01", "date-impossible"),
        ("0000-01-01", "date-impossible"),
    ],
)
def test_refused(value: object, check: str) -> None:
    with pytest.raises(DateError) as info:
        parse_when(value)
    assert info.value.check == check


def test_messages_say_what_is_wrong() -> None:
    with pytest.raises(DateError, match="time of day"):
        parse_when("12:30")
    with pytest.raises(DateError, match="whole days"):
        parse_when("2025-06-30T09:00:00Z")


@pytest.mark.parametrize(
    ("text", "instant"),
    [
        ("2025-03-01", datetime(2025, 3, 1, tzinfo=UTC)),
        ("2025-03-01T23:30:00Z", datetime(2025, 3, 1, 23, 30, tzinfo=UTC)),
        ("2025-03-02T00:30:00+02:00", datetime(2025, 3, 1, 22, 30, tzinfo=UTC)),
    ],
)
def test_parse_now(text: str, instant: datetime) -> None:
    assert parse_now(text) == instant


@pytest.mark.parametrize("text", ["2025-03-01T10:00", "12:30", "2025-02-30", "2025-06-30T24:30:00Z", "tomorrow"])
def test_parse_now_refuses(text: str) -> None:
    with pytest.raises(DateError):
        parse_now(text)


def test_format_instant() -> None:
    assert format_instant(parse_now("2025-03-01")) == "2025-03-01"
    assert format_instant(datetime(2025, 3, 1, 9, tzinfo=UTC)) == "2025-03-01T09:00:00Z"


def test_expires_maps_to_the_next_midnight_and_back() -> None:
    # expires: 2026-06-30 holds all of 30 June and stops at 1 July 00:00 UTC.
    assert expires_at_of(date(2026, 6, 30)) == datetime(2026, 7, 1, tzinfo=UTC)
    assert expires_day_of(datetime(2026, 7, 1, tzinfo=UTC)) == date(2026, 6, 30)
    # An expiry inside a day is written as the day before: the entry never claims a day the record does not hold.
    assert expires_day_of(datetime(2026, 7, 1, 12, tzinfo=UTC)) == date(2026, 6, 30)
    assert expires_day_of(datetime(2026, 7, 1, 0, 0, 0, 1, tzinfo=UTC)) == date(2026, 6, 30)


@given(st.dates(min_value=date(1971, 1, 1), max_value=date(9998, 12, 30)))
def test_expires_round_trips_for_every_day(day: date) -> None:
    assert expires_day_of(expires_at_of(day)) == day


@given(st.datetimes(min_value=datetime(1971, 1, 2), max_value=datetime(9998, 12, 30), timezones=st.just(UTC)))
def test_exported_day_never_outlives_the_record(at: datetime) -> None:
    back = expires_at_of(expires_day_of(at))
    assert back <= at and (at - back).total_seconds() < 86_400
