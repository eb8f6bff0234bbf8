"""The console's pictures, drawn on the server as SVG: no script draws them,
so a page is complete as it arrives (and in a screenshot)."""

from __future__ import annotations

import html
import math
from typing import Any, Sequence

TIER_COLOURS = {"cloud": "#4c78a8", "edge": "#f58518", "device": "#54a24b", None: "#9d9d9d"}
LINE_COLOURS = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#ff9da6", "#9d755d")


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def clock(seconds: float) -> str:
    """A run's instant as h:mm:ss (or m:ss)."""
    s = int(round(seconds))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def _ticks(start: float, end: float, most: int = 6) -> list[float]:
    span = max(end - start, 1e-9)
    raw = span / most
    steps = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
    step = next((x for x in steps if x >= raw), 10 ** math.ceil(math.log10(raw)))
    first = math.ceil(start / step) * step
    out, t = [], first
    while t <= end + 1e-9:
        out.append(t)
        t += step
    return out


def lane(segments: Sequence[dict[str, Any]], moves: Sequence[dict[str, Any]], start: float, end: float,
         width: int = 1100, label=clock) -> str:
    """Where one task was over time: a bar per stay, coloured by tier and named
    by site (hatched while it was on its way there), the moves marked above."""
    left, right, top, bar = 30, 34, 26, 34
    height = top + bar + 34
    span = max(end - start, 1e-9)

    def x(t: float) -> float:
        return left + (min(max(t, start), end) - start) / span * (width - left - right)

    parts = [f'<svg class="lane" viewBox="0 0 {width} {height}" width="100%" role="img" '
             f'aria-label="placement history">',
             '<defs><pattern id="moving" width="6" height="6" patternUnits="userSpaceOnUse" '
             'patternTransform="rotate(45)"><rect width="3" height="6" fill="#ffffff" opacity="0.6"/></pattern></defs>',
             f'<rect x="{left}" y="{top}" width="{width - left - right}" height="{bar}" fill="#f1f3f5"/>']
    for s in segments:
        x0, x1 = x(s["start"]), x(s["end"])
        colour = TIER_COLOURS.get(s.get("tier"), TIER_COLOURS[None])
        w = max(x1 - x0, 1.5)
        tip = f'{s["site"]} ({s.get("tier") or "?"}) on {s["node"]}: {label(s["start"])} – {label(s["end"])}'
        parts.append(f'<g class="segment" data-site="{_e(s["site"])}"><title>{_e(tip)}</title>'
                     f'<rect x="{x0:.1f}" y="{top}" width="{w:.1f}" height="{bar}" fill="{colour}"/>')
        run = s.get("running_from")
        if run is None or run > s["start"]:
            x2 = x(run if run is not None else s["end"])
            parts.append(f'<rect x="{x0:.1f}" y="{top}" width="{max(x2 - x0, 0):.1f}" height="{bar}" fill="url(#moving)"/>')
        if w > 8 * len(s["site"]) + 8:
            parts.append(f'<text x="{x0 + 6:.1f}" y="{top + bar / 2 + 5}" class="seg-label">{_e(s["site"])}</text>')
        parts.append("</g>")
    for m in moves:
        mx = x(m["t"])
        what = m["kind"] + (f' {m.get("from", "")} → {m.get("to", "")}' if m["kind"] == "migrated" else "")
        parts.append(f'<g class="move"><title>{_e(label(m["t"]) + " " + what)}</title>'
                     f'<path d="M{mx:.1f},{top - 2} l-5,-9 h10 z" fill="#333"/></g>')
    for t in _ticks(start, end):
        tx = x(t)
        parts.append(f'<line x1="{tx:.1f}" x2="{tx:.1f}" y1="{top + bar}" y2="{top + bar + 5}" stroke="#666"/>'
                     f'<text x="{tx:.1f}" y="{top + bar + 18}" text-anchor="middle" class="tick">{_e(label(t))}</text>')
    parts.append("</svg>")
    return "".join(parts)


def lines(t: Sequence[float], series: dict[str, Sequence[float]], width: int = 1100, height: int = 220,
          label=clock, at: float | None = None, percent: bool = True) -> str:
    """Step lines over time, one per series (a legend below); a marker at ``at``."""
    left, right, top, bottom = 48, 12, 10, 46
    if not t:
        return '<p class="empty">nothing recorded yet</p>'
    start, end = float(t[0]), float(t[-1]) if t[-1] > t[0] else float(t[0]) + 1.0
    top_value = max([max(v) for v in series.values() if len(v)] + [1e-9])
    top_value = 1.0 if percent and top_value <= 1.0 else top_value
    w, h = width - left - right, height - top - bottom

    def x(v: float) -> float:
        return left + (v - start) / (end - start) * w

    def y(v: float) -> float:
        return top + h - v / top_value * h

    parts = [f'<svg class="chart" viewBox="0 0 {width} {height}" width="100%" role="img" aria-label="over time">']
    for i in range(5):
        v = top_value * i / 4
        parts.append(f'<line x1="{left}" x2="{left + w}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#e9ecef"/>'
                     f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end" class="tick">'
                     f'{_e(f"{v * 100:.0f}%" if percent else f"{v:g}")}</text>')
    for tick in _ticks(start, end):
        parts.append(f'<text x="{x(tick):.1f}" y="{top + h + 16}" text-anchor="middle" class="tick">{_e(label(tick))}</text>')
    for i, (name, values) in enumerate(series.items()):
        colour = TIER_COLOURS.get(name) or LINE_COLOURS[i % len(LINE_COLOURS)]
        pts, prev = [], None
        for tv, v in zip(t, values):
            if prev is not None:
                pts.append(f"{x(tv):.1f},{y(prev):.1f}")
            pts.append(f"{x(tv):.1f},{y(v):.1f}")
            prev = v
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{" ".join(pts)}"/>')
        lx = left + i * 150
        parts.append(f'<rect x="{lx}" y="{height - 16}" width="12" height="4" fill="{colour}"/>'
                     f'<text x="{lx + 16}" y="{height - 11}" class="tick">{_e(name)}</text>')
    if at is not None and start <= at <= end:
        parts.append(f'<line x1="{x(at):.1f}" x2="{x(at):.1f}" y1="{top}" y2="{top + h}" stroke="#e45756" '
                     f'stroke-dasharray="4 3"/>')
    parts.append("</svg>")
    return "".join(parts)


LABELLED = 24  # sites of a tier drawn one per row with their names; more: a grid of dots
MAX_LINKS = 600  # links drawn; past this they are counted, not drawn


def timeline(counts: dict[str, Any], width: int = 1100, label=clock) -> str:
    """Events over time: a row per kind, a dot per time bucket that had any,
    its area as the count (the most per bucket named at the row's end)."""
    kinds = counts.get("kinds") or {}
    if not kinds:
        return '<p class="empty">no moves or incidents</p>'
    left, right, row = 110, 70, 22
    start, end = counts["start"], counts["end"]
    n = len(next(iter(kinds.values())))
    height = 20 + row * len(kinds) + 24
    most = max(max(v) for v in kinds.values()) or 1
    w = width - left - right
    parts = [f'<svg class="timeline" viewBox="0 0 {width} {height}" width="100%" role="img" aria-label="events over time">']
    for i, (kind, values) in enumerate(kinds.items()):
        y = 20 + i * row
        colour = LINE_COLOURS[i % len(LINE_COLOURS)]
        parts.append(f'<text x="{left - 8}" y="{y + 4}" text-anchor="end" class="tick">{_e(kind)}</text>'
                     f'<line x1="{left}" x2="{left + w}" y1="{y}" y2="{y}" stroke="#eef1f5"/>')
        for b, c in enumerate(values):
            if c:
                x = left + (b + 0.5) / n * w
                r = 2 + 7 * math.sqrt(c / most)
                t0 = start + b / n * (end - start)
                parts.append(f'<circle class="ev" data-kind="{_e(kind)}" cx="{x:.1f}" cy="{y}" r="{r:.1f}" '
                             f'fill="{colour}" fill-opacity="0.7"><title>{_e(f"{c:,} {kind} from {label(t0)}")}</title></circle>')
        parts.append(f'<text x="{left + w + 6}" y="{y + 4}" class="tick">{sum(values):,}</text>')
    for t in _ticks(start, end):
        x = left + (t - start) / max(end - start, 1e-9) * w
        parts.append(f'<text x="{x:.1f}" y="{height - 6}" text-anchor="middle" class="tick">{_e(label(t))}</text>')
    parts.append("</svg>")
    return "".join(parts)


def topology(topo: dict[str, Any], width: int = 1100) -> str:
    """Sites in three columns (cloud, edge, device), sized by nodes and
    labelled with their running tasks when a tier has few, a grid of dots
    shaded by load when it has many; links between them (rtt; down ones
    dashed red); a device population is one box, drawn to the edges it
    attaches to, thicker where more of its devices attach."""
    columns = ("cloud", "edge", "device")
    rows = {t: list(topo["by_tier"].get(t) or []) for t in columns}
    pops = topo.get("populations") or []
    col_w = (width - 40) / 3
    xs = {t: 20 + i * col_w for i, t in enumerate(columns)}
    pos: dict[str, tuple[float, float]] = {}
    gap, top = 52, 60
    bottoms = []
    grid_cols = int((col_w - 40) // 16)
    for t in columns:
        sites = rows[t]
        if len(sites) <= LABELLED:
            for i, s in enumerate(sites):
                pos[s["name"]] = (xs[t] + 40, top + i * gap)
            bottoms.append(top + len(sites) * gap)
        else:
            for i, s in enumerate(sites):
                pos[s["name"]] = (xs[t] + 20 + (i % grid_cols) * 16, top + 10 + (i // grid_cols) * 16)
            bottoms.append(top + 30 + (len(sites) // grid_cols + 1) * 16)
    base = max(bottoms + [top])
    for j, p in enumerate(pops):
        pos["population:" + p["name"]] = (xs["device"] + 40, base + 20 + j * gap)
    height = int(base + 40 + len(pops) * gap)
    parts = [f'<svg class="topology" viewBox="0 0 {width} {height}" width="100%" role="img" aria-label="topology">']
    for t in columns:
        n = len(rows[t]) + (sum(p["count"] for p in pops if p["tier"] == t) if pops else 0)
        parts.append(f'<text x="{xs[t] + 20:.0f}" y="24" class="col">{_e(t)}</text>'
                     f'<text x="{xs[t] + 20:.0f}" y="40" class="tick">{n:,} site{"s" if n != 1 else ""}</text>')
    down = {tuple(sorted(d)) for d in topo.get("down_links") or []}
    links = [ln for ln in topo.get("links") or [] if ln["between"][0] in pos and ln["between"][1] in pos]
    drawn = links if len(links) <= MAX_LINKS else [ln for ln in links if tuple(sorted(ln["between"])) in down]
    for ln in drawn:
        a, b = ln["between"]
        (x1, y1), (x2, y2) = pos[a], pos[b]
        is_down = tuple(sorted((a, b))) in down
        style = 'stroke="#e45756" stroke-dasharray="5 4" stroke-width="2"' if is_down else \
            'stroke="#adb5bd" stroke-width="1"'
        rtt, bw = ln["rtt_ms"], ln["bandwidth_mbps"]
        tip = f"{a} – {b}: {rtt:g} ms, {bw:g} Mbps" + (" (down)" if is_down else "")
        cls = "link down" if is_down else "link"
        parts.append(f'<g class="{cls}" data-between="{_e(a)} {_e(b)}"><title>{_e(tip)}</title>'
                     f'<line x1="{x1:.0f}" y1="{y1:.0f}" x2="{x2:.0f}" y2="{y2:.0f}" {style}/></g>')
    if len(drawn) < len(links):
        parts.append(f'<text x="{width / 2:.0f}" y="{height - 8}" text-anchor="middle" class="tick">'
                     f'{len(links):,} links between sites, not drawn (those down are)</text>')
    for p in pops:
        px, py = pos["population:" + p["name"]]
        total = sum(p["attached"].values()) or 1
        for edge, n in p["attached"].items():
            if edge in pos:
                ex, ey = pos[edge]
                tip = f"{n:,} of {p['name']} attach to {edge}"
                parts.append(f'<line x1="{px:.0f}" y1="{py:.0f}" x2="{ex:.0f}" y2="{ey:.0f}" stroke="#54a24b" '
                             f'stroke-opacity="0.3" stroke-width="{0.5 + 6 * n / total:.2f}"><title>{_e(tip)}</title></line>')
    busiest = max([s.get("running", 0) for t in columns for s in rows[t]] + [1])
    for t in columns:
        colour = TIER_COLOURS.get(t)
        many = len(rows[t]) > LABELLED
        for s in rows[t]:
            sx, sy = pos[s["name"]]
            running = s.get("running", 0)
            tip = f'{s["name"]}: {s.get("nodes", 0):,} nodes, {running:,} tasks running'
            if many:
                shade = 0.25 + 0.75 * running / busiest
                parts.append(f'<g class="site" data-site="{_e(s["name"])}"><title>{_e(tip)}</title>'
                             f'<circle cx="{sx:.0f}" cy="{sy:.0f}" r="6" fill="{colour}" fill-opacity="{shade:.2f}"/></g>')
                continue
            r = 8 + min(14, 3 * math.log2(1 + s.get("nodes", 1)))
            parts.append(f'<g class="site" data-site="{_e(s["name"])}"><title>{_e(tip)}</title>'
                         f'<circle cx="{sx:.0f}" cy="{sy:.0f}" r="{r:.0f}" fill="{colour}" fill-opacity="0.85"/>'
                         f'<text x="{sx + r + 6:.0f}" y="{sy - 2:.0f}" class="site-name">{_e(s["name"])}</text>'
                         f'<text x="{sx + r + 6:.0f}" y="{sy + 12:.0f}" class="site-load">{running:,} running · '
                         f'{s.get("nodes", 0):,} nodes</text></g>')
    for p in pops:
        px, py = pos["population:" + p["name"]]
        parts.append(f'<g class="population" data-population="{_e(p["name"])}"><title>{_e(p["name"])}: '
                     f'{p["count"]:,} devices</title>'
                     f'<rect x="{px - 18:.0f}" y="{py - 16:.0f}" width="36" height="32" rx="6" fill="#54a24b"/>'
                     f'<text x="{px + 26:.0f}" y="{py - 2:.0f}" class="site-name">{_e(p["name"])}: {p["count"]:,} devices</text>'
                     f'<text x="{px + 26:.0f}" y="{py + 12:.0f}" class="site-load">{p.get("running", 0):,} running on '
                     f'{p.get("busy_sites", 0):,}</text></g>')
    parts.append("</svg>")
    return "".join(parts)
