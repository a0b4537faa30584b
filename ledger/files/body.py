"""The body of an entry: one atomic fact, screened like every ledger write.

The fact is the text after the front matter with HTML comments removed (the
template's guidance is a comment), stripped. The whole body, comments included,
is screened for credentials: a secret in a comment is still a secret in the
repository.
"""

from __future__ import annotations

import re

from ledger.errors import BodyRejected
from ledger.files.fields import Collector
from ledger.screening import MAX_BODY_CHARS, screen_body

_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)
_BLANK_LINES = re.compile(r"\n[ \t]*\n")
_LIST_ITEM = re.compile(r"^[ \t]*(?:[-*+]|\d{1,3}[.)])[ \t]+\S", re.MULTILINE)

_CHECKS = {
    "empty": ("body-empty", "write the one fact this entry records below the front matter"),
    "too_long": ("body-too-long", "keep one short fact per entry; split the rest into more entries"),
    "credential": ("body-credential", "remove the secret; record where it is kept instead"),
    "not_text": ("body-not-text", "write the fact as text"),
}


def fact_of(raw_body: str) -> str:
    """The fact an entry states: its body without HTML comments, stripped."""
    return _COMMENT.sub("", raw_body).strip()


def check_body(raw_body: str, line: int, out: Collector) -> str:
    """Check the body starting on file ``line``; report into ``out`` and return the fact."""
    fact = fact_of(raw_body)
    if fact:
        if len(_BLANK_LINES.split(fact.replace("\r\n", "\n"))) > 1:
            msg = "the body has several paragraphs; an entry records one atomic fact"
            hint = "keep one fact here and move the others to new entries"
            out.add("body", "body-several-facts", msg, hint, line=line)
        elif len(_LIST_ITEM.findall(fact)) > 1:
            msg = "the body is a list; an entry records one atomic fact"
            out.add("body", "body-list", msg, "keep one fact here and move the other items to new entries", line=line)
    for text in (fact, raw_body) if raw_body.strip() != fact else (fact,):
        try:
            screen_body(text, max_chars=MAX_BODY_CHARS)
        except BodyRejected as exc:
            if text is raw_body and exc.why != "credential":
                continue
            check, hint = _CHECKS.get(exc.why, ("body-rejected", "rewrite the fact"))
            msg = f"the body looks like a credential ({exc.detail})" if exc.why == "credential" else exc.message
            out.add("body", check, msg, hint, line=line)
            break
    return fact
