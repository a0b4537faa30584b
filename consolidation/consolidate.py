"""The consolidation job: per-scope settings, a debounced run per scope, and the steps of its runs (the claim
with the scope's records, the prompt, the call, the gate and the batch applied), which
:class:`consolidation.engine.RunEngine` takes in order.

Life of a consolidation run::

    notify_turn ──► pending ──claim──► running ──call──► answer stored ──apply+settle──► settled
                       │                  │                                   (one transaction)
                       └─ mode off ──► settled(cancelled)    janitor: running past cap+grace ──► abandoned
                                                             (or its stored answer applied)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any, NamedTuple

from consolidation import runs
from consolidation import settings as scope_settings
from consolidation.apply import apply_batch
from consolidation.candidates import SIMILAR_PER_CHANGED, Selection, select_candidates
from consolidation.connections import Connections
from consolidation.engine import Claim, Settlement, Skip
from consolidation.errors import HarnessError
from consolidation.gate import GateResult, check_batch
from consolidation.harnesses import Harness, HarnessResult, PromptRecord, spec
from consolidation.models import ConsolidationRun, ConsolidationSettings, Mode, Outcome
from consolidation.prompt import CLOSE_TAG, IN_GROUP, KINDS, OPEN_TAG, SYSTEM_PROMPT, record_chars
from ledger import Ledger, MemoryRecord, Provenance, Transaction, check_scope, format_rfc3339, screen_body, to_micros

JOB = "consolidate"
# What a prompt holds besides its record lines: the system text, the tags, a line per kind.
SYSTEM_CHARS = len(SYSTEM_PROMPT) + len(OPEN_TAG) + len(CLOSE_TAG) + sum(len(kind) + 1 for kind in KINDS) + 2


class Claimed(NamedTuple):
    """What a consolidation run's claim read besides the spend: the scope's settings and its active records."""

    settings: ConsolidationSettings
    records: list[MemoryRecord]


class Prompt(NamedTuple):
    """A consolidation run's call: the harness, the records under their aliases (alias -> record id, in order),
    the selection whose cursor to store with the answer (None: the whole scope was sent), and the ids of the
    records sent."""

    harness: Harness
    settings: ConsolidationSettings
    records: list[PromptRecord]
    aliases: dict[str, str]
    selection: Selection[MemoryRecord] | None
    record_ids: list[str]


class Gated(NamedTuple):
    """The gate's verdict on a stored answer, and the mode the run applies it in."""

    gate: GateResult
    mode: Mode


class ConsolidationJob:
    """Consolidation runs of the scopes of one ledger: settings, debounce, and the steps of a run that
    :class:`consolidation.engine.RunEngine` takes. Thread-safe."""

    def __init__(self, led: Ledger, connections: Connections, harnesses: Mapping[str, Harness] | None = None) -> None:
        self.led = led
        self.connections = connections
        self._harnesses: dict[str, Harness] = dict(harnesses or {})

    # ------------------------------------------------------------------ settings
    def settings_in(self, db: runs.Executor, scope_key: str) -> ConsolidationSettings:
        row = scope_settings.load(db, scope_key)
        if row is None:
            return scope_settings.defaults(scope_key, api_key=self.connections.api_key, prices=self.connections.prices)
        return scope_settings.from_row(row)

    def settings(self, scope_key: str) -> ConsolidationSettings:
        scope = check_scope(scope_key)
        with self.led.reading() as db:
            return self.settings_in(db, scope)

    def update_settings(self, scope_key: str, *, now: datetime | None = None, **changes: Any) -> ConsolidationSettings:
        """Validate and store settings. ``mode="off"`` cancels pending runs in the same transaction.

        Raises:
            InvalidSettings: a field is invalid (nothing is changed); ScopeError.
        """
        scope = check_scope(scope_key)

        def fn(tx: Transaction) -> ConsolidationSettings:
            old = self.settings_in(tx, scope)
            new = scope_settings.merge(old, changes, self.connections.prices)
            scope_settings.store(tx, new)
            if new.mode == Mode.OFF:
                runs.cancel_pending(tx, scope, tx.now_us)
                return new
            # A pending run waits for the new debounce, not the one it was scheduled with.
            runs.reschedule_pending(
                tx, scope, job=JOB, old=(old.debounce_s, old.max_wait_s), new=(new.debounce_s, new.max_wait_s)
            )
            if (use := tx.usage()).held >= use.max_records:
                runs.ensure_pending(tx, new, tx.now_us)  # turned on for a scope that is already full
            return new

        return self.led.run(scope, fn, now=now)

    def on_budget_full(self, tx: Transaction) -> str | None:
        """The ledger's budget hook: with consolidation on, a full scope gets a run without a turn."""
        settings = self.settings_in(tx, tx.scope_key)
        if settings.mode == Mode.OFF:
            return None
        run = runs.ensure_pending(tx, settings, tx.now_us)
        return (
            f"Consolidation is on: run {run.id}, due {format_rfc3339(run.due_at)}, will merge duplicates to make "
            "room; try again after it."
        )

    def notify_turn_in(self, tx: Transaction, scope_key: str) -> ConsolidationRun | None:
        """Inside the scope's write transaction: create or push back the scope's pending run (None when off)."""
        settings = self.settings_in(tx, scope_key)
        return None if settings.mode == Mode.OFF else runs.debounce(tx, settings, tx.now_us)

    # ------------------------------------------------------------------ the steps of a run (consolidation.engine)
    def claim(self, tx: Transaction, run: ConsolidationRun) -> Claim[Claimed] | None:
        """Claim the run; in the same transaction read what the run needs: settings, spend, active records."""
        settings = self.settings_in(tx, run.scope_key)
        claimed = runs.claim(
            tx, run.id, tx.now_us, harness=settings.harness, model=settings.model, mode=settings.mode.value,
            cap_s=settings.wall_clock_cap_s,
        )  # fmt: skip
        # The claim and the reads go out together (one round trip on PostgreSQL); the reads are
        # wasted only when the claim is lost.
        spent = runs.month_spend(tx, run.scope_key, tx.now)
        records = tx.active_later()
        if not claimed.result():
            return None
        inputs = Claimed(settings, records.result())
        return Claim(settings.harness, spent.result(), settings.spend_budget_micro_usd, inputs)

    def plan(self, run: ConsolidationRun, claim: Claim[Claimed], now: datetime | None) -> Prompt | Skip:
        """The prompt: the bounded candidate list under per-run aliases; no call when there is no record, or
        when the answer alone would fill the model's context window."""
        settings, records = claim.inputs.settings, claim.inputs.records
        if not records:
            return Skip(Outcome.PROPOSED if settings.mode == Mode.PROPOSE else Outcome.APPLIED)
        harness = self._harness(settings)
        try:
            max_chars = self._records_room(harness, settings)
        except HarnessError as exc:
            return Skip(Outcome.FAILED, exc.message)
        records, selection = self._candidates(run.scope_key, settings, records, now, max_chars=max_chars)
        # The model sees short per-run ids (1, 2, ...) and a mark for a record in a conflict group:
        # smaller prompts, and no internal id or group name leaves the service. Targets are mapped back
        # before the answer is stored; an unknown one cannot match.
        aliases = {str(n): r.id for n, r in enumerate(records, start=1)}
        prompt_records = self._prompt_records(settings, records, aliases)
        return Prompt(harness, settings, prompt_records, aliases, selection, list(aliases.values()))

    @staticmethod
    def call(plan: Prompt) -> HarnessResult:
        """The harness's one call, its answer's targets mapped back to record ids."""
        settings = plan.settings
        result = plan.harness.call(
            plan.records,
            model=settings.model,
            max_output_tokens=settings.max_output_tokens,
            wall_clock_cap_s=settings.wall_clock_cap_s,
        )
        return _unalias(result, plan.aliases)

    @staticmethod
    def answer_stored(tx: Transaction, run_id: str, plan: Prompt, result: HarnessResult) -> None:
        """The rotation moves on once the answer is stored.

        The answer needs no registration of its own beyond the prompt's records (the engine's): the prompt holds
        nothing but their bodies, so a record saved after the claim is none the model saw (docs/consolidation.md,
        "Erasure reaches runs")."""
        if plan.selection is not None:
            scope_settings.store_cursor(tx, plan.selection.cursor)

    @staticmethod
    def before_apply(tx: Transaction, run: ConsolidationRun) -> ConsolidationRun:
        """Nothing to check: the stored answer is applied as it is."""
        return run

    @staticmethod
    def unparseable_ops(raw: str) -> int:
        """An answer that did not parse: each operation it seems to hold is refused (one at least)."""
        return max(1, len(re.findall(r'"op"\s*:', raw)))

    def _prompt_records(
        self, settings: ConsolidationSettings, records: list[MemoryRecord], aliases: dict[str, str]
    ) -> list[PromptRecord]:
        """The records as the harness gets them, under their aliases (``aliases``: alias -> record id, in order)."""
        replaced = {} if spec(settings.harness).pays else self._edited_from(records)
        return [
            PromptRecord(
                alias,
                r.kind.value,
                r.body or "",
                None if r.conflict_group is None else IN_GROUP,
                valid_from=r.valid_from,
                expires=r.expires_at is not None,
                replaced=replaced.get(r.id),
            )
            for alias, r in zip(aliases, records, strict=True)
        ]

    def _edited_from(self, records: list[MemoryRecord]) -> dict[str, str]:
        """For the offline harness: the body each user edit among ``records`` replaced, by the edit's id. It
        shows an update's old value, so the records that still quote it can follow the update."""
        edits = {
            r.id: r.supersedes[0]
            for r in records
            if r.provenance == Provenance.USER_EXPLICIT and len(r.supersedes) == 1
        }
        if not edits:
            return {}
        with self.led.reading() as db:
            before = db.records(edits.values())
        return {rid: body for rid, old in edits.items() if old in before and (body := before[old].body)}

    @staticmethod
    def _records_room(harness: Harness, settings: ConsolidationSettings) -> int:
        """The bound of the records one run sends: ``max_prompt_chars``, within the model's context window.

        Raises:
            HarnessError: the answer's limit leaves no room for records in the context window.
        """
        room = harness.records_room(
            model=settings.model, max_output_tokens=settings.max_output_tokens, system_chars=SYSTEM_CHARS
        )
        return settings.max_prompt_chars if room is None else min(settings.max_prompt_chars, room)

    def _candidates(
        self,
        scope: str,
        settings: ConsolidationSettings,
        records: list[MemoryRecord],
        now: datetime | None,
        *,
        max_chars: int,
    ) -> tuple[list[MemoryRecord], Selection[MemoryRecord] | None]:
        """The bounded candidate list (docs/consolidation.md), and the selection whose cursor to store
        (None: a whole scope)."""

        def cost(record: MemoryRecord) -> int:
            # A line with a 3-character alias: aliases are given after the selection.
            group = None if record.conflict_group is None else IN_GROUP
            return record_chars(PromptRecord("000", record.kind.value, record.body or "", group))

        if sum(cost(r) for r in records) <= max_chars:
            return records, None
        with self.led.reading() as db:
            cursor = scope_settings.load_cursor(db, scope)
            since = runs.last_prompt_at(db, scope)
        changed = set()
        if since is not None:
            changed = {r.id for r in records if max(to_micros(r.updated_at), to_micros(r.valid_from)) > since}

        def similar(record: MemoryRecord) -> list[str]:
            found = self.led.search(scope, record.body or "", limit=SIMILAR_PER_CHANGED + 1, now=now)
            return [r.id for r in found]

        selection = select_candidates(
            records, max_chars=max_chars, cost=cost, changed=changed, similar=similar, cursor=cursor
        )
        return selection.records, selection

    def gate(self, tx: Transaction, run: ConsolidationRun) -> Gated:
        """Check the stored answer against the records as they are at ``tx.now``, in the mode the run claimed."""
        settings = self.settings_in(tx, run.scope_key)
        mode = Mode(run.mode or settings.mode)
        ops = run.answer.get("operations") if isinstance(run.answer, dict) else None
        named = {
            t
            for op in ops or []
            if isinstance(op, dict) and isinstance(op.get("targets"), list)
            for t in op["targets"]
            if isinstance(t, str)
        }
        gate = check_batch(
            run.answer,
            scope_key=run.scope_key,
            records=tx.records(sorted(named)),
            allowed_ops=settings.allowed_ops,
            allow_removal=settings.allow_removal,
            now=tx.now,
            screen=lambda body: screen_body(body, max_chars=self.led.max_body_chars),
        )
        return Gated(gate, mode)

    @staticmethod
    def apply(tx: Transaction, run: ConsolidationRun, gated: Gated) -> Settlement:
        """Apply (or propose) the batch that passed the gate."""
        gate, mode = gated
        applied = apply_batch(tx, gate, mode=mode, run_id=run.id)
        refusals = gate.refusals
        for reason, count in applied.refusals.items():
            refusals[reason] = refusals.get(reason, 0) + count
        return Settlement(
            Outcome.PROPOSED if mode == Mode.PROPOSE else Outcome.APPLIED,
            ops_proposed=gate.proposed,
            ops_applied=applied.applied,
            proposals_written=applied.proposed,
            refusals=refusals,
        )

    def _harness(self, settings: ConsolidationSettings) -> Harness:
        """The scope's harness (an injected one by name, else the registry's for the scope's target)."""
        injected = self._harnesses.get(settings.harness)
        return injected if injected is not None else spec(settings.harness).consolidation(self.connections.of(settings))


def _target(known: dict[str, str], target: object) -> object:
    # Aliases are numerals: a model answering without structured output may write 3 for "3".
    if isinstance(target, int) and not isinstance(target, bool):
        target = str(target)
    return known.get(target, f"unknown:{target}") if isinstance(target, str) else target


def _unalias(result: HarnessResult, aliases: dict[str, str]) -> HarnessResult:
    """Map the answer's per-run target aliases back to record ids; an unknown alias stays unmatchable."""
    answer = result.answer
    known = {**aliases, **{rid: rid for rid in aliases.values()}}  # a record's own id names it too
    if not isinstance(answer, dict) or not isinstance(answer.get("operations"), list):
        return result
    mapped = []
    for op in answer["operations"]:
        if isinstance(op, dict) and isinstance(op.get("targets"), list):
            op = {**op, "targets": [_target(known, t) for t in op["targets"]]}
        mapped.append(op)
    return replace(result, answer={**answer, "operations": mapped})
