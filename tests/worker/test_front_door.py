"""The front door: `make run` installs only the runtime, and serve's first screen says what to do next."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

from ledger import open_ledger
from tests.conftest import tool_missing
from tests.worker.conftest import MEMLEDGER, Proc, free_port, wait_live

ROOT = Path(__file__).resolve().parents[2]


def _make_dry_run(target: str, venv: Path) -> str:
    if shutil.which("make") is None:
        tool_missing("make is not installed")
    result = subprocess.run(
        ["make", "-n", "-C", str(ROOT), *target.split(), f"VENV={venv}"], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_make_run_installs_only_the_runtime_dependencies(tmp_path: Path) -> None:
    run = _make_dry_run("run", tmp_path / "venv")
    installs = re.findall(r"pip install -q --python \S+ -e (\S+)", run)
    assert installs == ["."], run  # no [dev]: no mypy, ruff, hypothesis or validators just to run
    assert "memledger serve --banner" in run
    assert "--port" not in run  # MEMLEDGER_PORT, else 8080
    assert "memledger serve --banner --port 8081" in _make_dry_run("run PORT=8081", tmp_path / "venv")
    test = _make_dry_run("test", tmp_path / "venv")
    assert re.findall(r"pip install -q --python \S+ -e (\S+)", test) == ["'.[dev]'"], test


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
    env = {**base_env, "MEMLEDGER_ACCOUNT": "alice", "MEMLEDGER_SWEEP_INTERVAL_S": "0", "MEMLEDGER_PORT": str(port)}
    serve = spawn("serve", ["memledger", "serve", "--banner"], env)

    wait_live(f"http://127.0.0.1:{port}")
    banner = serve.out.read_text()
    assert "Bound account: alice (scope account:alice)" in banner
    assert "MEMLEDGER_ACCOUNT=<name>" in banner and "docs/protocol.md" in banner
    assert (ROOT / "docs" / "protocol.md").is_file()
    assert f"http://127.0.0.1:{port}/ops" in banner
    assert "make run PORT=8081" in banner and "MEMLEDGER_PORT" in banner  # how to change the port
    assert not any(line.startswith("{") for line in banner.splitlines())  # logs stay on stderr, as JSON
    # The curl it shows works as printed
    if shutil.which("curl") is None:
        tool_missing("curl is not installed")
    command = re.search(r"^\s+(curl .*?)$\n\s+(-d .*)$", banner, re.M)
    assert command is not None, banner
    argv = shlex.split(command.group(1).rstrip("\\") + " " + command.group(2))
    answer = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert '"status":"active"' in answer.stdout and '"scopeKey":"account:alice"' in answer.stdout


# That serve prints no banner when not on a terminal is checked on the serve of
# tests/worker/test_serve_and_worker.py::test_embedded_serve_is_a_complete_single_machine_service
# (a serve less to start).


def test_a_port_in_use_is_one_line_and_exit_status_1_before_anything_starts(base_env: dict[str, str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for args, env in (
            (["--port", str(port)], base_env),
            ([], {**base_env, "MEMLEDGER_PORT": str(port)}),
        ):
            result = subprocess.run(
                [MEMLEDGER, "serve", "--banner", *args],
                capture_output=True,
                text=True,
                env=env,
                timeout=60,
            )
            assert result.returncode == 1, result.stderr
            assert result.stderr.splitlines() == [port_in_use(port)]
            assert result.stdout == ""  # refused before the banner, the worker or any log line


def port_in_use(port: int) -> str:
    """The one line ``serve`` (and so ``make run``) prints when its port is taken."""
    return (
        f"memledger serve: port {port} on 127.0.0.1 is already in use; choose another with --port, "
        "MEMLEDGER_PORT or `make run PORT=<port>`"
    )


def _venv_of_this_test(tmp_path: Path) -> Path:
    """A venv for make's VENV that is this one, installed already: its bin and uv, stamps newer than pyproject."""
    venv = tmp_path / "venv"
    (venv / "tools" / "bin").mkdir(parents=True)
    (venv / "bin").symlink_to(Path(MEMLEDGER).parent)
    (venv / "tools" / "bin" / "uv").symlink_to(Path(MEMLEDGER).parent / "python")  # never run: it exists
    for stamp in (".installed", ".installed-runtime"):
        (venv / stamp).touch()
    return venv


def test_make_run_on_a_port_in_use_is_one_line_and_exit_status_1(tmp_path: Path, base_env: dict[str, str]) -> None:
    if shutil.which("make") is None:
        tool_missing("make is not installed")
    venv = _venv_of_this_test(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            ["make", "--no-print-directory", "-C", str(ROOT), "run", f"PORT={port}", f"VENV={venv}"],
            capture_output=True,
            text=True,
            env=base_env,
            timeout=60,
        )
    # Then what the README says: one line on stderr (make adds none) and exit status 1
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == [port_in_use(port)]
    assert result.stdout == ""


def test_the_package_says_its_license_and_where_its_documents_are() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    assert "Apache License" in (ROOT / "LICENSE").read_text(encoding="utf-8").splitlines()[1]
    assert project["authors"] and project["keywords"] and project["classifiers"]
    for name, target in project["urls"].items():
        assert (ROOT / target).is_file(), f"{name}: {target}"


def test_the_readme_commands_run_as_written() -> None:
    # Every memledger command in a code block is spelled with its path, or follows the line that puts
    # .venv/bin on the PATH.
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```sh\n(.*?)```", readme, re.S)
    path_set = 'export PATH="$PWD/.venv/bin:$PATH"'
    assert path_set in readme
    before_path = readme[: readme.index(path_set)]
    early = [c for b in re.findall(r"```sh\n(.*?)```", before_path, re.S) for c in re.findall(r"(?m)^memledger \S+", b)]
    assert early == [], "these run before .venv/bin is on the PATH"
    assert blocks


def test_the_first_five_minutes_end_with_a_merge_the_user_sees(
    spawn: Callable[..., Proc], base_env: dict[str, str], tmp_path: Path
) -> None:
    # Given a fresh serve, as `make run` starts it (about 3 s of start-up; the rest is a few CLI commands)
    from tests.worker.test_protocol_doc import MEMLEDGER_BIN, _run_blocks

    if shutil.which("curl") is None:
        tool_missing("curl is not installed")
    port = free_port()
    spawn("serve", ["memledger", "serve", "--port", str(port)], {**base_env, "MEMLEDGER_SWEEP_INTERVAL_S": "0"})

    wait_live(f"http://127.0.0.1:{port}")
    # When every command of the quickstart's first five minutes runs as written, in order
    quickstart = (ROOT / "docs" / "quickstart.md").read_text(encoding="utf-8")
    section = quickstart[quickstart.index("## Pin, list, build a packet") : quickstart.index("## Serve many accounts")]
    blocks = re.findall(r"^```sh\n(.*?)^```", section, re.M | re.S)
    assert any("run-now" in block for block in blocks)
    env = {**base_env, "PATH": f"{MEMLEDGER_BIN}:{os.environ['PATH']}", "COLUMNS": "200"}
    outputs = _run_blocks(blocks, port, tmp_path, env)
    # Then the run settled now, not ten minutes later, proposing the merge of the two pins
    shown = "\n".join(outputs)
    assert "settled: proposed" in shown and "0/1/0" in shown, shown
    assert "Replaces (closed on accept)" in shown and "I prefer metric units." in shown, shown
    # And accepting the proposal, as the quickstart says next, leaves one pin where there were two
    led = open_ledger(base_env["MEMLEDGER_DATABASE_URL"])
    try:
        [proposal] = [p for p in led.proposals(led.scope_key) if len(p.supersedes) == 2]
        led.accept(proposal.id)
        assert [r.body for r in led.list(led.scope_key)] == ["I prefer metric units"]
    finally:
        led.close()
