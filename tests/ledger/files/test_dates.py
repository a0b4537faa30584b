"""Front-matter dates: ISO dates and aware datetimes only."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ledger.files.dates import DateError, format_instant, parse_now, parse_when


@pytest.mark.parametrize(
    ("text", "instant"),
    [
        ("2025-06-30", datetime(2025, 6, 30, tzinfo=UTC)),
        ("2024-02-29", datetime(2024, 2, 29, tzinfo=UTC)),
        ("2025-06-30T09:00:00Z", datetime(2025, 6, 30, 9, tzinfo=UTC)),
        ("2025-06-30T09:00Z", datetime(2025, 6, 30, 9, tzinfo=UTC)),
        ("2025-06-30 11:00:00+02:00", datetime(2025, 6, 30, 9, tzinfo=UTC)),
        ("2025-06-30T09:00:00.123456Z", datetime(2025, 6, 30, 9, 0, 0, 123456, tzinfo=UTC)),
    ],
)
def test_accepted(text: str, instant: datetime) -> None:
    assert parse_when(text).instant == instant


@pytest.mark.parametrize(
    ("value", "check"),
    [
        ("12:30", "date-format"),
        ("190:20:30", "date-format"),
        ("20250630", "date-format"),
        ("2025-W26-1", "date-format"),
        ("30/06/2025", "date-format"),
        ("June 30, 2025", "date-format"),
        (20250630, "date-format"),
        (750, "date-format"),
        (True, "date-format"),
        (None, "date-format"),
        ("2025-02-30", "date-impossible"),
        ("2025-13-01", "date-impossible"),
        ("0000-01-01", "date-impossible"),
        ("2025-06-30T24:30:00Z", "date-impossible"),
        ("2025-06-30T09:00:00", "date-naive"),
        ("2025-06-30 09:00", "date-naive"),
    ],
)
def test_refused(value: object, check: str) -> None:
    with pytest.raises(DateError) as info:
        parse_when(value)
    assert info.value.check == check


def test_time_of_day_message_names_the_sexagesimal_trap() -> None:
    with pytest.raises(DateError, match="time of day"):
        parse_when("12:30")


def test_parse_now_and_format_round_trip() -> None:
    assert format_instant(parse_now("2025-03-01")) == "2025-03-01"
    assert format_instant(parse_now("2025-03-01T10:00:00+01:00")) == "2025-03-01T09:00:00Z"
    assert format_instant(datetime(2025, 3, 1, 9, 0, 0, 5, tzinfo=UTC)) == "2025-03-01T09:00:00.000005Z"
