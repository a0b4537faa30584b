"""Consolidation's tables and the types the API hands out inherit one statement of each field, and a value read
back from the database equals the one validation builds from the same fields."""

from __future__ import annotations

from datetime import timedelta

from consolidation import ConsolidationService, RunState
from consolidation.extraction.models import ExtractionSettings, ExtractionSettingsFields
from consolidation.models import (
    ConsolidationRun,
    ConsolidationRunFields,
    ConsolidationSettings,
    ConsolidationSettingsFields,
    Mode,
    ResponseFormat,
)
from consolidation.tables import ConsolidationRunRow, ConsolidationSettingsRow, ExtractionSettingsRow
from tests.conftest import T0
from tests.consolidation.conftest import SCOPE
from tests.stated_once import assert_stated_once


def test_each_pair_states_its_fields_once() -> None:
    assert_stated_once(
        ConsolidationSettingsFields,
        ConsolidationSettingsRow,
        ConsolidationSettings,
        row_only={"created_at", "updated_at", "rotation_cursor"},
        api_only=set(),
    )
    # The session is "" in the table for a run of no session, None to the API.
    assert_stated_once(
        ConsolidationRunFields, ConsolidationRunRow, ConsolidationRun, row_only={"session_id"}, api_only={"session_id"}
    )
    assert_stated_once(
        ExtractionSettingsFields,
        ExtractionSettingsRow,
        ExtractionSettings,
        row_only={"created_at", "updated_at"},
        api_only=set(),
    )


def test_settings_read_back_equal_the_validated_ones(svc: ConsolidationService) -> None:
    changes = {"mode": "propose", "debounce_s": 5.0, "max_wait_s": None, "allowed_ops": ["merge", "keep"]}
    calls = {"response_format": "json_object", "temperature": 0.5, "context_window_tokens": 8192, "stream": False}
    stored = svc.update_settings(SCOPE, now=T0, **changes, **calls)

    read = svc.settings(SCOPE)

    assert read == stored == ConsolidationSettings.model_validate(read.model_dump())
    assert (read.mode, read.response_format) == (Mode.PROPOSE, ResponseFormat.JSON_OBJECT)
    assert read.model_dump_json() == stored.model_dump_json()
    assert read.to_json() == {**stored.to_json(), "mode": "propose", "response_format": "json_object"}

    extraction = svc.update_extraction_settings(SCOPE, mode="propose", harness="offline", debounce_s=2.0, now=T0)
    read_extraction = svc.extraction_settings(SCOPE)
    assert read_extraction == extraction == ExtractionSettings.model_validate(read_extraction.model_dump())
    assert read_extraction.model_dump_json() == extraction.model_dump_json()


def test_a_run_read_back_equals_the_validated_one(svc: ConsolidationService) -> None:
    svc.led.save("I prefer metric units", now=T0)
    svc.update_settings(SCOPE, mode="apply", harness="offline", debounce_s=0, now=T0)
    svc.update_extraction_settings(SCOPE, mode="propose", harness="offline", debounce_s=0, now=T0)
    svc.notify_turn(SCOPE, session_id="s1", messages=[{"role": "user", "text": "I live in Lisbon"}], now=T0)
    settled = svc.run_due(now=T0 + timedelta(seconds=1))

    read = [svc.get_run(run.id) for run in settled]

    assert {run.job for run in read} == {"consolidate", "extract"}
    for run in read:
        assert run.state == RunState.SETTLED and run.settled_at is not None and run.settled_at.tzinfo is not None
        assert run == ConsolidationRun.model_validate(run.model_dump())
        assert run.session_id == ("s1" if run.job == "extract" else None)
        assert "prompt" not in repr(run) and "answer=" not in repr(run)  # bodies are never shown
    assert read == settled  # as each settlement wrote it
