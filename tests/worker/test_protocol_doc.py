"""The protocol reference is generated, complete and true: it is not stale, every served method is in it,
every example answers the documented fields, and every curl in it and in the quickstart works against serve."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ledger import open_ledger
from ledger.protocol import METHODS, handle
from tests.conftest import tool_missing
from tests.worker.conftest import MEMLEDGER, Proc, free_port, wait_live
from tools.protocol_doc import DOCS, RECORD_FIELDS, RESULTS, check_coverage, main, render, request_json, served_methods
from tools.protocol_doc.examples import fill_answers, pages_with_answers, stable_ids
from worker.cli.rpc import rpc_extra_methods

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "protocol.md"
PACKET = ROOT / "docs" / "packet.md"
INSTANT = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z")
QUICKSTART = ROOT / "docs" / "quickstart.md"
MARK = "@@memledger-example@@"


def test_the_committed_reference_and_the_pages_showing_answers_are_not_stale() -> None:
    assert REFERENCE.read_text(encoding="utf-8") == render(), "run: python -m tools.protocol_doc"
    assert PACKET in pages_with_answers(ROOT / "docs")
    assert main(["--check"]) == 0


def test_check_reports_a_stale_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stale = tmp_path / "protocol.md"
    stale.write_text(render().replace("memory/build_packet", "memory/old_name"), encoding="utf-8")
    args = ["--output", str(stale), "--docs-dir", str(tmp_path)]
    assert main(["--check", *args]) == 1
    # It says which lines differ
    said = capsys.readouterr().err
    assert f"{stale} is stale" in said and "-## memory/old_name" in said and "+## memory/build_packet" in said
    assert main(args) == 0 and main(["--check", *args]) == 0, capsys.readouterr().err


def test_check_reports_a_page_whose_answer_drifted(tmp_path: Path) -> None:
    # Given docs/packet.md with its capabilities answer edited by hand (three operations, as it once said)
    page = tmp_path / "packet.md"
    text = PACKET.read_text(encoding="utf-8")
    page.write_text(text.replace('"expire", "group", "retire", ', ""), encoding="utf-8")
    args = ["--output", str(tmp_path / "protocol.md"), "--docs-dir", str(tmp_path)]
    main([*args[:2], "--docs-dir", str(tmp_path / "none")])  # a fresh reference: only the page can be stale
    # Then --check fails, and a run rewrites the answer the server gives
    assert main(["--check", *args]) == 1
    assert main(args) == 0 and page.read_text(encoding="utf-8") == text


def test_an_answer_region_naming_a_method_without_an_example_is_refused() -> None:
    with pytest.raises(LookupError, match="memory/no_such_method"):
        fill_answers("<!-- answer: memory/no_such_method -->\n<!-- /answer -->\n", {})


def test_the_packet_page_shows_the_capabilities_a_server_answers(tmp_path: Path) -> None:
    led = open_ledger(f"sqlite:///{tmp_path / 'caps.db'}")
    try:
        request = {"jsonrpc": "2.0", "id": 1, "method": "memory/get_memory_capabilities"}
        served = handle(led, request, extra_methods=rpc_extra_methods(led))["result"]
    finally:
        led.close()
    shown = json.loads(re.search(r"<!-- answer: memory/get_memory_capabilities -->\n```json\n(.*?)```",
                                 PACKET.read_text(encoding="utf-8"), re.S).group(1))  # fmt: skip
    assert shown == served and len(shown["consolidation"]["operations"]) == 6


def test_every_served_method_is_documented_and_nothing_else() -> None:
    served = served_methods()
    assert set(METHODS) <= set(served)
    check_coverage(served)
    with pytest.raises(LookupError, match="memory/brand_new_method: served but not documented"):
        check_coverage([*served, "memory/brand_new_method"])
    with pytest.raises(LookupError, match="documented but not served"):
        check_coverage([name for name in served if name != "memory/build_packet"])


def _fill(params: Any, variables: dict[str, str]) -> Any:
    if isinstance(params, dict):
        return {key: _fill(value, variables) for key, value in params.items()}
    if isinstance(params, str) and params.startswith("$"):
        return variables[params[1:]]
    return params


def test_every_example_answers_exactly_the_documented_result_fields(tmp_path: Path) -> None:
    # Given a scratch ledger with a record and two waiting proposals, as the reference's set-up makes
    led = open_ledger(f"sqlite:///{tmp_path / 'doc.db'}")
    try:
        record = led.save("my deploy region is eu-west-1")
        proposals = [led.propose(f"you like option {n}") for n in (1, 2)]
        variables = {"ID": record.id, "PROPOSAL_ID": proposals[0].id, "OTHER_PROPOSAL_ID": proposals[1].id}
        extra = rpc_extra_methods(led)
        record_fields = {f.name for f in RECORD_FIELDS}
        # When each example runs in the reference's order
        for name, doc in DOCS.items():
            request = json.loads(request_json(name, doc))
            request["params"] = _fill(request.get("params", {}), variables)
            response = handle(led, request, extra_methods=extra)
            assert response is not None and "result" in response, (name, response)
            result = response["result"]
            # Then the result has every documented field and no other
            if doc.result == "record":
                assert set(result) == record_fields, name
                continue
            documented = {f.name for f in RESULTS[doc.result]}
            required = {f.name for f in RESULTS[doc.result] if not f.optional}
            assert required <= set(result) <= documented, (name, sorted(result))
            for key in ("records", "omitted"):
                for item in result.get(key, []):
                    assert set(item) == record_fields, name
    finally:
        led.close()


def _shell_blocks(path: Path) -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```", path.read_text(encoding="utf-8"), re.M | re.S)


MEMLEDGER_BIN = str(Path(MEMLEDGER).parent)


def _run_blocks(blocks: list[str], port: int, tmp_path: Path, env: dict[str, str] | None = None) -> list[str]:
    """Run the blocks in order in one bash (variables carry over); the output of each, in order."""
    script = ["set -euo pipefail"]
    for block in blocks:
        script += [f"echo '{MARK}'", block.replace("127.0.0.1:8080", f"127.0.0.1:{port}"), "echo"]
    path = tmp_path / "examples.sh"
    path.write_text("\n".join(script) + "\n")
    done = subprocess.run(["bash", str(path)], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    return [chunk.strip() for chunk in done.stdout.split(MARK)[1:]]


@pytest.fixture
def serve_with_proposals(spawn: Callable[..., Proc], base_env: dict[str, str]) -> int:
    if shutil.which("curl") is None:
        tool_missing("curl is not installed")
    led = open_ledger(base_env["MEMLEDGER_DATABASE_URL"])
    try:  # a model's proposals waiting for the user (consolidation in propose mode makes these)
        for n in (1, 2):
            led.propose(f"you prefer option {n}")
    finally:
        led.close()
    port = free_port()
    spawn("serve", ["memledger", "serve", "--port", str(port)], {**base_env, "MEMLEDGER_SWEEP_INTERVAL_S": "0"})

    wait_live(f"http://127.0.0.1:{port}")
    return port


@pytest.mark.parametrize("document", [REFERENCE, QUICKSTART], ids=["protocol.md", "quickstart.md"])
def test_every_curl_example_works_against_a_running_serve(
    document: Path, serve_with_proposals: int, tmp_path: Path, base_env: dict[str, str]
) -> None:
    # Blocks that start a server of their own (the token-protected serve walk-through) are set-up
    # for another layout, not examples against the default serve.
    blocks = [
        block
        for block in _shell_blocks(document)
        if "curl " in block and "/rpc" in block and "memledger serve" not in block and "make " not in block
    ]
    assert blocks, f"no curl examples in {document.name}"
    # As the quickstart has it: .venv/bin on the PATH, the commands on the served database.
    env = {**base_env, "PATH": f"{MEMLEDGER_BIN}:{os.environ['PATH']}"}
    outputs = _run_blocks(blocks, serve_with_proposals, tmp_path, env)
    documented = iter(_documented_answers(document))
    answered = 0
    for block, output in zip(blocks, outputs, strict=True):
        if not output:
            assert "=$(" in block, f"a curl example printed nothing:\n{block}"
            continue
        for line in output.splitlines():
            if not line.startswith("{"):
                continue  # a memledger command's own message
            response = json.loads(line)
            assert response.get("jsonrpc") == "2.0" and "result" in response, (block, response)
            if document == REFERENCE:  # the documented answer is the serve's, ids and instants aside
                assert _comparable(response) == _comparable(next(documented)), block
            answered += 1
    assert answered >= (len(DOCS) if document == REFERENCE else 4)
    assert next(documented, None) is None or document != REFERENCE


def _documented_answers(document: Path) -> list[Any]:
    blocks = re.findall(r"^\*\*Answer\*\*\n\n```json\n(.*?)^```", document.read_text(encoding="utf-8"), re.M | re.S)
    return [json.loads(block) for block in blocks]


def _comparable(response: Any) -> Any:
    """``response`` with its ids numbered in order of appearance and its instants blanked."""
    return json.loads(INSTANT.sub("<instant>", stable_ids(json.dumps(response), {})))
