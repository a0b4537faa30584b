"""The keyword options of a save and a proposal, stated once.

:meth:`ledger.Ledger.save` and :meth:`ledger.Ledger.propose` forward them to
:meth:`ledger.tx.Transaction.save` and :meth:`ledger.tx.Transaction.propose`, which give each its
default and validate it.
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
