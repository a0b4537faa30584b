"""The token store writes and reads through the ledger's store, as every other write does."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from ledger import LedgerError, open_ledger
from tests.conftest import T0
from tests.stated_once import assert_stated_once
from worker.http.tokens import ApiToken, ApiTokenFields, ApiTokenRow, TokenStore


def test_a_database_error_in_a_token_write_comes_out_as_a_ledger_error(tmp_path: Path) -> None:
    led = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    try:
        tokens = TokenStore.for_ledger(led)
        made, secret = tokens.create("alice")
        assert tokens.authenticate(secret) == "alice"
        with led.engine.begin() as conn:  # the test breaks the database behind the ledger's back
            conn.execute(text("DROP TABLE api_tokens"))
        with pytest.raises(LedgerError, match="the ledger database refused the operation"):
            tokens.create("bob")
        with pytest.raises(LedgerError, match="the ledger database refused the operation"):
            tokens.revoke(made.id)
    finally:
        led.close()


def test_a_write_outside_any_scope_rolls_back_when_its_block_raises(tmp_path: Path) -> None:
    led = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    try:
        tokens = TokenStore.for_ledger(led)
        tokens.create("alice")
        with pytest.raises(RuntimeError), led.writing() as w:
            w.execute(text("DELETE FROM api_tokens"))
            raise RuntimeError("stop")
        assert [t.account for t in tokens.list()] == ["alice"]
    finally:
        led.close()


def test_a_token_states_its_fields_once_and_reads_back_as_validated(tmp_path: Path) -> None:
    assert_stated_once(ApiTokenFields, ApiTokenRow, ApiToken, row_only={"hash"}, api_only=set())
    led = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    try:
        tokens = TokenStore.for_ledger(led)
        made, _ = tokens.create("alice", now=T0)
        revoked = tokens.revoke(made.id, now=T0 + timedelta(seconds=1))
        [read] = tokens.list("alice")
        assert read == revoked == ApiToken.model_validate(read.model_dump())
        assert read.created_at == T0 and not read.active
        assert read.to_json() == {**made.to_json(), "revokedAt": "2026-01-01T00:00:01.000000Z", "active": False}
    finally:
        led.close()
