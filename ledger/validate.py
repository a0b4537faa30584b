"""Argument checks shared by every write path (no database, no clock)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from ledger.audit import SESSION_MAX_CHARS, check_session_id
from ledger.errors import BodyRejected, InvalidArgument, InvalidTransition
from ledger.lines import CONTROL_CHARACTERS
from ledger.models import TRANSITIONS, Kind, Status
from ledger.screening import screen_body

GROUP_MAX_CHARS = 200


def new_record_id() -> str:
    return "mem_" + os.urandom(12).hex()  # secrets.token_hex(12), without its three calls


def kind(value: object) -> Kind:
    try:
        return Kind(str(value))
    except ValueError:
        raise InvalidArgument(f"unknown kind {value!r}: use one of {', '.join(k.value for k in Kind)}") from None


def group(value: object) -> str | None:
    if value is None:
        return None
    # No control character: the record protocol refuses them (docs/protocol.md, "Strict input"), and a command
    # that prints a group (``memledger pins``) would hand an escape sequence to the operator's terminal.
    if (
        not isinstance(value, str)
        or not value.strip()
        or len(value) > GROUP_MAX_CHARS
        or CONTROL_CHARACTERS.search(value)
    ):
        raise InvalidArgument(
            f"conflict_group must be a non-empty string of at most {GROUP_MAX_CHARS} characters, "
            "without control characters (such as NUL, tab or ESC)"
        )
    storable(value, "conflict_group")
    return value.strip()


def carried_group(value: object, stored: Iterable[str | None]) -> str | None:
    """A write's group: one of ``stored`` (its targets' groups) is carried as it is stored, as an edit carries
    it; any other is checked by :func:`group`. A group stored before today's checks (a tab, say) would otherwise
    make every merge, correction or expiry proposal of its records fail."""
    return value if isinstance(value, str) and value in stored else group(value)


def opt_text(value: object, name: str, limit: int = 200) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > limit or "\x00" in value:
        raise InvalidArgument(f"{name} must be a string of at most {limit} characters, without NUL")
    storable(value, name)
    return value


def source_session(value: object) -> str | None:
    """A record's ``source_session_id``: None, or a session id as every other session id is (1 to 200 characters,
    not blank, no control characters; :func:`ledger.audit.check_session_id`)."""
    if value is None:
        return None
    try:
        return check_session_id(value)
    except InvalidArgument:
        raise InvalidArgument(
            f"source_session_id must be 1 to {SESSION_MAX_CHARS} characters without control characters, "
            "as every session id (leave it out when there is no session)"
        ) from None


def confidence(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 10_000:
        raise InvalidArgument("confidence_bps must be an integer from 0 to 10000")
    return value


def storable(value: str, name: str) -> None:
    """Refuse text that neither database can store as UTF-8 (a lone surrogate such as ``"a\\ud800b"``)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(
            f"{name} contains a character that cannot be stored (a lone UTF-16 surrogate); send valid Unicode text"
        ) from None


def stored_body(body: object, *, max_chars: int) -> str:
    """``body`` as a record stores it: screened (:func:`ledger.screening.screen_body`) and storable.

    Raises:
        BodyRejected.
    """
    clean = screen_body(body, max_chars=max_chars)
    if not clean.isascii():  # ASCII always encodes
        storable_body(clean)
    return clean


def storable_body(body: str) -> None:
    try:
        body.encode("utf-8")
    except UnicodeEncodeError:
        raise BodyRejected(
            "the body contains a character that cannot be stored (a lone UTF-16 surrogate); send valid Unicode text",
            why="not_text",
        ) from None


def record_id(value: object) -> str:
    """One record id as a caller gave it: a non-empty string without NUL."""
    if not isinstance(value, str) or not value or "\x00" in value:
        raise InvalidArgument("a record id must be a non-empty string without NUL characters")
    return value


def record_ids(value: Iterable[object] | str) -> list[str]:
    targets = [value] if isinstance(value, str) else list(value)
    if any(not isinstance(t, str) for t in targets) or len(set(targets)) != len(targets):
        raise InvalidArgument("supersedes must be a list of distinct record ids")
    return [str(t) for t in targets]


def transition(row: Mapping[str, Any], to: Status, verb: str) -> None:
    """Raise :class:`InvalidTransition` unless ``row``'s status may move to ``to``."""
    current = Status(row["status"])
    if to not in TRANSITIONS[current]:
        raise InvalidTransition(f"cannot {verb} {row['id']}: it is {current.value}")
