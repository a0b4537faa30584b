"""Playing the corpus through the real pipeline, one fresh scope per episode.

One *arm* is one way of consolidating: a harness (consolidation on, mode ``apply``), or a
baseline (``keep_all``: consolidation off; ``latest_wins``: the rule of
:mod:`consolidation.replay.baseline`, applied when a run would be due). Every arm plays
every episode in a scope of its own: real saves, edits and forgets, ``notify_turn``, runs
executed when due (claim, model call, gate, apply, settlement), and time moved only by the
ledger's injected clock. The arm's :class:`~consolidation.replay.score.Tally` is read
from the ledger at each checkpoint.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from consolidation.errors import ConsolidationError, InvalidSettings, ReplayStopped
from consolidation.models import ConsolidationRun, Mode, Outcome, RunState
from consolidation.pricing import PriceTable
from consolidation.replay.baseline import latest_wins
from consolidation.replay.corpus import AsOf, Checkpoint, Episode, Step
from consolidation.replay.leaks import scan_files, scan_tables
from consolidation.replay.score import FORGOTTEN_WHILE_THINKING, Tally, count_false_merges, failure_cause, observe
from consolidation.service import ConsolidationService
from ledger import Ledger, MemoryRecord, Status, open_ledger

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
BASELINES = ("keep_all", "latest_wins")
DEBOUNCE_S = 60.0
MAX_WAIT_S = 600.0
Snapshot = frozenset[tuple[str, str | None]]
MAX_FAILING_IN_A_ROW = 3


class ReplayClock:
    """The ledger's clock: the replay sets the instant; nothing reads the machine's time."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@dataclass
class _Play:
    """One episode in progress in one scope."""

    episode: Episode
    scope: str
    led: Ledger
    ids: dict[str, str] = field(default_factory=dict)  # handle -> record id
    armed: list[Step] = field(default_factory=list)  # forgets waiting for the next run
    rule_due: datetime | None = None  # baselines: when a run would be due
    live: list[tuple[datetime, Snapshot]] = field(default_factory=list)


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _snapshot(records: list[MemoryRecord]) -> Snapshot:
    return frozenset((r.id, r.body) for r in records)


class Arm:
    """Plays episodes for one arm on one ledger. ``arm`` is a harness name or a baseline name."""

    def __init__(
        self,
        database_url: str,
        *,
        arm: str,
        model: str | None = None,
        scope_prefix: str,
        prices: PriceTable | None = None,
        service_kwargs: Mapping[str, Any] | None = None,
        target: Mapping[str, Any] | None = None,
    ) -> None:
        self.arm = arm
        self.model = model
        self.target = dict(target or {})
        self.failing = 0  # runs failed in a row for a cause other than the designed one
        self.url = database_url
        self.prefix = scope_prefix
        self.clock = ReplayClock()
        self.led = open_ledger(database_url, account=f"{scope_prefix}0", clock=self.clock, migrate=True)
        self.svc = ConsolidationService(self.led, prices=prices, fault_hook=self._hook, **(service_kwargs or {}))
        self.tally = Tally()
        self.secrets: list[str] = []
        self._current: _Play | None = None

    def close(self) -> None:
        self.led.close()

    # ------------------------------------------------------------------ setup
    def settings(self, scope: str) -> None:
        """Consolidation settings for a scope, explicit (never the defaults, which change between versions).

        Raises:
            InvalidSettings: the harness or model cannot be used (nothing is played).
        """
        self.clock.now = T0
        changes: dict[str, Any] = {"mode": Mode.OFF.value, "debounce_s": DEBOUNCE_S, "max_wait_s": MAX_WAIT_S}
        if self.arm not in BASELINES:
            changes.update(mode=Mode.APPLY.value, harness=self.arm, allow_removal=False)
            if self.model is not None:
                changes["model"] = self.model
            changes.update(self.target)
        self.svc.update_settings(scope, **changes)

    def check_target(self, scope: str) -> None:
        """Refuse a harness that cannot be called (no key, nothing answering at its server) before anything is played.

        Raises:
            InvalidSettings: what to fix.
        """
        if self.arm in BASELINES:
            return
        found = self.svc.check_target(self.svc.settings(scope))
        if found.problem is not None:
            raise InvalidSettings(f"the {self.arm} harness cannot be used: {found.problem} (nothing was played)")

    def play(self, episode: Episode, index: int) -> None:
        scope_led = self.led.for_account(f"{self.prefix}{index + 1}")
        play = _Play(episode, scope_led.scope_key, scope_led)
        self._current = play
        self.settings(play.scope)
        items: list[tuple[float, int, Step | Checkpoint]] = [(s.at_s, 0, s) for s in episode.steps]
        items += [(c.at_s, 1, c) for c in episode.checkpoints]
        for at_s, _, item in sorted(items, key=lambda i: (i[0], i[1])):
            self._advance(play, _at(at_s))
            self.clock.now = _at(at_s)
            if isinstance(item, Step):
                self._step(play, item)
            else:
                self._checkpoint(play, item)
        self._account(play)
        self.tally.classes[episode.klass].episodes += 1
        self.secrets += episode.secrets
        self._current = None

    # ------------------------------------------------------------------ time
    def _next_due(self, play: _Play, until: datetime) -> datetime | None:
        if self.arm in BASELINES:
            return play.rule_due if play.rule_due is not None and play.rule_due <= until else None
        due = [r.due_at for r in self.svc.runs(play.scope, limit=5) if r.state == RunState.PENDING]
        return min(due) if due and min(due) <= until else None

    def _advance(self, play: _Play, until: datetime) -> None:
        """Execute, in time order, every run that falls due up to ``until`` (as a worker would, when due)."""
        while (due := self._next_due(play, until)) is not None:
            self.clock.now = due
            if self.arm in BASELINES:
                play.rule_due = None
                self._fire_armed(play)
                if self.arm == "latest_wins":
                    latest_wins(play.led, play.scope)
                continue
            for run in self.svc.runs(play.scope, limit=5):
                if run.state == RunState.PENDING and run.due_at <= due:
                    started = time.perf_counter()
                    settled = self.svc.execute(run.id)
                    if settled is None:  # never in one thread: do not spin on it
                        raise ConsolidationError(f"run {run.id} was due but could not be executed")
                    self.tally.run_wall_s.append(time.perf_counter() - started)
                    self._watch(settled)
            self._fire_armed(play)  # a run that called no model (an empty scope) still ends the wait

    def _watch(self, run: ConsolidationRun) -> None:
        """Stop the replay once runs keep failing for a cause other than the designed one: the harness is broken,
        and every further run would only wait out its cap."""
        if run.outcome != Outcome.FAILED or failure_cause(run.error) == FORGOTTEN_WHILE_THINKING:
            self.failing = 0
            return
        self.failing += 1
        if self.failing >= MAX_FAILING_IN_A_ROW:
            raise ReplayStopped(
                f"the {self.arm} harness failed {self.failing} runs in a row "
                f"({failure_cause(run.error)}: {run.error}); fix the harness's settings and run the replay again"
            )

    def _hook(self, step: str) -> None:
        # The forget a user makes while the model is thinking: after the answer is stored, before it is applied.
        if step == "after_answer_stored" and self._current is not None:
            self._fire_armed(self._current)

    def _fire_armed(self, play: _Play) -> None:
        armed, play.armed = play.armed, []
        for step in armed:
            self._forget(play, step)

    # ------------------------------------------------------------------ steps
    def _head(self, play: _Play, handle: str) -> MemoryRecord:
        by_id = {r.id: r for r in play.led.records(play.scope)}
        record = by_id[play.ids[handle]]
        while record.superseded_by is not None:
            record = by_id[record.superseded_by]
        return record

    def _step(self, play: _Play, step: Step) -> None:
        if step.action == "save":
            assert step.handle is not None and step.body is not None
            target = None if step.supersedes is None else self._head(play, step.supersedes)
            record = play.led.save(
                step.body,
                supersedes=target.id if target is not None and target.status == Status.ACTIVE else None,
                expires_at=None if step.expires_at_s is None else _at(step.expires_at_s),
                conflict_group=step.group,
                source_session_id=step.session,
            )
            play.ids[step.handle] = record.id
        elif step.action == "turn":
            self.svc.notify_turn(play.scope)
            play.rule_due = self.clock.now + timedelta(seconds=DEBOUNCE_S)
        elif step.during_run:
            play.armed.append(step)
        else:
            self._forget(play, step)

    def _forget(self, play: _Play, step: Step) -> None:
        """Forget every active record that carries one of the step's handles (what the user sees in /pins)."""
        heads: dict[str, MemoryRecord] = {}
        for handle in step.forget:
            head = self._head(play, handle)
            heads[head.id] = head
        for head in heads.values():
            if head.status == Status.ACTIVE:
                play.led.delete(head.id)

    # ------------------------------------------------------------------ scoring
    def _checkpoint(self, play: _Play, checkpoint: Checkpoint) -> None:
        at = _at(checkpoint.at_s)  # no sweep: it is global, and a read never returns a record past its expiry
        records = play.led.records(play.scope)
        seen = observe(records, play.ids, at)
        tally = self.tally.classes[play.episode.klass]
        tally.add(checkpoint.gold, seen)
        if checkpoint is play.episode.checkpoints[-1]:
            self.tally.false_merges += count_false_merges(play.episode.apart, seen)
        erased = {r.id for r in records if r.erased}
        for read in play.episode.as_of:
            if read.at_s <= checkpoint.at_s:
                self.tally.read(self._as_of_exact(play, read))
        for instant, live in play.live:  # what a read returned then, it returns now (bodies since forgotten withheld)
            expected = frozenset((rid, None if rid in erased else body) for rid, body in live)
            self.tally.read(_snapshot(play.led.list_as_of(play.scope, instant)) == expected)
        play.live.append((at, _snapshot(play.led.list(play.scope, now=at))))

    def _as_of_exact(self, play: _Play, read: AsOf) -> bool:
        handle_of = {rid: h for h, rid in play.ids.items()}
        got = {(handle_of.get(r.id, r.id), r.body is not None) for r in play.led.list_as_of(play.scope, _at(read.at_s))}
        return got == set(read.visible)

    def _account(self, play: _Play) -> None:
        for run in self.svc.runs(play.scope):
            if run.state == RunState.SETTLED:
                self.tally.runs += 1
                self.tally.tokens += run.input_tokens + run.output_tokens
                self.tally.spend_micro_usd += run.spend_micro_usd
                self.tally.ops_proposed += run.ops_proposed
                self.tally.ops_applied += run.ops_applied
                self.tally.ops_refused += run.ops_refused
                for reason, count in run.refusals.items():
                    self.tally.refusals[reason] = self.tally.refusals.get(reason, 0) + count
            if run.outcome == Outcome.FAILED:
                self.tally.fail(run.error)

    def scan_leaks(self) -> None:
        """Count erased leaks over every episode this arm played (call once, at the end)."""
        places = scan_tables(self.led, self.secrets, scope_prefix=self.prefix)
        places += scan_files(self.url, self.secrets)
        self.tally.leak_places = places
        self.tally.erased_leaks = len(places)


Progress = Callable[[str, int, int], None]


def play_arm(
    episodes: list[Episode],
    *,
    arm: str,
    database_url: str,
    model: str | None = None,
    prices: PriceTable | None = None,
    progress: Progress | None = None,
    service_kwargs: Mapping[str, Any] | None = None,
    target: Mapping[str, Any] | None = None,
    check: bool = False,
) -> Tally:
    """Play ``episodes`` in ``arm`` (a harness name or a baseline) on the ledger at ``database_url``; score them.

    ``prices`` is the price table runs are charged by (default: the built-in one);
    ``service_kwargs`` the service's extra keyword arguments, ``target`` the harness's scope settings
    (see :func:`consolidation.replay.replay`; baselines ignore it); ``check``: check the harness's key and
    server first (``ConsolidationService.check_target``).

    Every episode gets a fresh scope (``account:replay-<random>-<n>``), so a database that
    already holds data is not disturbed.

    Raises:
        InvalidSettings: the harness or model cannot be used (with ``check``: no key, nothing answering);
        ReplayStopped: runs kept failing; LedgerError.
    """
    prefix = f"replay-{uuid.uuid4().hex[:8]}-"
    runner = Arm(
        database_url, arm=arm, model=model, scope_prefix=prefix, prices=prices, service_kwargs=service_kwargs,
        target=target,
    )  # fmt: skip
    try:
        runner.settings(f"account:{prefix}0")  # refuses a bad harness or model before anything is played
        if check:
            runner.check_target(f"account:{prefix}0")
        for index, episode in enumerate(episodes):
            runner.play(episode, index)
            if progress is not None:
                progress(arm, index + 1, len(episodes))
        runner.scan_leaks()
    finally:
        runner.close()
    return runner.tally
