"""A fake model server as a process of its own: ``python -m consolidation.fake_anthropic`` (or ``fake_openai``).

The first stdout line is the base URL; it serves until SIGTERM or SIGINT. ``--script FILE.json`` is a
JSON list of operations, or an object with any of the :class:`~consolidation.fake_model.FakeModelServer`
options (``operations``, ``text``, ``delay_s``, ``trickle_s``, ``usage``, ``statuses``, ``retry_after_s``,
``replies`` as a list of :class:`~consolidation.fake_model.Reply` fields, ``proposals``).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from consolidation.fake_model import FakeModelServer, Reply


def _load_script(path: Path) -> dict[str, Any]:
    script = json.loads(path.read_text())
    if isinstance(script, list):
        return {"operations": script}
    if not isinstance(script, dict):
        raise ValueError(f"{path}: the script must be a JSON list of operations or an object")
    allowed = {
        "operations", "text", "delay_s", "trickle_s", "usage", "statuses", "retry_after_s", "replies", "proposals"
    }  # fmt: skip
    unknown = set(script) - allowed
    if unknown:
        raise ValueError(f"{path}: unknown script key(s) {sorted(unknown)}; allowed: {sorted(allowed)}")
    script["replies"] = [Reply(**reply) for reply in script.get("replies", [])]
    return script


def main(argv: Sequence[str] | None, *, server: type[FakeModelServer]) -> int:
    """Run the fake ``server`` as a process until SIGTERM/SIGINT.

    The first stdout line is its base URL.
    """
    server_class = server
    module = sys.modules[server_class.__module__]
    parser = argparse.ArgumentParser(
        prog=f"python -m {module.__name__}", description=(module.__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--script", type=Path, help="JSON file: a list of operations, or an object (see docstring)")
    parser.add_argument("--delay", type=float, default=None, help="seconds to wait before every default reply")
    parser.add_argument("--trickle", type=float, default=None, help="seconds between the bytes of every answer")
    parser.add_argument(
        "--counter-file",
        "--hang-file",
        dest="counter_file",
        type=Path,
        help="file rewritten with the call count as each request arrives",
    )
    args = parser.parse_args(argv)
    try:
        script = _load_script(args.script) if args.script else {}
    except (OSError, ValueError, TypeError) as exc:
        parser.error(str(exc))
    if args.delay is not None:
        script["delay_s"] = args.delay
    if args.trickle is not None:
        script["trickle_s"] = args.trickle
    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    with server_class(counter_file=args.counter_file, host=args.host, port=args.port, **script) as fake:
        print(fake.base_url, flush=True)
        while not stop.wait(0.2):
            pass
    return 0
