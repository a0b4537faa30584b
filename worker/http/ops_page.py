"""``GET /ops``: the read-only operator page of ``memledger serve``, rendered on the server (Jinja2).

Who may see it: the operator (:mod:`worker.http.guard`, the same guard as ``/metrics``). The page
only reads; every other HTTP method on ``/ops`` is 405.

What it shows: the sweep's last run, every scope (mode, budget use, this month's spend against its
cap), the recent runs (outcome, tokens, spend, refusals by reason) and, for one scope
(``?scope=``, default the bound account's), its validity timeline (:mod:`worker.http.timeline`).
Bodies appear only in the bound account's own scope; a forgotten record's body is erased in the
database and so can never reach the page.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import jinja2
from starlette.responses import HTMLResponse, PlainTextResponse, Response

from ledger import Ledger, check_scope, format_rfc3339
from ledger.errors import ScopeError
from worker.http.timeline import COLOURS, FORGOTTEN, render_svg
from worker.snapshot import OpsSnapshot

MAX_SCOPES_LISTED = 200
MAX_TIMELINE_RECORDS = 10_000
SWEEP_STALE_AFTER = timedelta(hours=2)
SECURITY_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}

_env = jinja2.Environment(
    loader=jinja2.PackageLoader("worker.http", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def format_usd(micro: int) -> str:
    """Micro-USD as dollars without trailing zeros: ``$0``, ``$0.0123``, ``$5``."""
    return f"${Decimal(micro) / 1_000_000:.6f}".rstrip("0").rstrip(".") if micro else "$0"


def _instant(value: datetime | None) -> str:
    return "" if value is None else value.strftime("%Y-%m-%d %H:%M:%S UTC")


_env.filters["usd"] = format_usd
_env.filters["instant"] = _instant


def _age(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min {secs} s" if minutes else f"{secs} s"


def render_ops(
    led: Ledger, snapshot: OpsSnapshot, *, scope: str, bound_scope: str, max_scopes: int = MAX_SCOPES_LISTED
) -> str:
    """The page's HTML for ``snapshot`` with ``scope``'s timeline (every record and revision of it).

    Raises:
        ScopeError: ``scope`` is not a valid scope key.
    """
    check_scope(scope)
    records = led.records(scope)
    shown = records
    if len(records) > MAX_TIMELINE_RECORDS:  # keep the page bounded: the newest part of the picture
        shown = sorted(records, key=lambda r: r.valid_from)[-MAX_TIMELINE_RECORDS:]
    show_bodies = scope == bound_scope
    age = snapshot.sweep_age_s()
    month = snapshot.overview.month_start.strftime("%B %Y")
    context: dict[str, Any] = {
        "snapshot": snapshot,
        "scope": scope,
        "bound_scope": bound_scope,
        "scopes": snapshot.overview.scopes[:max_scopes],
        "hidden_scopes": max(0, len(snapshot.overview.scopes) - max_scopes),
        "month": month,
        "sweep_age": "" if age is None else _age(age),
        "sweep_stale": age is None or age > SWEEP_STALE_AFTER.total_seconds(),
        "record_count": len(records),
        "shown_count": len(shown),
        "show_bodies": show_bodies,
        "colours": [*((s, c) for s, c in COLOURS.items() if s != "deleted"), ("forgotten", FORGOTTEN)],
        "timeline": render_svg(shown, now=snapshot.at, show_bodies=show_bodies),
        "generated": format_rfc3339(snapshot.at),
    }
    return _env.get_template("ops.html").render(context)


def ops_response(led: Ledger, snapshot: OpsSnapshot, *, scope: str | None, bound_scope: str) -> Response:
    """``render_ops`` as an HTTP answer: 200 HTML, or 400 naming a bad ``scope``."""
    try:
        html = render_ops(led, snapshot, scope=scope or bound_scope, bound_scope=bound_scope)
    except ScopeError:
        return PlainTextResponse(
            "invalid scope: expected 'kind:name', e.g. ?scope=account:local", status_code=400, headers=SECURITY_HEADERS
        )
    return HTMLResponse(html, headers=SECURITY_HEADERS)
