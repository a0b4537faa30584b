"""The operator page in a real browser: Debian's chromium driven by Playwright, against a running serve.

Given a seeded database (a chain with an edit, an expiring pin, a forgotten chain and one run),
`memledger serve` is started on it and /ops is loaded in headless Chromium: the scopes table, the
run row and the timeline bars are there, placed in time order, forgotten bars are grey and carry
no text, and a screenshot is written to tests/artifacts/ (ignored by git) for a person to look at.

Chromium is Debian's (`apt-get install chromium`, done by .ci/run when missing); Playwright only
drives it (`executable_path`), it never downloads a browser of its own.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from consolidation import ConsolidationService
from ledger import open_ledger
from tests.conftest import require_services
from tests.worker.conftest import Proc, free_port, wait_live
from tests.worker.ops_seed import EDIT_BODY, FORGOTTEN_BODY, FORGOTTEN_EARLIER_BODY, SCOPE, seed_scope

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"


@pytest.fixture
def chromium_path() -> str:
    if shutil.which(CHROMIUM) is None:
        message = f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does)"
        if require_services():
            pytest.fail(message)
        pytest.skip(message)
    return CHROMIUM


def _box(page: Any, record_id: str) -> dict[str, float]:
    box: dict[str, float] | None = page.locator(f'rect[data-id="{record_id}"]').bounding_box()
    assert box is not None, record_id
    return box


def test_ops_page_in_chromium(
    chromium_path: str, spawn: Callable[..., Proc], base_env: dict[str, str], tmp_path: Path
) -> None:
    from playwright.sync_api import sync_playwright

    # Given a seeded database (with a pin that expires years from now) and a serve on it
    led = open_ledger(base_env["MEMLEDGER_DATABASE_URL"])
    try:
        seeded = seed_scope(led, ConsolidationService(led))
        later = led.save("my passport is valid until 2030", expires_at=datetime(2030, 1, 1, tzinfo=UTC))
    finally:
        led.close()
    port = free_port()
    spawn("serve", ["memledger", "serve", "--port", str(port)], {**base_env, "MEMLEDGER_SWEEP_INTERVAL_S": "0"})
    base = f"http://127.0.0.1:{port}"

    wait_live(base)
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "ops.png"
    shot.unlink(missing_ok=True)
    # When /ops is loaded in headless Chromium
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            response = page.goto(f"{base}/ops")
            assert response is not None and response.status == 200
            # Then the scopes table and the run row are shown
            scope_row = page.locator(f'tr.scope[data-scope="{SCOPE}"]')
            assert scope_row.locator("td.mode").inner_text() == "apply"
            run_row = page.locator(f'tr.run[data-run="{seeded.run_id}"]')
            assert run_row.locator("td.outcome").inner_text() == "applied"
            assert page.locator("#sweep-last").is_visible()
            # And the bars are present and placed in time order
            original, edit = _box(page, seeded.original), _box(page, seeded.edit)
            expiring = _box(page, seeded.expiring)
            first, forgotten = _box(page, seeded.forgotten_first), _box(page, seeded.forgotten)
            assert original["x"] < expiring["x"] < first["x"] < forgotten["x"] < edit["x"]
            assert abs(original["x"] + original["width"] - edit["x"]) < 1.5  # the edit closes the original
            assert original["y"] == edit["y"]  # one chain, one line
            assert abs(first["x"] + first["width"] - forgotten["x"]) < 1.5 and first["y"] == forgotten["y"]
            now_line = page.locator("line.now").bounding_box()
            assert now_line is not None
            assert expiring["x"] + expiring["width"] < now_line["x"]  # expired before now
            assert edit["x"] + edit["width"] == pytest.approx(now_line["x"], abs=1.5)  # the edit still applies
            assert page.locator(f'path.link[data-from="{seeded.original}"][data-to="{seeded.edit}"]').count() == 1
            # Forgotten records: grey bars, no text anywhere on the page
            for record_id in (seeded.forgotten_first, seeded.forgotten):
                bar = page.locator(f'rect[data-id="{record_id}"]')
                assert bar.get_attribute("fill") == "#bdbdbd" and bar.locator("title").count() == 0
            text = page.content()
            assert EDIT_BODY in page.locator("svg.timeline").inner_html()
            assert FORGOTTEN_BODY not in text and FORGOTTEN_EARLIER_BODY not in text
            page.screenshot(path=str(shot), full_page=True)
            # A pin expiring in 2030 still applies: drawn up to now, and the axis ends at now, so the
            # history keeps its width (no 2-px slivers) and "(now)" sits at the now line
            future = page.locator(f'rect[data-id="{later.id}"]')
            assert future.get_attribute("data-to") == "" and future.get_attribute("data-expires", timeout=1000)
            assert abs(_box(page, later.id)["x"] + _box(page, later.id)["width"] - now_line["x"]) < 1.5
            axis = page.locator("svg.timeline text.axis")
            svg = page.locator("svg.timeline").bounding_box()
            assert svg is not None and now_line["x"] > svg["x"] + svg["width"] - 12  # now is the axis's right end
            assert original["width"] > 20 and expiring["width"] > 20
            # The axis reads as dates, not raw RFC 3339
            first_label = axis.first.text_content() or ""
            assert re.fullmatch(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC", first_label), first_label
            assert axis.filter(has_text="(now)").count() == 1
            # And at 800 px nothing scrolls sideways: the tables wrap, the timeline scales
            page.set_viewport_size({"width": 800, "height": 1000})
            assert page.evaluate("document.documentElement.scrollWidth") <= 800
            for table in ("table.scopes", "table.runs"):
                box = page.locator(table).bounding_box()
                assert box is not None and box["x"] + box["width"] <= 800, table
            narrow = page.locator("svg.timeline").bounding_box()
            assert narrow is not None and narrow["x"] + narrow["width"] <= 800
            page.screenshot(path=str(ARTIFACTS / "ops-800.png"), full_page=True)
        finally:
            browser.close()
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
