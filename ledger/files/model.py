"""The file ledger's data: entries, their typed fields, and the problems found in them.

Rule ids (``rule``) are public (docs/file-ledger.md) and never change::

    invalid               the entry breaks a rule of the format (see ``check`` for which)
    missing-source        source (or source.reference) is absent, not text, or a placeholder
    out-of-scope          the entry cannot be trusted in the audit's trust context, or its scope is invalid
    expired               the audit date is after the entry's ``expires`` day
    review-overdue        the audit date is after the entry's ``review-by`` day
    chain-missing-target  a ``superseded-by`` chain (reported on its root) names an entry that does not exist
    chain-cycle           a ``superseded-by`` chain (reported on its root) returns to an entry it passed

Validation problems also carry a finer ``check`` id (``yaml-duplicate-key``,
``date-naive``, ``authorize-inferred``, …); ``docs/file-ledger.md`` lists them all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from enum import StrEnum
from pathlib import Path

INVALID = "invalid"
MISSING_SOURCE = "missing-source"
OUT_OF_SCOPE = "out-of-scope"
EXPIRED = "expired"
REVIEW_OVERDUE = "review-overdue"
CHAIN_MISSING_TARGET = "chain-missing-target"
CHAIN_CYCLE = "chain-cycle"

# Stable order: SARIF rule indexes and documentation follow it.
RULE_IDS: tuple[str, ...] = (
    INVALID,
    MISSING_SOURCE,
    OUT_OF_SCOPE,
    EXPIRED,
    REVIEW_OVERDUE,
    CHAIN_MISSING_TARGET,
    CHAIN_CYCLE,
)

# Warnings (``--warn-within``); never findings, never change the exit code.
EXPIRES_SOON = "expires-soon"
REVIEW_DUE_SOON = "review-due-soon"
WARNING_IDS: tuple[str, ...] = (EXPIRES_SOON, REVIEW_DUE_SOON)

AUTHORIZE_KEY = "may-this-authorize-action"
MIN_AUTHORIZE_CONFIDENCE = 0.9
ELIGIBILITY_NOTICE = (
    "Eligible to consider, never standing permission: re-read each source before relying on it for an action."
)


class SourceKind(StrEnum):
    USER_SAID = "user-said"
    OBSERVED = "observed"
    INFERRED = "inferred"


class ScopeLevel(StrEnum):
    PROJECT = "project"
    GLOBAL = "global"


def line_of(lines: Mapping[str, int], key: str) -> int:
    """The file line of dotted ``key`` in ``lines``, of its nearest parent when absent, else 1."""
    while key:
        if key in lines:
            return lines[key]
        key = key.rpartition(".")[0]
    return 1


@dataclass(frozen=True, slots=True)
class Problem:
    """One broken rule in one entry: where (file, field, line), which rule, and what to change."""

    file: str
    field: str
    check: str
    rule: str
    message: str
    hint: str
    line: int


@dataclass(frozen=True, slots=True)
class When:
    """A whole-day date from front matter (``instant`` is 00:00 UTC of ``day``)."""

    instant: datetime
    text: str
    is_date: bool = True

    @property
    def day(self) -> date:
        return self.instant.date()

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class Entry:
    """One parsed memory entry.

    ``name`` is the entry's id: its path relative to the audited directory (``/``
    separated), or the file name. ``trusted`` is False when the front matter could
    not be read safely (syntax error, duplicate key, alias, tag); every typed field
    is then None. A typed field is also None when its own value broke a rule.
    ``fact`` is the front matter's ``fact``; ``body`` is the free Markdown after the
    front matter (context and evidence notes, never parsed as the fact).
    ``problems`` holds every validation problem (none depends on the audit date).
    """

    name: str
    path: Path
    digest: str
    trusted: bool
    fact: str | None = None
    source_kind: SourceKind | None = None
    source_reference: str | None = None
    source_concrete: bool = False
    scope_level: ScopeLevel | None = None
    scope_reference: str | None = None
    confidence: float | None = None
    created: When | None = None
    expires: When | None = None
    review_by: When | None = None
    superseded_by: str | None = None
    authorize: bool = False
    synthetic: bool = False
    body: str = ""
    body_line: int = 1
    lines: Mapping[str, int] = field(default_factory=dict)
    problems: tuple[Problem, ...] = ()

    def line_of(self, key: str) -> int:
        """The file line of ``key`` (dotted), of its parent when absent, else 1 (the opening ``---``)."""
        return line_of(self.lines, key)

    @property
    def horizon(self) -> When | None:
        """``expires`` or ``review-by``, whichever the entry has."""
        return self.expires or self.review_by
