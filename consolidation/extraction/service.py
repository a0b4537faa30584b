"""Extraction runs (SPEC 4.5): debounced per session, one hidden call, the gate, settled exactly once.

Life of an extraction run (a row of ``consolidation_runs`` with ``job = 'extract'``)::

    notify_turn(session, messages) ──► digest extended, pending run (one per session) created or pushed back
    claim ──► running: the digest is taken into the run (the digest row is gone; a new turn starts a new one)
    call ──► answer stored (with usage) ──► gate + proposals + settle, one transaction; the run's copy of the
                                           transcript (its prompt) is dropped when it settles

The same exactly-once rules as consolidation: every move is a conditional UPDATE;
the answer is stored before anything is applied, so a crash after the call never
pays for a second one (the janitor applies the stored answer); a run with no spend
budget left settles ``skipped_budget`` without a call. Nothing here knows of queues.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Table, delete, text

from consolidation import runs as R
from consolidation.extraction import digest as D
from consolidation.extraction import settings as XS
from consolidation.extraction.gate import BUDGET_EXCEEDED, UNPARSEABLE, GateResult, check_proposals
from consolidation.extraction.prompt import MAX_PINNED, decode_user_message
from consolidation.harnesses.base import HarnessError
from consolidation.harnesses.extract_base import Extractor, get_extractor
from consolidation.models import ConsolidationRun, Outcome
from ledger.audit import check_session_id
from ledger.db import execute, query
from ledger.errors import BudgetExceeded, InvalidArgument
from ledger.instants import from_micros, to_micros
from ledger.models import EventKind, ExtractionDigestRow, Provenance
from ledger.screening import screen_body

if TYPE_CHECKING:
    from consolidation.service import ConsolidationService

log = logging.getLogger(__name__)

JOB = "extract"
DIGESTS: Table = ExtractionDigestRow.__table__  # type: ignore[attr-defined]

# The turn path runs on every chat turn: its statements go through ledger.db's direct path.
_DIGEST_READ = "SELECT messages, next_seq FROM extraction_digests WHERE scope_key = :s AND session_id = :sid"
_DIGEST_WRITE = (
    "INSERT INTO extraction_digests (scope_key, session_id, messages, chars, next_seq, updated_at) "
    "VALUES (:s, :sid, :m, :c, :seq, :n) ON CONFLICT (scope_key, session_id) DO UPDATE SET "
    "messages = excluded.messages, chars = excluded.chars, next_seq = excluded.next_seq, "
    "updated_at = excluded.updated_at"
)

# Every non-forgotten body of a scope: what a proposal must not duplicate.
_BODIES = "SELECT body FROM memory_records WHERE scope_key = :s AND status <> 'deleted' AND body IS NOT NULL"
# Up to 20 active bodies, newest first: "already pinned, do not re-propose".
_PINNED = (
    "SELECT body FROM memory_records WHERE scope_key = :s AND status = 'active' AND body IS NOT NULL "
    "AND (expires_at IS NULL OR expires_at > :n) ORDER BY valid_from DESC, id LIMIT :lim"
)


def _month_bounds(now_us: int) -> tuple[int, int]:
    now = from_micros(now_us).astimezone(UTC)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
    return to_micros(start), to_micros(end)


class ExtractionJobs:
    """The extraction half of a :class:`~consolidation.service.ConsolidationService` (same runs table)."""

    def __init__(self, service: ConsolidationService, extractors: Mapping[str, Extractor] | None = None) -> None:
        self.svc = service
        self.led = service.led
        self._extractors: dict[str, Extractor] = dict(extractors or {})

    # ------------------------------------------------------------------ settings
    def settings_in(self, conn: Connection, scope_key: str) -> XS.ExtractionSettings:
        found = XS.load(conn, scope_key)
        return found or XS.defaults(scope_key, api_key=self.svc.api_key, prices=self.svc.prices)

    def settings(self, scope_key: str) -> XS.ExtractionSettings:
        from ledger.reads import check_scope

        with self.led.engine.connect() as conn:
            return self.settings_in(conn, check_scope(scope_key))

    def update_settings(self, scope_key: str, *, now: datetime | None = None, **changes: Any) -> XS.ExtractionSettings:
        """Validate and store; ``mode="off"`` cancels the scope's pending extraction runs and drops their digests.

        Raises:
            InvalidSettings: a field is invalid (nothing changed); ScopeError.
        """
        from ledger.reads import check_scope

        scope = check_scope(scope_key)
        now_us = to_micros(self.led.now(now))

        def fn(conn: Connection) -> XS.ExtractionSettings:
            new = XS.merge(self.settings_in(conn, scope), changes, self.svc.prices)
            XS.store(conn, new, now_us)
            if new.mode == XS.ExtractionMode.OFF:
                conn.execute(
                    text(
                        "UPDATE consolidation_runs SET state = 'settled', outcome = 'cancelled', settled_at = :n, "
                        "prompt = NULL WHERE scope_key = :s AND state = 'pending' AND job = 'extract'"
                    ),
                    {"n": now_us, "s": scope},
                )
                conn.execute(delete(DIGESTS).where(DIGESTS.c.scope_key == scope))
            return new

        result: XS.ExtractionSettings = self.led.write(scope, fn)
        return result

    # ------------------------------------------------------------------ turns
    def check_turn(self, session_id: object, messages: object) -> tuple[str, list[dict[str, Any]]]:
        """Validate a turn before anything is written. Raises InvalidArgument / InvalidExtractionInput."""
        try:
            session = check_session_id(session_id)
        except InvalidArgument as exc:
            raise InvalidArgument(f"sessionId: {exc.message}") from None
        return session, D.check_messages(messages) if messages is not None else []

    def notify_turn_in(
        self, conn: Connection, scope_key: str, session_id: str, messages: Sequence[Mapping[str, Any]], now_us: int
    ) -> ConsolidationRun | None:
        """Inside the scope's write transaction: extend the session's digest and debounce its run.

        None (and nothing stored) when extraction is off or the turn carried no message.
        """
        settings = self.settings_in(conn, scope_key)
        if settings.mode == XS.ExtractionMode.OFF or not messages:
            return None
        found = query(conn, _DIGEST_READ, {"s": scope_key, "sid": session_id})
        current = D.loads(found[0][0]) if found else []
        digest, next_seq = D.extend(current, messages, next_seq=found[0][1] if found else 0)
        execute(
            conn,
            _DIGEST_WRITE,
            {
                "s": scope_key,
                "sid": session_id,
                "m": D.dumps(digest),
                "c": D.chars(digest),
                "seq": next_seq,
                "n": now_us,
            },
        )
        return self._debounce(conn, settings, session_id, now_us)

    def _debounce(
        self, conn: Connection, settings: XS.ExtractionSettings, session_id: str, now_us: int
    ) -> ConsolidationRun:
        debounce_us = round(settings.debounce_s * 1_000_000)
        where = "scope_key = :s AND state = 'pending' AND job = 'extract' AND session_id = :sid"
        params = {"s": settings.scope_key, "sid": session_id}
        pending = R.select(conn, where, params, order="id", limit=1)
        if pending:
            run = pending[0]
            due = now_us + debounce_us
            if settings.max_wait_s is not None:
                due = min(due, to_micros(run.created_at) + round(settings.max_wait_s * 1_000_000))
            due = max(due, to_micros(run.due_at))
            conn.execute(
                text(
                    "UPDATE consolidation_runs SET turns = turns + 1, due_at = :d WHERE id = :id AND state = 'pending'"
                ),
                {"d": due, "id": run.id},
            )
            run_id = run.id
        else:
            run_id = R.new_run_id()
            conn.execute(
                text(
                    "INSERT INTO consolidation_runs (id, scope_key, state, turns, created_at, due_at, refusals, job, "
                    "session_id) VALUES (:id, :s, 'pending', 1, :n, :d, '{}', 'extract', :sid)"
                ),
                {"id": run_id, "s": settings.scope_key, "n": now_us, "d": now_us + debounce_us, "sid": session_id},
            )
        fresh = R.get(conn, run_id)
        assert fresh is not None
        return fresh

    # ------------------------------------------------------------------ execution
    def execute(self, run: ConsolidationRun, now_us: int) -> ConsolidationRun | None:
        """Claim, call, store, gate and settle one extraction run; None when stale or settled by someone else."""
        claimed = self.led.write(run.scope_key, lambda conn: self._claim(conn, run, now_us))
        if claimed is None:
            return None
        self.svc._fault("after_claim")
        settings, spent, budget, digest, pinned = claimed
        if spent >= budget:
            error = f"monthly spend {spent} micro-USD reached the budget of {budget}"
            return _mine(self.svc._settle(run.id, Outcome.SKIPPED_BUDGET, now_us, error=error))
        if not digest:
            return _mine(self.svc._settle(run.id, Outcome.PROPOSED, now_us))
        try:
            result = self._extractor(settings.harness).extract(
                digest,
                pinned,
                model=settings.model,
                max_output_tokens=settings.max_output_tokens,
                wall_clock_cap_s=settings.wall_clock_cap_s,
            )
        except HarnessError as exc:
            settled = self.svc._settle(
                run.id,
                Outcome.FAILED,
                now_us,
                error=exc.message,
                usage=exc.usage,
                spend=exc.spend_micro_usd,
                calls=1,
            )
            return _mine(settled)
        except Exception as exc:  # a harness bug must still settle the run
            log.exception("extraction harness %s crashed for run %s", settings.harness, run.id)
            return _mine(self.svc._settle(run.id, Outcome.FAILED, now_us, error=f"harness error: {type(exc).__name__}"))
        self.svc._store(run.id, result, now_us)
        self.svc._fault("after_answer_stored")
        return _mine(self.apply_stored(run.id, run.scope_key, now_us))

    def _claim(
        self, conn: Connection, run: ConsolidationRun, now_us: int
    ) -> tuple[XS.ExtractionSettings, int, int, list[D.DigestMessage], list[str]] | None:
        """pending → running; take the session's digest into the run; read the spend and the pinned bodies."""
        settings = self.settings_in(conn, run.scope_key)
        done = execute(
            conn,
            "UPDATE consolidation_runs SET state = 'running', started_at = :n, harness = :h, model = :m, "
            "mode = 'propose', wall_clock_cap_s = :cap "
            f"WHERE id = :id AND state = 'pending' AND due_at <= :n AND {R._NO_OTHER_RUNNING}",
            {"n": now_us, "id": run.id, "h": settings.harness, "m": settings.model, "cap": settings.wall_clock_cap_s},
        )
        if done != 1:
            return None
        key = {"s": run.scope_key, "sid": run.session_id or ""}
        found = query(conn, _DIGEST_READ, key)
        stored = found[0][0] if found else None
        execute(conn, "DELETE FROM extraction_digests WHERE scope_key = :s AND session_id = :sid", key)
        start, end = _month_bounds(now_us)
        spent = R.month_spend(conn, run.scope_key, start, end)
        budget = self.svc._settings_in(conn, run.scope_key).spend_budget_micro_usd
        pinned = [r[0] for r in conn.execute(text(_PINNED), {"s": run.scope_key, "n": now_us, "lim": MAX_PINNED}).all()]
        return settings, spent, budget, D.loads(stored) if stored else [], pinned

    def apply_stored(self, run_id: str, scope_key: str, now_us: int) -> tuple[ConsolidationRun, bool]:
        """Gate the stored answer, store what passes as proposals, settle — one transaction."""
        try:
            won: bool = self.led.write(scope_key, lambda conn: self._apply_and_settle(conn, run_id, now_us))
        except Exception as exc:
            if exc.__dict__.get("memledger_fault"):
                raise
            log.exception("applying the stored extraction answer of run %s failed", run_id)
            return self.svc._settle(run_id, Outcome.FAILED, now_us, error=f"apply error: {type(exc).__name__}")
        self.svc._fault("after_apply")
        return self.svc.get_run(run_id), won

    def _apply_and_settle(self, conn: Connection, run_id: str, now_us: int) -> bool:
        run = R.get(conn, run_id)
        if run is None or run.state != "running":
            return False
        if run.answer is None:
            return R.settle(
                conn, run_id, Outcome.FAILED, now_us, error="unparseable answer", ops_proposed=1, ops_refused=1,
                refusals={UNPARSEABLE: 1},
            )  # fmt: skip
        self.led.prepare_in(conn, run.scope_key, now_us)
        digest = _digest_of(run.prompt)
        bodies = [r[0] for r in query(conn, _BODIES, {"s": run.scope_key})]
        gate = check_proposals(
            run.answer,
            existing_bodies=bodies,
            digest=digest,
            screen=lambda body: screen_body(body, max_chars=self.led.max_body_chars),
        )
        self.svc._fault("mid_apply")
        stored = self._store_proposals(conn, run, gate, now_us)
        refusals = gate.refusals
        over = len(gate.passed) - stored
        if over:
            refusals[BUDGET_EXCEEDED] = refusals.get(BUDGET_EXCEEDED, 0) + over
        return R.settle(
            conn,
            run_id,
            Outcome.PROPOSED,
            now_us,
            ops_proposed=gate.proposed,
            ops_applied=stored,
            ops_refused=sum(refusals.values()),
            refusals=refusals,
        )

    def _store_proposals(self, conn: Connection, run: ConsolidationRun, gate: GateResult, now_us: int) -> int:
        """Store each passed proposal; one over the budget is refused before it is stored, and recorded."""
        stored = 0
        for proposal in gate.passed:
            try:
                self.led.supersede_in(
                    conn,
                    scope_key=run.scope_key,
                    target_ids=[],
                    body=proposal.body,
                    kind=proposal.kind,
                    provenance=Provenance.MODEL_PROPOSAL,
                    now_us=now_us,
                    propose=True,
                    confidence_bps=proposal.confidence_bps,
                    rationale=proposal.rationale,
                    run_id=run.id,
                    source_session_id=run.session_id or None,
                )
            except BudgetExceeded as exc:
                self.led.event(
                    conn,
                    EventKind.PROPOSAL_REFUSED,
                    at_us=now_us,
                    scope_key=run.scope_key,
                    reason=exc.reason,
                    run_id=run.id,
                    detail={"budget": exc.budget, "active": exc.active, "proposed": exc.proposed, "job": JOB},
                )
                continue
            stored += 1
        return stored

    def _extractor(self, name: str) -> Extractor:
        if name not in self._extractors:
            self._extractors[name] = get_extractor(
                name, api_key=self.svc.api_key, base_url=self.svc.base_url, prices=self.svc.prices
            )
        return self._extractors[name]


def _digest_of(prompt: str | None) -> list[D.DigestMessage]:
    """The digest a run's stored prompt carried (its messages' ids and roles judge ``source_message_id``)."""
    if not prompt:
        return []
    try:
        return decode_user_message(prompt)[0]
    except ValueError:
        return []


def _mine(settled: tuple[ConsolidationRun, bool]) -> ConsolidationRun | None:
    run, won = settled
    return run if won else None
