"""Pages of a list: ``limit``, an opaque ``cursor``, and the filters ``kind``, ``provenance``, ``conflict_group``.

A list is ordered by when each record took effect, then by insertion (``valid_from``,
``seq``); a page asks for the records after the last one of the page before (keyset
paging), so what is written between two pages neither repeats nor skips a record that was
already in the list. The guarantee, precisely (see docs/ledger.md, "Paging"):

* every record that is in the list when the first page is read, and still in it when a
  later page is read, is returned exactly once over the pages;
* a record added after the first page took effect after every record already in the list
  (instants strictly increase within a scope), so it comes after them: on a later page, or
  not at all if the pages are done;
* a record that leaves the list between pages (forgotten, superseded, expired, accepted,
  rejected) is not returned by a later page.

The cursor names the list, the scope and the filters it was made for, and the id of the
last record returned, base64url-encoded JSON; the next page looks that record up in the
scope for its sort key (:func:`position`). A position per scope: a cursor holds nothing the
client was not sent (never the ledger-wide insertion number, which would tell how many
records other accounts wrote). It is opaque but not secret: a client that edits one can only
move within its own scope's list, which it may read anyway; a cursor that does not decode to
exactly that shape, names a record the scope does not hold, or was made for another list,
scope or set of filters is refused (:class:`~ledger.errors.InvalidArgument`).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Select, bindparam, select, tuple_

from ledger import record_rows as rowsmod
from ledger.errors import InvalidArgument
from ledger.models import Kind, MemoryRecord, Provenance
from ledger.schema import RECORDS
from ledger.validate import group as check_group

MAX_LIMIT = 1000
CURSOR_VERSION = 2  # 1 carried the sort key itself (the ledger-wide seq): refused since
MAX_CURSOR_CHARS = 2000
_MAX_ID_CHARS = 100
M = RECORDS.c
_BAD_CURSOR = (
    "cursor is not one this ledger issued (it may be cut or edited): pass the previous page's next "
    "cursor unchanged, or leave it out for the first page"
)


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a list; ``next_cursor`` asks for the next one (None: this was the last)."""

    records: list[MemoryRecord]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class Filters:
    """What a page is filtered by (None: any)."""

    kind: Kind | None = None
    provenance: Provenance | None = None
    conflict_group: str | None = None

    @classmethod
    def of(cls, kind: object, provenance: object, conflict_group: object) -> Filters:
        """Validated filters. Raises InvalidArgument naming the bad one and the values it takes."""
        return cls(
            kind=None if kind is None else _member(Kind, kind, "kind"),
            provenance=None if provenance is None else _member(Provenance, provenance, "provenance"),
            conflict_group=None if conflict_group is None else check_group(conflict_group),
        )

    def where(self) -> list[ColumnElement[bool]]:
        found: list[ColumnElement[bool]] = []
        if self.kind is not None:
            found.append(M.kind == self.kind.value)
        if self.provenance is not None:
            found.append(M.provenance == self.provenance.value)
        if self.conflict_group is not None:
            found.append(M.conflict_group == self.conflict_group)
        return found

    def key(self) -> list[str | None]:
        return [
            None if self.kind is None else self.kind.value,
            None if self.provenance is None else self.provenance.value,
            self.conflict_group,
        ]


def _member(enum: Any, value: object, name: str) -> Any:
    try:
        return enum(value)
    except ValueError:
        allowed = ", ".join(m.value for m in enum)
        raise InvalidArgument(f"{name} must be one of {allowed}; got {str(value)[:80]!r}") from None


def check_limit(limit: object) -> int | None:
    """``limit`` as given (None: the whole list). Raises InvalidArgument unless an integer from 1 to 1000."""
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidArgument(f"limit must be an integer from 1 to {MAX_LIMIT} (or left out for the whole list)")
    return limit


def encode_cursor(listing: str, scope_key: str, filters: Filters, last_id: str) -> str:
    payload = {"v": CURSOR_VERSION, "l": listing, "s": scope_key, "f": filters.key(), "a": last_id}
    raw = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: object, listing: str, scope_key: str, filters: Filters) -> str:
    """The id of the record a cursor resumes after. Raises InvalidArgument for anything but a cursor of this
    list, scope and filters (garbled, edited, nested, or made for another scope, account or filter)."""
    if not isinstance(cursor, str) or not cursor or len(cursor) > MAX_CURSOR_CHARS:
        raise InvalidArgument(_BAD_CURSOR)
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        payload = json.loads(raw.decode())
    except (ValueError, binascii.Error, UnicodeDecodeError, RecursionError):  # RecursionError: nested arrays
        raise InvalidArgument(_BAD_CURSOR) from None
    if not isinstance(payload, dict) or payload.get("v") != CURSOR_VERSION:
        raise InvalidArgument(_BAD_CURSOR)
    last_id = payload.get("a")
    if not isinstance(last_id, str) or not 0 < len(last_id) <= _MAX_ID_CHARS:
        raise InvalidArgument(_BAD_CURSOR)
    if payload.get("s") != scope_key:
        raise InvalidArgument(
            "cursor was made for another scope; a cursor pages only the list of the scope it came from"
        )
    if payload.get("l") != listing or payload.get("f") != filters.key():
        raise InvalidArgument(
            "cursor was made for another list or other filters: ask for the next page with the same "
            "method and the same kind, provenance and conflict group as the first"
        )
    return last_id


POSITION = select(M.valid_from, M.seq).where(M.id == bindparam("cursor_id"), M.scope_key == bindparam("s"))
"""The sort key of the record a cursor names, in the cursor's scope (params ``cursor_id``, ``s``)."""


def position(found: list[tuple[Any, ...]]) -> tuple[int, int]:
    """The sort key :data:`POSITION` found. Raises InvalidArgument when the scope holds no such record."""
    if not found:
        raise InvalidArgument(_BAD_CURSOR)
    valid_from, seq = found[0]
    return int(valid_from), int(seq)


def paged(stmt: Select[Any], after: tuple[int, int] | None, limit: int | None) -> Select[Any]:
    """``stmt`` (a :data:`ledger.record_rows.SELECT_RECORDS` query) ordered by sort key, after ``after``, one row
    more than ``limit`` (to know whether another page follows)."""
    stmt = stmt.order_by(M.valid_from, M.seq)
    if after is not None:
        stmt = stmt.where(tuple_(M.valid_from, M.seq) > tuple_(*after))
    return stmt if limit is None else stmt.limit(limit + 1)


def page_of(found: list[tuple[Any, ...]], listing: str, scope_key: str, filters: Filters, limit: int | None) -> Page:
    """The page from rows in :data:`ledger.record_rows.NAMES` order (``seq`` first)."""
    more = limit is not None and len(found) > limit
    kept = found[:limit] if more else found
    records = [rowsmod.record_from_tuple(row) for row in kept]
    if not more:
        return Page(records, None)
    return Page(records, encode_cursor(listing, scope_key, filters, records[-1].id))
