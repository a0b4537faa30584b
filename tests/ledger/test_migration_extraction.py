"""Migration 0007_extraction_packet: its tables match the declared tables, it keeps existing runs
(their job is ``consolidate``), and it downgrades and upgrades again cleanly."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from alembic import command
from sqlalchemy import Engine, inspect, text

from consolidation.tables import DIGESTS, EXTRACTION_SETTINGS
from ledger.db import alembic_config, current_revision, head_revision, make_engine, upgrade
from ledger.schema import INJECTION, PACKET_AUDITS

REVISION = "0007_extraction_packet"
TABLES = (PACKET_AUDITS, INJECTION, EXTRACTION_SETTINGS, DIGESTS)


@pytest.fixture
def db_url(empty_db_url: str) -> str:
    """An empty database on each backend: these tests run the migrations themselves."""
    return empty_db_url


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    eng = make_engine(db_url)
    yield eng
    eng.dispose()


def _downgrade(engine: Engine, revision: str) -> None:
    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)


def test_the_tables_match_their_declarations(engine: Engine) -> None:
    upgrade(engine)
    found = inspect(engine)
    for table in TABLES:
        columns = {c["name"]: c for c in found.get_columns(table.name)}
        assert set(columns) == {c.name for c in table.columns}, table.name
        for column in table.columns:
            assert columns[column.name]["nullable"] == column.nullable, (table.name, column.name)
        assert set(found.get_pk_constraint(table.name)["constrained_columns"]) == {c.name for c in table.primary_key}
    runs = {c["name"] for c in found.get_columns("consolidation_runs")}
    assert {"job", "session_id"} <= runs


def test_existing_runs_become_consolidate_jobs_and_the_revision_round_trips(engine: Engine) -> None:
    # Given a database before this revision with a consolidation run in it
    upgrade(engine, "0006_consolidation_v2")
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO consolidation_runs (id, scope_key, state, turns, created_at, due_at, refusals) "
                "VALUES ('run_old', 'account:local', 'pending', 1, 1, 2, '{}')"
            )
        )
    # When it is upgraded
    upgrade(engine)
    assert current_revision(engine) == head_revision()
    with engine.connect() as conn:
        assert conn.execute(text("SELECT job, session_id FROM consolidation_runs")).one() == ("consolidate", "")
    # Then it downgrades below this revision and comes back
    _downgrade(engine, "0006_consolidation_v2")
    tables = set(inspect(engine).get_table_names())
    assert not tables & {"packet_audits", "memory_injection", "extraction_settings", "extraction_digests"}
    assert "job" not in {c["name"] for c in inspect(engine).get_columns("consolidation_runs")}
    upgrade(engine)
    assert current_revision(engine) == head_revision()
