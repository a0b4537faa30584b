"""Consolidation's tables: SQLModel classes on the ledger's one metadata (:data:`ledger.schema.METADATA`).

Written and read only by ``consolidation/``, through the ledger's transactions; the migrations that build
them are in the ledger's one Alembic history. Statements are SQLAlchemy Core built from each class's table
(``RUNS``, ``CONSOLIDATION_SETTINGS`` …). A table's fields are stated once, with the types the API hands
out, in the class it inherits (:mod:`consolidation.models`, :mod:`consolidation.extraction.models`); its
own class adds the columns only the table keeps. The ``memledger.tables`` entry point names this module, so Alembic
and the schema tests see these tables without the ledger importing this package.
"""

from __future__ import annotations

from sqlalchemy import CheckConstraint, Index
from sqlmodel import SQLModel

from consolidation.extraction.models import ExtractionSettingsFields
from consolidation.models import ConsolidationRunFields, ConsolidationSettingsFields
from ledger.columns import big_field, int_field, text_field
from ledger.schema import partial_index, table


# Per-scope consolidation settings (written by ``consolidation/`` through a ledger transaction): the fields
# of :class:`ConsolidationSettingsFields`, and what only the table keeps.
class ConsolidationSettingsRow(ConsolidationSettingsFields, table=True):
    __tablename__ = "consolidation_settings"
    __table_args__ = (
        CheckConstraint("mode IN ('off','propose','apply')", name="ck_consolidation_settings_mode"),
        CheckConstraint("debounce_s >= 0", name="ck_consolidation_settings_debounce"),
        CheckConstraint("max_wait_s IS NULL OR max_wait_s >= debounce_s", name="ck_consolidation_settings_wait"),
        CheckConstraint("wall_clock_cap_s > 0", name="ck_consolidation_settings_cap"),
        CheckConstraint("max_output_tokens > 0", name="ck_consolidation_settings_tokens"),
        CheckConstraint("spend_budget_micro_usd >= 0", name="ck_consolidation_settings_budget"),
    )

    created_at: int = big_field()
    updated_at: int = big_field()
    rotation_cursor: str | None = text_field()  # candidate rotation


# One run of either job (docs/consolidation.md): the fields of :class:`ConsolidationRunFields`, and the
# session as stored.
class ConsolidationRunRow(ConsolidationRunFields, table=True):
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

    # An extraction run's session ("" for a consolidation run, which the API hands out as None).
    session_id: str = text_field(default="")


# Extraction settings per scope: the fields of :class:`ExtractionSettingsFields`, and when they were set.
class ExtractionSettingsRow(ExtractionSettingsFields, table=True):
    __tablename__ = "extraction_settings"
    __table_args__ = (
        CheckConstraint("mode IN ('off','propose')", name="ck_extraction_settings_mode"),
        CheckConstraint("debounce_s >= 0", name="ck_extraction_settings_debounce"),
    )

    created_at: int = big_field()
    updated_at: int = big_field()


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
