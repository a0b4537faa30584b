"""The :class:`ConsolidationService`: debounced per-scope runs, settled exactly once.

Life of a run::

    notify_turn ──► pending ──claim──► running ──call──► answer stored ──apply+settle──► settled
                       │                  │                                   (one transaction)
                       └─ mode off ──► settled(cancelled)    janitor: running past cap+grace ──► abandoned
                                                             (or its stored answer applied)

Every move is a conditional UPDATE, so concurrent callers (threads, processes,
redelivered queue messages) cannot execute or settle a run twice. The answer and
its usage are stored before anything is applied: a crash after the call never pays
for a second call. This module knows nothing of queues.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import and_

from consolidation import runs as R
from consolidation import settings as S
from consolidation.apply import apply_batch
from consolidation.candidates import SIMILAR_PER_CHANGED, Selection, select_candidates
from consolidation.errors import RunNotFound
from consolidation.extraction.service import JOB as EXTRACT_JOB
from consolidation.extraction.service import ExtractionJobs
from consolidation.extraction.settings import ExtractionMode, ExtractionSettings
from consolidation.gate import UNPARSEABLE, GateResult, check_batch
from consolidation.harnesses import Connection, Harness, HarnessError, HarnessResult, PromptRecord, Usage, spec
from consolidation.harnesses.extract_base import Extractor
from consolidation.models import ALL_OPS, ConsolidationRun, ConsolidationSettings, Mode, Outcome
from consolidation.pricing import PriceTable, default_price_table
from consolidation.prompt import IN_GROUP, record_chars
from consolidation.setting_checks import scope_prices
from ledger import Ledger, MemoryRecord
from ledger.instants import to_micros
from ledger.models import RUNS
from ledger.reads import check_scope
from ledger.screening import screen_body
from ledger.tx import Transaction

log = logging.getLogger(__name__)

FaultHook = Callable[[str], None]
DEFAULT_GRACE_S = 30.0
RC = RUNS.c


def _month_bounds(now: datetime) -> tuple[int, int]:
    start = now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
    return to_micros(start), to_micros(end)


class ConsolidationService:
    """Consolidation for the scopes of one ledger. Thread-safe; share one per process.

    ``api_key``/``base_url`` are the anthropic harness's key and server (``None``: its SDK reads
    ``ANTHROPIC_API_KEY``/``ANTHROPIC_BASE_URL``), ``openai_api_key``/``openai_base_url`` the
    openai harness's (a scope's own ``base_url`` wins); the worker passes the ones it read from
    its environment. Keys are never logged or stored.
    ``fault_hook`` is called with a step name (``after_claim``,
    ``after_answer_stored``, ``mid_apply``, ``after_apply``) so fault tests can kill a
    process at an exact point.
    """

    def __init__(
        self,
        led: Ledger,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        prices: PriceTable | None = None,
        janitor_grace_s: float = DEFAULT_GRACE_S,
        harnesses: dict[str, Harness] | None = None,
        fault_hook: FaultHook | None = None,
        extractors: dict[str, Extractor] | None = None,
        openai_api_key: str | None = None,
        openai_base_url: str | None = None,
    ) -> None:
        self.led = led
        self.api_key = api_key
        self.base_url = base_url
        self.openai_api_key = openai_api_key or None
        self.openai_base_url = openai_base_url or None
        self.prices = prices or default_price_table()
        self.janitor_grace_s = janitor_grace_s
        self._harnesses: dict[str, Harness] = dict(harnesses or {})
        self._fault_hook = fault_hook
        self.extraction = ExtractionJobs(self, extractors)
        led.add_capability_provider(self.capabilities)
        led.add_erase_hook(self.extraction.scrub_digests_hook)
        # A full scope is due for consolidation rather than blocked by it (SPEC 4.2).
        led.set_budget_hook("consolidation", self._on_budget_full)

    def _fault(self, step: str) -> None:
        """Fault tests stop the process here; what the hook raises is marked so no handler swallows it."""
        if self._fault_hook is None:
            return
        try:
            self._fault_hook(step)
        except BaseException as exc:
            exc.__dict__["memledger_fault"] = True
            raise

    # ------------------------------------------------------------------ settings
    def _now(self, now: datetime | None) -> int:
        return to_micros(self.led.now(now))

    def _settings_in(self, db: R.Executor, scope_key: str) -> ConsolidationSettings:
        row = S.load(db, scope_key)
        if row is None:
            return S.defaults(scope_key, api_key=self.api_key, prices=self.prices)
        return S.from_row(row)

    def settings(self, scope_key: str) -> ConsolidationSettings:
        scope = check_scope(scope_key)
        with self.led.reading() as db:
            return self._settings_in(db, scope)

    def update_settings(self, scope_key: str, *, now: datetime | None = None, **changes: Any) -> ConsolidationSettings:
        """Validate and store settings. ``mode="off"`` cancels pending runs in the same transaction.

        Raises:
            InvalidSettings: a field is invalid (nothing is changed); ScopeError.
        """
        scope = check_scope(scope_key)

        def fn(tx: Transaction) -> ConsolidationSettings:
            new = S.merge(self._settings_in(tx, scope), changes, self.prices)
            S.store(tx, new)
            if new.mode == Mode.OFF:
                R.cancel_pending(tx, scope, tx.now_us)
            elif (use := tx.usage()).held >= use.max_records:
                R.ensure_pending(tx, new, tx.now_us)  # turned on for a scope that is already full
            return new

        return self.led.run(scope, fn, now=now)

    def _on_budget_full(self, tx: Transaction) -> str | None:
        """The ledger's budget hook: with consolidation on, a full scope gets a run without a turn."""
        settings = self._settings_in(tx, tx.scope_key)
        if settings.mode == Mode.OFF:
            return None
        run = R.ensure_pending(tx, settings, tx.now_us)
        return (
            f"Consolidation is on: a consolidation run is scheduled ({run.id}, due {run.due_at.isoformat()}) "
            "to merge duplicates and make room; try again after it."
        )

    # ------------------------------------------------------------------ runs
    def notify_turn(
        self,
        scope_key: str,
        *,
        session_id: str | None = None,
        messages: list[dict[str, Any]] | None = None,
        now: datetime | None = None,
    ) -> ConsolidationRun | None:
        """Record a chat turn: the scope's pending consolidation run is created or pushed back and, with
        ``session_id`` (and ``messages``), the session's digest is extended and its extraction run debounced.

        Returns the session's pending extraction run when there is one, else the consolidation
        run; None when both jobs are off. :meth:`notify_turn_runs` returns both.

        Raises:
            InvalidArgument, InvalidExtractionInput: a malformed session id or message (nothing stored).
        """
        consolidation, extraction = self.notify_turn_runs(scope_key, session_id=session_id, messages=messages, now=now)
        return extraction if extraction is not None else consolidation

    def notify_turn_runs(
        self,
        scope_key: str,
        *,
        session_id: str | None = None,
        messages: list[dict[str, Any]] | None = None,
        now: datetime | None = None,
    ) -> tuple[ConsolidationRun | None, ConsolidationRun | None]:
        """As :meth:`notify_turn`, in one transaction; returns (consolidation run, extraction run)."""
        scope = check_scope(scope_key)
        turn = None if session_id is None and messages is None else self.extraction.check_turn(session_id, messages)

        def fn(tx: Transaction) -> tuple[ConsolidationRun | None, ConsolidationRun | None]:
            settings = self._settings_in(tx, scope)
            consolidation = None if settings.mode == Mode.OFF else R.debounce(tx, settings, tx.now_us)
            extraction = None if turn is None else self.extraction.notify_turn_in(tx, scope, *turn)
            return consolidation, extraction

        return self.led.run(scope, fn, now=now)

    # ------------------------------------------------------------------ extraction
    def extraction_settings(self, scope_key: str) -> ExtractionSettings:
        """The scope's extraction settings (SPEC 4.5; defaults when never set)."""
        return self.extraction.settings(scope_key)

    def update_extraction_settings(
        self, scope_key: str, *, now: datetime | None = None, **changes: Any
    ) -> ExtractionSettings:
        """Validate and store extraction settings (``mode``, ``harness``, ``model``, ``debounce_s``, ...).

        ``mode="off"`` cancels the scope's pending extraction runs and deletes their digests.

        Raises:
            InvalidSettings: a field is invalid (nothing is changed); ScopeError.
        """
        return self.extraction.update_settings(scope_key, now=now, **changes)

    def capabilities(self, scope_key: str) -> dict[str, Any]:
        """What consolidation and extraction offer the scope, for :meth:`ledger.Ledger.capabilities`."""
        with self.led.reading() as db:
            settings = self._settings_in(db, scope_key)
            extraction = self.extraction.settings_in(db, scope_key)
        return {
            "consolidation": {
                "available": True,
                "mode": settings.mode.value,
                "operations": list(ALL_OPS),
                "allowedOperations": list(settings.allowed_ops),
            },
            "extraction": {
                "available": True,
                "mode": extraction.mode.value,
                "enabled": extraction.mode != ExtractionMode.OFF,
            },
        }

    def get_run(self, run_id: str) -> ConsolidationRun:
        with self.led.reading() as db:
            run = R.get(db, run_id)
        if run is None:
            raise RunNotFound(f"no consolidation run {run_id!r}")
        return run

    def _select(self, where: Any, order: tuple[Any, ...], limit: int) -> list[ConsolidationRun]:
        with self.led.reading() as db:
            return R.select_runs(db, where, order=order, limit=limit)

    def runs(self, scope_key: str | None = None, *, limit: int = 100) -> list[ConsolidationRun]:
        """Runs newest first, of one scope or all."""
        where = RC.scope_key == scope_key if scope_key else None
        return self._select(where, (RC.created_at.desc(), RC.id.desc()), limit)

    def due_runs(self, *, now: datetime | None = None, limit: int = 1000) -> list[ConsolidationRun]:
        now_us = self._now(now)
        return self._select(and_(RC.state == "pending", RC.due_at <= now_us), (RC.due_at, RC.id), limit)

    def pending_runs(self, *, limit: int = 1000) -> list[ConsolidationRun]:
        return self._select(RC.state == "pending", (RC.due_at, RC.id), limit)

    def run_due(self, *, now: datetime | None = None, limit: int = 100) -> list[ConsolidationRun]:
        """Execute every due pending run; returns the runs this call settled."""
        settled = []
        for run in self.due_runs(now=now, limit=limit):
            done = self.execute(run.id, now=now)
            if done is not None:
                settled.append(done)
        return settled

    def execute(self, run_id: str, *, now: datetime | None = None) -> ConsolidationRun | None:
        """Claim, run and settle one run. None when the call is stale (not pending, not due, scope busy)
        or when the janitor settled the run first (it outlived its cap + grace).

        Exactly once: any number of concurrent or repeated calls with one run id
        lead to one execution and one settlement. Claim, answer storage, apply and
        settlement each run in their own ledger transaction at their own instant (an
        explicit ``now`` is used for each of them).
        """
        run = self.get_run(run_id)
        if run.job == EXTRACT_JOB:
            return self.extraction.execute(run, now)
        claimed = self.led.run(run.scope_key, lambda tx: self._claim(tx, run), now=now)
        if claimed is None:
            return None
        self._fault("after_claim")
        settings, spent, records = claimed
        return self._run_claimed(run, settings, spent, records, now)

    def _claim(
        self, tx: Transaction, run: ConsolidationRun
    ) -> tuple[ConsolidationSettings, int, list[MemoryRecord]] | None:
        """Claim the run; in the same transaction read what the run needs: settings, spend, active records."""
        settings = self._settings_in(tx, run.scope_key)
        if not R.claim(tx, run.id, settings, tx.now_us):
            return None
        start, end = _month_bounds(tx.now)
        spent = R.month_spend(tx, run.scope_key, start, end)
        tx.prepare()
        return settings, spent, tx.active()

    def _run_claimed(
        self,
        run: ConsolidationRun,
        settings: ConsolidationSettings,
        spent: int,
        records: list[MemoryRecord],
        now: datetime | None,
    ) -> ConsolidationRun | None:
        scope = run.scope_key
        if spent >= settings.spend_budget_micro_usd:
            error = f"monthly spend {spent} micro-USD reached the budget of {settings.spend_budget_micro_usd}"
            return _mine(self._settle(scope, run.id, Outcome.SKIPPED_BUDGET, now, error=error))
        if not records:
            outcome = Outcome.PROPOSED if settings.mode == Mode.PROPOSE else Outcome.APPLIED
            return _mine(self._settle(scope, run.id, outcome, now))
        records, selection = self._candidates(scope, settings, records, now)
        # The model sees short per-run ids (1, 2, ...) and a mark for a record in a conflict group:
        # smaller prompts, and no internal id or group name leaves the service. Targets are mapped back
        # before the answer is stored; an unknown one cannot match.
        aliases = {str(n): r.id for n, r in enumerate(records, start=1)}
        prompt_records = [
            PromptRecord(alias, r.kind.value, r.body or "", None if r.conflict_group is None else IN_GROUP)
            for alias, r in zip(aliases, records, strict=True)
        ]
        try:
            result = self._harness(settings).call(
                prompt_records,
                model=settings.model,
                max_output_tokens=settings.max_output_tokens,
                wall_clock_cap_s=settings.wall_clock_cap_s,
            )
        except HarnessError as exc:
            failed = self._settle(
                scope,
                run.id,
                Outcome.FAILED,
                now,
                error=exc.message,
                usage=exc.usage,
                spend=exc.spend_micro_usd,
                calls=1,
            )
            return _mine(failed)
        except Exception as exc:  # a harness bug must still settle the run
            log.exception("harness %s crashed for run %s", settings.harness, run.id)
            return _mine(self._settle(scope, run.id, Outcome.FAILED, now, error=f"harness error: {type(exc).__name__}"))
        self._store(scope, run.id, _unalias(result, aliases), list(aliases.values()), now, selection=selection)
        self._fault("after_answer_stored")
        return _mine(self._apply_stored(run.id, now, scope_key=scope))

    def _candidates(
        self, scope: str, settings: ConsolidationSettings, records: list[MemoryRecord], now: datetime | None
    ) -> tuple[list[MemoryRecord], Selection[MemoryRecord] | None]:
        """The bounded candidate list (SPEC 4.3), and the selection whose cursor to store (None: a whole scope)."""

        def cost(record: MemoryRecord) -> int:
            # A line with a 3-character alias: aliases are given after the selection.
            group = None if record.conflict_group is None else IN_GROUP
            return record_chars(PromptRecord("000", record.kind.value, record.body or "", group))

        if sum(cost(r) for r in records) <= settings.max_prompt_chars:
            return records, None
        with self.led.reading() as db:
            cursor = S.load_cursor(db, scope)
            since = R.last_prompt_at(db, scope)
        changed = set()
        if since is not None:
            changed = {r.id for r in records if max(to_micros(r.updated_at), to_micros(r.valid_from)) > since}

        def similar(record: MemoryRecord) -> list[str]:
            found = self.led.search(scope, record.body or "", limit=SIMILAR_PER_CHANGED + 1, now=now)
            return [r.id for r in found]

        selection = select_candidates(
            records, max_chars=settings.max_prompt_chars, cost=cost, changed=changed, similar=similar, cursor=cursor
        )
        return selection.records, selection

    def _store(
        self,
        scope: str,
        run_id: str,
        result: HarnessResult,
        record_ids: list[str],
        now: datetime | None,
        *,
        selection: Selection[MemoryRecord] | None = None,
    ) -> None:
        """Store the answer, and register the prompt and answer as text derived from the prompt's records
        (forgetting one of them erases all three columns; see docs/ledger.md, "Derived text")."""

        def fn(tx: Transaction) -> bool:
            stored = R.store_answer(
                tx,
                run_id,
                prompt=result.prompt,
                answer=result.answer,
                raw=result.raw_text,
                usage=result.usage,
                spend_micro_usd=result.spend_micro_usd,
                now_us=tx.now_us,
            )
            if stored:  # after the text is written: a record forgotten meanwhile erases it at once
                tx.register_derived(RUNS, run_id, record_ids=record_ids, columns=("prompt", "answer", "answer_raw"))
                if selection is not None:  # the rotation moves on once the answer is stored
                    S.store_cursor(tx, selection.cursor)
            return stored

        self.led.run(scope, fn, now=now)

    def apply_stored(self, run_id: str, *, now: datetime | None = None) -> ConsolidationRun:
        """Gate and apply a running run's stored answer, and settle it, in one transaction.

        Used right after the call and by the janitor for a run whose worker died after
        storing its answer; never calls the model. If the run was settled meanwhile,
        nothing is applied.
        """
        run = self.get_run(run_id)
        if run.job == EXTRACT_JOB:
            return self.extraction.apply_stored(run_id, run.scope_key, now)[0]
        return self._apply_stored(run_id, now, scope_key=run.scope_key)[0]

    def _apply_stored(
        self, run_id: str, now: datetime | None, *, scope_key: str | None = None
    ) -> tuple[ConsolidationRun, bool]:
        """As :meth:`apply_stored`; also says whether this call was the one that settled the run."""
        scope = scope_key or self.get_run(run_id).scope_key
        try:
            won: bool = self.led.run(scope, lambda tx: self._apply_and_settle(tx, run_id), now=now)
        except _LostRace:
            won = False
        except Exception as exc:
            if exc.__dict__.get("memledger_fault"):
                raise
            # An answer that breaks the apply in a way the gate did not foresee must still settle
            # the run (its usage is already stored), never leave the scope blocked in `running`.
            log.exception("applying the stored answer of run %s failed", run_id)
            return self._settle(scope, run_id, Outcome.FAILED, now, error=f"apply error: {type(exc).__name__}")
        self._fault("after_apply")
        return self.get_run(run_id), won

    def _apply_and_settle(self, tx: Transaction, run_id: str) -> bool:
        """Gate and apply the stored answer at ``tx.now`` (when the answer is applied, SPEC 4.2), then settle."""
        run = R.get(tx, run_id)
        if run is None or run.state != "running":
            return False
        if run.answer is None and run.answer_raw is None:
            # A record the answer was built from was forgotten after it was stored: nothing to apply.
            error = "the stored answer was erased: a record it was built from was forgotten"
            return R.settle(tx, run_id, Outcome.FAILED, tx.now_us, error=error)
        if run.answer is None:
            count = max(1, len(re.findall(r'"op"\s*:', run.answer_raw or "")))
            return R.settle(
                tx,
                run_id,
                Outcome.FAILED,
                tx.now_us,
                error="unparseable answer",
                ops_proposed=count,
                ops_refused=count,
                refusals={UNPARSEABLE: count},
            )
        gate, mode = self._gate(tx, run)
        self._fault("mid_apply")
        applied = apply_batch(tx, gate, mode=mode, run_id=run_id)
        refusals = gate.refusals
        for reason, count in applied.refusals.items():
            refusals[reason] = refusals.get(reason, 0) + count
        outcome = Outcome.PROPOSED if mode == Mode.PROPOSE else Outcome.APPLIED
        won = R.settle(
            tx,
            run_id,
            outcome,
            tx.now_us,
            ops_proposed=gate.proposed,
            ops_applied=applied.applied,
            ops_refused=sum(refusals.values()),
            refusals=refusals,
        )
        if not won:
            raise _LostRace(run_id)  # another settlement won: roll the whole batch back
        return True

    def _gate(self, tx: Transaction, run: ConsolidationRun) -> tuple[GateResult, Mode]:
        """Check the stored answer against the records as they are at ``tx.now``."""
        tx.prepare()
        settings = self._settings_in(tx, run.scope_key)
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
        return gate, mode

    def _settle(
        self,
        scope: str,
        run_id: str,
        outcome: Outcome,
        now: datetime | None,
        *,
        error: str | None = None,
        usage: Usage | None = None,
        spend: int = 0,
        calls: int = 0,
        unanswered: bool = False,
    ) -> tuple[ConsolidationRun, bool]:
        def fn(tx: Transaction) -> bool:
            won = R.settle(
                tx,
                run_id,
                outcome,
                tx.now_us,
                error=error,
                usage=usage,
                spend_micro_usd=spend,
                unanswered=unanswered,
                calls=calls,
            )
            if not won and (usage is not None or spend or calls):
                # Someone else settled first; the call was still made and paid: keep its usage.
                R.add_usage(tx, run_id, usage, spend, calls=calls)
            return won

        won = self.led.run(scope, fn, now=now)
        return self.get_run(run_id), won

    def _harness(self, settings: ConsolidationSettings) -> Harness:
        """The scope's harness (an injected one by name, else the registry's for the scope's target)."""
        injected = self._harnesses.get(settings.harness)
        if injected is not None:
            return injected
        connection = self.connection(
            settings.harness, settings.model, settings.base_url,
            settings.price_in_usd_per_mtok, settings.price_out_usd_per_mtok,
        )  # fmt: skip
        return spec(settings.harness).consolidation(connection)

    def connection(
        self, harness: str, model: str, base_url: str | None, price_in: float | None, price_out: float | None
    ) -> Connection:
        """Where a scope's call goes: the harness's key and server (the scope's ``base_url`` first), and the
        prices it is charged at (the scope's own price of ``model`` over the table). Harnesses keep no
        connection, so one is built per run."""
        if harness == "openai":
            api_key, url = self.openai_api_key, base_url or self.openai_base_url
        else:
            api_key, url = self.api_key, self.base_url
        prices = scope_prices(self.prices, model=model, price_in=price_in, price_out=price_out)
        return Connection(api_key=api_key, base_url=url, prices=prices)

    # ------------------------------------------------------------------ recovery
    def recover_stuck(self, *, now: datetime | None = None) -> list[ConsolidationRun]:
        """Settle runs stuck in ``running`` past cap + grace: apply a stored answer, else ``abandoned``.

        Exactly once with several janitors: every settlement is conditional, and only
        the runs this call settled are returned.
        """
        now_us = self._now(now)
        grace_us = round(self.janitor_grace_s * 1_000_000)
        stuck = self._select(RC.state == "running", (RC.started_at, RC.id), 1000)
        recovered = []
        for run in stuck:
            assert run.started_at is not None
            cap_s = run.wall_clock_cap_s if run.wall_clock_cap_s is not None else S.DEFAULT_CAP_S
            if now_us < to_micros(run.started_at) + round(cap_s * 1_000_000) + grace_us:
                continue
            try:
                done, won = self._recover(run, now)
            except Exception:  # one bad run must not block the recovery of the others
                log.exception("recovering run %s failed; the next janitor pass tries again", run.id)
                continue
            if won:
                recovered.append(done)
        return recovered

    def _recover(self, run: ConsolidationRun, now: datetime | None) -> tuple[ConsolidationRun, bool]:
        if run.answer_stored_at is None:
            done, won = self._settle(
                run.scope_key,
                run.id,
                Outcome.ABANDONED,
                now,
                error="worker stopped before the answer was stored; settled by the janitor",
                unanswered=True,
            )
            if won or done.state == "settled":
                return done, won
            # An answer was stored between the read and the abandon: apply it instead.
        if run.job == EXTRACT_JOB:
            return self.extraction.apply_stored(run.id, run.scope_key, now)
        return self._apply_stored(run.id, now, scope_key=run.scope_key)


def _mine(settled: tuple[ConsolidationRun, bool]) -> ConsolidationRun | None:
    """The run, when this call settled it; None when another settlement (the janitor's) came first."""
    run, won = settled
    return run if won else None


class _LostRace(Exception):
    """Another caller settled the run first; the transaction that tried to apply its batch rolls back."""


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
