"""Keyword options shared by several methods, stated once.

:meth:`ledger.Ledger.save` and :meth:`ledger.Ledger.propose` forward theirs to
:meth:`ledger.tx.Transaction.save` and :meth:`ledger.tx.Transaction.propose`, which give each its
default and validate it; ``list_page`` and ``proposals_page`` take the same :class:`PageOptions`.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TypedDict

from ledger.models import Kind, Provenance


class SaveOptions(TypedDict, total=False):
    """A save's options (every one may be left out)."""

    kind: Kind | str | None  # default: the replaced record's kind, else fact
    supersedes: str | None  # the id of the active record this edits
    expires_at: datetime | None
    conflict_group: str | None
    source_session_id: str | None
    request_id: str | None  # the client's key: the same save sent again returns the record it wrote


class ProposeOptions(TypedDict, total=False):
    """A proposal's options (every one may be left out)."""

    kind: Kind | str  # default: fact
    confidence_bps: int | None
    rationale: str | None
    source_session_id: str | None
    conflict_group: str | None
    expires_at: datetime | None
    supersedes: Iterable[str] | str  # the ids it closes when accepted
    provenance: Provenance | str  # default: model_proposal
    run_id: str | None


class PageOptions(TypedDict, total=False):
    """A page's options (every one may be left out)."""

    limit: int | None  # 1 to 1000; left out, the whole list
    cursor: str | None  # the previous page's next cursor
    kind: str | None
    provenance: str | None
    conflict_group: str | None
    now: datetime | None  # the instant the page is read at (default: the clock)
