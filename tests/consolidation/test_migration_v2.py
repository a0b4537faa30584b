"""Migration 0006_consolidation_v2: new settings columns, the pending-forget marker, the wider vocabulary."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, inspect, text

from ledger.db import current_revision, head_revision, make_engine, upgrade

REVISION = "0006_consolidation_v2"


@pytest.fixture
def db_url(empty_db_url: str) -> str:
    """An empty database on each backend: these tests run the migrations themselves."""
    return empty_db_url


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    eng = make_engine(db_url)
    yield eng
    eng.dispose()


def settings_row(scope: str, ops: list[str]) -> dict[str, object]:
    return {
        "s": scope, "ops": json.dumps(ops), "mode": "apply", "d": 30.0, "h": "offline", "m": "offline",
        "cap": 60.0, "tok": 4096, "b": 5_000_000, "t": 1,
    }  # fmt: skip


def test_upgrade_adds_the_columns_and_widens_default_vocabularies(engine: Engine) -> None:
    # Given a database before the revision, with one scope on the old default vocabulary and one narrowed
    upgrade(engine, "0003_consolidation")
    with engine.begin() as conn:
        for scope, ops in (("account:a", ["merge", "correct", "keep"]), ("account:b", ["keep"])):
            conn.execute(
                text(
                    "INSERT INTO consolidation_settings (scope_key, mode, allowed_ops, debounce_s, harness, model, "
                    "wall_clock_cap_s, max_output_tokens, spend_budget_micro_usd, created_at, updated_at) "
                    "VALUES (:s, :mode, :ops, :d, :h, :m, :cap, :tok, :b, :t, :t)"
                ),
                settings_row(scope, ops),
            )

    # When it is upgraded to head
    upgrade(engine)

    # Then the new columns have their defaults, and only the old default vocabulary grew
    assert current_revision(engine) == head_revision()
    columns = {c["name"] for c in inspect(engine).get_columns("consolidation_settings")}
    assert {"allow_removal", "max_prompt_chars", "rotation_cursor"} <= columns
    assert "proposed_action" in {c["name"] for c in inspect(engine).get_columns("memory_records")}
    with engine.connect() as conn:
        rows = dict(
            conn.execute(text("SELECT scope_key, allowed_ops FROM consolidation_settings ORDER BY scope_key")).all()
        )
        extra = conn.execute(
            text("SELECT allow_removal, max_prompt_chars, rotation_cursor FROM consolidation_settings")
        )
        assert {tuple(r) for r in extra} == {(False, 16000, None)}
    assert json.loads(rows["account:a"]) == ["merge", "correct", "expire", "group", "retire", "keep"]
    assert json.loads(rows["account:b"]) == ["keep"]


def test_downgrade_and_upgrade_again(engine: Engine) -> None:
    upgrade(engine)
    from alembic import command

    from ledger.db import alembic_config

    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0003_consolidation")
    assert "allow_removal" not in {c["name"] for c in inspect(engine).get_columns("consolidation_settings")}
    upgrade(engine)
    assert current_revision(engine) == head_revision()
