"""The answers the docs show, produced by running every example against a real ledger and its server's methods.

:func:`example_answers` opens a scratch SQLite ledger at a fixed instant, holding what the
reference's set-up makes (two waiting proposals, then a saved record), and answers each example of
:data:`tools.protocol_doc.DOCS` in order through :func:`ledger.protocol.handle` with the methods
``memledger serve`` adds: exactly the code a served ``POST /rpc`` runs. Ids are random, so each is
replaced by a stable stand-in (in order of first appearance, its packet citation with it); instants
come from the fixed clock. The answers are therefore the same on every run, a doc that shows them
is checked like the reference itself (``python -m tools.protocol_doc --check``), and
``tests/worker/test_protocol_doc.py`` compares them with a running serve's, ids and instants aside.

Any page under ``docs/`` can show an example's result between two markers, filled in by
:func:`fill_answers`::

    <!-- answer: memory/get_memory_capabilities -->
    ```json
    …
    ```
    <!-- /answer -->
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ledger import CITATION_CHARS

DOC_INSTANT = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
SETUP_BODY = "my deploy region is eu-west-1"  # what the reference's set-up saves ($ID)
PROPOSAL_BODIES = ("you prefer option 1", "you prefer option 2")  # waiting proposals ($PROPOSAL_ID, …)
# No word boundary in front: in JSON text an id may follow an escape such as ``\n``.
_IDS = re.compile(r"(?:mem|run)_[0-9a-f]{24}(?![0-9a-f])")
_ID_OR_CITATION = re.compile(
    rf"(?:mem|run)_[0-9a-f]{{24}}(?![0-9a-f])|mem_[0-9a-f]{{{CITATION_CHARS - 4}}}(?![0-9a-f])"
)
_MARKED = re.compile(r"(<!-- answer: (?P<method>[^ ]+) -->\n)(?:```json\n.*?\n```\n)?(<!-- /answer -->)", re.S)


def stand_in(real: str, n: int) -> str:
    """A stable id of the same form as ``real`` for the ``n``-th id met (they look like ids, and are not random)."""
    prefix = real.split("_", 1)[0]
    return f"{prefix}_{hashlib.sha256(f'memledger-docs-{prefix}-{n}'.encode()).hexdigest()[:24]}"


def stable_ids(text: str, seen: dict[str, str]) -> str:
    """``text`` with every record and run id replaced by its stand-in (and a record's citation by the stand-in's).

    ``seen`` maps the ids met so far to their stand-ins (it grows). One pass, so a text that already
    holds stand-ins is renumbered consistently.
    """
    for match in _IDS.finditer(text):
        seen.setdefault(match.group(), stand_in(match.group(), len(seen)))
    citations = {real[:CITATION_CHARS]: fake[:CITATION_CHARS] for real, fake in seen.items() if real.startswith("mem_")}

    def swap(match: re.Match[str]) -> str:
        found = match.group()
        return seen.get(found) or citations.get(found, found)

    return _ID_OR_CITATION.sub(swap, text)


@contextmanager
def _scratch_ledger() -> Iterator[Any]:
    """A ledger in a temporary SQLite file, its clock frozen at :data:`DOC_INSTANT`, with the set-up's records."""
    from ledger import open_ledger

    with tempfile.TemporaryDirectory(prefix="memledger-docs-") as tmp:
        led = open_ledger(f"sqlite:///{Path(tmp) / 'docs.db'}", account="local", clock=lambda: DOC_INSTANT)
        try:
            for body in PROPOSAL_BODIES:
                led.propose(body)
            yield led
        finally:
            led.close()


def _server_methods(led: Any, database_url: str) -> tuple[Mapping[str, Any], Callable[[], None]]:
    """The methods ``memledger serve`` adds, on ``led``, with a default configuration (embedded queue)."""
    from worker.config import WorkerConfig
    from worker.rpc.methods import extra_methods
    from worker.runtime import build_runtime

    runtime = build_runtime(WorkerConfig(database_url=database_url, redis_url=None, account="local"), ledger=led)
    return extra_methods(runtime, operator=runtime.config.auth != "tokens"), runtime.close


def example_answers(requests: Mapping[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each example request answered in order (``$ID``-style params filled in); ``{method: response}``.

    ``requests`` maps a method to its example request, params holding ``"$ID"``,
    ``"$PROPOSAL_ID"`` or ``"$OTHER_PROPOSAL_ID"`` where the set-up's ids go. Raises
    ``RuntimeError`` when an example is answered with an error: a doc never shows a broken call.
    """
    from ledger.protocol import handle

    answers: dict[str, dict[str, Any]] = {}
    seen: dict[str, str] = {}
    with _scratch_ledger() as led:
        extra, close = _server_methods(led, str(led.engine.url))
        try:
            saved = handle(led, {"jsonrpc": "2.0", "id": 1, "method": "memory/save_memory_record",
                                 "params": {"body": SETUP_BODY}})  # fmt: skip
            proposals = [r.id for r in led.proposals(led.scope_key)]
            variables = {"ID": saved["result"]["id"], "PROPOSAL_ID": proposals[0], "OTHER_PROPOSAL_ID": proposals[1]}
            for method, request in requests.items():
                filled = json.loads(json.dumps(request), object_hook=lambda o: _fill(o, variables))
                response = handle(led, filled, extra_methods=extra)
                if response is None or "result" not in response:
                    raise RuntimeError(f"the example of {method} is answered with an error: {response}")
                answers[method] = json.loads(stable_ids(json.dumps(response), seen))
        finally:
            close()
    return answers


def _fill(obj: dict[str, Any], variables: Mapping[str, str]) -> dict[str, Any]:
    return {k: variables[v[1:]] if isinstance(v, str) and v[1:] in variables else v for k, v in obj.items()}


def answer_block(result: Any) -> str:
    """A result as the docs show it: indented JSON in a fenced block (a list of plain values on one line)."""
    return "```json\n" + _pretty(result, "") + "\n```"


def _pretty(value: Any, indent: str) -> str:
    inner = indent + "  "
    if isinstance(value, dict) and value:
        items = [f"{inner}{json.dumps(k, ensure_ascii=False)}: {_pretty(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{indent}}}"
    if isinstance(value, list) and any(isinstance(v, dict | list) for v in value):
        return "[\n" + ",\n".join(inner + _pretty(v, inner) for v in value) + f"\n{indent}]"
    return json.dumps(value, ensure_ascii=False)


def fill_answers(text: str, answers: Mapping[str, dict[str, Any]]) -> str:
    """``text`` with every ``<!-- answer: METHOD -->`` region holding that method's example result.

    Raises ``LookupError`` for a region naming a method that has no example.
    """

    def filled(match: re.Match[str]) -> str:
        method = match.group("method")
        if method not in answers:
            raise LookupError(f"<!-- answer: {method} -->: no such method has an example in tools/protocol_doc")
        return f"{match.group(1)}{answer_block(answers[method]['result'])}\n{match.group(3)}"

    return _MARKED.sub(filled, text)


def pages_with_answers(docs_dir: Path) -> list[Path]:
    """Every Markdown page under ``docs_dir`` that shows an example's answer."""
    return sorted(p for p in docs_dir.glob("*.md") if _MARKED.search(p.read_text(encoding="utf-8")))
