"""The ``latest_wins`` baseline: among active records about one subject, the newest wins.

A deterministic rule, applied where a consolidation run would be (when the turn's
debounce has passed), through the ledger's public API: one accepted
``model_consolidation`` record, a copy of the newest, supersedes every record of the
subject — the same supersession a ``group`` or ``merge`` would make.

The *subject* of a body is its words (lower-cased, filler such as *please, remember
that, actually, now* dropped) up to the first value: a number, a signed number, or a
capitalised word that does not open the body. "My office is in room 301" and "My
office is in room 415" share the subject "my office is in room"; "Alice's birthday is
on May 3" and "Bruno's birthday is on May 3" do not. See docs/consolidation-quality.md.
"""

from __future__ import annotations

import re

from ledger import Ledger, MemoryRecord, Provenance

RULE_CONFIDENCE_BPS = 10_000
_FILLER = frozenset({"please", "remember", "note", "that", "actually", "now", "update", "correction", "fyi", "thanks"})
_TOKEN = re.compile(r"[+\-\u2212]?\d[\d.,:]*|[^\W\d_]+(?:'[^\W\d_]+)*|[^\w\s]")


def subject(body: str) -> str:
    """The words of ``body`` that name what it is about (see the module docstring)."""
    words: list[str] = []
    for token in _TOKEN.findall(body):
        folded = token.casefold()
        if folded in _FILLER:
            continue
        is_value = token[-1].isdigit() or (token[:1].isupper() and bool(words) and token != "I")
        if is_value:
            break
        if token.isalnum() or "'" in token:
            words.append(folded)
    return " ".join(words)


def latest_wins(led: Ledger, scope_key: str) -> int:
    """Apply the rule to the scope's active records; returns how many records it closed."""
    by_subject: dict[str, list[MemoryRecord]] = {}
    for record in led.list(scope_key):
        by_subject.setdefault(subject(record.body or ""), []).append(record)
    closed = 0
    for members in by_subject.values():
        if len(members) < 2:
            continue
        newest = max(members, key=lambda r: (r.valid_from, r.id))
        proposal = led.propose(
            newest.body or "",
            kind=newest.kind,
            confidence_bps=RULE_CONFIDENCE_BPS,
            rationale=f"latest_wins: the newest of {len(members)} records about one subject",
            supersedes=[r.id for r in members],
            expires_at=newest.expires_at,
            conflict_group=newest.conflict_group,
            provenance=Provenance.MODEL_CONSOLIDATION,
            scope_key=scope_key,
        )
        led.accept(proposal.id)
        closed += len(members)
    return closed
