"""Extraction runs (docs/extraction.md): debounced per session, one hidden call, the gate, settled exactly once.

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
import secrets
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import BindParameter, bindparam, delete, insert, or_, select, update

from consolidation import runs
from consolidation.connections import Connections
from consolidation.engine import Claim, Settlement, Skip
from consolidation.extraction import settings as XS
from consolidation.extraction.digest import DigestMessage, chars, check_messages, dumps, extend, loads
from consolidation.extraction.gate import BUDGET_EXCEEDED, GateResult, check_proposals
from consolidation.extraction.models import ExtractionMode, ExtractionSettings
from consolidation.extraction.prompt import MAX_PINNED, decode_user_message
from consolidation.harnesses import HarnessResult, spec
from consolidation.harnesses.extract_base import Extractor
from consolidation.models import ConsolidationRun, Outcome
from consolidation.settings import spend_budget
from consolidation.tables import DIGESTS, RUNS
from ledger import (
    EventKind,
    Ledger,
    Provenance,
    Reader,
    Transaction,
    check_scope,
    check_session_id,
    screen_body,
    to_micros,
)
from ledger.errors import BudgetExceeded, InvalidArgument
from ledger.schema import RECORDS

log = logging.getLogger(__name__)

JOB = "extract"
C = RUNS.c
G = DIGESTS.c
M = RECORDS.c


def _digest_key(scope_key: str, session_id: str) -> tuple[Any, ...]:
    return (G.scope_key == scope_key, G.session_id == session_id)


# The session's digest as stored (read on every chat turn, and at claim).
_DIGEST_READ = select(G.messages, G.next_seq, G.digest_id)
_SCOPE: BindParameter[str] = bindparam("scope")
_KEY = (G.scope_key == _SCOPE, G.session_id == bindparam("session"))
_DIGEST_TAKE = select(G.messages).where(*_KEY)
_DIGEST_DROP = delete(DIGESTS).where(*_KEY)
# Every non-forgotten body of a scope: what a proposal must not duplicate.
_BODIES = select(M.id, M.body).where(M.scope_key == _SCOPE, M.status != "deleted", M.body.is_not(None))
# Up to MAX_PINNED active bodies, newest first: "already pinned, do not re-propose".
_PINNED = (
    select(M.id, M.body)
    .where(
        M.scope_key == _SCOPE,
        M.valid_to.is_(None),  # the active records (ck_memory_records_active_open): SQLite finds them by this
        M.body.is_not(None),
        or_(M.expires_at.is_(None), M.expires_at > bindparam("now")),
    )
    .order_by(M.valid_from.desc(), M.id)
    .limit(MAX_PINNED)
)


# The scope's records saved after an instant (a run's claim, its stored answer): ``(id, body)``, the body None once
# forgotten (ck_memory_records_body_or_erased).
_SAVED_SINCE = select(M.id, M.body).where(M.scope_key == _SCOPE, M.created_at > bindparam("since"))
# A run's stored texts, and those of them that hold the answer.
RUN_TEXTS = ("prompt", "answer", "answer_raw")
ANSWER_TEXTS = ("answer", "answer_raw")


def _bodies(db: runs.Executor, scope_key: str) -> list[Any]:
    return db.rows(_BODIES, {"scope": scope_key})


def _saved_since(db: runs.Executor, scope_key: str, since_us: int) -> list[tuple[str, str | None]]:
    return [(r[0], r[1]) for r in db.rows(_SAVED_SINCE, {"scope": scope_key, "since": since_us})]


def _pinned(db: runs.Executor, scope_key: str, now_us: int) -> list[tuple[str, str]]:
    return [(r[0], r[1]) for r in db.rows(_PINNED, {"scope": scope_key, "now": now_us})]


class Taken(NamedTuple):
    """What an extraction run's claim took and read, and its call: the settings, the session's digest (now the
    run's), the pinned bodies ``(id, body)``, the records the prompt was built from (the pinned ones and those
    the digest quotes), and the claim's instant (what is saved after it, the claim did not see)."""

    settings: ExtractionSettings
    digest: list[DigestMessage]
    pinned: list[tuple[str, str]]
    record_ids: list[str]
    claimed_us: int


class Checked(NamedTuple):
    """The gate's verdict on the stored proposals, and the scope's bodies ``(id, body)`` it was checked against."""

    gate: GateResult
    existing: list[Any]


class ExtractionJobs:
    """Extraction runs of the scopes of one ledger (rows of the runs table shared with consolidation): settings,
    turns, and the steps of a run that :class:`consolidation.engine.RunEngine` takes."""

    def __init__(
        self, led: Ledger, connections: Connections, extractors: Mapping[str, Extractor] | None = None
    ) -> None:
        self.led = led
        self.connections = connections
        self._extractors: dict[str, Extractor] = dict(extractors or {})

    # ------------------------------------------------------------------ settings
    def settings_in(self, db: Reader, scope_key: str) -> ExtractionSettings:
        found = XS.load(db, scope_key)
        return found or XS.defaults(scope_key, api_key=self.connections.api_key, prices=self.connections.prices)

    def settings(self, scope_key: str) -> ExtractionSettings:
        with self.led.reading() as db:
            return self.settings_in(db, check_scope(scope_key))

    def update_settings(self, scope_key: str, *, now: datetime | None = None, **changes: Any) -> ExtractionSettings:
        """Validate and store; ``mode="off"`` cancels the scope's pending extraction runs and drops their digests.

        Raises:
            InvalidSettings: a field is invalid (nothing changed); ScopeError.
        """
        scope = check_scope(scope_key)

        def fn(tx: Transaction) -> ExtractionSettings:
            old = self.settings_in(tx, scope)
            new = XS.merge(old, changes, self.connections.prices)
            XS.store(tx, new, tx.now_us)
            if new.mode == ExtractionMode.OFF:
                runs.cancel_pending(tx, scope, tx.now_us, job=JOB)
                tx.execute(delete(DIGESTS).where(DIGESTS.c.scope_key == scope))
            else:  # each session's pending run waits for the new debounce
                runs.reschedule_pending(
                    tx, scope, job=JOB, old=(old.debounce_s, old.max_wait_s), new=(new.debounce_s, new.max_wait_s)
                )
            return new

        return self.led.run(scope, fn, now=now)

    # ------------------------------------------------------------------ turns
    def check_turn(self, session_id: object, messages: object) -> tuple[str, list[dict[str, Any]]]:
        """Validate a turn before anything is written. Raises InvalidArgument / InvalidExtractionInput."""
        try:
            session = check_session_id(session_id)
        except InvalidArgument as exc:
            raise InvalidArgument(f"sessionId: {exc.message}") from None
        return session, check_messages(messages) if messages is not None else []

    def notify_turn_in(
        self, tx: Transaction, scope_key: str, session_id: str, messages: Sequence[Mapping[str, Any]]
    ) -> ConsolidationRun | None:
        """Inside the scope's write transaction: extend the session's digest and debounce its run.

        None (and nothing stored) when extraction is off or the turn carried no message. The
        digest is registered as text derived from every record of the scope whose body a new
        message quotes, so forgetting one erases the digest's messages (docs/ledger.md).
        """
        settings = self.settings_in(tx, scope_key)
        if settings.mode == ExtractionMode.OFF or not messages:
            return None
        key = _digest_key(scope_key, session_id)
        found = tx.execute(_DIGEST_READ.where(*key)).first()
        current = loads(found[0]) if found and found[0] else []
        digest, next_seq = extend(current, messages, next_seq=found[1] if found else 0)
        values = {"messages": dumps(digest), "chars": chars(digest), "next_seq": next_seq, "updated_at": tx.now_us}
        # Insert or update (the scope's write lock is held: no other writer adds this session's digest meanwhile).
        if tx.execute(update(DIGESTS).where(*key).values(**values)).rowcount == 0:
            tx.execute(
                insert(DIGESTS).values(
                    scope_key=scope_key, session_id=session_id, digest_id=found[2] if found else _digest_id(), **values
                )
            )
        quoted = _quoted(_bodies(tx, scope_key), digest[len(digest) - len(messages) :])
        if quoted:
            digest_id = found[2] if found else tx.execute(select(G.digest_id).where(*key)).scalar_one()
            tx.register_derived(DIGESTS, digest_id, record_ids=quoted, columns=("messages",), key_column="digest_id")
        return runs.debounce(tx, settings, tx.now_us, job=JOB, session_id=session_id)

    # ------------------------------------------------------------------ the steps of a run (consolidation.engine)
    def claim(self, tx: Transaction, run: ConsolidationRun) -> Claim[Taken] | None:
        """pending → running; take the session's digest into the run; read the spend and the pinned bodies."""
        settings = self.settings_in(tx, run.scope_key)
        claimed = runs.claim(
            tx, run.id, tx.now_us, harness=settings.harness, model=settings.model, mode="propose",
            cap_s=settings.wall_clock_cap_s,
        )  # fmt: skip
        if not claimed.result():
            return None
        key = {"scope": run.scope_key, "session": run.session_id or ""}
        found = tx.rows(_DIGEST_TAKE, key)
        stored = found[0][0] if found else None
        tx.run(_DIGEST_DROP, key)
        spent, budget = runs.month_spend(tx, run.scope_key, tx.now).result(), spend_budget(tx, run.scope_key)
        tx.prepare()
        pinned = _pinned(tx, run.scope_key, tx.now_us)
        digest = loads(stored) if stored else []
        quoted = _quoted(_bodies(tx, run.scope_key), digest) if digest else []
        record_ids = [*(rid for rid, _ in pinned), *quoted]
        return Claim(settings.harness, spent, budget, Taken(settings, digest, pinned, record_ids, tx.now_us))

    @staticmethod
    def plan(run: ConsolidationRun, claim: Claim[Taken], now: datetime | None) -> Taken | Skip:
        """The digest and the pinned bodies are the prompt; an empty digest settles without a call."""
        return claim.inputs if claim.inputs.digest else Skip(Outcome.PROPOSED)

    def call(self, plan: Taken) -> HarnessResult:
        """The extractor's one call (the extractor is built here: a failure to build it fails the run)."""
        settings = plan.settings
        return self._extractor(settings).extract(
            plan.digest,
            [body for _, body in plan.pinned],
            model=settings.model,
            max_output_tokens=settings.max_output_tokens,
            wall_clock_cap_s=settings.wall_clock_cap_s,
        )

    @staticmethod
    def answer_stored(tx: Transaction, run_id: str, plan: Taken, result: HarnessResult) -> None:
        """Register the stored texts as derived from the records saved since the claim that they quote, too
        (docs/extraction.md, "Pins saved while a run is in flight"): one the prompt quotes erases all three
        texts when forgotten, one only the answer quotes the answer's two. One already forgotten (its body
        gone, so what quotes it cannot be told) erases all three now."""
        later = _saved_since(tx, tx.scope_key, plan.claimed_us)
        if not later:
            return
        live = [(rid, body) for rid, body in later if body is not None]
        prompt = [*plan.digest, *(DigestMessage("", "pinned", body) for _, body in plan.pinned)]
        in_prompt = [*(rid for rid, body in later if body is None), *_quoted(live, prompt)]
        answer = [*_answer_messages(result.answer), DigestMessage("", "model", result.raw_text or "")]
        in_answer = [rid for rid in _quoted(live, answer) if rid not in in_prompt]
        for record_ids, columns in ((in_prompt, RUN_TEXTS), (in_answer, ANSWER_TEXTS)):
            if record_ids:
                tx.register_derived(RUNS, run_id, record_ids=record_ids, columns=columns)

    @staticmethod
    def before_apply(tx: Transaction, run: ConsolidationRun) -> ConsolidationRun:
        """Erase the stored texts now if a record saved since the answer was stored is already forgotten: the
        answer may restate it (the conversation said it), and its body is gone, so that cannot be told. One saved
        since and not forgotten, the answer's proposals quoting it, is registered by :meth:`apply`."""
        if run.answer_stored_at is None:
            return run
        later = _saved_since(tx, run.scope_key, to_micros(run.answer_stored_at))
        forgotten = [rid for rid, body in later if body is None]
        if not forgotten:
            return run
        tx.register_derived(RUNS, run.id, record_ids=forgotten, columns=RUN_TEXTS)
        return run.model_copy(update=dict.fromkeys(RUN_TEXTS))

    @staticmethod
    def unparseable_ops(raw: str) -> int:
        """An answer that did not parse counts as one refused proposal."""
        return 1

    def gate(self, tx: Transaction, run: ConsolidationRun) -> Checked:
        """Check the stored proposals against the scope's bodies as they are at ``tx.now``."""
        existing = _bodies(tx, run.scope_key)
        gate = check_proposals(
            run.answer,
            existing_bodies=[body for _, body in existing],
            digest=_digest_of(run.prompt),
            screen=lambda body: screen_body(body, max_chars=self.led.max_body_chars),
        )
        return Checked(gate, existing)

    def apply(self, tx: Transaction, run: ConsolidationRun, checked: Checked) -> Settlement:
        """Store what passed as proposals (the scope's budget allowing)."""
        gate, existing = checked
        stored = self._store_proposals(tx, run, gate)
        # The answer restates the proposals' bodies (and any duplicate's): forgetting one erases it.
        tx.register_derived(
            RUNS, run.id, record_ids=[*stored, *_quoted(existing, _answer_messages(run.answer))],
            columns=("answer", "answer_raw"),
        )  # fmt: skip
        refusals = gate.refusals
        over = len(gate.passed) - len(stored)
        if over:
            refusals[BUDGET_EXCEEDED] = refusals.get(BUDGET_EXCEEDED, 0) + over
        return Settlement(
            Outcome.PROPOSED, ops_proposed=gate.proposed, proposals_written=len(stored), refusals=refusals
        )

    def _store_proposals(self, tx: Transaction, run: ConsolidationRun, gate: GateResult) -> list[str]:
        """Store each passed proposal; one over the budget is refused before it is stored, and recorded."""
        stored = []
        for proposal in gate.passed:
            try:
                record = tx.propose(
                    proposal.body,
                    kind=proposal.kind,
                    confidence_bps=proposal.confidence_bps,
                    rationale=proposal.rationale,
                    source_session_id=run.session_id or None,
                    provenance=Provenance.MODEL_PROPOSAL,
                    run_id=run.id,
                )
            except BudgetExceeded as exc:
                detail = {"budget": exc.budget, "active": exc.active, "proposed": exc.proposed, "job": JOB}
                tx.event(EventKind.PROPOSAL_REFUSED, reason=exc.reason, run_id=run.id, detail=detail)
                continue
            stored.append(record.id)
        return stored

    def _extractor(self, settings: ExtractionSettings) -> Extractor:
        """The scope's extraction harness (an injected one by name, else the registry's for the scope's target)."""
        injected = self._extractors.get(settings.harness)
        return injected if injected is not None else spec(settings.harness).extraction(self.connections.of(settings))


def _digest_of(prompt: str | None) -> list[DigestMessage]:
    """The digest a run's stored prompt carried (its messages' ids and roles judge ``source_message_id``)."""
    if not prompt:
        return []
    try:
        return decode_user_message(prompt)[0]
    except ValueError:
        return []


def _digest_id() -> str:
    return "dig_" + secrets.token_hex(12)


def _quoted(records: Sequence[Sequence[Any]], messages: Sequence[DigestMessage]) -> list[str]:
    """Ids of the ``(id, body)`` records whose body (case- and whitespace-insensitively) a message quotes."""
    if not messages:
        return []
    # One haystack, messages apart: one substring search (in C) per record, whatever the digest's length.
    haystack = "\n".join(" ".join(m.text.casefold().split()) for m in messages)
    found = []
    for record_id, body in records:
        needle = " ".join(str(body).casefold().split())
        if needle and needle in haystack:
            found.append(record_id)
    return found


def _answer_messages(answer: Any) -> list[DigestMessage]:
    """The answer's proposal bodies, as messages for :func:`_quoted`."""
    proposals = answer.get("proposals") if isinstance(answer, dict) else None
    if not isinstance(proposals, list):
        return []
    return [
        DigestMessage("", "model", p["body"])
        for p in proposals
        if isinstance(p, dict) and isinstance(p.get("body"), str)
    ]
