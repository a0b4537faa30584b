"""A scope's validity timeline as inline SVG: what the scope said at any instant, at a glance.

Each record is a bar from ``valid_from`` to where it stopped applying (``min(valid_to,
expires_at)``, or *now* while it still applies), coloured by status. A revision chain shares one
lane, so an edit reads as one line that changes colour where the successor took over; each
supersession is also drawn as a small arc from the predecessor's end to the successor's start
(``<path class="link">``), and each bar links to the record it replaced. A proposal that never
applied has an empty interval and shows as a thin tick at its creation.

Forgotten records (the tombstone and every revision whose body was erased) are grey bars with
no text at all: no body, no label, no tooltip. Other bars carry a tooltip, and each lane a label
(its latest record) in the left column; the body appears in them only when ``show_bodies`` (the
bound account's own scope), else the kind and id.

Every bar is ``<rect class="bar" data-id data-status data-from data-to>`` with instants in
RFC 3339, so tests and scripts can read the picture back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape as _html_escape

from markupsafe import Markup

from ledger import MemoryRecord


def _esc(text: str) -> str:
    return _html_escape(text, quote=True)


WIDTH = 1100
LABEL_W = 300
LANE_H = 16
BAR_H = 10
TOP = 34
LEFT = 8
RIGHT = 8
MIN_BAR_W = 2.0
TICKS = 4
LABEL_CHARS = 48

COLOURS = {
    "active": "#2e7d32",
    "proposed": "#f9a825",
    "superseded": "#1565c0",
    "expired": "#ef6c00",
    "rejected": "#ad1457",
    "deleted": "#9e9e9e",
}
FORGOTTEN = "#bdbdbd"


@dataclass(frozen=True, slots=True)
class Bar:
    record: MemoryRecord
    lane: int
    start: datetime
    end: datetime
    open_ended: bool
    forgotten: bool


def _end(record: MemoryRecord, now: datetime) -> tuple[datetime, bool]:
    # min(valid_to, expires_at), inlined: this runs once per record of a scope that may hold thousands.
    end, expires = record.valid_to, record.expires_at
    if end is None or (expires is not None and expires < end):
        end = expires
    if end is None or end > now:
        # Still applies: drawn up to now. An end in the future (an expiry not yet reached) is not drawn,
        # or one record expiring in 2030 would squeeze all of the scope's history into slivers.
        return (now if now > record.valid_from else record.valid_from), True
    return (end if end > record.valid_from else record.valid_from), False


def layout(records: Sequence[MemoryRecord], now: datetime) -> list[Bar]:
    """Bars in lanes: a successor continues the lane of the first record it supersedes, when free."""
    ordered = sorted(records, key=lambda r: (r.valid_from, r.created_at, r.id))
    lane_of: dict[str, int] = {}
    lane_end: list[datetime] = []
    lane_last: list[str] = []
    bars = []
    for record in ordered:
        end, open_ended = _end(record, now)
        lane = None
        for predecessor in record.supersedes:
            candidate = lane_of.get(predecessor)
            if (
                candidate is not None
                and lane_last[candidate] == predecessor
                and lane_end[candidate] <= record.valid_from
            ):
                lane = candidate
                break
        if lane is None:
            lane = len(lane_end)
            lane_end.append(end)
            lane_last.append(record.id)
        else:
            lane_end[lane], lane_last[lane] = end, record.id
        lane_of[record.id] = lane
        forgotten = record.erased or record.status == "deleted"
        bars.append(Bar(record, lane, record.valid_from, end, open_ended, forgotten))
    return bars


def _iso(value: datetime) -> str:
    """RFC 3339 as the protocol writes it (``…T09:00:00.000000Z``), by the C ``isoformat`` (UTC instants)."""
    return value.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _axis_instant(value: datetime) -> str:
    """An instant as the axis shows it: ``2026-01-01 09:30`` (UTC, to the minute); tooltips keep RFC 3339."""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M")


def _label(record: MemoryRecord, show_bodies: bool) -> str:
    if show_bodies and record.body is not None:
        text = record.body.replace("\n", " ")
        return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"
    return f"{record.kind.value} {record.id}"


@dataclass(frozen=True, slots=True)
class _Scale:
    """Where an instant falls along the bars' axis."""

    t0: float
    span: float
    usable: float

    def x(self, at: datetime) -> float:
        return LABEL_W + LEFT + (at.timestamp() - self.t0) / self.span * self.usable


def render_svg(records: Sequence[MemoryRecord], *, now: datetime, show_bodies: bool) -> Markup:
    """The timeline of ``records`` (one scope, any statuses) as one ``<svg>`` element."""
    bars = layout(records, now)
    if not bars:
        return Markup('<p class="empty">This scope holds no records yet.</p>')
    t0 = min(bar.start for bar in bars).timestamp()
    t1 = max(max(bar.end for bar in bars), now).timestamp()  # now, unless a record claims a later start
    scale = _Scale(t0, max(t1 - t0, 1e-6), WIDTH - LABEL_W - LEFT - RIGHT)
    height = TOP + (max(bar.lane for bar in bars) + 1) * LANE_H + 8
    where: dict[str, tuple[float, float, float]] = {}
    labels: dict[int, str] = {}  # lane -> the label of its latest record
    parts = _axis(scale, bars[0].start, now, height)
    for bar in bars:
        parts.append(_bar(bar, scale, show_bodies, where, labels))
    parts.extend(_links(bars, where))
    parts.extend(labels[lane] for lane in sorted(labels))
    parts.append("</svg>")
    return Markup("".join(parts))


def _axis(scale: _Scale, first: datetime, now: datetime, height: int) -> list[str]:
    """The ``<svg>`` opening, the axis's ends, the line of now and a few instants along the axis."""
    now_x = scale.x(now)
    parts: list[str] = [
        # Scaled to the page's width (CSS), drawn in this coordinate system.
        f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" preserveAspectRatio="xMinYMin meet" role="img" '
        'aria-label="validity timeline">',
        f'<text class="axis" x="{LABEL_W + LEFT}" y="14">{_axis_instant(first)} UTC</text>',
        f'<text class="axis" x="{now_x:.1f}" y="14" text-anchor="end">{_axis_instant(now)} (now)</text>',
        f'<line class="now" x1="{now_x:.1f}" y1="{TOP - 6}" x2="{now_x:.1f}" y2="{height}"/>',
    ]
    for n in range(1, TICKS):  # a few instants along the axis, so a bar's place reads as a date
        at_s = scale.t0 + scale.span * n / TICKS
        tick_x = LABEL_W + LEFT + scale.usable * n / TICKS
        when = _axis_instant(datetime.fromtimestamp(at_s, UTC))
        parts.append(f'<line class="tick" x1="{tick_x:.1f}" y1="{TOP - 4}" x2="{tick_x:.1f}" y2="{height}"/>')
        parts.append(f'<text class="axis" x="{tick_x:.1f}" y="{TOP - 6}" text-anchor="middle">{when}</text>')
    return parts


def _bar(
    bar: Bar,
    scale: _Scale,
    show_bodies: bool,
    where: dict[str, tuple[float, float, float]],
    labels: dict[int, str],
) -> str:
    """One record's bar; notes where it lies (for the links) and its lane's label."""
    record = bar.record
    left = scale.x(bar.start)
    width = max(MIN_BAR_W, scale.x(bar.end) - left)
    top = TOP + bar.lane * LANE_H
    where[record.id] = (left, left + width, top + BAR_H / 2)
    status = record.status.value
    rid = _esc(record.id)
    start, end = _iso(bar.start), "" if bar.open_ended else _iso(bar.end)
    expires = record.expires_at if bar.open_ended and record.expires_at is not None else None
    common = (
        f'class="bar{" forgotten" if bar.forgotten else ""}" data-id="{rid}" data-status="{status}" '
        f'data-from="{start}" data-to="{end}" data-lane="{bar.lane}" '
        + (f'data-expires="{_iso(expires)}" ' if expires is not None else "")
        + f'x="{left:.2f}" y="{top}" width="{width:.2f}" height="{BAR_H}"'
    )
    if bar.forgotten:
        labels.pop(bar.lane, None)  # a forget erases the whole chain: its lane keeps no text
        return f'<rect {common} fill="{FORGOTTEN}"/>'
    label = _esc(_label(record, show_bodies))
    rect = (
        f'<rect {common} fill="{COLOURS.get(status, "#607d8b")}">'
        f"<title>{rid} · {status} · {start} → {end or 'now'}"
        f"{f' (expires {_iso(expires)})' if expires is not None else ''} · {label}</title></rect>"
    )
    if record.supersedes:
        rect = f'<a href="#rec-{_esc(record.supersedes[0])}">{rect}</a>'
    labels[bar.lane] = f'<text class="label" x="{LEFT}" y="{top + BAR_H - 1}">{label}</text>'
    return f'<g id="rec-{rid}">{rect}</g>'


def _links(bars: Sequence[Bar], where: dict[str, tuple[float, float, float]]) -> list[str]:
    """A curve from each record's predecessor to it."""
    parts: list[str] = []
    for bar in bars:
        for predecessor in bar.record.supersedes:
            if predecessor not in where:
                continue
            _, x1, y1 = where[predecessor]
            x2, _, y2 = where[bar.record.id]
            lift = min(y1, y2) - BAR_H
            parts.append(
                f'<path class="link" data-from="{_esc(predecessor)}" data-to="{_esc(bar.record.id)}" '
                f'd="M{x1:.2f},{y1:.1f} C{x1:.2f},{lift:.1f} {x2:.2f},{lift:.1f} {x2:.2f},{y2:.1f}"/>'
            )
    return parts
