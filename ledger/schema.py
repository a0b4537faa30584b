"""The tables: SQLModel classes on one metadata (:data:`METADATA`), the one schema Alembic is checked against.

Each package states its own tables as SQLModel classes: the ledger's are below, consolidation's and the
worker's are in those packages. A class registers its table on :data:`METADATA` when its module is imported;
:func:`load_every_table` imports every package's tables (named by the ``memledger.tables`` entry points, since
the ledger imports no other package), for Alembic and for the tests that compare it with the migrations.

Queries are SQLAlchemy Core built from each class's table (:func:`table`: ``RECORDS = table(MemoryRecordRow)``),
never through the ORM: a row costs what a tuple costs. Storage keeps instants as integer microseconds since the
epoch; the domain objects they are read into are in :mod:`ledger.models`.
"""

from __future__ import annotations

from enum import StrEnum
from importlib.metadata import entry_points

from sqlalchemy import (
    CheckConstraint,
    Index,
    MetaData,
    Table,
    text,
)
from sqlmodel import SQLModel

from ledger.columns import big_field, bool_field, int_field, serial_field, text_field
from ledger.models import (
    Kind,
    LedgerEvent,
    MemoryRecordFields,
    PacketAuditFields,
    Provenance,
    Status,
    SweepStatus,
)

# Every table of every package (and so what Alembic compares the migrations against). Its index naming
# convention (``ix_%(column_0_label)s``) is the one the tables were first created with.
METADATA: MetaData = SQLModel.metadata
# The entry-point group naming the modules that hold other packages' tables (pyproject.toml).
TABLES_GROUP = "memledger.tables"
# A partial index's predicate, in its ``info`` (:func:`partial_index`).
_PARTIAL = "memledger_where"


def load_every_table() -> MetaData:
    """:data:`METADATA` with every package's tables on it: the modules the ``memledger.tables`` entry points
    name, imported, and each partial index's predicate given to PostgreSQL too (:func:`partial_index`): what
    creates or compares the schema (Alembic, the schema tests) takes the metadata from here. Idempotent."""
    for entry in entry_points(group=TABLES_GROUP):
        entry.load()
    for each in METADATA.tables.values():
        for index in each.indexes:
            where = index.info.get(_PARTIAL)
            if where is not None:
                index.dialect_kwargs["postgresql_where"] = text(where)
    return METADATA


def table(model: type[SQLModel]) -> Table:
    """The Core table of a SQLModel table class, to build statements from."""
    found: Table = model.__table__  # type: ignore[attr-defined]
    return found


def partial_index(name: str, *columns: str, where: str, unique: bool = False) -> Index:
    """A partial index, the same on both databases. Naming a PostgreSQL option loads SQLAlchemy's PostgreSQL
    dialect (about 0.03 s), which a command on SQLite never needs: :func:`load_every_table` adds PostgreSQL's
    ``where`` (no statement reads it, only the schema's DDL)."""
    return Index(name, *columns, unique=unique, sqlite_where=text(where), info={_PARTIAL: where})


def one_of(column: str, values: type[StrEnum] | tuple[str, ...]) -> str:
    """A CHECK's ``column IN (...)`` over an enum's values (or the names given)."""
    names = values if isinstance(values, tuple) else tuple(v.value for v in values)
    return f"{column} IN ({', '.join(repr(v) for v in names)})"


# One row of ``memory_records``. ``seq`` is the FTS rowid; ``id`` is public.
class MemoryRecordRow(MemoryRecordFields, table=True):
    __tablename__ = "memory_records"
    __table_args__ = (
        CheckConstraint(one_of("kind", Kind), name="ck_memory_records_kind"),
        CheckConstraint(one_of("provenance", Provenance), name="ck_memory_records_provenance"),
        CheckConstraint(one_of("status", Status), name="ck_memory_records_status"),
        CheckConstraint("valid_to IS NULL OR valid_to >= valid_from", name="ck_memory_records_interval"),
        CheckConstraint("(status = 'active') = (valid_to IS NULL)", name="ck_memory_records_active_open"),
        CheckConstraint(
            "status NOT IN ('proposed','rejected') OR valid_to = valid_from", name="ck_memory_records_proposal_empty"
        ),
        CheckConstraint(
            "confidence_bps IS NULL OR (confidence_bps BETWEEN 0 AND 10000)", name="ck_memory_records_confidence"
        ),
        CheckConstraint("body IS NOT NULL OR erased_at IS NOT NULL", name="ck_memory_records_body_or_erased"),
        CheckConstraint("erased_at IS NULL OR status IN ('deleted','superseded')", name="ck_memory_records_erased"),
        CheckConstraint("status <> 'superseded' OR superseded_by IS NOT NULL", name="ck_memory_records_successor"),
        # One active member per conflict group (docs/ledger.md).
        partial_index(
            "ux_memory_records_conflict_active",
            "scope_key",
            "conflict_group",
            where="status = 'active' AND conflict_group IS NOT NULL",
            unique=True,
        ),
        # As-of reads: open records (valid_to IS NULL) and those closed after the instant.
        Index("ix_memory_records_asof", "scope_key", "valid_to", "valid_from"),
        # By scope and status: PostgreSQL's alone (ledger/store/postgres_ddl.py). On SQLite the open records are found
        # through ix_memory_records_asof (valid_to IS NULL) and proposals through ix_memory_records_proposed
        # (ledger/store/sqlite_ddl.py), so a save writes one index entry fewer and an edit three.
        # The sweep: only what can still expire, ordered by when.
        partial_index(
            "ix_memory_records_due", "expires_at", where="status IN ('active','proposed') AND expires_at IS NOT NULL"
        ),
    )

    # The table's own columns, beside the fields a record has (MemoryRecordFields). ``seq`` is the FTS rowid
    # and the order of records written in one instant; ``erased_at`` is read as MemoryRecord.erased.
    seq: int | None = serial_field()
    erased_at: int | None = big_field()
    # 'forget' on a proposal whose acceptance forgets the record it names (consolidation's retire, propose mode).
    proposed_action: str | None = text_field()


# One row per scope; also the lock that serializes a scope's writes.
class ScopeSettings(SQLModel, table=True):
    __tablename__ = "scope_settings"
    __table_args__ = (CheckConstraint("max_records >= 0", name="ck_scope_settings_max_records"),)

    scope_key: str = text_field(primary_key=True)
    max_records: int = int_field()
    created_at: int = big_field()
    updated_at: int = big_field()
    # The scope's latest write instant: the next write's instant is strictly after it.
    latest_at: int | None = big_field()
    # How many of its records are active and proposed: kept by triggers on memory_records (0009).
    active_count: int = big_field(default=0)
    proposed_count: int = big_field(default=0)
    # The latest valid_to of its records, or later (it never moves back): kept by triggers on memory_records
    # (0018), so a write whose clock was read before its lock sees in this row whether a record was closed after
    # that reading.
    latest_closed_at: int | None = big_field()


# Append-only event log. Never holds a body. Every read names the scope: one index (0017 dropped the record_id one).
class LedgerEventRow(LedgerEvent, table=True):
    __tablename__ = "ledger_events"
    __table_args__ = (Index("ix_ledger_events_scope", "scope_key", "seq"),)


# Text derived from records (a run's prompt, a packet audit, a digest), by the record ids it contains.
#
# ``owner`` names a table the ledger knows, ``key`` that table's primary key value, and
# ``columns`` (a JSON list) the columns that hold the derived text: forgetting one of
# ``record_id``'s chain clears those columns of that row, in the same scope
# (see :meth:`ledger.tx.Transaction.register_derived`).
class DerivedText(SQLModel, table=True):
    __tablename__ = "derived_texts"

    seq: int | None = serial_field()
    owner: str = text_field()
    key: str = text_field()
    record_id: str = text_field(index=True)
    columns: str = text_field()
    created_at: int = big_field()
    # The scope of the records it quotes (and of the owner's row): every statement names it.
    scope_key: str = text_field()


# The request ids of saves (docs/ledger.md, "Retrying a save"): one row per record a save with a ``request_id``
# wrote, so that the same save sent again in the scope returns that record instead of writing another.
#
# ``fingerprint`` is the SHA-256 of the save's arguments (a retry with other arguments is refused); forgetting
# the record sets it to NULL, since it is derived from the body.
class SaveRequest(SQLModel, table=True):
    __tablename__ = "save_requests"
    __table_args__ = (Index("ix_save_requests_request", "scope_key", "request_id", unique=True),)

    record_id: str = text_field(primary_key=True)
    scope_key: str = text_field()
    request_id: str = text_field()
    fingerprint: str | None = text_field()
    created_at: int = big_field()


# The expiry sweep's last run, one row per sweep name (``expiry``), so a stopped cron shows.
#
# ``last_now`` is the instant swept to (``--now``, else the clock); ``last_started_at`` and
# ``last_finished_at`` are the ledger clock's readings around the run. ``runs`` and
# ``expired_total`` only grow.
class OpsSweep(SweepStatus, table=True):
    __tablename__ = "ops_sweep"
    __table_args__ = (
        CheckConstraint("last_expired >= 0 AND runs >= 1 AND expired_total >= 0", name="ck_ops_sweep_counts"),
    )


# The packet audit (docs/packet.md): one row per session, replaced when its packet is built again.
#
# ``selected`` is a JSON list of ``{id, kind, reason, body}`` (the body as sent, frozen;
# null once the record is forgotten); ``excluded`` a JSON list of ``{id, code}``.
class PacketAuditRow(PacketAuditFields, table=True):
    __tablename__ = "packet_audits"


# The injection switch per scope; no row means on (the default).
class MemoryInjection(SQLModel, table=True):
    __tablename__ = "memory_injection"

    scope_key: str = text_field(primary_key=True)
    enabled: bool = bool_field()
    updated_at: int = big_field()


RECORDS = table(MemoryRecordRow)
SCOPES = table(ScopeSettings)
EVENTS = table(LedgerEventRow)
DERIVED = table(DerivedText)
SAVE_REQUESTS = table(SaveRequest)
SWEEPS = table(OpsSweep)
PACKET_AUDITS = table(PacketAuditRow)
INJECTION = table(MemoryInjection)

# The columns of memory_records a MemoryRecord is built from: ``seq``, its fields, with ``erased_at`` before
# ``created_at`` (the order the tables were first created in, and the one the PostgreSQL write functions take
# their arguments in); not those the write paths keep for themselves (``proposed_action``).
# ``ledger.record_rows`` reads and writes records in this order.
_FIELDS = tuple(MemoryRecordFields.model_fields)
_CREATED = _FIELDS.index("created_at")
RECORD_NAMES = ("seq", *_FIELDS[:_CREATED], "erased_at", *_FIELDS[_CREATED:])
