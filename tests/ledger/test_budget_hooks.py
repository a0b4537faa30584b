"""Ledger hooks for consolidation v2: budget hooks, an expiry set on an active record, a pending forget."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ledger import BudgetExceeded, InvalidTransition, Ledger
from ledger.models import Status
from ledger.tx import Transaction
from tests.conftest import T0

SCOPE = "account:local"


def at(seconds: float):  # type: ignore[no-untyped-def]
    return T0 + timedelta(seconds=seconds)


def test_the_save_that_fills_the_scope_and_a_refused_save_call_the_hook(led: Ledger) -> None:
    calls: list[tuple[str, int]] = []

    def hook(tx: Transaction) -> str | None:
        calls.append((tx.scope_key, tx.usage().held))
        return "Help is on the way."

    led.set_budget_hook("test", hook)
    led.set_budget(SCOPE, 2)
    led.save("one", now=at(1))
    assert calls == []
    led.save("two", now=at(2))  # takes the last slot: called inside that transaction, before the insert
    assert calls == [(SCOPE, 1)]

    with pytest.raises(BudgetExceeded, match=r"Help is on the way\.") as refused:
        led.save("three", now=at(3))

    assert refused.value.budget == 2 and refused.value.held == 2
    assert calls[-1] == (SCOPE, 2) and [r.body for r in led.list(SCOPE, now=at(4))] == ["one", "two"]
    led.set_budget_hook("test", None)
    with pytest.raises(BudgetExceeded) as again:
        led.save("three", now=at(5))
    assert "Help" not in str(again.value)


def test_a_hook_that_says_nothing_leaves_the_refusal_as_it_was(led: Ledger) -> None:
    led.set_budget_hook("quiet", lambda tx: None)
    led.set_budget(SCOPE, 0)

    with pytest.raises(BudgetExceeded) as refused:
        led.save("one", now=at(1))

    assert str(refused.value).endswith("or raise the budget.")


def test_set_expiry_keeps_an_earlier_one_and_refuses_what_is_not_active(led: Ledger) -> None:
    pin = led.save("pin", now=at(1))
    soon = led.save("soon", expires_at=at(60), now=at(1))

    with led.transaction(SCOPE, now=at(2)) as tx:
        assert tx.set_expiry(pin.id, at(3600)).expires_at == at(3600)
        assert tx.set_expiry(soon.id, at(3600)).expires_at == at(60)
    edited = led.save("pin, edited", supersedes=pin.id, now=at(3))

    with pytest.raises(InvalidTransition), led.transaction(SCOPE, now=at(4)) as tx:
        tx.set_expiry(pin.id, at(7200))
    assert led.get(edited.id).expires_at is None


def test_a_pending_forget_forgets_on_accept_and_nothing_on_reject(led: Ledger) -> None:
    keep, drop = led.save("keep me", now=at(1)), led.save("drop me", now=at(1))
    with led.transaction(SCOPE, now=at(2)) as tx:
        spared = tx.propose_forget(keep.id, rationale="maybe")
        forget = tx.propose_forget(drop.id)
    assert spared.status == forget.status == Status.PROPOSED and "drop me" not in (forget.body or "")

    led.reject(spared.id, now=at(3))
    done = led.accept(forget.id, now=at(4))

    assert led.get(keep.id).status == Status.ACTIVE
    assert led.get(drop.id).status == Status.DELETED and led.get(drop.id).body is None
    assert done.status == Status.DELETED and led.proposals(SCOPE) == []
