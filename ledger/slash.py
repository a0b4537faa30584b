"""Slash commands: exactly ``/pin <text>``, ``/pins`` and ``/unpin <id>``; anything else is not ours.

``/pins`` lists the active pins with their ids, then the suggestions waiting for a
decision (accepted or rejected with ``memory/accept_proposed_memory_record`` /
``memory/reject_proposed_memory_record``). ``/unpin`` takes a whole id (of any of the account's records) or a
unique prefix of an active id, as ``/pins`` shows it: with or without the ``mem_``
part, with or without the brackets, at least 4 characters after ``mem_``. A prefix
that matches several active pins is refused and says to type more of the id.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from ledger.errors import AmbiguousId, InvalidArgument, LedgerError, RecordNotFound
from ledger.models import MemoryRecord
from ledger.packet import CITATION_CHARS, flatten

ID_PREFIX = "mem_"
MIN_PREFIX_CHARS = 4  # after "mem_": the citation's own length
_PREFIX = re.compile(rf"^(?:mem_)?([0-9a-f]{{{MIN_PREFIX_CHARS},24}})$")
_UNPIN_USAGE = "Usage: /unpin <id> (the id or its first characters, as /pins shows them)"


Records = list[MemoryRecord]


class Ledger(Protocol):
    """What a slash command uses of :class:`ledger.Ledger` (named here, so this module needs nothing of it)."""

    @property
    def scope_key(self) -> str: ...

    def save(self, body: str, *, now: datetime | None = None) -> MemoryRecord: ...

    def delete(self, record_id: str, *, now: datetime | None = None) -> MemoryRecord: ...

    def list(self, scope_key: str | None = None, *, now: datetime | None = None) -> Records: ...

    def proposals(self, scope_key: str | None = None, *, now: datetime | None = None) -> Records: ...

    def get(self, record_id: str) -> MemoryRecord | None: ...


@dataclass(frozen=True, slots=True)
class SlashResult:
    handled: bool
    reply: str = ""
    ok: bool = True
    records: list[MemoryRecord] = field(default_factory=list)
    reason: str | None = None


def short_ids(ids: Sequence[str]) -> dict[str, str]:
    """Each id's shortest prefix of at least the citation's length that no other of ``ids`` shares."""
    out: dict[str, str] = {}
    for rid in ids:
        length = CITATION_CHARS
        while length < len(rid) and any(o != rid and o.startswith(rid[:length]) for o in ids):
            length += 1
        out[rid] = rid[:length]
    return out


def handle_slash(led: Ledger, text: str, *, now: datetime | None = None) -> SlashResult:
    """Run a slash command against ``led``'s bound scope; ``handled=False`` for anything else."""
    if not isinstance(text, str):
        return SlashResult(handled=False)
    command, _, arg = text.strip().partition(" ")
    arg = arg.strip()
    if command not in ("/pin", "/pins", "/unpin"):
        return SlashResult(handled=False)
    try:
        if command == "/pin":
            if not arg:
                return SlashResult(handled=True, ok=False, reply="Usage: /pin <text to remember>", reason="usage")
            record = led.save(arg, now=now)
            return SlashResult(handled=True, reply=f"Pinned {record.id}: {record.body}", records=[record])
        if command == "/pins":
            if arg:
                return SlashResult(handled=True, ok=False, reply="Usage: /pins (takes no arguments)", reason="usage")
            return _pins(led, now)
        if not arg or " " in arg:
            return SlashResult(handled=True, ok=False, reply=_UNPIN_USAGE, reason="usage")
        record = led.delete(_resolve(led, arg.strip("[]"), now), now=now)
        return SlashResult(handled=True, reply=f"Forgot {record.id}.", records=[record])
    except LedgerError as exc:
        return SlashResult(handled=True, ok=False, reply=exc.message, reason=exc.reason)


def _pins(led: Ledger, now: datetime | None) -> SlashResult:
    records = led.list(led.scope_key, now=now)
    waiting = led.proposals(led.scope_key, now=now)
    if not records and not waiting:
        return SlashResult(handled=True, reply="No pins yet. Add one with /pin <text>.")
    lines = [f"{r.id}  [{r.kind.value}] {flatten(r.body or '')}" for r in records]
    if not records:
        lines.append("No pins yet. Add one with /pin <text>.")
    if waiting:
        lines.append(f"Suggestions waiting for you ({len(waiting)}; accept or reject each):")
        lines += [f"  {p.id} {p.kind.value}: {flatten(p.body or '')}" for p in waiting]
    return SlashResult(handled=True, reply="\n".join(lines), records=records)


def _resolve(led: Ledger, arg: str, now: datetime | None) -> str:
    """The one record id ``arg`` names: a whole id of the account, or a unique prefix of an active id.

    Raises:
        RecordNotFound: nothing of the account matches (another account's id is as good as absent).
        AmbiguousId: the prefix matches several active pins (reason ``ambiguous_id``).
    """
    prefix = _PREFIX.match(arg)
    if prefix is not None:
        typed = ID_PREFIX + prefix.group(1)
        matches = [r.id for r in led.list(led.scope_key, now=now) if r.id.startswith(typed)]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            raise AmbiguousId(
                f"{arg[:40]!r} matches {len(matches)} pins ({', '.join(short_ids(matches).values())}); "
                "type more of the id"
            )
    try:
        found = led.get(arg)
    except (RecordNotFound, InvalidArgument):
        found = None
    if found is None or found.scope_key != led.scope_key:
        # The command acts on the caller's own pins: another account's record is as good as absent.
        raise RecordNotFound(f"no pin {arg[:40]!r} in {led.scope_key}; see /pins for ids", record_id=arg[:80])
    return found.id
