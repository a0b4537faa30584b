"""Slash commands: exactly ``/pin <text>``, ``/pins`` and ``/unpin <id>``; anything else is not ours."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from ledger.errors import LedgerError, RecordNotFound
from ledger.models import MemoryRecord

if TYPE_CHECKING:
    from ledger.core import Ledger


@dataclass(frozen=True, slots=True)
class SlashResult:
    handled: bool
    reply: str = ""
    ok: bool = True
    records: list[MemoryRecord] = field(default_factory=list)
    reason: str | None = None


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
            records = led.list(led.scope_key, now=now)
            if not records:
                return SlashResult(handled=True, reply="No pins yet. Add one with /pin <text>.")
            lines = [f"{r.id}  [{r.kind.value}] {r.body}" for r in records]
            return SlashResult(handled=True, reply="\n".join(lines), records=records)
        if not arg or " " in arg:
            return SlashResult(handled=True, ok=False, reply="Usage: /unpin <id> (see /pins for ids)", reason="usage")
        if led.get(arg).scope_key != led.scope_key:
            # The command acts on the caller's own pins: another account's record is as good as absent.
            raise RecordNotFound(f"no memory record {arg!r}", record_id=arg)
        record = led.delete(arg, now=now)
        return SlashResult(handled=True, reply=f"Forgot {record.id}.", records=[record])
    except LedgerError as exc:
        return SlashResult(handled=True, ok=False, reply=exc.message, reason=exc.reason)
