"""Front-matter fields: read each one into a typed value, or report the rule it breaks.

:func:`read_fields` never raises; a field whose value breaks a rule is reported
and read as None. The authorization criteria live in :func:`authorization_criteria`
so that validation and ``audit --explain`` cannot disagree.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ledger.errors import BodyRejected, DateError
from ledger.files.dates import DATE_HINT, parse_when
from ledger.files.model import (
    AUTHORIZE_KEY,
    INVALID,
    MIN_AUTHORIZE_CONFIDENCE,
    MISSING_SOURCE,
    Problem,
    ScopeLevel,
    SourceKind,
    When,
    line_of,
)
from ledger.screening import MAX_BODY_CHARS, screen_body

TOP_KEYS = (
    "fact",
    "source",
    "scope",
    "confidence",
    "created",
    "expires",
    "review-by",
    "superseded-by",
    AUTHORIZE_KEY,
    "synthetic",
)
NESTED_KEYS = {"source": ("kind", "reference"), "scope": ("level", "reference")}

# Normalized (lower case, articles and "from"/"see" dropped) references that name no retrievable source.
PLACEHOLDER_REFERENCES = frozenset(
    {
        "context",
        "conversation",
        "chat",
        "n/a",
        "na",
        "none",
        "null",
        "nil",
        "unknown",
        "tbd",
        "todo",
        "tba",
        "above",
        "see above",
        "same as above",
        "below",
        "various",
        "memory",
        "source",
        "user",
        "earlier",
        "previous conversation",
        "this conversation",
        "discussion",
        "somewhere",
        "internet",
        "web",
    }
)
# The reference tool's placeholder rule: a value *starting* with one of these (case-insensitive).
_PLACEHOLDER_START = re.compile(r"^(?:todo|tbd|unknown|none|n/a|replace\b|example\b|<.*>|\{\{.*\}\})", re.I | re.S)
_REFERENCE_PREFIXES = re.compile(r"^(?:from|per|see|in|via|the|a|an)\s+")
# Template guidance left in place anywhere in a value: "<the exact project reference>", "{{ref}}".
# (A bare "<id@host>" is a mail Message-ID, a real reference; the reference tool refuses it only at the start.)
_TEMPLATE_PLACEHOLDER = re.compile(r"<[^<>]*\s[^<>]*>|\{\{.*?\}\}")
_WILDCARD = re.compile(r"[*?\[\]]")


def is_placeholder_start(text: str) -> bool:
    """True when ``text`` starts like a placeholder (``TODO…``, ``n/a``, ``example…``, ``<…>``, ``{{…}}``)."""
    return bool(_PLACEHOLDER_START.match(text.strip()))


def is_placeholder_reference(text: str) -> bool:
    """True when ``text`` names no stable, retrievable source ("from context", "TODO", "<url>", …)."""
    if is_placeholder_start(text) or _TEMPLATE_PLACEHOLDER.search(text):
        return True
    norm = re.sub(r"\s+", " ", text.strip().lower()).strip(" .!:;,")
    previous = None
    while previous != norm:
        previous = norm
        norm = _REFERENCE_PREFIXES.sub("", norm)
    if norm in PLACEHOLDER_REFERENCES or previous in PLACEHOLDER_REFERENCES:
        return True
    return not re.search(r"[a-z0-9]", norm)


def did_you_mean(key: str, allowed: tuple[str, ...]) -> str | None:
    """The allowed key ``key`` most likely stands for (``review_by`` → ``review-by``), if any."""
    norm = re.sub(r"[\s_]+", "-", key.strip().lower())
    if norm in allowed:
        return norm
    close = difflib.get_close_matches(norm, allowed, n=1, cutoff=0.6)
    return close[0] if close else None


@dataclass(slots=True)
class Collector:
    """Collects the problems of one entry, each placed on the line of its key."""

    name: str
    lines: Mapping[str, int]
    problems: list[Problem] = field(default_factory=list)

    def add(
        self, key: str, check: str, message: str, hint: str, *, rule: str = INVALID, line: int | None = None
    ) -> None:
        where = line_of(self.lines, key) if line is None else line
        self.problems.append(Problem(self.name, key, check, rule, message, hint, where))


@dataclass(slots=True)
class Fields:
    """The typed values read from front matter (None where absent or broken)."""

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
    fact: str | None = None
    expires_given: bool = False


def read_fields(data: Any, out: Collector) -> Fields:
    """Read every field of the front matter ``data`` into :class:`Fields`, reporting into ``out``."""
    fields = Fields()
    if not isinstance(data, dict):
        what = "empty" if data is None else f"a {type(data).__name__}, not a mapping of fields"
        out.add("front-matter", "front-matter-not-mapping", f"front matter is {what}", "start from memory-entry.md")
        data = {}
    _unknown_keys(data, out)
    _read_fact(data, out, fields)
    _read_source(data, out, fields)
    _read_scope(data, out, fields)
    _read_confidence(data, out, fields)
    _read_dates(data, out, fields)
    _read_superseded_by(data, out, fields)
    _read_authorize(data, out, fields)
    _read_synthetic(data, out, fields)
    return fields


_FACT_CHECKS = {
    "empty": ("fact-empty", "write the one atomic, falsifiable fact this entry records"),
    "too_long": ("fact-too-long", "keep one short fact per entry; put context in the body below the front matter"),
    "credential": ("fact-credential", "remove the secret; record where it is kept instead"),
    "not_text": ("fact-not-text", "write the fact as plain text (line breaks and tabs are fine)"),
}


def _read_fact(data: dict[str, Any], out: Collector, fields: Fields) -> None:
    value = data.get("fact")
    hint = 'add fact: "…" (one atomic, falsifiable fact) as the first field'
    if value is None:
        out.add("fact", "missing-field", "fact is missing", hint)
        return
    if not isinstance(value, str):
        out.add("fact", "wrong-type", f"fact must be a non-empty string, not {type(value).__name__}", "quote it")
        return
    if _TEMPLATE_PLACEHOLDER.fullmatch(value.strip()):
        out.add("fact", "fact-placeholder", f"fact {value!r} is the template's placeholder", hint)
        return
    try:
        fields.fact = screen_body(value, max_chars=MAX_BODY_CHARS)
    except BodyRejected as exc:
        check, fix = _FACT_CHECKS.get(exc.why, ("fact-rejected", "rewrite the fact"))
        msg = f"fact looks like a credential ({exc.detail})" if exc.why == "credential" else f"fact: {exc.message}"
        if exc.why == "empty":
            msg = "fact must be a non-empty string"
        out.add("fact", check, msg, fix)


def _read_synthetic(data: dict[str, Any], out: Collector, fields: Fields) -> None:
    if "synthetic" not in data:
        return
    value = data["synthetic"]
    if not isinstance(value, bool):
        out.add("synthetic", "wrong-type", f"synthetic must be true or false when present, not {value!r}", "write true")
        return
    fields.synthetic = value


def _unknown_keys(data: dict[str, Any], out: Collector) -> None:
    for key in data:
        if key not in TOP_KEYS:
            _report_unknown(key, key, TOP_KEYS, out)
    for parent, allowed in NESTED_KEYS.items():
        nested = data.get(parent)
        if isinstance(nested, dict):
            for key in nested:
                if key not in allowed:
                    _report_unknown(f"{parent}.{key}", key, allowed, out)


def _report_unknown(dotted: str, key: str, allowed: tuple[str, ...], out: Collector) -> None:
    parent = dotted.rpartition(".")[0]
    if "." in key and key.split(".", 1)[0] in NESTED_KEYS:
        head, _, tail = key.partition(".")
        hint = f"nest it: '{head}:' on its own line, then '  {tail}: …' indented below"
    else:
        guess = did_you_mean(key, allowed)
        listed = ", ".join(allowed)
        hint = f"did you mean {guess!r}?" if guess else f"remove it; allowed here: {listed}"
    where = f" under {parent!r}" if parent else ""
    out.add(dotted, "unknown-key", f"unknown key {key!r}{where}", hint)


def _mapping(data: dict[str, Any], key: str, out: Collector, *, rule: str = INVALID) -> dict[str, Any] | None:
    """The nested mapping under ``key``; None (reported) when absent or not a mapping."""
    value = data.get(key)
    nested = " and ".join(NESTED_KEYS[key])
    if value is None:
        hint = f"add {key}: with {nested} indented two spaces below it"
        out.add(key, "missing-field", f"{key} is missing (it must contain {nested})", hint, rule=rule)
        return None
    if not isinstance(value, dict):
        hint = f"write {key}: then {nested} indented"
        out.add(key, "wrong-type", f"{key} must be a mapping with {nested}", hint, rule=rule)
        return None
    return value


def _read_source(data: dict[str, Any], out: Collector, fields: Fields) -> None:
    # Without a source there is no source to re-read: that is a missing source, reported once.
    source = _mapping(data, "source", out, rule=MISSING_SOURCE)
    if source is not None:
        _read_source_kind(source.get("kind"), out, fields)
        _read_reference(source, out, fields)


def _read_source_kind(kind: Any, out: Collector, fields: Fields) -> None:
    if kind is None:
        out.add("source.kind", "missing-field", "source.kind is missing", "add kind: user-said, observed or inferred")
    elif kind not in tuple(SourceKind):
        guess = did_you_mean(str(kind), tuple(SourceKind))
        hint = f"did you mean {guess!r}?" if guess else "use user-said, observed or inferred"
        out.add("source.kind", "source-kind", f"source.kind {kind!r} is not a known kind", hint)
    else:
        fields.source_kind = SourceKind(kind)


def _read_reference(source: dict[str, Any], out: Collector, fields: Fields) -> None:
    ref = source.get("reference")
    hint = "name a stable, retrievable source: a URL, a file path at a commit, a ticket or message id"
    if ref is None or (isinstance(ref, str) and not ref.strip()):
        msg = "source.reference is missing"
        out.add("source.reference", "source-reference-missing", msg, hint, rule=MISSING_SOURCE)
    elif not isinstance(ref, str):
        msg = f"source.reference must be text, not {type(ref).__name__}"
        out.add("source.reference", "wrong-type", msg, "quote it", rule=MISSING_SOURCE)
    elif is_placeholder_reference(ref):
        msg = f"source.reference {ref!r} is a placeholder, not a source anyone can re-read"
        out.add("source.reference", "source-reference-placeholder", msg, hint, rule=MISSING_SOURCE)
        fields.source_reference = ref
    else:
        fields.source_reference = ref
        fields.source_concrete = True


def _read_scope(data: dict[str, Any], out: Collector, fields: Fields) -> None:
    scope = _mapping(data, "scope", out)
    if scope is None:
        return
    level = scope.get("level")
    if level is None:
        out.add("scope.level", "missing-field", "scope.level is missing", "add level: project or level: global")
        return
    if level not in tuple(ScopeLevel):
        msg = f"scope.level {level!r} is not project or global"
        out.add("scope.level", "scope-level", msg, "use level: project or level: global")
        return
    fields.scope_level = ScopeLevel(level)
    ref = scope.get("reference")
    if fields.scope_level is ScopeLevel.GLOBAL:
        if "reference" in scope:  # even ``reference: null``: a global entry has none at all
            msg = "a global entry has no scope.reference"
            out.add("scope.reference", "scope-reference-on-global", msg, "remove it, or use level: project")
        return
    _read_project_reference(ref, out, fields)


def _read_project_reference(ref: Any, out: Collector, fields: Fields) -> None:
    hint = "give the project's exact reference, e.g. acme/widgets, as the audit's --scope project:REF uses it"
    if ref is None or ref == "":
        out.add("scope.reference", "scope-reference-missing", "a project entry needs scope.reference", hint)
    elif not isinstance(ref, str):
        out.add("scope.reference", "wrong-type", f"scope.reference must be text, not {type(ref).__name__}", "quote it")
    elif (
        not ref.strip() or ref != ref.strip() or _WILDCARD.search(ref) or _TEMPLATE_PLACEHOLDER.search(ref)
    ) or is_placeholder_start(ref):
        msg = f"scope.reference {ref!r} is not one exact project (spaces, wildcards or a placeholder)"
        out.add("scope.reference", "scope-reference-inexact", msg, hint)
    else:
        fields.scope_reference = ref


def _read_confidence(data: dict[str, Any], out: Collector, fields: Fields) -> None:
    value = data.get("confidence")
    if value is None:
        out.add("confidence", "missing-field", "confidence is missing", "add confidence: a number from 0 to 1")
    elif isinstance(value, bool) or not isinstance(value, int | float):
        out.add("confidence", "wrong-type", f"confidence {value!r} is not a number", "write a number from 0 to 1")
    elif not 0 <= value <= 1:
        out.add("confidence", "confidence-range", f"confidence {value} is outside 0 to 1", "write a number from 0 to 1")
    else:
        fields.confidence = float(value)


def _read_dates(data: dict[str, Any], out: Collector, fields: Fields) -> None:
    fields.created = _date(data, "created", out, required=True)
    fields.expires = _date(data, "expires", out)
    fields.review_by = _date(data, "review-by", out)
    # A horizon written as ``expires: null`` is still written: it counts (and fails as a date).
    has_expires, has_review = "expires" in data, "review-by" in data
    fields.expires_given = has_expires
    if has_expires and has_review:
        msg = "an entry has exactly one of expires and review-by, not both"
        out.add("review-by", "horizon-both", msg, "keep expires (a hard end) or review-by (a check date)")
    elif not (has_expires or has_review):
        msg = "an entry needs exactly one of expires and review-by"
        out.add("front-matter", "horizon-missing", msg, "add expires: YYYY-MM-DD or review-by: YYYY-MM-DD")
    for key, when in (("expires", fields.expires), ("review-by", fields.review_by)):
        if when is not None and fields.created is not None and when.instant < fields.created.instant:
            msg = f"{key} {when} is earlier than created {fields.created}"
            out.add(key, "horizon-before-created", msg, f"set {key} to created's day or later")


def _date(data: dict[str, Any], key: str, out: Collector, *, required: bool = False) -> When | None:
    value = data.get(key)
    if value is None and (required or key not in data):
        if required:
            out.add(key, "missing-field", f"{key} is missing", f"add {key}: YYYY-MM-DD")
        return None
    try:
        return parse_when(value)
    except DateError as exc:
        out.add(key, exc.check, f"{key}: {exc.message}", DATE_HINT)
        return None


def _read_superseded_by(data: dict[str, Any], out: Collector, fields: Fields) -> None:
    value = data.get("superseded-by")
    if value is None:
        return
    hint = "null, or the replacing entry's file name in the same directory, e.g. deploy-region-2.md"
    if not isinstance(value, str):
        out.add("superseded-by", "wrong-type", f"superseded-by must be null or a file name, not {value!r}", hint)
    elif not value.strip() or "/" in value or "\\" in value:
        msg = f"superseded-by {value!r} is not a file name in the same directory (no '/' or '\\')"
        out.add("superseded-by", "superseded-by-path", msg, hint)
    else:
        fields.superseded_by = value


def _read_authorize(data: dict[str, Any], out: Collector, fields: Fields) -> None:
    if data.get(AUTHORIZE_KEY) is None:
        msg = f"{AUTHORIZE_KEY} is missing"
        out.add(AUTHORIZE_KEY, "missing-field", msg, f"add {AUTHORIZE_KEY}: false (true only for what may authorize)")
        return
    value = data[AUTHORIZE_KEY]
    if not isinstance(value, bool):
        msg = f"{AUTHORIZE_KEY} must be true or false, not {value!r}"
        out.add(AUTHORIZE_KEY, "wrong-type", msg, "write true or false (unquoted)")
        return
    fields.authorize = value
    if value:
        for criterion in authorization_criteria(fields):
            # A criterion that fails only because its field is missing or broken adds nothing:
            # that field's own problem already says what to change.
            if criterion.check in _EXPLAIN_ONLY:
                continue  # a placeholder source is already its own missing-source problem
            if not criterion.passed and _FIELD_READ[criterion.check](fields):
                out.add(AUTHORIZE_KEY, criterion.check, criterion.failure, criterion.hint)


_EXPLAIN_ONLY = frozenset({"authorize-source"})
_FIELD_READ: dict[str, Callable[[Fields], bool]] = {
    "authorize-inferred": lambda f: f.source_kind is not None,
    "authorize-not-project": lambda f: f.scope_level is ScopeLevel.GLOBAL or f.scope_reference is not None,
    "authorize-low-confidence": lambda f: f.confidence is not None,
    "authorize-source": lambda f: f.source_reference is not None,
    "authorize-no-expires": lambda f: f.expires is not None or not f.expires_given,
}


@dataclass(frozen=True, slots=True)
class Criterion:
    """One authorization criterion: ``passed`` and what to say either way."""

    check: str
    label: str
    passed: bool
    failure: str
    hint: str


def authorization_criteria(fields: Fields | Any) -> list[Criterion]:
    """The static criteria an entry must meet for ``may-this-authorize-action: true`` to be valid.

    Works on :class:`Fields` or an :class:`~ledger.files.model.Entry` (same attribute names).
    """
    kind, conf = fields.source_kind, fields.confidence
    return [
        Criterion(
            "authorize-inferred",
            "source.kind is user-said or observed",
            kind is not None and kind is not SourceKind.INFERRED,
            f"an entry with source.kind {kind} cannot authorize an action",
            "set may-this-authorize-action: false, or record a user-said or observed source",
        ),
        Criterion(
            "authorize-not-project",
            "scope.level is project",
            fields.scope_level is ScopeLevel.PROJECT and fields.scope_reference is not None,
            "only a project-scoped entry with an exact scope.reference can authorize an action",
            "set may-this-authorize-action: false, or scope it to one project",
        ),
        Criterion(
            "authorize-low-confidence",
            f"confidence ≥ {MIN_AUTHORIZE_CONFIDENCE}",
            conf is not None and conf >= MIN_AUTHORIZE_CONFIDENCE,
            f"confidence {conf} is below {MIN_AUTHORIZE_CONFIDENCE}",
            "set may-this-authorize-action: false, or confirm the fact and raise confidence",
        ),
        Criterion(
            "authorize-source",
            "source.reference is concrete",
            bool(fields.source_concrete),
            "an entry without a concrete source.reference cannot authorize an action",
            "name a stable, retrievable source",
        ),
        Criterion(
            "authorize-no-expires",
            "has an explicit expires date",
            fields.expires is not None,
            "an entry that authorizes an action needs an explicit expires date (review-by is not enough)",
            "replace review-by with expires: YYYY-MM-DD",
        ),
    ]
