"""Instants: aware UTC datetimes at the API, integer microseconds in storage.

No query reads a clock: every time-dependent operation takes ``now`` explicitly
or asks the ledger's injectable :class:`Clock`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from ledger.errors import InvalidInstant

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)

Clock = Callable[[], datetime]


def system_clock() -> datetime:
    """The default clock: the machine's current instant in UTC."""
    return datetime.now(UTC)


def require_aware(value: object, *, name: str = "instant") -> datetime:
    """Return ``value`` as an aware UTC datetime, or raise :class:`InvalidInstant`."""
    if not isinstance(value, datetime):
        raise InvalidInstant(f"{name} must be a timezone-aware datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        raise InvalidInstant(
            f"{name} is a naive datetime ({value.isoformat()}); pass an aware one, e.g. datetime.now(timezone.utc)"
        )
    try:
        return value.astimezone(UTC)
    except OverflowError:
        # e.g. 9999-12-31T23:59-05:00 lies past the last instant a datetime can hold in UTC
        raise InvalidInstant(f"{name} {value.isoformat()} is out of range once converted to UTC") from None


def to_micros(value: datetime, *, name: str = "instant") -> int:
    """Exact microseconds since the Unix epoch (no float on the way)."""
    aware = require_aware(value, name=name)
    return (aware - EPOCH) // _ONE_US


def from_micros(value: int) -> datetime:
    return EPOCH + timedelta(microseconds=value)


def opt_from_micros(value: int | None) -> datetime | None:
    return None if value is None else from_micros(value)


def parse_rfc3339(text: str, *, name: str = "instant") -> datetime:
    """Parse an RFC 3339 instant (``Z`` or an offset is required)."""
    if not isinstance(text, str):
        raise InvalidInstant(f"{name} must be an RFC 3339 string")
    try:
        value = datetime.fromisoformat(text.strip().replace("z", "Z").replace("Z", "+00:00"))
    except ValueError as exc:
        raise InvalidInstant(f"{name} is not an RFC 3339 instant: {text!r}") from exc
    return require_aware(value, name=name)


def format_rfc3339(value: datetime | None) -> str | None:
    """RFC 3339 with microseconds and ``Z``."""
    if value is None:
        return None
    return require_aware(value).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
