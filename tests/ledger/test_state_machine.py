"""A hypothesis state machine against a plain-Python model of the ledger and its invariants (docs/ledger.md).

Random saves, edits, conflict-group saves, deletes, proposals, accepts, rejects, sweeps and
budget changes run over random instants (the same instant as the previous operation, one
microsecond later, exactly at an expiry, just before one). After every step the database
must agree with the model row for row, and every invariant of the ledger must hold, including
that no read ever hands back an erased body.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test
from sqlalchemy import func, select, text

from ledger import (
    BudgetExceeded,
    InvalidInstant,
    InvalidTransition,
    Ledger,
    LedgerError,
    RecordNotFound,
    open_ledger,
)
from ledger.schema import RECORDS, SCOPES
from tests.conftest import copy_migrated_sqlite, pg_pool, pg_schema_url, service_missing

SCOPE = "account:local"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
US = timedelta(microseconds=1)
WORDS = ["apple", "river", "stone", "maple", "tiger", "cloud"]
GROUPS = ["g1", "g2"]
KINDS = ["fact", "preference", "decision", "constraint"]
TOKEN = re.compile(r"zq\d{5}x")


@dataclass
class Rec:
    """The model's view of one record."""

    id: str
    order: int
    status: str
    body: str | None
    token: str
    kind: str
    valid_from: datetime
    valid_to: datetime | None
    expires_at: datetime | None
    group: str | None
    created_at: datetime
    supersedes: list[str] = field(default_factory=list)
    superseded_by: str | None = None
    erased: bool = False

    def end(self) -> datetime | None:
        ends = [e for e in (self.valid_to, self.expires_at) if e is not None]
        return min(ends) if ends else None


class LedgerMachine(RuleBasedStateMachine):
    """Drives one fresh ledger (per example) and a model side by side."""

    open_url: Callable[[], tuple[str, Callable[[], None]]]  # set by the factory below

    def __init__(self) -> None:
        super().__init__()
        url, self._cleanup = self.open_url()
        self.now = T0
        self.led: Ledger = open_ledger(url, clock=lambda: self.now, migrate=True)
        self.sqlite = self.led.engine.dialect.name == "sqlite"
        self.recs: dict[str, Rec] = {}
        self.budget = self.led.default_max_records
        self.counter = 0
        self.touched: set[datetime] = {T0}

    def teardown(self) -> None:
        try:
            if hasattr(self, "led"):
                self.final_checks()
        finally:
            if hasattr(self, "led"):
                self.led.close()
            self._cleanup()

    # ------------------------------------------------------------------ model helpers
    def _body(self, words: list[str]) -> tuple[str, str]:
        self.counter += 1
        token = f"zq{self.counter:05d}x"
        return " ".join([*words, token]), token

    def _held(self) -> int:
        return sum(r.status in ("active", "proposed") for r in self.recs.values())

    def _prepare(self, now: datetime) -> None:
        """Expire what is due at ``now`` (what every write does first, and the sweep)."""
        for r in self.recs.values():
            if r.status in ("active", "proposed") and r.expires_at is not None and r.expires_at <= now:
                if r.status == "active":
                    r.valid_to = r.expires_at
                r.status = "expired"

    def _status_after_prepare(self, r: Rec, now: datetime) -> str:
        if r.status in ("active", "proposed") and r.expires_at is not None and r.expires_at <= now:
            return "expired"
        return r.status

    def _active_member(self, group: str | None, now: datetime) -> Rec | None:
        if group is None:
            return None
        found = [r for r in self.recs.values() if r.group == group and self._status_after_prepare(r, now) == "active"]
        assert len(found) <= 1
        return found[0] if found else None

    def _close(self, r: Rec, successor: str, now: datetime) -> None:
        r.status, r.valid_to, r.superseded_by = "superseded", now, successor

    def _ancestors(self, head: Rec) -> list[Rec]:
        seen: dict[str, Rec] = {}
        frontier = [(rid, head.id) for rid in head.supersedes]
        while frontier:
            rid, child = frontier.pop()
            r = self.recs.get(rid)
            if r is None or rid in seen or r.superseded_by != child:
                continue
            seen[rid] = r
            frontier += [(x, rid) for x in r.supersedes]
        return list(seen.values())

    def _chain(self, r: Rec) -> list[Rec]:
        head = r
        while head.superseded_by is not None:
            head = self.recs[head.superseded_by]
        chain = [*self._ancestors(head), head]
        return sorted(chain, key=lambda x: (x.valid_from, x.created_at, x.order))

    def _expiry(self, draw: Any) -> datetime | None:
        pending = sorted({r.expires_at for r in self.recs.values() if r.expires_at is not None})
        options: list[Any] = [
            None,
            None,
            self.now,
            self.now + US,
            self.now + timedelta(seconds=1),
            self.now + timedelta(hours=1),
        ]
        options += [e for e in pending if e > self.now - US]
        return draw(st.sampled_from(options))

    def _expect(self, expected: type[LedgerError] | None, call: Callable[[], Any]) -> Any:
        if expected is None:
            return call()
        try:
            call()
        except LedgerError as exc:
            assert isinstance(exc, expected), f"expected {expected.__name__}, got {type(exc).__name__}: {exc}"
            return None
        raise AssertionError(f"expected {expected.__name__}, but the call succeeded")

    def _add(self, rec: Any, *, token: str, status: str, supersedes: list[str]) -> Rec:
        r = Rec(
            id=rec.id,
            order=len(self.recs),
            status=status,
            body=rec.body,
            token=token,
            kind=rec.kind.value,
            valid_from=self.now,
            valid_to=None if status == "active" else self.now,
            expires_at=rec.expires_at,
            group=rec.conflict_group,
            created_at=self.now,
            supersedes=supersedes,
        )
        self.recs[r.id] = r
        return r

    def _ids(self) -> list[str]:
        return sorted(self.recs, key=lambda i: self.recs[i].order)

    def _waiting(self) -> list[str]:
        return [i for i in self._ids() if self._status_after_prepare(self.recs[i], self.now) == "proposed"]

    def _pick(self, data: Any, likely: list[str]) -> str:
        """Mostly one of ``likely`` (where the operation can succeed), sometimes any record."""
        if likely and data.draw(st.integers(0, 3)):
            return str(data.draw(st.sampled_from(likely)))
        return str(data.draw(st.sampled_from(self._ids())))

    # ------------------------------------------------------------------ rules
    @initialize(budget=st.integers(min_value=2, max_value=8))
    def start_budget(self, budget: int) -> None:
        self.led.set_budget(SCOPE, budget, now=self.now)
        self.budget = budget

    @rule(step=st.sampled_from(["same", "us", "ms", "s", "h", "expiry", "before_expiry"]))
    def advance(self, step: str) -> None:
        pending = sorted(
            r.expires_at
            for r in self.recs.values()
            if r.expires_at is not None and r.expires_at > self.now and r.status in ("active", "proposed")
        )
        if step in ("expiry", "before_expiry") and pending:
            target = pending[0] if step == "expiry" else pending[0] - US
            self.now = max(self.now, target)
        else:
            self.now += {
                "same": timedelta(0),
                "us": US,
                "ms": timedelta(milliseconds=1),
                "s": timedelta(seconds=1),
                "h": timedelta(hours=1),
            }.get(step, US)
        self.touched.add(self.now)

    @rule(
        data=st.data(),
        words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
        group=st.sampled_from([None, None, *GROUPS]),
        kind=st.sampled_from(KINDS),
    )
    def save(self, data: Any, words: list[str], group: str | None, kind: str) -> None:
        exp = self._expiry(data.draw)
        body, token = self._body(words)
        now = self.now
        member = self._active_member(group, now)
        if exp is not None and exp <= now:
            expected: type[LedgerError] | None = InvalidInstant
        elif member is None and self._held_after_prepare(now) + 1 > self.budget:
            expected = BudgetExceeded
        else:
            expected = None
        rec = self._expect(
            expected, lambda: self.led.save(body, kind=kind, conflict_group=group, expires_at=exp, now=now)
        )
        if rec is None:
            return
        self._prepare(now)
        if member is not None:
            self._close(member, rec.id, now)
        self._add(rec, token=token, status="active", supersedes=[member.id] if member else [])
        assert self._held() <= self.budget or member is not None

    def _held_after_prepare(self, now: datetime) -> int:
        return sum(self._status_after_prepare(r, now) in ("active", "proposed") for r in self.recs.values())

    @rule(
        data=st.data(),
        words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
        group=st.sampled_from([None, None, None, *GROUPS]),
    )
    def edit(self, data: Any, words: list[str], group: str | None) -> None:
        if not self.recs:
            return
        target = self.recs[self._pick(data, [r.id for r in self._live()])]
        body, token = self._body(words)
        now = self.now
        expected: type[LedgerError] | None = None
        if self._status_after_prepare(target, now) != "active":
            expected = InvalidTransition
        rec = self._expect(expected, lambda: self.led.save(body, supersedes=target.id, conflict_group=group, now=now))
        if rec is None:
            return
        final_group = group if group is not None else target.group
        member = self._active_member(final_group, now)
        self._prepare(now)
        replaced = [target] + ([member] if member is not None and member.id != target.id else [])
        for r in replaced:
            self._close(r, rec.id, now)
        assert rec.kind.value == target.kind and rec.conflict_group == final_group
        self._add(rec, token=token, status="active", supersedes=[r.id for r in replaced])

    @rule(data=st.data())
    def delete(self, data: Any) -> None:
        if not self.recs:
            return
        heads = [r for r in self.recs.values() if self._status_after_prepare(r, self.now) != "superseded"]
        with_history = [r.id for r in heads if self._ancestors(r)]
        target = self.recs[
            self._pick(data, with_history if with_history and data.draw(st.booleans()) else [r.id for r in heads])
        ]
        now = self.now
        status = self._status_after_prepare(target, now)
        expected = None if status in ("active", "proposed", "expired", "rejected") else InvalidTransition
        got = self._expect(expected, lambda: self.led.delete(target.id, now=now))
        if got is None:
            return
        self._prepare(now)
        if target.status == "active":
            target.valid_to = now
        target.status = "deleted"
        chain = [target, *self._ancestors(target)]
        chain_ids = {r.id for r in chain}
        # Proposals that would supersede a forgotten record are forgotten with it.
        dependants = [
            r
            for r in self.recs.values()
            if r.valid_to == r.valid_from
            and r.status in ("proposed", "rejected", "expired")
            and chain_ids & set(r.supersedes)
        ]
        for r in dependants:
            r.status = "deleted"
        for r in [*chain, *dependants]:
            r.body, r.erased = None, True

    @rule(
        data=st.data(),
        words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
        group=st.sampled_from([None, None, *GROUPS]),
        n_targets=st.integers(0, 2),
        bogus=st.sampled_from([False] * 5 + [True]),
    )
    def propose(self, data: Any, words: list[str], group: str | None, n_targets: int, bogus: bool) -> None:
        # Mostly live targets (so that accepts can succeed), sometimes any record at all.
        ids = [r.id for r in self._live()] if data.draw(st.integers(0, 3)) else self._ids()
        targets = data.draw(st.lists(st.sampled_from(ids), max_size=n_targets, unique=True)) if ids else []
        if bogus and n_targets:
            targets.append("mem_" + "0" * 24)
        exp = self._expiry(data.draw)
        body, token = self._body(words)
        now = self.now
        if exp is not None and exp <= now:
            expected: type[LedgerError] | None = InvalidInstant
        elif self._held_after_prepare(now) + 1 > self.budget:
            expected = BudgetExceeded
        else:
            expected = None
        rec = self._expect(
            expected,
            lambda: self.led.propose(
                body,
                supersedes=targets,
                conflict_group=group,
                expires_at=exp,
                confidence_bps=5000,
                rationale="model rationale",
                now=now,
            ),
        )
        if rec is None:
            return
        self._prepare(now)
        self._add(rec, token=token, status="proposed", supersedes=list(targets))
        assert self._held() <= self.budget

    @rule(data=st.data())
    def accept(self, data: Any) -> None:
        if not self.recs:
            return
        p = self.recs[self._pick(data, self._waiting())]
        now = self.now
        expected: type[LedgerError] | None = None
        if self._status_after_prepare(p, now) != "proposed":
            expected = InvalidTransition
        else:
            for tid in p.supersedes:
                t = self.recs.get(tid)
                if t is None or self._status_after_prepare(t, now) != "active":
                    expected = InvalidTransition
        got = self._expect(expected, lambda: self.led.accept(p.id, now=now))
        if got is None:
            return
        member = self._active_member(p.group, now)
        self._prepare(now)
        replaced = [self.recs[t] for t in p.supersedes]
        if member is not None and member.id not in p.supersedes:
            replaced.append(member)
        for r in replaced:
            self._close(r, p.id, now)
        p.status, p.valid_from, p.valid_to, p.supersedes = "active", now, None, [r.id for r in replaced]

    @rule(data=st.data())
    def reject(self, data: Any) -> None:
        if not self.recs:
            return
        p = self.recs[self._pick(data, self._waiting())]
        now = self.now
        expected = None if self._status_after_prepare(p, now) == "proposed" else InvalidTransition
        got = self._expect(expected, lambda: self.led.reject(p.id, now=now))
        if got is None:
            return
        self._prepare(now)
        p.status = "rejected"

    @rule()
    def sweep(self) -> None:
        due = sum(self._status_after_prepare(r, self.now) != r.status for r in self.recs.values())
        assert self.led.sweep_expired(self.now) == due
        self._prepare(self.now)
        assert self.led.sweep_expired(self.now) == 0

    @rule(budget=st.integers(min_value=0, max_value=8))
    def set_budget(self, budget: int) -> None:
        use = self.led.set_budget(SCOPE, budget, now=self.now)
        self.budget = budget
        assert use.max_records == budget
        # Setting a budget never evicts and never expires anything.
        assert use.held == sum(r.status in ("active", "proposed") for r in self.recs.values())

    @rule(data=st.data())
    def read_as_of_the_past(self, data: Any) -> None:
        instants = sorted(self._boundaries())
        self._check_as_of([data.draw(st.sampled_from(instants))])

    @rule(data=st.data())
    def read_with_now(self, data: Any) -> None:
        """get/history at a chosen instant: an active record past its expiry reads as expired then."""
        if not self.recs:
            return
        r = self.recs[data.draw(st.sampled_from(self._ids()))]
        t = data.draw(st.sampled_from(sorted(self._boundaries())))
        got = self.led.get(r.id, now=t)
        want_status = r.status
        if r.status == "active" and r.expires_at is not None and r.expires_at <= t:
            want_status = "expired"
        assert got.status.value == want_status, (r.id, t)
        assert (got.body, got.erased) == (r.body, r.erased)
        history = self.led.history(r.id, now=t)
        assert [h.id for h in history] == [h.id for h in self._chain(r)]
        self._assert_no_erased_token(repr(got) + repr(history))

    # ------------------------------------------------------------------ invariants
    def _boundaries(self) -> set[datetime]:
        out = {self.now}
        for r in self.recs.values():
            for t in (r.valid_from, r.valid_to, r.expires_at):
                if t is not None:
                    out |= {t - US, t, t + US}
        return out

    def _expected_as_of(self, t: datetime) -> list[str]:
        # A forgotten record still answers for the instants it held, body withheld.
        held = [r for r in self.recs.values() if r.valid_from <= t and (r.end() is None or t < r.end())]
        return [r.id for r in sorted(held, key=lambda r: (r.valid_from, r.order))]

    def _live(self) -> list[Rec]:
        live = [r for r in self.recs.values() if self._status_after_prepare(r, self.now) == "active"]
        return sorted(live, key=lambda r: (r.valid_from, r.order))

    def _check_as_of(self, instants: Iterable[datetime]) -> str:
        out = []
        for t in instants:
            got = self.led.list_as_of(SCOPE, t)
            assert [r.id for r in got] == self._expected_as_of(t), t
            for r in got:
                m = self.recs[r.id]
                assert (r.body, r.erased) == (m.body, m.erased), (t, r.id)
                assert not r.erased or (r.body is None and r.rationale is None)
            out.append(repr(got))
        return "\n".join(out)

    @invariant()
    def rows_match_the_model(self) -> None:
        rows = self.led.records(SCOPE)
        assert [r.id for r in rows] == sorted(self.recs, key=lambda i: (self.recs[i].created_at, self.recs[i].order))
        for row in rows:
            m = self.recs[row.id]
            got = (
                row.status.value,
                row.body,
                row.valid_from,
                row.valid_to,
                row.expires_at,
                row.conflict_group,
                row.superseded_by,
                sorted(row.supersedes),
                row.erased,
                row.kind.value,
            )
            want = (
                m.status,
                m.body,
                m.valid_from,
                m.valid_to,
                m.expires_at,
                m.group,
                m.superseded_by,
                sorted(m.supersedes),
                m.erased,
                m.kind,
            )
            assert got == want, (row.id, got, want)

    @invariant()
    def spec_invariants(self) -> None:
        rows = {r.id: r for r in self.led.records(SCOPE)}
        active_groups: list[str] = []
        for r in rows.values():
            # 3.2.1
            if r.status == "active":
                assert r.valid_to is None
            else:
                assert r.valid_to is not None
            if r.status in ("proposed", "rejected"):
                assert r.valid_to == r.valid_from
            # 3.2.2
            if r.superseded_by is not None:
                s = rows[r.superseded_by]
                assert r.status == "superseded" and r.valid_to == s.valid_from and r.id in s.supersedes
            if r.status == "superseded":
                assert r.superseded_by is not None
            # 3.2.3: an expired active record closed at expires_at
            if r.status == "expired" and r.valid_to != r.valid_from:
                assert r.valid_to == r.expires_at
            # 3.2.7: an erased record has no body; a deleted head erased its chain
            if r.status == "deleted":
                assert r.body is None and r.erased
                for older in self._ancestors(self.recs[r.id]):
                    assert rows[older.id].body is None
            if r.status == "active" and r.conflict_group is not None:
                active_groups.append(r.conflict_group)
        # 3.2.4
        assert len(active_groups) == len(set(active_groups))
        # 3.2.5 (a lowered budget refuses growth but never evicts; growth is checked in the rules)
        use = self.led.budget(SCOPE)
        assert use.held == self._held() and use.max_records == self.budget

    @invariant()
    def reads_agree_and_never_return_an_erased_body(self) -> None:
        now = self.now
        live = self._live()
        listed = self.led.list(SCOPE, now=now)
        assert [r.id for r in listed] == [r.id for r in live]
        assert listed == self.led.list_as_of(SCOPE, now)
        proposals = self.led.proposals(SCOPE, now=now)
        want_props = sorted(
            (r for r in self.recs.values() if self._status_after_prepare(r, now) == "proposed"),
            key=lambda r: (r.valid_from, r.order),
        )
        assert [r.id for r in proposals] == [r.id for r in want_props]
        packet = self.led.build_packet(SCOPE, now=now)
        # Explicit pins first, then accepted suggestions by confidence (highest first), newest first, id.
        want_packet = sorted(
            listed,
            key=lambda r: (
                r.provenance != "user_explicit",
                0 if r.provenance == "user_explicit" else -(r.confidence_bps if r.confidence_bps is not None else -1),
                -r.valid_from.timestamp(),
                r.id,
            ),
        )
        assert [r.id for r in packet.records] == [r.id for r in want_packet] and packet.omitted == []
        for r in live:
            assert r.body is not None and r.body in packet.text
        # Search: live records answer their own tokens; nothing else answers any other token.
        if live:
            hits = self.led.search(SCOPE, " ".join(r.token for r in live), limit=200, now=now)
            assert sorted(x.id for x in hits) == sorted(r.id for r in live)
            last = live[-1]
            assert [x.id for x in self.led.search(SCOPE, f"({last.token}", now=now)] == [last.id]
        dead = [r.token for r in self.recs.values() if r not in live][-30:]
        if dead:
            assert self.led.search(SCOPE, " ".join(dead), now=now) == []
        word = WORDS[len(self.recs) % len(WORDS)]
        found = {x.id for x in self.led.search(SCOPE, word, limit=200, now=now)}
        assert found == {r.id for r in live if word in (r.body or "").split()}
        touched = set(sorted(self.touched)[-2:]) | {now - US}
        seen = [repr(listed), repr(proposals), packet.text, repr(packet.records), self._check_as_of(sorted(touched))]
        seen.append(repr(self.led.records(SCOPE)))
        for r in list(self.recs.values())[-2:]:
            seen.append(repr(self.led.history(r.id)))
            seen.append(repr(self.led.get(r.id)))
        self._assert_no_erased_token("\n".join(seen))

    @invariant()
    def the_kept_counts_are_the_rows_counts(self) -> None:
        """The triggers' active and proposed counts (what the budget reads) equal a count of the rows."""
        with self.led.engine.connect() as conn:
            kept = conn.execute(
                select(SCOPES.c.active_count, SCOPES.c.proposed_count).where(SCOPES.c.scope_key == SCOPE)
            ).one_or_none()
            counted = conn.execute(
                select(
                    func.count().filter(RECORDS.c.status == "active"),
                    func.count().filter(RECORDS.c.status == "proposed"),
                ).where(RECORDS.c.scope_key == SCOPE)
            ).one()
        assert (kept is None and counted == (0, 0)) or tuple(kept or ()) == tuple(counted)

    @invariant()
    def fts_holds_exactly_the_active_bodies(self) -> None:
        if not self.sqlite:
            return
        with self.led.engine.connect() as conn:
            seqs = dict(conn.execute(text("SELECT id, seq FROM memory_records")).all())
            # What the index should hold: the active bodies through the same (porter) tokenizer.
            conn.exec_driver_sql("DROP TABLE IF EXISTS temp.fts_expect")
            conn.exec_driver_sql("CREATE VIRTUAL TABLE temp.fts_expect USING fts5(body, tokenize='porter unicode61')")
            for r in self.recs.values():
                if r.status == "active":
                    conn.execute(
                        text("INSERT INTO temp.fts_expect(rowid, body) VALUES (:s, :b)"), {"s": seqs[r.id], "b": r.body}
                    )
            want: dict[int, set[str]] = {}
            conn.exec_driver_sql(
                "CREATE VIRTUAL TABLE IF NOT EXISTS temp.fts_terms USING fts5vocab('main', 'memory_fts', 'instance')"
            )
            conn.exec_driver_sql("DROP TABLE IF EXISTS temp.fts_expect_terms")
            conn.exec_driver_sql(
                "CREATE VIRTUAL TABLE temp.fts_expect_terms USING fts5vocab('temp', 'fts_expect', 'instance')"
            )
            indexed: dict[int, set[str]] = {}
            for doc, term in conn.exec_driver_sql("SELECT doc, term FROM temp.fts_terms"):
                indexed.setdefault(doc, set()).add(term)
            for doc, term in conn.exec_driver_sql("SELECT doc, term FROM temp.fts_expect_terms"):
                want.setdefault(doc, set()).add(term)
            conn.rollback()
        assert indexed == want

    def _assert_no_erased_token(self, blob: str) -> None:
        erased = {r.token for r in self.recs.values() if r.erased}
        leaked = erased & set(TOKEN.findall(blob))
        assert not leaked, f"erased bodies returned by a read: {leaked}"

    def final_checks(self) -> None:
        """At the end of each example: every record through every read path, at every boundary instant."""
        blob = [self._check_as_of(sorted(self._boundaries()))]
        for r in self.recs.values():
            got = self.led.get(r.id)
            blob.append(repr(got))
            history = self.led.history(r.id)
            assert [h.id for h in history] == [h.id for h in self._chain(r)]
            blob.append(repr(history))
        blob.append(repr(self.led.search(SCOPE, " ".join(WORDS), limit=200, now=self.now)))
        for call in (self.led.get, self.led.history, self.led.delete, self.led.accept, self.led.reject):
            self._expect(RecordNotFound, lambda call=call: call("mem_" + "f" * 24))
        self._assert_no_erased_token("\n".join(blob))
        with self.led.engine.connect() as conn:
            events = repr(conn.execute(text("SELECT * FROM ledger_events")).all())
        assert not TOKEN.search(events), "an event holds a body"


# --------------------------------------------------------------------------- backends
def _sqlite_url() -> tuple[str, Callable[[], None]]:
    tmp = tempfile.TemporaryDirectory(prefix="ledger-sm-")
    url = f"sqlite:///{Path(tmp.name) / 'ledger.db'}"
    copy_migrated_sqlite(url)
    return url, tmp.cleanup


def _pg_url() -> tuple[str, Callable[[], None]]:
    """A migrated schema of the pool per example (as the migrations left it)."""
    schema = pg_pool().lease()
    return pg_schema_url(schema), lambda: pg_pool().give_back(schema)


def _machine(open_url: Callable[[], tuple[str, Callable[[], None]]]) -> type[LedgerMachine]:
    return type("Machine", (LedgerMachine,), {"open_url": staticmethod(open_url)})


def _settings(examples: int, steps: int) -> settings:
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
    )


def test_state_machine_sqlite() -> None:
    # The invariants checked after every step are most of its time; the soak below runs 600 examples of 60 steps
    run_state_machine_as_test(_machine(_sqlite_url), settings=_settings(20, 30))


def test_state_machine_postgres(pg_available: BaseException | None) -> None:
    if pg_available is not None:
        service_missing("PostgreSQL", pg_available)
    run_state_machine_as_test(_machine(_pg_url), settings=_settings(8, 25))


@pytest.mark.soak
@pytest.mark.timeout(3600)
def test_state_machine_sqlite_soak() -> None:
    run_state_machine_as_test(_machine(_sqlite_url), settings=_settings(600, 60))


@pytest.mark.soak
@pytest.mark.timeout(3600)
def test_state_machine_postgres_soak(pg_available: BaseException | None) -> None:
    if pg_available is not None:
        service_missing("PostgreSQL", pg_available)
    run_state_machine_as_test(_machine(_pg_url), settings=_settings(150, 50))
