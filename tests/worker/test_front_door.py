"""The front door: `make run` installs only the runtime, and serve's first screen says what to do next."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.worker.conftest import Proc, free_port, wait_until

ROOT = Path(__file__).resolve().parents[2]


def _make_dry_run(target: str, venv: Path) -> str:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    result = subprocess.run(
        ["make", "-n", "-C", str(ROOT), target, f"VENV={venv}"], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_make_run_installs_only_the_runtime_dependencies(tmp_path: Path) -> None:
    run = _make_dry_run("run", tmp_path / "venv")
    installs = re.findall(r"pip install -q -e (\S+)", run)
    assert installs == ["."], run  # no [dev]: no mypy, ruff, hypothesis or validators just to run
    assert "memledger serve --banner" in run
    test = _make_dry_run("test", tmp_path / "venv")
    assert re.findall(r"pip install -q -e (\S+)", test) == ["'.[dev]'"], test


def test_make_run_reuses_a_venv_that_already_has_the_dev_extras(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / ".installed").touch()  # newer than pyproject.toml: `make install` already ran here
    run = _make_dry_run("run", venv)
    assert "then touch" in run  # the runtime stamp is taken from the dev install, nothing reinstalled


def test_serve_banner_names_the_account_the_reference_and_a_working_curl(
    spawn: Callable[..., Proc], base_env: dict[str, str]
) -> None:
    port = free_port()
    env = {**base_env, "MEMLEDGER_ACCOUNT": "alice", "MEMLEDGER_SWEEP_INTERVAL_S": "0"}
    serve = spawn("serve", ["memledger", "serve", "--port", str(port), "--banner"], env)

    def up() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/livez", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(up, timeout_s=30)
    banner = serve.out.read_text()
    assert "Bound account: alice (scope account:alice)" in banner
    assert "MEMLEDGER_ACCOUNT=<name>" in banner and "docs/protocol.md" in banner
    assert (ROOT / "docs" / "protocol.md").is_file()
    assert f"http://127.0.0.1:{port}/ops" in banner
    assert not any(line.startswith("{") for line in banner.splitlines())  # logs stay on stderr, as JSON
    # The curl it shows works as printed
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    command = re.search(r"^\s+(curl .*?)$\n\s+(-d .*)$", banner, re.M)
    assert command is not None, banner
    argv = shlex.split(command.group(1).rstrip("\\") + " " + command.group(2))
    answer = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert '"status":"active"' in answer.stdout and '"scopeKey":"account:alice"' in answer.stdout


def test_serve_prints_no_banner_when_not_on_a_terminal(spawn: Callable[..., Proc], base_env: dict[str, str]) -> None:
    port = free_port()
    serve = spawn("serve", ["memledger", "serve", "--port", str(port)], {**base_env, "MEMLEDGER_SWEEP_INTERVAL_S": "0"})

    def up() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/livez", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(up, timeout_s=30)
    assert serve.out.read_text() == ""
