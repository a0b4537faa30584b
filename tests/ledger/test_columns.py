"""ledger.columns and the classes built with it: each field stated once, and read back as validation would build it."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlmodel import SQLModel

from ledger import Kind, LedgerEvent, MemoryRecord, Provenance, Status, SweepStatus
from ledger.audit import PacketAudit
from ledger.instants import from_micros
from ledger.models import MemoryRecordFields, PacketAuditFields
from ledger.record_rows import NAMES, record_from_tuple
from ledger.schema import (
    EVENTS,
    PACKET_AUDITS,
    RECORDS,
    SWEEPS,
    LedgerEventRow,
    MemoryRecordRow,
    OpsSweep,
    PacketAuditRow,
)

# Each API class, the class that states its fields, and the table class that inherits them.
PAIRS: list[tuple[type[SQLModel], type[SQLModel], type[SQLModel]]] = [
    (MemoryRecord, MemoryRecordFields, MemoryRecordRow),
    (LedgerEvent, LedgerEvent, LedgerEventRow),
    (SweepStatus, SweepStatus, OpsSweep),
    (PacketAudit, PacketAuditFields, PacketAuditRow),
]


def _own(model: type[SQLModel]) -> set[str]:
    """The fields a class states itself (not those it inherits)."""
    bases = [base for base in model.__mro__[1:] if issubclass(base, SQLModel)]
    inherited: set[str] = set().union(*(base.model_fields for base in bases))
    return set(model.model_fields) - inherited


def test_the_api_class_and_the_table_inherit_their_fields_from_one_class() -> None:
    for api, fields, row in PAIRS:
        assert issubclass(api, fields) and issubclass(row, fields)
        # Neither states again a field the class of fields states (where the API class is not that class).
        assert api is fields or not (_own(api) & set(fields.model_fields)), api
        assert not (_own(row) & set(fields.model_fields)), row
    # The table's columns are those fields and the table's own; the record's own field is derived from one.
    assert {c.name for c in RECORDS.c} == set(MemoryRecordFields.model_fields) | {"seq", "erased_at", "proposed_action"}
    assert _own(MemoryRecord) == {"erased"}
    assert [c.name for c in EVENTS.c] == list(LedgerEvent.model_fields)
    assert [c.name for c in SWEEPS.c] == list(SweepStatus.model_fields)
    assert [c.name for c in PACKET_AUDITS.c] == list(PacketAuditFields.model_fields)


def test_an_instant_is_a_datetime_to_the_api_and_microseconds_in_the_table() -> None:
    for name in ("valid_from", "valid_to", "expires_at", "created_at", "updated_at"):
        assert str(RECORDS.c[name].type) == "BIGINT"
        assert datetime in _types(MemoryRecord, name)
    assert str(RECORDS.c["supersedes"].type) == "TEXT"


def _types(model: type[SQLModel], name: str) -> set[object]:
    annotation = model.model_fields[name].annotation
    return set(getattr(annotation, "__args__", (annotation,)))


_MICROS = st.integers(min_value=0, max_value=253_402_300_799_999_999)  # the epoch to the end of 9999
_TEXT = st.text(max_size=20)
_ROWS = st.fixed_dictionaries(
    {
        "seq": st.integers(min_value=1, max_value=10**9),
        "id": _TEXT,
        "scope_key": _TEXT,
        "kind": st.sampled_from([k.value for k in Kind]),
        "body": st.none() | _TEXT,
        "provenance": st.sampled_from([p.value for p in Provenance]),
        "status": st.sampled_from([s.value for s in Status]),
        "source_session_id": st.none() | _TEXT,
        "supersedes": st.lists(_TEXT, max_size=3).map(json.dumps),
        "superseded_by": st.none() | _TEXT,
        "confidence_bps": st.none() | st.integers(min_value=0, max_value=10_000),
        "rationale": st.none() | _TEXT,
        "valid_from": _MICROS,
        "valid_to": st.none() | _MICROS,
        "expires_at": st.none() | _MICROS,
        "conflict_group": st.none() | _TEXT,
        "erased_at": st.none() | _MICROS,
        "created_at": _MICROS,
        "updated_at": _MICROS,
    }
)


@given(_ROWS)
def test_a_record_read_back_unchecked_equals_the_record_validation_builds(row: dict[str, object]) -> None:
    # Given a row as the table holds it (instants in microseconds, the ids' list as JSON)
    read = record_from_tuple([row[name] for name in NAMES])
    # When the same values are validated into a MemoryRecord
    values = {name: row[name] for name in MemoryRecordFields.model_fields}
    for name in ("valid_from", "valid_to", "expires_at", "created_at", "updated_at"):
        values[name] = None if row[name] is None else from_micros(int(str(row[name])))
    values["supersedes"] = json.loads(str(row["supersedes"]))
    validated = MemoryRecord.model_validate({**values, "erased": row["erased_at"] is not None})
    # Then the two are equal, field by field and as wholes, with the same types
    assert read == validated
    assert read.model_dump() == validated.model_dump()
    assert type(read.kind) is Kind and type(read.status) is Status and type(read.provenance) is Provenance
    assert read.model_fields_set == validated.model_fields_set


def test_a_record_handed_out_cannot_be_changed_in_place() -> None:
    row = dict.fromkeys(NAMES)
    row.update(seq=1, id="mem_1", scope_key="account:local", kind="fact", body="b", provenance="user_explicit")
    row.update(status="active", supersedes="[]", valid_from=0, created_at=0, updated_at=0)
    record = record_from_tuple([row[name] for name in NAMES])
    with pytest.raises(ValueError, match="frozen"):
        record.body = "changed"  # type: ignore[misc]
    assert record.body == "b"
    assert record.model_copy(update={"body": "c"}).body == "c" and record.body == "b"
