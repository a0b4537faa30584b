"""``make replay-llm``: ``memledger bench replay --harness openai`` against llama-cpp-python's server (Gemma 3 270M).

Starts the server (:mod:`tools.llama_server`, the Python of the venv ``make test-llm`` installs,
``MEMLEDGER_LLM_PYTHON``) with a 2,048-token context, runs the replay through the real ``openai``
harness with the model free of charge, that context window stated (this server reports none) and a
cap that suits a CPU, prints its report, and stops the
server. Extra arguments go to ``memledger bench replay`` (``make replay-llm REPLAY_ARGS="--episodes 7
--split tuning --format json"``); docs/consolidation-quality.md records what it measured.

Exit status: the replay's (1 when a run failed for any cause but the designed one).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tools.llama_server import MODEL_ALIAS, serve

CONTEXT_WINDOW = 2048


def main(argv: list[str]) -> int:
    python = os.environ.get("MEMLEDGER_LLM_PYTHON")
    if not python:
        print("MEMLEDGER_LLM_PYTHON is not set: run `make replay-llm`", file=sys.stderr)
        return 2
    with (
        tempfile.TemporaryDirectory(prefix="memledger-llm-") as scratch,
        serve(python, n_ctx=CONTEXT_WINDOW, log=Path(scratch) / "server.log") as base_url,
    ):
        command = [
            str(Path(sys.executable).with_name("memledger")), "bench", "replay", "--harness", "openai",
            "--model", MODEL_ALIAS, "--base-url", base_url, "--price-in-usd-per-mtok", "0",
            "--price-out-usd-per-mtok", "0", "--wall-clock-cap-s", "300", "--max-output-tokens", "256",
            "--context-window-tokens", str(CONTEXT_WINDOW), *argv,
        ]  # fmt: skip
        return subprocess.run(command, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
