"""Records built in memory, for tests of code that reads records without a ledger (the gate, the packet)."""

from __future__ import annotations

from ledger import Kind, MemoryRecord, Provenance, Status
from tests.conftest import T0


def active_record(rid: str, *, scope_key: str = "account:local", **fields: object) -> MemoryRecord:
    """An active, user-stated fact ``rid`` of ``scope_key``, valid and written at ``T0``; ``fields`` override."""
    record = MemoryRecord(
        id=rid,
        scope_key=scope_key,
        kind=Kind.FACT,
        body=f"body {rid}",
        provenance=Provenance.USER_EXPLICIT,
        status=Status.ACTIVE,
        source_session_id=None,
        supersedes=[],
        superseded_by=None,
        confidence_bps=None,
        rationale=None,
        valid_from=T0,
        valid_to=None,
        expires_at=None,
        conflict_group=None,
        created_at=T0,
        updated_at=T0,
    )
    return record.model_copy(update=fields)
