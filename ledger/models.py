"""Tables (SQLModel) and the domain objects the API hands out.

Storage keeps instants as integer microseconds since the epoch; the domain
objects (:class:`MemoryRecord`, :class:`LedgerEvent`) carry aware UTC datetimes.
The allowed lifecycle transitions live in :data:`TRANSITIONS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from sqlalchemy import BigInteger, Boolean, CheckConstraint, Column, Float, Index, Integer, Table, Text, false, text
from sqlmodel import Field, SQLModel


class Kind(StrEnum):
    PREFERENCE = "preference"
    FACT = "fact"
    DECISION = "decision"
    CONSTRAINT = "constraint"


class Provenance(StrEnum):
    USER_EXPLICIT = "user_explicit"
    MODEL_PROPOSAL = "model_proposal"
    MODEL_CONSOLIDATION = "model_consolidation"


class Status(StrEnum):
    ACTIVE = "active"
    PROPOSED = "proposed"
    REJECTED = "rejected"
    SUPERSEDED = "superseded"
    EXPIRED = "expired"
    DELETED = "deleted"


# Which status may move to which; every write path checks against this table.
TRANSITIONS: dict[Status, frozenset[Status]] = {
    Status.PROPOSED: frozenset({Status.ACTIVE, Status.REJECTED, Status.EXPIRED, Status.DELETED}),
    Status.ACTIVE: frozenset({Status.SUPERSEDED, Status.EXPIRED, Status.DELETED}),
    Status.EXPIRED: frozenset({Status.DELETED}),
    Status.SUPERSEDED: frozenset(),
    Status.REJECTED: frozenset({Status.DELETED}),
    Status.DELETED: frozenset(),
}


class EventKind(StrEnum):
    SAVED = "saved"
    SUPERSEDED = "superseded"
    DELETED = "deleted"
    ERASED = "erased"
    PROPOSED = "proposed"
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    EXPIRED = "expired"
    PROPOSAL_REFUSED = "proposal_refused"
    SAVE_REFUSED = "save_refused"
    BUDGET_SET = "budget_set"
    CONSOLIDATION_OP_APPLIED = "consolidation_op_applied"
    CONSOLIDATION_OP_REFUSED = "consolidation_op_refused"


def _big(*, nullable: bool = False, index: bool = False) -> Column[int]:
    return Column(BigInteger, nullable=nullable, index=index)


def _partial(name: str, *columns: str, where: str, unique: bool = False) -> Index:
    """A partial index, the same on both databases."""
    return Index(name, *columns, unique=unique, sqlite_where=text(where), postgresql_where=text(where))


def _in(column: str, values: type[StrEnum] | tuple[str, ...]) -> str:
    names = values if isinstance(values, tuple) else tuple(v.value for v in values)
    return f"{column} IN ({', '.join(repr(v) for v in names)})"


class MemoryRecordRow(SQLModel, table=True):
    """One row of ``memory_records``. ``seq`` is the FTS rowid; ``id`` is public."""

    __tablename__ = "memory_records"
    __table_args__ = (
        CheckConstraint(_in("kind", Kind), name="ck_memory_records_kind"),
        CheckConstraint(_in("provenance", Provenance), name="ck_memory_records_provenance"),
        CheckConstraint(_in("status", Status), name="ck_memory_records_status"),
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
        # One active member per conflict group (SPEC 3.2.4).
        _partial(
            "ux_memory_records_conflict_active",
            "scope_key",
            "conflict_group",
            where="status = 'active' AND conflict_group IS NOT NULL",
            unique=True,
        ),
        # As-of reads: open records (valid_to IS NULL) and those closed after the instant.
        Index("ix_memory_records_asof", "scope_key", "valid_to", "valid_from"),
        # The active set and the budget count.
        Index("ix_memory_records_scope_status", "scope_key", "status"),
        # The sweep: only what can still expire, ordered by when.
        _partial(
            "ix_memory_records_due", "expires_at", where="status IN ('active','proposed') AND expires_at IS NOT NULL"
        ),
    )

    seq: int | None = Field(default=None, sa_column=Column(Integer, primary_key=True, autoincrement=True))
    id: str = Field(sa_column=Column(Text, nullable=False, unique=True))
    scope_key: str = Field(sa_column=Column(Text, nullable=False))
    kind: str = Field(sa_column=Column(Text, nullable=False))
    body: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    provenance: str = Field(sa_column=Column(Text, nullable=False))
    status: str = Field(sa_column=Column(Text, nullable=False))
    source_session_id: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    supersedes: str = Field(default="[]", sa_column=Column(Text, nullable=False))
    superseded_by: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    confidence_bps: int | None = Field(default=None, sa_column=Column(Integer, nullable=True))
    rationale: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    valid_from: int = Field(sa_column=_big())
    valid_to: int | None = Field(default=None, sa_column=_big(nullable=True))
    expires_at: int | None = Field(default=None, sa_column=_big(nullable=True))
    conflict_group: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    erased_at: int | None = Field(default=None, sa_column=_big(nullable=True))
    created_at: int = Field(sa_column=_big())
    updated_at: int = Field(sa_column=_big())
    # 'forget' on a proposal whose acceptance forgets the record it names (consolidation's retire, propose mode).
    proposed_action: str | None = Field(default=None, sa_column=Column(Text, nullable=True))


class ScopeSettingsRow(SQLModel, table=True):
    """One row per scope; also the lock that serializes a scope's writes."""

    __tablename__ = "scope_settings"
    __table_args__ = (CheckConstraint("max_records >= 0", name="ck_scope_settings_max_records"),)

    scope_key: str = Field(sa_column=Column(Text, primary_key=True))
    max_records: int = Field(sa_column=Column(Integer, nullable=False))
    created_at: int = Field(sa_column=_big())
    updated_at: int = Field(sa_column=_big())
    # The scope's latest write instant: the next write's instant is strictly after it (SPEC 3.1).
    latest_at: int | None = Field(default=None, sa_column=_big(nullable=True))
    # How many of its records are active and proposed: kept by triggers on memory_records (0009).
    active_count: int = Field(default=0, sa_column=Column(BigInteger, nullable=False, server_default="0"))
    proposed_count: int = Field(default=0, sa_column=Column(BigInteger, nullable=False, server_default="0"))


class LedgerEventRow(SQLModel, table=True):
    """Append-only event log. Never holds a body."""

    __tablename__ = "ledger_events"
    __table_args__ = (
        Index("ix_ledger_events_scope", "scope_key", "seq"),
        Index("ix_ledger_events_record", "record_id"),
    )

    seq: int | None = Field(default=None, sa_column=Column(Integer, primary_key=True, autoincrement=True))
    at: int = Field(sa_column=_big())
    scope_key: str = Field(sa_column=Column(Text, nullable=False))
    event: str = Field(sa_column=Column(Text, nullable=False))
    record_id: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    reason: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    run_id: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    detail: str = Field(default="{}", sa_column=Column(Text, nullable=False))


def _zero(kind: type[BigInteger] | type[Integer] = BigInteger) -> Column[int]:
    return Column(kind, nullable=False, server_default="0")


class ConsolidationSettingsRow(SQLModel, table=True):
    """Per-scope consolidation settings (written by ``consolidation/`` through a ledger transaction)."""

    __tablename__ = "consolidation_settings"
    __table_args__ = (
        CheckConstraint("mode IN ('off','propose','apply')", name="ck_consolidation_settings_mode"),
        CheckConstraint("debounce_s >= 0", name="ck_consolidation_settings_debounce"),
        CheckConstraint("max_wait_s IS NULL OR max_wait_s >= debounce_s", name="ck_consolidation_settings_wait"),
        CheckConstraint("wall_clock_cap_s > 0", name="ck_consolidation_settings_cap"),
        CheckConstraint("max_output_tokens > 0", name="ck_consolidation_settings_tokens"),
        CheckConstraint("spend_budget_micro_usd >= 0", name="ck_consolidation_settings_budget"),
    )

    scope_key: str = Field(sa_column=Column(Text, primary_key=True))
    mode: str = Field(sa_column=Column(Text, nullable=False))
    allowed_ops: str = Field(sa_column=Column(Text, nullable=False))
    debounce_s: float = Field(sa_column=Column(Float, nullable=False))
    max_wait_s: float | None = Field(default=None, sa_column=Column(Float, nullable=True))
    harness: str = Field(sa_column=Column(Text, nullable=False))
    model: str = Field(sa_column=Column(Text, nullable=False))
    wall_clock_cap_s: float = Field(sa_column=Column(Float, nullable=False))
    max_output_tokens: int = Field(sa_column=Column(Integer, nullable=False))
    spend_budget_micro_usd: int = Field(sa_column=_big())
    created_at: int = Field(sa_column=_big())
    updated_at: int = Field(sa_column=_big())
    allow_removal: bool = Field(
        default=False, sa_column=Column(Boolean, nullable=False, server_default=false())
    )  # retire passes the gate only when on
    max_prompt_chars: int = Field(default=16_000, sa_column=Column(Integer, nullable=False, server_default="16000"))
    rotation_cursor: str | None = Field(default=None, sa_column=Column(Text, nullable=True))  # candidate rotation
    # The model target beyond harness + model: a server of the scope's own, and its own price of the model.
    base_url: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    price_in_usd_per_mtok: float | None = Field(default=None, sa_column=Column(Float, nullable=True))
    price_out_usd_per_mtok: float | None = Field(default=None, sa_column=Column(Float, nullable=True))


class ConsolidationRunRow(SQLModel, table=True):
    """One consolidation run (SPEC 4.2). ``prompt``/``answer``/``answer_raw`` hold bodies."""

    __tablename__ = "consolidation_runs"
    __table_args__ = (
        CheckConstraint("state IN ('pending','running','settled')", name="ck_consolidation_runs_state"),
        CheckConstraint(
            "(state = 'settled') = (outcome IS NOT NULL) AND (outcome IS NULL OR outcome IN "
            "('applied','proposed','cancelled','skipped_budget','failed','abandoned'))",
            name="ck_consolidation_runs_outcome",
        ),
        CheckConstraint("(state = 'settled') = (settled_at IS NOT NULL)", name="ck_consolidation_runs_settled"),
        CheckConstraint(
            "state = 'pending' OR started_at IS NOT NULL OR outcome = 'cancelled'", name="ck_consolidation_runs_started"
        ),
        # At most one pending run per scope, job and session (migration 0007), one running per scope.
        _partial(
            "ux_consolidation_runs_pending", "scope_key", "job", "session_id", where="state = 'pending'", unique=True
        ),
        _partial("ux_consolidation_runs_running", "scope_key", where="state = 'running'", unique=True),
        _partial("ix_consolidation_runs_due", "due_at", where="state = 'pending'"),
        Index("ix_consolidation_runs_scope", "scope_key", "created_at"),
    )

    id: str = Field(sa_column=Column(Text, primary_key=True))
    scope_key: str = Field(sa_column=Column(Text, nullable=False))
    state: str = Field(sa_column=Column(Text, nullable=False))
    outcome: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    mode: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    turns: int = Field(sa_column=Column(Integer, nullable=False))
    created_at: int = Field(sa_column=_big())
    due_at: int = Field(sa_column=_big())
    started_at: int | None = Field(default=None, sa_column=_big(nullable=True))
    settled_at: int | None = Field(default=None, sa_column=_big(nullable=True))
    harness: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    model: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    wall_clock_cap_s: float | None = Field(default=None, sa_column=Column(Float, nullable=True))
    input_tokens: int = Field(default=0, sa_column=_zero())
    output_tokens: int = Field(default=0, sa_column=_zero())
    cache_creation_input_tokens: int = Field(default=0, sa_column=_zero())
    cache_read_input_tokens: int = Field(default=0, sa_column=_zero())
    spend_micro_usd: int = Field(default=0, sa_column=_zero())
    model_calls: int = Field(default=0, sa_column=_zero(Integer))
    ops_proposed: int = Field(default=0, sa_column=_zero(Integer))
    ops_applied: int = Field(default=0, sa_column=_zero(Integer))
    ops_refused: int = Field(default=0, sa_column=_zero(Integer))
    refusals: str = Field(default="{}", sa_column=Column(Text, nullable=False, server_default="{}"))
    error: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    prompt: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    answer: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    answer_raw: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    answer_stored_at: int | None = Field(default=None, sa_column=_big(nullable=True))
    # Both jobs share the table (SPEC 4.5): "consolidate" or "extract", and an extraction run's session.
    job: str = Field(default="consolidate", sa_column=Column(Text, nullable=False, server_default="consolidate"))
    session_id: str = Field(default="", sa_column=Column(Text, nullable=False, server_default=""))


class DerivedTextRow(SQLModel, table=True):
    """Text derived from records (a run's prompt, a packet audit, a digest), by the record ids it contains.

    ``owner`` names a table the ledger knows, ``key`` that table's primary key value, and
    ``columns`` (a JSON list) the columns that hold the derived text: forgetting one of
    ``record_id``'s chain clears those columns of that row (see :meth:`ledger.tx.Transaction.register_derived`).
    """

    __tablename__ = "derived_texts"

    seq: int | None = Field(default=None, sa_column=Column(Integer, primary_key=True, autoincrement=True))
    owner: str = Field(sa_column=Column(Text, nullable=False))
    key: str = Field(sa_column=Column(Text, nullable=False))
    record_id: str = Field(sa_column=Column(Text, nullable=False, index=True))
    columns: str = Field(sa_column=Column(Text, nullable=False))
    created_at: int = Field(sa_column=_big())


class SweepStatusRow(SQLModel, table=True):
    """The expiry sweep's last run, one row per sweep name (``expiry``), so a stopped cron shows.

    ``last_now`` is the instant swept to (``--now``, else the clock); ``last_started_at`` and
    ``last_finished_at`` are the ledger clock's readings around the run. ``runs`` and
    ``expired_total`` only grow.
    """

    __tablename__ = "ops_sweep"

    name: str = Field(sa_column=Column(Text, primary_key=True))
    last_started_at: int = Field(sa_column=_big())
    last_finished_at: int = Field(sa_column=_big())
    last_now: int = Field(sa_column=_big())
    last_expired: int = Field(sa_column=_big())
    runs: int = Field(sa_column=_big())
    expired_total: int = Field(sa_column=_big())


@dataclass(frozen=True, slots=True)
class SweepStatus:
    """The sweep's last run as :meth:`ledger.Ledger.last_sweep` hands it out."""

    name: str
    last_started_at: datetime
    last_finished_at: datetime
    last_now: datetime
    last_expired: int
    runs: int
    expired_total: int


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """A record as the API hands it out. An erased body reads as ``None``."""

    id: str
    scope_key: str
    kind: Kind
    body: str | None
    provenance: Provenance
    status: Status
    source_session_id: str | None
    supersedes: list[str]
    superseded_by: str | None
    confidence_bps: int | None
    rationale: str | None
    valid_from: datetime
    valid_to: datetime | None
    expires_at: datetime | None
    conflict_group: str | None
    created_at: datetime
    updated_at: datetime
    erased: bool = False

    def effective_end(self) -> datetime | None:
        """``min(valid_to, expires_at)``: where the record stops applying."""
        ends = [e for e in (self.valid_to, self.expires_at) if e is not None]
        return min(ends) if ends else None

    def applies_at(self, instant: datetime) -> bool:
        end = self.effective_end()
        return self.valid_from <= instant and (end is None or instant < end)


@dataclass(frozen=True, slots=True)
class LedgerEvent:
    seq: int
    at: datetime
    scope_key: str
    event: str
    record_id: str | None
    reason: str | None
    run_id: str | None
    detail: dict[str, object] = field(default_factory=dict)


class PacketAuditRow(SQLModel, table=True):
    """The packet audit (SPEC 3.7): one row per session, replaced when its packet is built again.

    ``selected`` is a JSON list of ``{id, kind, reason, body}`` (the body as sent, frozen;
    null once the record is forgotten); ``excluded`` a JSON list of ``{id, code}``.
    """

    __tablename__ = "packet_audits"

    scope_key: str = Field(sa_column=Column(Text, primary_key=True))
    session_id: str = Field(sa_column=Column(Text, primary_key=True))
    built_at: int = Field(sa_column=_big())
    max_chars: int = Field(sa_column=Column(Integer, nullable=False))
    token_estimate: int = Field(sa_column=Column(Integer, nullable=False))
    selected: str = Field(sa_column=Column(Text, nullable=False))
    excluded: str = Field(sa_column=Column(Text, nullable=False))


class MemoryInjectionRow(SQLModel, table=True):
    """The injection switch per scope; no row means on (the default)."""

    __tablename__ = "memory_injection"

    scope_key: str = Field(sa_column=Column(Text, primary_key=True))
    enabled: bool = Field(sa_column=Column(Boolean, nullable=False))
    updated_at: int = Field(sa_column=_big())


class ExtractionSettingsRow(SQLModel, table=True):
    """Extraction settings per scope (used only by ``consolidation/``; same migration chain)."""

    __tablename__ = "extraction_settings"

    scope_key: str = Field(sa_column=Column(Text, primary_key=True))
    mode: str = Field(sa_column=Column(Text, nullable=False))
    harness: str = Field(sa_column=Column(Text, nullable=False))
    model: str = Field(sa_column=Column(Text, nullable=False))
    debounce_s: float = Field(sa_column=Column(Float, nullable=False))
    max_wait_s: float | None = Field(default=None, sa_column=Column(Float, nullable=True))
    wall_clock_cap_s: float = Field(sa_column=Column(Float, nullable=False))
    max_output_tokens: int = Field(sa_column=Column(Integer, nullable=False))
    created_at: int = Field(sa_column=_big())
    updated_at: int = Field(sa_column=_big())
    base_url: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    price_in_usd_per_mtok: float | None = Field(default=None, sa_column=Column(Float, nullable=True))
    price_out_usd_per_mtok: float | None = Field(default=None, sa_column=Column(Float, nullable=True))


class ExtractionDigestRow(SQLModel, table=True):
    """A session's bounded digest of recent messages (JSON list); taken into its run at claim.

    ``digest_id`` is the single-column key the derived-text registry names (forgetting a
    record a message quoted sets ``messages`` to NULL).
    """

    __tablename__ = "extraction_digests"

    scope_key: str = Field(sa_column=Column(Text, primary_key=True))
    session_id: str = Field(sa_column=Column(Text, primary_key=True))
    digest_id: str = Field(sa_column=Column(Text, nullable=False, unique=True))
    messages: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    chars: int = Field(sa_column=Column(Integer, nullable=False))
    next_seq: int = Field(sa_column=Column(Integer, nullable=False))
    updated_at: int = Field(sa_column=_big())


def _table(model: type[SQLModel]) -> Table:
    table = model.__table__  # type: ignore[attr-defined]
    assert isinstance(table, Table)
    return table


# The tables as SQLAlchemy Core sees them: build statements from these (``select(RUNS)...``).
RECORDS = _table(MemoryRecordRow)
SCOPES = _table(ScopeSettingsRow)
EVENTS = _table(LedgerEventRow)
CONSOLIDATION_SETTINGS = _table(ConsolidationSettingsRow)
RUNS = _table(ConsolidationRunRow)
DERIVED = _table(DerivedTextRow)
PACKET_AUDITS = _table(PacketAuditRow)
INJECTION = _table(MemoryInjectionRow)
EXTRACTION_SETTINGS = _table(ExtractionSettingsRow)
DIGESTS = _table(ExtractionDigestRow)
SWEEPS = _table(SweepStatusRow)


# ---------------------------------------------------------------------- API tokens (issue 9, SPEC 5.1)
# The table of worker/tokens.py: it is here so that the one SQLModel metadata (and so Alembic) holds it.
class ApiTokenRow(SQLModel, table=True):
    """One API token: only the SHA-256 of the token is stored; the token itself is shown once."""

    __tablename__ = "api_tokens"

    id: str = Field(sa_column=Column(Text, primary_key=True))
    account: str = Field(sa_column=Column(Text, nullable=False, index=True))
    hash: str = Field(sa_column=Column(Text, nullable=False, unique=True))
    created_at: int = Field(sa_column=_big())
    last_used_at: int | None = Field(default=None, sa_column=_big(nullable=True))
    revoked_at: int | None = Field(default=None, sa_column=_big(nullable=True))


API_TOKENS = _table(ApiTokenRow)
# ---------------------------------------------------------------------- end of API tokens
