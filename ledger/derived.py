"""Erasure of derived copies: consolidation runs keep the prompt and answer built from bodies.

The runs table belongs to the same migration chain as the ledger, so forgetting a
record scrubs them in the delete's own transaction, whichever program deletes
(the service, the command line, a library caller) and whether or not consolidation
was ever imported. Bodies are replaced by ``[erased]`` in every stored encoding.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, text

ERASED = "[erased]"


def scrub_runs(conn: Connection, record_ids: Sequence[str], bodies: Sequence[str]) -> None:
    """Erase forgotten bodies from every stored prompt and answer (runs inside the delete transaction).

    Prompts name records by per-run aliases, so runs are found by scope and age:
    every run of the records' scope started since the oldest erased record was created.
    """
    ids = list(record_ids)
    texts = sorted({b for b in bodies if b}, key=len, reverse=True)
    if not ids:
        return
    marks = ", ".join(f":i{n}" for n in range(len(ids)))
    scopes = conn.execute(
        text(f"SELECT scope_key, MIN(created_at) FROM memory_records WHERE id IN ({marks}) GROUP BY scope_key"),
        {f"i{n}": rid for n, rid in enumerate(ids)},
    ).all()
    for scope, since in scopes:
        rows = (
            conn.execute(
                text(
                    "SELECT id, prompt, answer, answer_raw FROM consolidation_runs WHERE scope_key = :s "
                    "AND COALESCE(started_at, created_at) >= :since "
                    "AND (prompt IS NOT NULL OR answer IS NOT NULL OR answer_raw IS NOT NULL)"
                ),
                {"s": scope, "since": since - 1},
            )
            .mappings()
            .all()
        )
        for row in rows:
            _scrub_row(conn, row, set(ids), texts)


def _scrub_row(conn: Connection, row: Any, ids: set[str], texts: list[str]) -> None:
    stored = None if row["answer"] is None else json.loads(row["answer"])
    # The raw text repeats the answer's own words: an operation that named an erased record
    # may restate it (a paraphrase, a rationale) in text that matches no erased body.
    raw_texts = sorted({*texts, *_touched_texts(stored, ids)}, key=len, reverse=True)
    answer = None if stored is None else _scrub_answer(stored, ids, texts)
    conn.execute(
        text("UPDATE consolidation_runs SET prompt = :p, answer = :a, answer_raw = :r WHERE id = :id"),
        {
            "p": _scrub_text(row["prompt"], texts),
            "a": None if answer is None else json.dumps(answer),
            "r": _scrub_text(row["answer_raw"], raw_texts),
            "id": row["id"],
        },
    )


def _scrub_text(value: str | None, texts: list[str]) -> str | None:
    if value is None:
        return None
    for body in texts:
        for form in _stored_forms(body):
            value = value.replace(form, ERASED)
    return value


def _stored_forms(body: str) -> list[str]:
    """Every way a body is written into a stored prompt or answer.

    As is (raw answers); JSON-escaped (stored answers); and as the prompt encodes it
    (``ensure_ascii=False``, ``<``/``>`` as ``\\u003c``/``\\u003e``). Without the last, a
    body with a ``<`` or a quote and non-ASCII text would survive in the prompt.
    """
    unicode_json = json.dumps(body, ensure_ascii=False)[1:-1]
    prompt_form = unicode_json.replace("<", "\\u003c").replace(">", "\\u003e")
    return list(dict.fromkeys([body, json.dumps(body)[1:-1], unicode_json, prompt_form]))


def _touched_texts(answer: Any, ids: set[str]) -> list[str]:
    """Bodies and rationales of the operations that named an erased record."""
    if not isinstance(answer, dict) or not isinstance(answer.get("operations"), list):
        return []
    return [
        op[key]
        for op in answer["operations"]
        if isinstance(op, dict) and isinstance(op.get("targets"), list) and ids & set(map(str, op["targets"]))
        for key in ("body", "rationale")
        if isinstance(op.get(key), str) and op[key]
    ]


def _scrub_answer(answer: Any, ids: set[str], texts: list[str]) -> Any:
    """An operation that touched an erased record loses its body and rationale."""
    if isinstance(answer, dict) and isinstance(answer.get("operations"), list):
        for op in answer["operations"]:
            if isinstance(op, dict) and isinstance(op.get("targets"), list) and ids & set(map(str, op["targets"])):
                for key in ("body", "rationale"):
                    if key in op:
                        op[key] = ERASED
    return json.loads(_scrub_text(json.dumps(answer), texts) or "null")


def scrub_digests(conn: Connection, scope_key: str, bodies: Sequence[str]) -> int:
    """Erase forgotten bodies from the scope's extraction digests (the chat text an extraction run reads).

    A digest message that contains a forgotten body (case-insensitive, whitespace-flattened)
    loses that text: the message keeps its id and role, its text has the body replaced by
    ``[erased]``. Returns how many digests changed.
    """
    needles = sorted({" ".join(b.split()).lower() for b in bodies if b and b.strip()}, key=len, reverse=True)
    if not needles:
        return 0
    rows = conn.execute(
        text("SELECT session_id, messages FROM extraction_digests WHERE scope_key = :s"), {"s": scope_key}
    ).all()
    changed = 0
    for session_id, stored in rows:
        messages = json.loads(stored)
        touched = False
        for message in messages:
            flat = " ".join(str(message.get("text", "")).split())
            lowered = flat.lower()
            if any(n in lowered for n in needles):
                for needle in needles:
                    flat = _replace_ci(flat, needle, ERASED)
                message["text"] = flat
                touched = True
        if touched:
            conn.execute(
                text(
                    "UPDATE extraction_digests SET messages = :m, chars = :c WHERE scope_key = :s AND session_id = :sid"
                ),
                {
                    "m": json.dumps(messages, ensure_ascii=False),
                    "c": sum(len(m.get("text", "")) for m in messages),
                    "s": scope_key,
                    "sid": session_id,
                },
            )
            changed += 1
    return changed


def _replace_ci(haystack: str, needle: str, replacement: str) -> str:
    """Replace every case-insensitive occurrence of ``needle`` in ``haystack``."""
    return re.sub(re.escape(needle), replacement, haystack, flags=re.IGNORECASE)
