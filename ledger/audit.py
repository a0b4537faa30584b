"""The packet audit and the injection switch (docs/packet.md), as statements inside a ledger transaction.

One audit row per (scope, session), replaced whenever that session's packet is built
again: what was selected (id, kind, reason, and the body as sent, frozen — an edit
of the record later does not change what the chat received), what was excluded (id,
code), the token estimate and the instant. Forgetting a record erases its body from
every audit of its scope (:func:`scrub_audits`, called inside the delete's transaction); the entry
stays, marked erased, because the chat did receive a pin then.

The injection switch is a row per scope; no row means on.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Table, delete, insert, or_, select, update

from ledger.errors import InvalidArgument
from ledger.instants import from_micros, to_micros
from ledger.models import PacketAuditFields
from ledger.packet import HEADER, Packet, citation
from ledger.schema import INJECTION, PACKET_AUDITS

AUDITS: Table = PACKET_AUDITS
SESSION_MAX_CHARS = 200


class PacketAudit(PacketAuditFields):
    """What one chat received: the answer to :meth:`ledger.core.Ledger.packet_audit`, with ``text``, the
    packet text rebuilt from the frozen lines (a forgotten line reads ``[erased]``)."""

    @property
    def text(self) -> str:
        if not self.selected:
            return ""
        lines = [HEADER]
        for entry in self.selected:
            body = "[erased]" if entry.get("body") is None else entry["body"]
            lines.append(f"[{citation(entry['id'])}] {entry['kind']}: {body}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        from ledger.instants import format_rfc3339

        return {
            "scopeKey": self.scope_key,
            "sessionId": self.session_id,
            "builtAt": format_rfc3339(self.built_at),
            "maxChars": self.max_chars,
            "tokenEstimate": self.token_estimate,
            "text": self.text,
            "selected": [dict(e) for e in self.selected],
            "excluded": [dict(e) for e in self.excluded],
        }


def write_audit(conn: Connection, scope_key: str, session_id: str, packet: Packet) -> None:
    """Replace the session's audit with ``packet`` (inside the caller's write transaction)."""
    assert packet.built_at is not None
    selected = [
        {"id": s.id, "kind": s.kind, "reason": s.reason, "body": s.body, "erased": False} for s in packet.selected
    ]
    excluded = [{"id": e.id, "code": e.code} for e in packet.excluded]
    key = (AUDITS.c.scope_key == scope_key) & (AUDITS.c.session_id == session_id)
    conn.execute(delete(AUDITS).where(key))
    conn.execute(
        insert(AUDITS).values(
            scope_key=scope_key,
            session_id=session_id,
            built_at=to_micros(packet.built_at),
            max_chars=packet.max_chars,
            token_estimate=packet.token_estimate,
            selected=json.dumps(selected, ensure_ascii=False),
            excluded=json.dumps(excluded),
        )
    )


def read_audit(conn: Connection, scope_key: str, session_id: str) -> PacketAudit | None:
    key = (AUDITS.c.scope_key == scope_key) & (AUDITS.c.session_id == session_id)
    row = conn.execute(select(AUDITS).where(key)).mappings().first()
    if row is None:
        return None
    return PacketAudit(
        scope_key=row["scope_key"],
        session_id=row["session_id"],
        built_at=from_micros(row["built_at"]),
        max_chars=row["max_chars"],
        token_estimate=row["token_estimate"],
        selected=list(json.loads(row["selected"])),
        excluded=list(json.loads(row["excluded"])),
    )


def scrub_audits(conn: Connection, scope_key: str, record_ids: Sequence[str]) -> int:
    """Erase forgotten records' bodies from every audit of ``scope_key`` that carried them (inside the delete's
    transaction).

    Audits are found by the id in their ``selected`` list (a LIKE on the JSON text, then an
    exact check); the entry keeps its id, kind and reason, its body becomes null. Returns
    how many audits changed.
    """
    ids = set(record_ids)
    if not ids:
        return 0
    found = conn.execute(
        select(AUDITS.c.scope_key, AUDITS.c.session_id, AUDITS.c.selected).where(
            AUDITS.c.scope_key == scope_key, or_(*(AUDITS.c.selected.like(f'%"{rid}"%') for rid in sorted(ids)))
        )
    ).all()
    changed = 0
    for scope_key, session_id, selected_text in found:
        selected = json.loads(selected_text)
        touched = False
        for entry in selected:
            if entry.get("id") in ids and entry.get("body") is not None:
                entry["body"], entry["erased"] = None, True
                touched = True
        if touched:
            key = (AUDITS.c.scope_key == scope_key) & (AUDITS.c.session_id == session_id)
            conn.execute(update(AUDITS).where(key).values(selected=json.dumps(selected, ensure_ascii=False)))
            changed += 1
    return changed


def check_session_id(value: object) -> str:
    """A session id: 1 to 200 characters, no control characters, valid Unicode (no lone surrogate).

    Raises:
        InvalidArgument: anything else.
    """
    if (
        not isinstance(value, str)
        or not value.strip()
        or len(value) > SESSION_MAX_CHARS
        or any(ord(ch) < 32 or 0x7F <= ord(ch) < 0xA0 or 0xD800 <= ord(ch) < 0xE000 for ch in value)
    ):
        raise InvalidArgument(f"a session id must be 1 to {SESSION_MAX_CHARS} characters without control characters")
    return value


def injection_enabled(conn: Connection, scope_key: str) -> bool:
    row = conn.execute(select(INJECTION.c.enabled).where(INJECTION.c.scope_key == scope_key)).first()
    return True if row is None else bool(row[0])


def store_injection(conn: Connection, scope_key: str, enabled: bool, now_us: int) -> None:
    conn.execute(delete(INJECTION).where(INJECTION.c.scope_key == scope_key))
    conn.execute(insert(INJECTION).values(scope_key=scope_key, enabled=enabled, updated_at=now_us))
