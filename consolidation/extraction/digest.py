"""The per-session digest an extraction run reads (docs/extraction.md): the most recent messages, bounded.

A digest keeps at most :data:`MAX_MESSAGES` messages and :data:`MAX_CHARS` characters of
text, newest kept: each turn's messages are appended and the oldest fall off. A single
message longer than the whole bound keeps its first :data:`MAX_CHARS` characters. A
message that carries a credential is stored with its text withheld, so no secret typed
into a chat is kept (or sent to a model) by extraction.

Messages arrive as ``{id?, role: user|assistant, text}``; :func:`check_messages`
validates them (a clear :class:`~consolidation.errors.InvalidSettings`-style error, and
nothing is stored, when one is wrong). A message without an id is named ``m<n>`` by its
position in the session.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from consolidation.errors import InvalidExtractionInput
from ledger import find_credential

MAX_MESSAGES = 30
MAX_CHARS = 24_000
MAX_MESSAGES_PER_TURN = 100
MAX_ID_CHARS = 100
ROLES = ("user", "assistant")
WITHHELD = "[withheld: this message looked like it carried a credential]"


@dataclass(frozen=True, slots=True)
class DigestMessage:
    """One message of a digest: its id (as the prompt names it), who said it, and what."""

    id: str
    role: str
    text: str

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "role": self.role, "text": self.text}


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_BUT_BREAKS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def _has_control(text: str, *, allow_breaks: bool) -> bool:
    """Control characters (but newline, tab, CR when ``allow_breaks``), or a lone surrogate (not text)."""
    if (_CONTROL_BUT_BREAKS if allow_breaks else _CONTROL).search(text):
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def check_messages(messages: object) -> list[dict[str, Any]]:
    """Validate one turn's messages; returns them as plain dicts (id may be None).

    Raises:
        InvalidExtractionInput: not a list of 1 to 100 objects with a ``role`` of user or
            assistant, a string ``text`` (no control characters but newline and tab), an
            optional string ``id`` of at most 100 characters, and no other field.
    """
    if not isinstance(messages, list) or not 1 <= len(messages) <= MAX_MESSAGES_PER_TURN:
        raise InvalidExtractionInput(f"messages must be a list of 1 to {MAX_MESSAGES_PER_TURN} messages")
    out = []
    for n, message in enumerate(messages):
        where = f"messages[{n}]"
        if not isinstance(message, Mapping):
            raise InvalidExtractionInput(f"{where} must be an object with role and text")
        unknown = sorted(str(k) for k in message if k not in ("id", "role", "text"))
        if unknown:
            raise InvalidExtractionInput(f"{where} has unknown field(s) {', '.join(unknown)[:80]}; use id, role, text")
        role, text, mid = message.get("role"), message.get("text"), message.get("id")
        if role not in ROLES:
            raise InvalidExtractionInput(f"{where}.role must be user or assistant")
        if not isinstance(text, str) or _has_control(text, allow_breaks=True):
            raise InvalidExtractionInput(f"{where}.text must be text without control characters (newline and tab ok)")
        if mid is not None and (
            not isinstance(mid, str)
            or not mid.strip()
            or len(mid) > MAX_ID_CHARS
            or _has_control(mid, allow_breaks=False)
        ):
            raise InvalidExtractionInput(
                f"{where}.id must be 1 to {MAX_ID_CHARS} characters without control characters"
            )
        out.append({"id": mid, "role": role, "text": text})
    return out


def extend(
    current: Sequence[DigestMessage], turn: Sequence[Mapping[str, Any]], *, next_seq: int
) -> tuple[list[DigestMessage], int]:
    """``current`` plus ``turn`` (checked messages), bounded, newest kept; returns (digest, next_seq)."""
    added = []
    for message in turn:
        next_seq += 1
        text = str(message["text"])[:MAX_CHARS]
        if find_credential(text) is not None:
            text = WITHHELD
        added.append(DigestMessage(str(message["id"] or f"m{next_seq}"), str(message["role"]), text))
    digest = [*current, *added][-MAX_MESSAGES:]
    total = sum(len(m.text) for m in digest)
    while len(digest) > 1 and total > MAX_CHARS:
        total -= len(digest[0].text)
        digest.pop(0)
    return digest, next_seq


def dumps(digest: Sequence[DigestMessage]) -> str:
    return json.dumps([m.to_json() for m in digest], ensure_ascii=False)


def loads(stored: str) -> list[DigestMessage]:
    return [DigestMessage(str(m["id"]), str(m["role"]), str(m["text"])) for m in json.loads(stored)]


def chars(digest: Sequence[DigestMessage]) -> int:
    return sum(len(m.text) for m in digest)
