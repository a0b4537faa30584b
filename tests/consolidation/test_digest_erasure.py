"""The extraction digests' erase hook (the ``memledger.erasure`` entry point) in the programs that forget.

A forget never fails or half-applies because of the hook, and never skips it without saying so: on a
database of the ledger's tables alone there are no digests to scrub; a hook that cannot be loaded leaves
the forget to erase the records and logs, at each forget, what it could not scrub (docs/extraction.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from importlib.metadata import EntryPoint

import pytest
from sqlalchemy import insert, select, text

from consolidation.extraction.digest import DigestMessage, chars, dumps, loads
from consolidation.tables import DIGESTS
from ledger import Ledger, open_ledger
from ledger import policy as policy_module
from tests.consolidation.conftest import at


def put_digest(led: Ledger, *texts: str) -> None:
    """A pending digest of the ledger's scope holding ``texts`` as user messages."""
    messages = [DigestMessage(f"m{i}", "user", said) for i, said in enumerate(texts)]
    row = {"scope_key": led.scope_key, "session_id": "s1", "digest_id": "d1", "messages": dumps(messages)}
    with led.engine.begin() as conn:
        conn.execute(insert(DIGESTS).values(**row, chars=chars(messages), next_seq=len(texts), updated_at=0))


def digest_texts(led: Ledger) -> list[str]:
    with led.engine.connect() as conn:
        stored = conn.execute(select(DIGESTS.c.messages).where(DIGESTS.c.scope_key == led.scope_key)).scalar_one()
    return [m.text for m in loads(stored)]


@pytest.fixture
def unloadable_hook(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The ``memledger.erasure`` entry points as an install whose hook's module cannot be imported has them."""
    broken = EntryPoint("extraction_digests", "consolidation.no_such_module:scrub_digests", policy_module.ERASURE_GROUP)
    monkeypatch.setattr(policy_module, "entry_points", lambda group: [broken])
    policy_module.package_erase_hooks.cache_clear()
    yield
    policy_module.package_erase_hooks.cache_clear()


def test_a_forget_on_a_database_of_the_ledgers_tables_alone_erases_the_record(empty_db_url: str) -> None:
    # Given a ledger whose database has no table of extraction's (the ledger's tables alone)
    led = open_ledger(empty_db_url, migrate=True)
    try:
        with led.engine.begin() as conn:
            conn.execute(text("DROP TABLE extraction_digests"))
        pin = led.save("my wombat xylograph locker", now=at(1))
        # When it is forgotten
        forgotten = led.delete(pin.id, now=at(2))
        # Then the forget is done: the record's body is erased (there is no digest to scrub)
        assert forgotten.body is None and led.get(pin.id).body is None
    finally:
        led.close()


@pytest.mark.usefixtures("unloadable_hook")
def test_a_hook_that_cannot_be_loaded_leaves_the_forget_whole_and_says_so_at_each_forget(
    led: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    # Given an install whose extraction erase hook cannot be imported
    pins = [led.save(f"my wombat xylograph locker number {n}", now=at(1)) for n in range(2)]
    # When both are forgotten
    with caplog.at_level(logging.ERROR, logger=policy_module.__name__):
        for n, pin in enumerate(pins):
            led.delete(pin.id, now=at(2 + n))
    # Then each forget erased its record, and each said which record's derived text it could not scrub
    assert [led.get(p.id).body for p in pins] == [None, None]
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR and "not scrubbed" in r.getMessage()]
    assert [[p.id in line for p in pins] for line in said] == [[True, False], [False, True]], said


def test_a_body_that_the_erased_mark_contains_erases_its_quote_only(led: Ledger) -> None:
    # Given a digest message quoting, among other things, a pin whose body is a word of the mark itself
    put_digest(led, "Erased the old backups on Monday; the wombat stays.", "nothing of it here")
    pin = led.save("Erased", now=at(1))
    # When the pin is forgotten
    led.delete(pin.id, now=at(2))
    # Then its quote is erased, and the rest of the message is kept
    assert digest_texts(led) == ["[erased] the old backups on Monday; the wombat stays.", "nothing of it here"]


def test_a_quote_found_only_under_case_folding_still_erases_the_whole_message(
    make_ledger: Callable[..., Ledger],
) -> None:
    # Given a message that quotes a pin only case-folded ("STRASSE" for "Straße"), beside an earlier mark
    led = make_ledger()
    put_digest(led, "[erased] and GROSSE STRASSE 12", "kept")
    pin = led.save("Große Straße 12", now=at(1))
    # When the pin is forgotten
    led.delete(pin.id, now=at(2))
    # Then that message is erased whole, the other kept
    assert digest_texts(led) == ["[erased]", "kept"]
