"""Consolidation's tables: SQLModel classes on the ledger's one metadata (:data:`ledger.schema.METADATA`).

Written and read only by ``consolidation/``, through the ledger's transactions; the migrations that build
them are in the ledger's one Alembic history. Statements are SQLAlchemy Core built from each class's table
(``RUNS``, ``CONSOLIDATION_SETTINGS`` …). The ``memledger.tables`` entry point names this module, so Alembic
and the schema tests see these tables without the ledger importing this package.
"""

from __future__ import annotations

from sqlalchemy import CheckConstraint, Index
from sqlmodel import SQLModel

from ledger.columns import big_field, bool_field, float_field, int_field, text_field
from ledger.schema import partial_index, table


# Per-scope consolidation settings (written by ``consolidation/`` through a ledger transaction).
class ConsolidationSettingsRow(SQLModel, table=True):
    __tablename__ = "consolidation_settings"
    __table_args__ = (
        CheckConstraint("mode IN ('off','propose','apply')", name="ck_consolidation_settings_mode"),
        CheckConstraint("debounce_s >= 0", name="ck_consolidation_settings_debounce"),
        CheckConstraint("max_wait_s IS NULL OR max_wait_s >= debounce_s", name="ck_consolidation_settings_wait"),
        CheckConstraint("wall_clock_cap_s > 0", name="ck_consolidation_settings_cap"),
        CheckConstraint("max_output_tokens > 0", name="ck_consolidation_settings_tokens"),
        CheckConstraint("spend_budget_micro_usd >= 0", name="ck_consolidation_settings_budget"),
    )

    scope_key: str = text_field(primary_key=True)
    mode: str = text_field()
    allowed_ops: str = text_field()
    debounce_s: float = float_field()
    max_wait_s: float | None = float_field()
    harness: str = text_field()
    model: str = text_field()
    wall_clock_cap_s: float = float_field()
    max_output_tokens: int = int_field()
    spend_budget_micro_usd: int = big_field()
    created_at: int = big_field()
    updated_at: int = big_field()
    allow_removal: bool = bool_field(default=False)  # retire passes the gate only when on
    max_prompt_chars: int = int_field(default=16000)
    rotation_cursor: str | None = text_field()  # candidate rotation
    # The model target beyond harness + model: a server of the scope's own, and its own price of the model.
    base_url: str | None = text_field()
    price_in_usd_per_mtok: float | None = float_field()
    price_out_usd_per_mtok: float | None = float_field()
    # How the call to the scope's model is made (the openai harness; docs/consolidation.md, "Models").
    response_format: str = text_field(default="auto")
    temperature: float = float_field(default=0)
    context_window_tokens: int | None = int_field()
    system_role: bool = bool_field(default=True)
    stream: bool = bool_field(default=True)


# One run of either job (docs/consolidation.md). ``prompt``/``answer``/``answer_raw`` hold bodies.
class ConsolidationRunRow(SQLModel, table=True):
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
            "state = 'pending' OR started_at IS NOT NULL OR outcome = 'cancelled'",
            name="ck_consolidation_runs_started",
        ),
        # At most one pending run per scope, job and session (migration 0007), one running per scope.
        partial_index(
            "ux_consolidation_runs_pending", "scope_key", "job", "session_id", where="state = 'pending'", unique=True
        ),
        partial_index("ux_consolidation_runs_running", "scope_key", where="state = 'running'", unique=True),
        partial_index("ix_consolidation_runs_due", "due_at", where="state = 'pending'"),
        Index("ix_consolidation_runs_scope", "scope_key", "created_at"),
    )

    id: str = text_field(primary_key=True)
    scope_key: str = text_field()
    state: str = text_field()
    outcome: str | None = text_field()
    mode: str | None = text_field()
    turns: int = int_field()
    created_at: int = big_field()
    due_at: int = big_field()
    started_at: int | None = big_field()
    settled_at: int | None = big_field()
    harness: str | None = text_field()
    model: str | None = text_field()
    wall_clock_cap_s: float | None = float_field()
    input_tokens: int = big_field(default=0)
    output_tokens: int = big_field(default=0)
    cache_creation_input_tokens: int = big_field(default=0)
    cache_read_input_tokens: int = big_field(default=0)
    spend_micro_usd: int = big_field(default=0)
    model_calls: int = int_field(default=0)
    ops_proposed: int = int_field(default=0)
    ops_applied: int = int_field(default=0)
    ops_refused: int = int_field(default=0)
    refusals: str = text_field(default="{}")
    error: str | None = text_field()
    prompt: str | None = text_field()
    answer: str | None = text_field()
    answer_raw: str | None = text_field()
    answer_stored_at: int | None = big_field()
    # Both jobs share the table (docs/extraction.md): "consolidate" or "extract", and an extraction run's session.
    job: str = text_field(default="consolidate")
    session_id: str = text_field(default="")
    # What a run left waiting for the user (propose mode, extraction), apart from what it applied (migration 0013).
    proposals_written: int = int_field(default=0)


# Extraction settings per scope.
class ExtractionSettingsRow(SQLModel, table=True):
    __tablename__ = "extraction_settings"
    __table_args__ = (
        CheckConstraint("mode IN ('off','propose')", name="ck_extraction_settings_mode"),
        CheckConstraint("debounce_s >= 0", name="ck_extraction_settings_debounce"),
    )

    scope_key: str = text_field(primary_key=True)
    mode: str = text_field()
    harness: str = text_field()
    model: str = text_field()
    debounce_s: float = float_field()
    max_wait_s: float | None = float_field()
    wall_clock_cap_s: float = float_field()
    max_output_tokens: int = int_field()
    created_at: int = big_field()
    updated_at: int = big_field()
    # The model target beyond harness + model: a server of the scope's own, and its own price of the model.
    base_url: str | None = text_field()
    price_in_usd_per_mtok: float | None = float_field()
    price_out_usd_per_mtok: float | None = float_field()


# A session's bounded digest of recent messages (JSON list); taken into its run at claim.
#
# ``digest_id`` is the single-column key the derived-text registry names (forgetting a
# record a message quoted sets ``messages`` to NULL).
class ExtractionDigestRow(SQLModel, table=True):
    __tablename__ = "extraction_digests"

    scope_key: str = text_field(primary_key=True)
    session_id: str = text_field(primary_key=True)
    digest_id: str = text_field(unique=True)
    messages: str | None = text_field()
    chars: int = int_field()
    next_seq: int = int_field()
    updated_at: int = big_field()


CONSOLIDATION_SETTINGS = table(ConsolidationSettingsRow)
RUNS = table(ConsolidationRunRow)
EXTRACTION_SETTINGS = table(ExtractionSettingsRow)
DIGESTS = table(ExtractionDigestRow)
