"""What a forget does to extraction's own text: the digests' messages lose the forgotten bodies.

The ledger calls :func:`scrub_digests` inside every delete transaction, in whichever program deletes (the
``memledger.erasure`` entry point in pyproject.toml names it; :mod:`ledger.policy` loads it), whether or not
that program runs the extraction service: ``memledger unpin`` and a plain library caller erase as the server
does.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from sqlalchemy import Connection, inspect, select, update

from consolidation.extraction.digest import DigestMessage, chars, dumps, loads
from consolidation.tables import DIGESTS

ERASED = "[erased]"
G = DIGESTS.c


def scrub_digests(conn: Connection, scope: str, ids: Sequence[str], bodies: Sequence[str]) -> None:
    """An erase hook (in the delete's transaction): a forgotten body leaves the text of the scope's digests too.

    The registry (docs/ledger.md, "Derived text") covers the records a digest quoted when it was written; this
    also covers a body pinned after the message that quotes it. Each quote becomes ``[erased]``, compared
    case-insensitively with any run of whitespace for a space. A message that still quotes a body under the
    registry's rule (case-folded: "STRASSE" quotes "Straße", which no regex case match finds) is ``[erased]``
    whole.
    """
    needles = sorted({" ".join(b.split()) for b in bodies if b and b.strip()}, key=len, reverse=True)
    if not needles or not inspect(conn).has_table(DIGESTS.name):  # a database of the ledger's tables alone
        return
    pattern = re.compile("|".join(re.escape(n).replace("\\ ", "\\s+") for n in needles), re.IGNORECASE)
    folded = [n.casefold() for n in needles]
    digests = conn.execute(select(G.session_id, G.messages).where(G.scope_key == scope, G.messages.is_not(None)))
    for session_id, stored in digests.all():
        digest = loads(stored)
        cleaned = [DigestMessage(m.id, m.role, _scrub(m.text, pattern, folded)) for m in digest]
        if cleaned == digest:
            continue
        key = (G.scope_key == scope, G.session_id == session_id)
        conn.execute(update(DIGESTS).where(*key).values(messages=dumps(cleaned), chars=chars(cleaned)))


def _scrub(text: str, pattern: re.Pattern[str], folded: Sequence[str]) -> str:
    """``text`` with each quote of a body ``[erased]``; the whole text if a case-folded quote is left (outside
    the ``[erased]`` marks: a body such as "Erased" is in every mark)."""
    text = pattern.sub(ERASED, text)
    pieces = [" ".join(piece.casefold().split()) for piece in text.split(ERASED)]
    return ERASED if any(needle in piece for piece in pieces for needle in folded) else text
