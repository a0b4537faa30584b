"""A run's life, shared by both jobs (consolidation and extraction): call, store the answer, settle, fault.

Life of a run of either job (the job decides what is claimed, called and applied)::

    pending ──claim──► running ──call──► answer stored ──apply+settle──► settled
       │                  │                                 (one transaction)
       └─ cancelled ──────┴── budget reached, nothing to do, call failed ──► settled

Every move is a conditional UPDATE (:mod:`consolidation.runs`), so concurrent callers
(threads, processes, redelivered queue messages) cannot execute or settle a run twice.
The answer and its usage are stored before anything is applied: a crash after the call
never pays for a second call (the janitor applies the stored answer).

A job is a :class:`Job`: :class:`consolidation.service.ConsolidationService` keeps one
table ``{job name: Job}`` and hands each run to its job.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Protocol

from consolidation import runs
from consolidation.errors import HarnessError, LostRace
from consolidation.harnesses import HarnessResult
from consolidation.models import ConsolidationRun, Outcome, Usage, usage_problem
from consolidation.tables import RUNS
from ledger import Ledger, Transaction

log = logging.getLogger(__name__)

FaultHook = Callable[[str], None]
ApplyFn = Callable[[Transaction, str], bool]
"""A job's gate + apply + settle of a stored answer, in the scope's transaction: True when it settled the run."""


class Job(Protocol):
    """What a job does with one of its runs (claimed by its own rules, applied by its own gate)."""

    def execute(self, run: ConsolidationRun, now: datetime | None) -> ConsolidationRun | None:
        """Claim, call, store, apply and settle; None when stale or settled by someone else."""
        ...

    def apply_stored(self, run_id: str, scope_key: str, now: datetime | None) -> tuple[ConsolidationRun, bool]:
        """Apply a running run's stored answer and settle it; also says whether this call settled it."""
        ...


def mine(settled: tuple[ConsolidationRun, bool]) -> ConsolidationRun | None:
    """The run, when this call settled it; None when another settlement (the janitor's) came first."""
    run, won = settled
    return run if won else None


class RunLife:
    """The moves of a run that both jobs make the same way, each in its own ledger transaction.

    ``fault_hook`` is called with a step name (``after_claim``, ``after_answer_stored``,
    ``mid_apply``, ``after_apply``) so fault tests can kill a process at an exact point.
    """

    def __init__(self, led: Ledger, fault_hook: FaultHook | None = None) -> None:
        self.led = led
        self._fault_hook = fault_hook

    def fault(self, step: str) -> None:
        """Fault tests stop the process here; what the hook raises is marked so no handler swallows it."""
        if self._fault_hook is None:
            return
        try:
            self._fault_hook(step)
        except BaseException as exc:
            exc.__dict__["memledger_fault"] = True
            raise

    def get(self, run_id: str) -> ConsolidationRun:
        """The run as stored (it exists: its caller holds its id)."""
        with self.led.reading() as db:
            found = runs.get(db, run_id)
        assert found is not None
        return found

    def settle(
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
        """Settle a running run without applying anything; a call's usage is kept even if another settled first."""

        def fn(tx: Transaction) -> bool:
            won = runs.settle(
                tx, run_id, outcome, tx.now_us, error=error, usage=usage, spend_micro_usd=spend,
                unanswered=unanswered, calls=calls,
            )  # fmt: skip
            if not won and (usage is not None or spend or calls):
                # Someone else settled first; the call was still made and paid: keep its usage.
                runs.add_usage(tx, run_id, usage, spend, calls=calls)
            return won

        won = self.led.run(scope, fn, now=now)
        return self.get(run_id), won

    def settle_over_budget(
        self, run: ConsolidationRun, now: datetime | None, *, spent: int, budget: int
    ) -> ConsolidationRun | None:
        """Settle ``skipped_budget`` (the month's spend reached the budget): the run when this call settled it."""
        error = f"monthly spend {spent} micro-USD reached the budget of {budget}"
        return mine(self.settle(run.scope_key, run.id, Outcome.SKIPPED_BUDGET, now, error=error))

    def call(
        self, run: ConsolidationRun, now: datetime | None, harness: str, call: Callable[[], HarnessResult]
    ) -> HarnessResult | tuple[ConsolidationRun, bool]:
        """Make the run's one model call; a failed call settles the run ``failed`` (usage kept) instead, and so
        does a call whose reported usage is impossible (:func:`usage_problem`: not stored, the answer unused)."""
        try:
            result = call()
        except HarnessError as exc:
            problem = usage_problem(exc.usage)
            usage, spend = (None, 0) if problem else (exc.usage, exc.spend_micro_usd)
            error = f"{exc.message}; {problem}" if problem else exc.message
            return self.settle(
                run.scope_key, run.id, Outcome.FAILED, now, error=error, usage=usage, spend=spend, calls=1
            )  # fmt: skip
        except Exception as exc:  # a harness bug must still settle the run
            log.exception("%s harness %s crashed for run %s", run.job, harness, run.id)
            return self.settle(run.scope_key, run.id, Outcome.FAILED, now, error=f"harness error: {type(exc).__name__}")
        problem = usage_problem(result.usage)
        if problem is not None:
            log.warning("%s run %s: %s", run.job, run.id, problem)
            error = f"{problem}; the answer was not used"
            return self.settle(run.scope_key, run.id, Outcome.FAILED, now, error=error, calls=1)
        return result

    def store(
        self,
        run: ConsolidationRun,
        result: HarnessResult,
        record_ids: Sequence[str],
        now: datetime | None,
        *,
        also: Callable[[Transaction], None] | None = None,
    ) -> None:
        """Store the answer, and register the prompt and answer as text derived from the prompt's records
        (forgetting one of them erases all three columns; see docs/ledger.md, "Derived text").
        ``also`` runs in the same transaction once the answer is stored."""

        def fn(tx: Transaction) -> None:
            stored = runs.store_answer(
                tx, run.id, prompt=result.prompt, answer=result.answer, raw=result.raw_text, usage=result.usage,
                spend_micro_usd=result.spend_micro_usd, now_us=tx.now_us, error=result.error,
            )  # fmt: skip
            if stored:  # after the text is written: a record forgotten meanwhile erases it at once
                tx.register_derived(RUNS, run.id, record_ids=record_ids, columns=("prompt", "answer", "answer_raw"))
                if also is not None:
                    also(tx)

        self.led.run(run.scope_key, fn, now=now)

    def answer(
        self,
        run: ConsolidationRun,
        now: datetime | None,
        *,
        harness: str,
        call: Callable[[], HarnessResult],
        record_ids: Sequence[str],
        apply: ApplyFn,
        also: Callable[[Transaction], None] | None = None,
    ) -> ConsolidationRun | None:
        """Call, store the answer, then apply it and settle; the run when this call settled it, else None."""
        result = self.call(run, now, harness, call)
        if not isinstance(result, HarnessResult):
            return mine(result)
        self.store(run, result, record_ids, now, also=also)
        self.fault("after_answer_stored")
        return mine(self.apply_stored(run.id, run.scope_key, now, apply))

    def apply_stored(
        self, run_id: str, scope: str, now: datetime | None, apply: ApplyFn
    ) -> tuple[ConsolidationRun, bool]:
        """Run ``apply`` in the scope's transaction; an apply that breaks still settles the run ``failed``."""
        try:
            won: bool = self.led.run(scope, lambda tx: apply(tx, run_id), now=now)
        except LostRace:
            won = False
        except Exception as exc:
            if exc.__dict__.get("memledger_fault"):
                raise
            # An answer that breaks the apply in a way the gate did not foresee must still settle
            # the run (its usage is already stored), never leave the scope blocked in `running`.
            log.exception("applying the stored answer of run %s failed", run_id)
            return self.settle(scope, run_id, Outcome.FAILED, now, error=f"apply error: {type(exc).__name__}")
        self.fault("after_apply")
        return self.get(run_id), won
