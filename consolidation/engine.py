"""The run engine: the life of a run of either job, top to bottom, each step a method.

Life of a run (the job, :class:`Job`, supplies what is claimed, called, gated and applied)::

    pending ──claim──► running ──call──► answer stored ──gate+apply+settle──► settled
       │                  │                                 (one transaction)
       └─ cancelled ──────┴── budget reached, nothing to do, call failed ──► settled

:meth:`RunEngine.execute` is that line: :meth:`~RunEngine.claim`, :meth:`~RunEngine.call`,
:meth:`~RunEngine.store`, :meth:`~RunEngine.apply_stored` (gate, apply, settle). Each step that
writes is one ledger transaction (its instant read once the scope's lock is held), and every
write of a run row is one conditional statement of :mod:`consolidation.runs`, so concurrent
callers (threads, processes, redelivered queue messages) cannot execute or settle a run twice.
The answer and its usage are stored before anything is applied: a crash after the call never
pays for a second call (the janitor applies the stored answer). The run row is read where a
step needs it: by its caller before the claim (its scope and job), at the start of the apply
(the stored answer, in the apply's transaction); a settlement returns the settled row.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, Protocol, TypeVar

from consolidation import runs
from consolidation.errors import HarnessError, LostRace
from consolidation.gate import UNPARSEABLE
from consolidation.harnesses import HarnessResult
from consolidation.models import ConsolidationRun, Outcome, RunState, Usage, usage_problem
from consolidation.tables import RUNS
from ledger import Ledger, Transaction

log = logging.getLogger(__name__)

FaultHook = Callable[[str], None]
T = TypeVar("T")
ERASED = "the stored answer was erased: a record it was built from was forgotten"


@dataclass(frozen=True)
class Claim(Generic[T]):
    """What a job read in the transaction that claimed its run: the harness (for the logs), the month's spend
    and the budget it counts against, and the job's own ``inputs``."""

    harness: str
    spent_micro_usd: int
    budget_micro_usd: int
    inputs: T


@dataclass(frozen=True)
class Skip:
    """A run that settles without a call: nothing to send (``error`` None), or a call that cannot be made."""

    outcome: Outcome
    error: str | None = None


class Plan(Protocol):
    """A job's prepared call; ``record_ids``: the records its prompt was built from (their forgetting erases it)."""

    @property
    def record_ids(self) -> Sequence[str]: ...


@dataclass
class Settlement:
    """What a gated and applied answer settles a run with (``refusals``: count by reason)."""

    outcome: Outcome
    ops_proposed: int = 0
    ops_applied: int = 0
    proposals_written: int = 0
    refusals: dict[str, int] = field(default_factory=dict)


class Job(Protocol):
    """The steps a job supplies to the engine, in the order the engine takes them."""

    def claim(self, tx: Transaction, run: ConsolidationRun) -> Claim[Any] | None:
        """In the claim's transaction: claim the run (:func:`runs.claim`), read what its call needs; None: lost."""
        ...

    def plan(self, run: ConsolidationRun, claim: Claim[Any], now: datetime | None) -> Plan | Skip:
        """The call to make (no transaction held), or why the run settles without one."""
        ...

    def call(self, plan: Any) -> HarnessResult:
        """The one model call. Raises HarnessError."""
        ...

    def answer_stored(self, tx: Transaction, run_id: str, plan: Any, result: HarnessResult) -> None:
        """In the transaction that stored the answer, once it is stored (and registered as derived from the
        prompt's records)."""
        ...

    def before_apply(self, tx: Transaction, run: ConsolidationRun) -> ConsolidationRun:
        """In the apply's transaction, before anything is read from the stored answer: the run as it is to be
        applied (its texts None if the job erased them now)."""
        ...

    def unparseable_ops(self, raw: str) -> int:
        """How many operations an answer that did not parse counts as refused."""
        ...

    def gate(self, tx: Transaction, run: ConsolidationRun) -> Any:
        """Check the stored answer against the ledger as it is at ``tx.now``."""
        ...

    def apply(self, tx: Transaction, run: ConsolidationRun, gate: Any) -> Settlement:
        """Write what passed the gate (applied or proposed), in the transaction that settles the run."""
        ...


def mine(settled: tuple[ConsolidationRun, bool]) -> ConsolidationRun | None:
    """The run, when this call settled it; None when another settlement (the janitor's) came first."""
    run, won = settled
    return run if won else None


class RunEngine:
    """Executes, applies and settles the runs of both jobs of one ledger (``jobs``: by job name). Thread-safe.

    ``fault_hook`` is called with a step name (``after_claim``, ``after_answer_stored``,
    ``mid_apply``, ``after_apply``) so fault tests can kill a process at an exact point.
    """

    def __init__(self, led: Ledger, jobs: Mapping[str, Job], fault_hook: FaultHook | None = None) -> None:
        self.led = led
        self.jobs = dict(jobs)
        self._fault_hook = fault_hook

    def execute(self, run: ConsolidationRun, now: datetime | None) -> ConsolidationRun | None:
        """Claim, call, store, gate, apply and settle ``run`` (as read: its id, scope and job); the run when this
        call settled it, None when the claim was lost (stale, not due, scope busy) or another settled it first."""
        job = self.jobs[run.job]
        claim = self.claim(job, run, now)
        if claim is None:
            return None
        self.fault("after_claim")
        if claim.spent_micro_usd >= claim.budget_micro_usd:
            error = f"monthly spend {claim.spent_micro_usd} micro-USD reached the budget of {claim.budget_micro_usd}"
            return mine(self.settle(run, Outcome.SKIPPED_BUDGET, now, error=error))
        plan = job.plan(run, claim, now)
        if isinstance(plan, Skip):
            return mine(self.settle(run, plan.outcome, now, error=plan.error))
        result = self.call(job, run, plan, claim.harness, now)
        if not isinstance(result, HarnessResult):
            return mine(result)
        self.store(job, run, plan, result, now)
        self.fault("after_answer_stored")
        return mine(self.apply_stored(run, now))

    def claim(self, job: Job, run: ConsolidationRun, now: datetime | None) -> Claim[Any] | None:
        """pending → running, and what the call needs, in one transaction (the job's)."""
        return self.led.run(run.scope_key, lambda tx: job.claim(tx, run), now=now)

    def call(
        self, job: Job, run: ConsolidationRun, plan: Plan, harness: str, now: datetime | None
    ) -> HarnessResult | tuple[ConsolidationRun, bool]:
        """Make the run's one model call; a failed call settles the run ``failed`` (usage kept) instead, and so
        does a call whose reported usage is impossible (:func:`usage_problem`: not stored, the answer unused)."""
        try:
            result = job.call(plan)
        except HarnessError as exc:
            problem = usage_problem(exc.usage)
            usage, spend = (None, 0) if problem else (exc.usage, exc.spend_micro_usd)
            error = f"{exc.message}; {problem}" if problem else exc.message
            return self.settle(run, Outcome.FAILED, now, error=error, usage=usage, spend=spend, calls=1)
        except Exception as exc:  # a harness bug must still settle the run
            log.exception("%s harness %s crashed for run %s", run.job, harness, run.id)
            return self.settle(run, Outcome.FAILED, now, error=f"harness error: {type(exc).__name__}")
        problem = usage_problem(result.usage)
        if problem is not None:
            log.warning("%s run %s: %s", run.job, run.id, problem)
            return self.settle(run, Outcome.FAILED, now, error=f"{problem}; the answer was not used", calls=1)
        return result

    def store(self, job: Job, run: ConsolidationRun, plan: Plan, result: HarnessResult, now: datetime | None) -> None:
        """Store the answer, and register the prompt and answer as text derived from the prompt's records
        (forgetting one of them erases all three columns; see docs/ledger.md, "Derived text"); then the
        job's own step, in the same transaction."""

        def fn(tx: Transaction) -> None:
            stored = runs.store_answer(
                tx, run.id, prompt=result.prompt, answer=result.answer, raw=result.raw_text, usage=result.usage,
                spend_micro_usd=result.spend_micro_usd, now_us=tx.now_us, error=result.error,
            )  # fmt: skip
            if stored:  # after the text is written: a record forgotten meanwhile erases it at once
                tx.register_derived(
                    RUNS, run.id, record_ids=plan.record_ids, columns=("prompt", "answer", "answer_raw")
                )
                job.answer_stored(tx, run.id, plan, result)

        self.led.run(run.scope_key, fn, now=now)

    def apply_stored(self, run: ConsolidationRun, now: datetime | None) -> tuple[ConsolidationRun, bool]:
        """Gate and apply the run's stored answer and settle it, in one transaction; never calls the model. Also
        says whether this call settled it. An apply that breaks still settles the run ``failed``."""
        try:
            settled: ConsolidationRun | None = self.led.run(run.scope_key, lambda tx: self._apply(tx, run), now=now)
        except LostRace:
            settled = None
        except Exception as exc:
            if exc.__dict__.get("memledger_fault"):
                raise
            # An answer that breaks the apply in a way the gate did not foresee must still settle
            # the run (its usage is already stored), never leave the scope blocked in `running`.
            log.exception("applying the stored answer of run %s failed", run.id)
            return self.settle(run, Outcome.FAILED, now, error=f"apply error: {type(exc).__name__}")
        self.fault("after_apply")
        return (settled, True) if settled is not None else (self._read(run.id), False)

    def _apply(self, tx: Transaction, claimed: ConsolidationRun) -> ConsolidationRun | None:
        """Gate and apply the stored answer at ``tx.now`` (when the answer is applied), then settle: the settled run,
        None when the run is no longer running. The job may erase the stored texts first (:meth:`Job.before_apply`):
        the run then settles as erased. Raises LostRace when another settlement won (rolls it all back)."""
        run = runs.get(tx, claimed.id)
        if run is None or run.state != RunState.RUNNING:
            return None
        job = self.jobs[run.job]
        run = job.before_apply(tx, run)
        if run.answer is None and run.answer_raw is None:
            # A record the answer was built from was forgotten after it was stored: nothing to apply.
            settlement, error = Settlement(Outcome.FAILED), ERASED
        elif run.answer is None:
            # The harness's reading of why (cut off at max_tokens, a content filter) was stored with the answer.
            count = job.unparseable_ops(run.answer_raw or "")
            settlement = Settlement(Outcome.FAILED, ops_proposed=count, refusals={UNPARSEABLE: count})
            error = run.error or "unparseable answer"
        else:
            tx.prepare()
            gate = job.gate(tx, run)
            self.fault("mid_apply")
            settlement, error = job.apply(tx, run, gate), None
        settled = runs.settle(
            tx, run.id, settlement.outcome, tx.now_us, error=error, ops_proposed=settlement.ops_proposed,
            ops_applied=settlement.ops_applied, proposals_written=settlement.proposals_written,
            ops_refused=sum(settlement.refusals.values()), refusals=settlement.refusals,
        )  # fmt: skip
        if settled is None:
            raise LostRace(run.id)
        return settled

    def settle(
        self,
        run: ConsolidationRun,
        outcome: Outcome,
        now: datetime | None,
        *,
        error: str | None = None,
        usage: Usage | None = None,
        spend: int = 0,
        calls: int = 0,
        unanswered: bool = False,
    ) -> tuple[ConsolidationRun, bool]:
        """Settle a running run without applying anything; a call's usage is kept even if another settled first.
        Returns the run as it is now, and whether this call settled it."""

        def fn(tx: Transaction) -> tuple[ConsolidationRun, bool]:
            settled = runs.settle(
                tx, run.id, outcome, tx.now_us, error=error, usage=usage, spend_micro_usd=spend,
                unanswered=unanswered, calls=calls,
            )  # fmt: skip
            if settled is not None:
                return settled, True
            if usage is not None or spend or calls:
                # Someone else settled first; the call was still made and paid: keep its usage.
                runs.add_usage(tx, run.id, usage, spend, calls=calls)
            found = runs.get(tx, run.id)
            assert found is not None
            return found, False

        return self.led.run(run.scope_key, fn, now=now)

    def fault(self, step: str) -> None:
        """Fault tests stop the process here; what the hook raises is marked so no handler swallows it."""
        if self._fault_hook is None:
            return
        try:
            self._fault_hook(step)
        except BaseException as exc:
            exc.__dict__["memledger_fault"] = True
            raise

    def _read(self, run_id: str) -> ConsolidationRun:
        """The run as stored, when another settlement came first (it exists: its caller holds its id)."""
        with self.led.reading() as db:
            found = runs.get(db, run_id)
        assert found is not None
        return found
