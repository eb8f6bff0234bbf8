"""The HTML report of a simulated run (``report.html``).

``render_report(result, events)`` turns the ``result.json`` object (see
:func:`suanli.sim.results.result_json`) and the event log into one
self-contained HTML document: no external CSS, scripts, fonts or images; the
charts are drawn with matplotlib's Agg renderer and embedded as base64 PNG.

The document has a header (scenario, seed, simulated span, task counts), five
charts (allocation by tier over time; queueing delay and completion time by
workload class; moves and incidents over time, each migration's state;
where each task that moved ran, one lane per task; fairness over time) and
tables (tasks still pending with their top reasons, time-averaged
allocation, queueing by tenant, the tasks of the lanes).

The lanes come from ``metrics.lanes`` of ``result.json`` (made by
``metrics.summarize`` in its one read of the event log); a result without
them gets them from the events given, when those are the whole log.
Every axis is given its ticks here (``_set_ticks``): round steps, as many
decimals as the step needs, no negative zero, no label twice.

Output is deterministic: the same inputs give a byte-identical document (no
timestamps in the HTML or in the PNG metadata, fixed rcParams, bundled font).
Long series are thinned to at most ``MAX_POINTS`` points per line, keeping
each bucket's maximum (and drawing the bucket's min-max band), so a trace
replay with 100,000 samples renders as quickly as a small scenario.
"""

from __future__ import annotations

import base64
import html
import io
import math
from typing import Any, Iterable, Sequence

import numpy as np

from suanli.model.quantities import format_bytes
from suanli.phrases import binding_line
from suanli.sim.events import INCIDENT_KINDS, MOVE_KINDS
from suanli.sim.metrics import LANES, STOP_KINDS, finite, task_lanes

__all__ = ["MAX_POINTS", "decimate", "duration", "render_report"]

MAX_POINTS = 2000  # per plotted line
PENDING_ROWS = 50
CLASSES = ("short/small", "short/large", "resident/small", "resident/large")
STATUSES = ("submitted", "finished", "running", "pending", "failed", "omitted", "withdrawn")

# Colours: resources keep theirs across tier panels; kinds of move are grouped
# by what they are (infrastructure red/green, task disruption amber/purple).
RESOURCE_COLORS = {
    "cpu_milli": "#1f77b4", "mem_mib": "#ff7f0e", "gpu_milli": "#2ca02c",
    "npu_milli": "#d62728", "dsa_milli": "#9467bd",
}
EXTRA_COLORS = ("#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
TENANT_COLORS = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2",
                 "#ff9da6", "#9d755d", "#bab0ac", "#eeca3b")
KIND_COLORS = {
    "nodeDown": "#c0392b", "nodeUp": "#27ae60", "nodeDrain": "#a04000", "nodeCordon": "#b9770e", "linkDown": "#e67e22", "linkUp": "#16a085",
    "lost": "#8e44ad", "requeued": "#f1c40f", "preempted": "#d35400", "migrated": "#2980b9",
}
PCT_COLORS = {"p50": "#9ecae1", "p90": "#4292c6", "p99": "#08519c"}
TIER_COLORS = {"cloud": "#4c78a8", "edge": "#f58518", "device": "#54a24b"}  # as the console draws tiers
SITE_COLORS = ("#4c78a8", "#54a24b", "#f58518", "#b279a2", "#72b7b2", "#9d755d", "#e45756", "#bab0ac")
MIGRATION_LABELS = 6  # migrations labelled on the chart: all when no more, else the largest

RC = {
    "font.family": "DejaVu Sans",  # bundled with matplotlib: same glyphs everywhere
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.titleweight": "bold",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#e5e5e5",
    "grid.linewidth": 0.6,
    "axes.edgecolor": "#999999",
    "legend.frameon": False,
    "legend.fontsize": 8,
    "text.parse_math": False,  # task and tenant names may contain '$'
    "svg.hashsalt": "suanli-report",
    "path.simplify": True,
}
DPI = 144  # pixels per inch of the PNGs; they are shown at 96 px per inch


# ----------------------------------------------------------------- formatting


def _esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


_num = finite  # a figure read from result.json: a finite float, or None


def _nan(value: Any) -> float:
    x = _num(value)
    return np.nan if x is None else x


def duration(seconds: Any) -> str:
    """A readable duration: ``0 s``, ``0.25 s``, ``42 s``, ``3 min 20 s``, ``2 h 5 min``, ``3 d 4 h``."""
    s = _num(seconds)
    if s is None:
        return "–"
    if s < 0:
        return "-" + duration(-s)
    if s == 0:
        return "0 s"
    if s < 10:
        return f"{s:.3g} s"
    if s < 60:
        return f"{s:.0f} s"
    units = (("d", 86400), ("h", 3600), ("min", 60), ("s", 1))
    rounded = int(round(s))
    for i, (name, size) in enumerate(units):
        if rounded >= size:
            big, rest = divmod(rounded, size)
            small_name, small_size = units[i + 1] if i + 1 < len(units) else (None, 1)
            small = rest // small_size
            return f"{big} {name}" + (f" {small} {small_name}" if small and small_name else "")
    return f"{s:.0f} s"  # pragma: no cover


def _short_duration(seconds: float) -> str:
    """Compact duration for axis ticks and bar labels."""
    s = _num(seconds)
    if s is None:
        return ""
    a = abs(s)
    if a == 0:
        return "0"
    if a < 1:
        return f"{s * 1000:.3g}ms"
    if a < 60:
        return f"{s:.3g}s"
    if a < 3600:
        return f"{s / 60:.3g}m"
    if a < 86400:
        return f"{s / 3600:.3g}h"
    return f"{s / 86400:.3g}d"


def _bytes(n: Any) -> str:
    x = _num(n)
    return "–" if x is None else format_bytes(x)


def _pct(ratio: Any) -> str:
    x = _num(ratio)
    return "–" if x is None else f"{x * 100:.1f}%"


def _time_unit(span: float) -> tuple[float, str]:
    if span >= 2 * 86400:
        return 86400.0, "d"
    if span >= 2 * 3600:
        return 3600.0, "h"
    if span >= 2 * 60:
        return 60.0, "min"
    return 1.0, "s"


def _resource_label(key: str) -> str:
    return {"cpu_milli": "CPU", "mem_mib": "memory"}.get(key, key.removesuffix("_milli").upper())


def _colors_for(keys: Iterable[str]) -> dict[str, str]:
    out, extra = {}, 0
    for k in keys:
        if k in RESOURCE_COLORS:
            out[k] = RESOURCE_COLORS[k]
        else:
            out[k] = EXTRA_COLORS[extra % len(EXTRA_COLORS)]
            extra += 1
    return out


# ----------------------------------------------------------------- ticks


def _nice_ticks_between(lo: float, hi: float, most: int = 6) -> tuple[list[float], int]:
    """Round ticks from ``lo`` to ``hi`` (steps of 1, 2, 2.5 or 5 times a power
    of ten, at most ``most`` + 1 of them) and the decimals their labels need
    to differ."""
    span = hi - lo
    if not (span > 0 and math.isfinite(span)):
        return [lo] if math.isfinite(lo) else [0.0], 0
    power = math.floor(math.log10(span / most))
    for m in (1, 2, 2.5, 5, 10):
        step = m * 10.0 ** power
        if span / step <= most + 1e-9:
            break
    exponent = power + (1 if m == 10 else 0)
    decimals = max(0, -exponent + (1 if m == 2.5 else 0))
    first = math.ceil(lo / step - 1e-9)
    ticks = []
    i = first
    while i * step <= hi + step * 1e-9:
        ticks.append(round(i * step, decimals + 3))
        i += 1
    return ticks, decimals


def _tick_text(value: float, decimals: int, suffix: str = "") -> str:
    """A tick's label: ``decimals`` places, never a negative zero, a true minus sign."""
    text = f"{abs(value):.{decimals}f}"
    negative = value < 0 and float(text) != 0
    return ("\u2212" if negative else "") + text + suffix


def _set_ticks(axis, lo: float, hi: float, *, scale: float = 1.0, suffix: str = "", most: int = 6) -> None:
    """Give ``axis`` (an ``ax.xaxis`` or ``ax.yaxis``) round ticks covering the
    data values ``lo``..``hi``, labelled in units of ``scale``: each label
    different, none a negative zero."""
    ticks, decimals = _nice_ticks_between(lo / scale, hi / scale, most)
    labels = [_tick_text(v, decimals, suffix) for v in ticks]
    while len(set(labels)) < len(labels) and decimals < 9:  # never: the decimals follow the step
        decimals += 1
        labels = [_tick_text(v, decimals, suffix) for v in ticks]
    from matplotlib.ticker import NullLocator

    axis.set_ticks([v * scale for v in ticks], labels)
    axis.set_minor_locator(NullLocator())


# ----------------------------------------------------------------- series


def decimate(t: np.ndarray, ys: Sequence[np.ndarray], max_points: int = MAX_POINTS
             ) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray] | None]:
    """Thin step series sampled at times ``t`` to at most ``max_points`` points.

    Time is cut into equal buckets; each bucket keeps its first sample time and
    the maximum (and minimum, returned separately) of each series within it, so
    a short peak is never lost. The last sample is kept as it is. Returns
    ``(t, maxima, minima)``; ``minima`` is None when nothing was thinned.
    """
    n = len(t)
    if n <= max_points or max_points < 3:
        return t, list(ys), None
    span = float(t[-1] - t[0])
    buckets = max_points - 1
    if span > 0:
        bid = np.minimum(((t - t[0]) / span * buckets).astype(np.int64), buckets - 1)
    else:
        bid = np.zeros(n, np.int64)
    starts = np.flatnonzero(np.r_[True, bid[1:] != bid[:-1]])
    tt = np.r_[t[starts], t[-1]]
    maxima = [np.r_[np.fmax.reduceat(y, starts), y[-1]] for y in ys]  # fmax: NaN (a gap) is ignored
    minima = [np.r_[np.fmin.reduceat(y, starts), y[-1]] for y in ys]
    return tt, maxima, minima


def _array(values: Any) -> np.ndarray:
    try:
        a = np.asarray([np.nan if v is None else v for v in values or ()], dtype=float)
    except (TypeError, ValueError):
        return np.zeros(0)
    return a


def _aligned(values: Any, n: int) -> np.ndarray:
    """A series as floats, cut or padded with NaN (drawn as a gap) to ``n`` samples."""
    a = _array(values)[:n]
    return np.r_[a, np.full(n - a.size, np.nan)] if a.size < n else a


# ----------------------------------------------------------------- figures


class _Charts:
    """Makes figures with matplotlib's Agg canvas, without touching pyplot's state."""

    def __init__(self) -> None:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        self.Figure, self.Canvas = Figure, FigureCanvasAgg

    def figure(self, width: float, height: float, *, left: float = 0.8, right: float = 0.2,
               top: float = 0.35, bottom: float = 0.55, hspace: float = 0.0, wspace: float = 0.0):
        """A figure with fixed margins in inches (faster than a layout engine, and stable)."""
        fig = self.Figure(figsize=(width, height), dpi=DPI)
        self.Canvas(fig)
        fig.subplots_adjust(left=left / width, right=1 - right / width, top=1 - top / height,
                            bottom=bottom / height, hspace=hspace, wspace=wspace)
        return fig

    def img(self, fig, alt: str) -> str:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None}, facecolor="white")
        width, height = fig.get_size_inches()
        data = base64.b64encode(buf.getvalue()).decode("ascii")
        return (f'<img class="chart" alt="{_esc(alt)}" width="{round(width * 96)}" '
                f'height="{round(height * 96)}" src="data:image/png;base64,{data}">')


def _time_axis(ax, unit: float, name: str, start: float, stop: float) -> None:
    ax.set_xlabel(f"simulated time ({name})")
    lo, hi = start / unit, (stop / unit if stop > start else start / unit + 1)
    ax.set_xlim(lo, hi)
    _set_ticks(ax.xaxis, lo, hi, most=10)


def _short_name(name: Any, limit: int = 28) -> str:
    s = str(name)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _hold_to(stop: float, tt: np.ndarray, hi: list[np.ndarray], lo: list[np.ndarray] | None):
    """Extend step series to ``stop`` with their last values."""
    if tt.size and stop > tt[-1]:
        tt = np.r_[tt, stop]
        hi = [np.r_[y, y[-1]] for y in hi]
        lo = None if lo is None else [np.r_[y, y[-1]] for y in lo]
    return tt, hi, lo


def _steps(ax, x: np.ndarray, y: np.ndarray, **style: Any) -> None:
    if x.size == 1:
        ax.plot(x, y, "o", **style)
    else:
        ax.plot(x, y, drawstyle="steps-post", **style)


def _allocation_chart(ch: _Charts, timeline: dict, end: float) -> str | None:
    t = _array(timeline.get("t"))
    by_tier = {tier: res for tier, res in (timeline.get("by_tier") or {}).items() if res}
    if t.size == 0 or not by_tier:
        return None
    keys = list(dict.fromkeys(k for res in by_tier.values() for k in res))
    colors = _colors_for(keys)
    stop = max(end, float(t[-1]))
    unit, uname = _time_unit(stop - float(t[0]))
    tiers = list(by_tier)
    thinned = t.size > MAX_POINTS
    panel, gap, top = 1.7, 0.45, (0.5 if thinned else 0.35)
    height = top + 0.55 + panel * len(tiers) + gap * (len(tiers) - 1)
    fig = ch.figure(10, height, left=0.8, right=2.1, top=top, bottom=0.55, hspace=gap / panel)
    axes = fig.subplots(len(tiers), 1, sharex=True, squeeze=False)[:, 0]
    for ax, tier in zip(axes, tiers):
        res = by_tier[tier]
        names = list(res)
        ys = [_aligned(res[k], t.size) * 100 for k in names]
        tt, hi, lo = decimate(t, ys)
        tt, hi, lo = _hold_to(stop, tt, hi, lo)
        x = tt / unit
        peak = 0.0
        for i, k in enumerate(names):
            finite = ys[i][np.isfinite(ys[i])]
            kpeak = float(finite.max()) if finite.size else 0.0
            peak = max(peak, kpeak)
            digits = 0 if kpeak >= 10 or kpeak == 0 else 1
            label = f"{_short_name(_resource_label(k), 16)}  peak {kpeak:.{digits}f}%"
            if lo is not None:
                ax.fill_between(x, lo[i], hi[i], step="post", color=colors[k], alpha=0.15, linewidth=0)
            _steps(ax, x, hi[i], color=colors[k], linewidth=1.3, label=label, zorder=3)
        if peak == 0:
            ax.text(0.5, 0.5, "nothing allocated on this tier during the run", ha="center", va="center",
                    transform=ax.transAxes, color="#888888")
        high = max(100.0, peak) * 1.06
        ax.set_ylim(-0.02 * high, high)
        _set_ticks(ax.yaxis, 0, high, suffix="%", most=5)
        ax.set_title(f"{_short_name(tier, 40)} tier", loc="left")
        ax.set_ylabel("allocated")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    _time_axis(axes[-1], unit, uname, float(t[0]), stop)
    if thinned:
        fig.text(0.99, 1 - 0.12 / height, f"{t.size:,} samples thinned to ≤{MAX_POINTS:,} per line: "
                 "line = bucket maximum, band = bucket range", ha="right", va="top", fontsize=8,
                 color="#666666")
    return ch.img(fig, "allocation by tier over time, percent of capacity per resource")


def _class_order(names: Iterable[str]) -> list[str]:
    names = list(names)
    return [c for c in CLASSES if c in names] + sorted(n for n in names if n not in CLASSES)


NICE_DURATIONS = (0.001, 0.01, 0.1, 1, 10, 60, 600, 3600, 36000, 86400, 864000)


def _percentile_bars(ax, stats: dict, title: str, empty: str, zero: str) -> None:
    """p50 / p90 / p99 bars per class, the max as a dash; under each class its
    count and, for waits, how many are censored (still waiting at the end, or
    ended unplaced: lower bounds)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    classes = [c for c in _class_order(stats) if (stats.get(c) or {}).get("count")]
    ax.set_title(title, loc="left")
    ax.grid(axis="x", visible=False)
    if not classes:
        ax.text(0.5, 0.5, empty, ha="center", va="center", transform=ax.transAxes, color="#666666")
        ax.set_xticks([])
        ax.set_yticks([])
        return
    pcts = ("p50", "p90", "p99")
    values = np.array([[_nan(stats[c].get(p)) for p in pcts] for c in classes])
    maxima = np.array([_num(stats[c].get("max")) or 0.0 for c in classes])
    positive = np.r_[values[values > 0], maxima[maxima > 0]]
    x = np.arange(len(classes))
    width = 0.26

    def label(c: str) -> str:
        n, cut = stats[c].get("count", 0), int(_num(stats[c].get("censored")) or 0)
        return f"{_short_name(c, 18)}\nn={n:,}" + (f"\n{cut:,} censored" if cut else "")

    ax.set_xticks(x, [label(c) for c in classes])
    ax.set_xlim(-0.6, len(classes) - 0.4)
    if positive.size == 0:
        for j in range(len(pcts)):
            ax.bar(x + (j - 1) * width, np.zeros(len(classes)), width)
        ax.set_ylim(0, 1)
        ax.set_yticks([])
        ax.text(0.5, 0.55, zero, ha="center", va="center", transform=ax.transAxes, color="#666666",
                wrap=True)
        return
    lo, hi = float(positive.min()), float(positive.max())
    log = hi / lo >= 100
    floor = lo * 0.5 if log else 0.0
    for j, p in enumerate(pcts):
        v = values[:, j]
        bars = ax.bar(x + (j - 1) * width, np.where(v > 0, v, floor) - floor, width, bottom=floor,
                      color=PCT_COLORS[p], zorder=2)
        for rect, val in zip(bars, v):
            label = _short_duration(val) if np.isfinite(val) else "n/a"
            ax.annotate(label, (rect.get_x() + rect.get_width() / 2, val if val > floor else floor),
                        xytext=(0, 2), textcoords="offset points", ha="center", va="bottom",
                        fontsize=7, color="#333333")
    ax.plot(x + width, np.where(maxima > 0, maxima, np.nan), "_", color="#08306b", markersize=16,
            markeredgewidth=1.6, zorder=3)
    for xi, m, p99 in zip(x, maxima, values[:, 2]):
        if m > 0 and not (p99 * (1.6 if log else 1.15) >= m):
            ax.annotate(f"max {_short_duration(m)}", (xi + width, m), xytext=(0, 3),
                        textcoords="offset points", ha="center", va="bottom", fontsize=7, color="#08306b")
    if log:
        ax.set_yscale("log")
        ax.set_ylim(floor * 0.8, hi * 4)
        ticks = [d for d in NICE_DURATIONS if floor * 0.8 <= d <= hi * 4]
        ax.yaxis.set_major_locator(FixedLocator(ticks))
        ax.yaxis.set_minor_locator(NullLocator())
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _short_duration(v)))
        ax.set_ylabel("log scale")
    else:
        scale, name = _time_unit(hi)
        ax.set_ylim(0, hi * 1.2)
        _set_ticks(ax.yaxis, 0, hi * 1.2, scale=scale, most=6)
        ax.set_ylabel({"s": "seconds", "min": "minutes", "h": "hours", "d": "days"}[name])


def _delay_chart(ch: _Charts, metrics: dict) -> str:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    fig = ch.figure(10, 3.9, left=0.75, right=0.2, top=0.65, bottom=0.85, wspace=0.28)
    a1, a2 = fig.subplots(1, 2)
    delays = metrics.get("queueing_delay_s") or {}
    _percentile_bars(a1, delays, "queueing delay (each wait until placed)", "no task was submitted",
                     _no_wait_text(delays, metrics.get("tasks") or {}))
    _percentile_bars(a2, metrics.get("completion_time_s") or {},
                     "completion time of jobs (submitted → finished)", "no job finished",
                     "every job finished at once (0 s)")
    handles = [Patch(color=PCT_COLORS[p], label=p) for p in ("p50", "p90", "p99")]
    handles.append(Line2D([], [], marker="_", linestyle="", color="#08306b", markersize=12,
                          markeredgewidth=1.6, label="max"))
    fig.legend(handles=handles, loc="upper right", ncols=4, bbox_to_anchor=(0.99, 0.995))
    return ch.img(fig, "queueing delay and completion time by workload class, p50/p90/p99")


def _no_wait_text(delays: dict, tasks: dict) -> str:
    """What to say when every wait counted lasted 0 s: never that no task
    waited while one still does (or one ended without being placed)."""
    waiting = int(_num(tasks.get("pending")) or 0)
    cut = sum(int(_num(v.get("censored")) or 0) for v in delays.values() if isinstance(v, dict))
    if waiting:
        return (f"every wait that ended took 0 s;\n{waiting:,} task{'s' if waiting != 1 else ''} "
                "still waiting at the end")
    if cut:
        return f"every wait took 0 s;\n{cut:,} ended without a placement"
    return "no task waited:\nevery wait ended in a placement at once (0 s)"


RUG_MAX = 150  # above this many events a row becomes a density strip


def _moves_chart(ch: _Charts, by_kind: dict[str, np.ndarray], migrations: list[dict],
                 start: float, stop: float) -> str:
    unit, uname = _time_unit(stop - start)
    has_mig = any(_num(m.get("bytes")) is not None for m in migrations)
    rug, mig = 3.0, 1.8
    height = 0.35 + 0.55 + rug + ((0.5 + mig) if has_mig else 0)
    fig = ch.figure(10, height, left=1.55, right=0.2, top=0.35, bottom=0.55, hspace=0.5 / ((rug + mig) / 2))
    if has_mig:
        ax, ax2 = fig.subplots(2, 1, sharex=True, height_ratios=(rug, mig))
    else:
        ax, ax2 = fig.subplots(1, 1), None
    kinds = list(MOVE_KINDS)
    rows = list(range(len(kinds)))[::-1]  # first kind at the top
    none = np.zeros(0)
    dense = False
    for row, kind in zip(rows, kinds):
        times = by_kind.get(kind, none)
        if times.size > RUG_MAX and stop > start:
            # a density strip: bar height within the row ∝ events per time bin
            dense = True
            bins = 200
            counts, edges = np.histogram(times, bins=bins, range=(start, stop))
            h = 0.8 * counts / counts.max()
            ax.bar(edges[:-1] / unit, h, width=np.diff(edges) / unit, bottom=row - 0.4, align="edge",
                   color=KIND_COLORS[kind], edgecolor=KIND_COLORS[kind], linewidth=0.3, zorder=3)
        elif times.size:
            ax.scatter(times / unit, np.full(times.size, row), marker="|", s=160, linewidths=1.8,
                       color=KIND_COLORS[kind], zorder=3)
    ax.set_yticks(rows, [f"{k}  ({by_kind.get(k, none).size:,})" for k in kinds])
    for tick, kind in zip(ax.get_yticklabels(), kinds):
        if by_kind.get(kind, none).size == 0:
            tick.set_color("#aaaaaa")
    ax.set_ylim(-0.7, len(kinds) - 0.3)
    ax.grid(axis="y", visible=False)
    ax.set_title("one tick per event, count in brackets" + (
        f"; rows with more than {RUG_MAX} events show events per time bin" if dense else ""),
        loc="left", fontweight="normal")
    if not any(by_kind.get(k, none).size for k in kinds):
        ax.text(0.5, 0.5, "no incidents and no moves during the run", ha="center", va="center",
                transform=ax.transAxes, color="#888888")
    if ax2 is not None:
        _migration_panel(ax2, migrations, start, stop, unit)
        _time_axis(ax2, unit, uname, start, stop)
    else:
        _time_axis(ax, unit, uname, start, stop)
    return ch.img(fig, "incidents and moves over time, one row per kind of event")


BYTE_UNITS = (("KiB", 1024), ("MiB", 1024 ** 2), ("GiB", 1024 ** 3), ("TiB", 1024 ** 4))


def _migration_panel(ax, migrations: list[dict], start: float, stop: float, unit: float) -> None:
    """Each migration's state against time: a dot (area ∝ downtime) on a stem,
    a hollow diamond on the zero line for a move that carried no state; the
    largest few (all, when there are few) labelled with task and from → to.
    Past ``RUG_MAX`` migrations: the state moved per time bin."""
    from matplotlib.lines import Line2D

    t = np.array([_num(m.get("t")) or 0.0 for m in migrations])
    b = np.array([_num(m.get("bytes")) or 0.0 for m in migrations])
    d = np.array([_num(m.get("downtime_s")) or 0.0 for m in migrations])
    scale, uname_b = 1.0, "B"
    color = KIND_COLORS["migrated"]
    zero = b <= 0
    n_zero = int(zero.sum())
    labelled = 0
    if t.size > RUG_MAX and stop > start:
        bins = 100
        sums, edges = np.histogram(t, bins=bins, range=(start, stop), weights=b)
        for name, size in BYTE_UNITS:
            if sums.max() >= size:
                scale, uname_b = size, name
        ax.bar(edges[:-1] / unit, sums / scale, width=np.diff(edges) / unit, align="edge",
               color=color, edgecolor=color, linewidth=0.3)
        ax.set_title(f"migrations: state moved per {duration((stop - start) / bins)}"
                     + (f"; {n_zero:,} of {t.size:,} moves carried no state (0 B)" if n_zero else "")
                     + "; the largest labelled", loc="left", fontweight="normal")
        top = sums.max() / scale
        high = (top if top > 0 else 1.0) * 1.5
        ax.set_ylim(-0.09 * high, high)
        at = np.clip(((t - start) / (stop - start) * bins).astype(np.int64), 0, bins - 1)
        labelled = _label_migrations(ax, migrations, t / unit, sums[at] / scale, b, d,
                                     (start / unit, stop / unit), (-0.09 * high, high), sized=True)
    else:
        for name, size in BYTE_UNITS:
            if b.size and b.max() >= size:
                scale, uname_b = size, name
        sizes = 12 + 80 * (d / d.max()) if d.size and d.max() > 0 else np.full(t.size, 14.0)
        some = ~zero
        ax.vlines(t[some] / unit, 0, b[some] / scale, color=color, linewidth=1.0, alpha=0.6)
        ax.scatter(t[some] / unit, b[some] / scale, s=sizes[some], color=color, alpha=0.85, zorder=3)
        ax.scatter(t[zero] / unit, np.zeros(n_zero), s=30, marker="D", facecolors="white", edgecolors=color,
                   linewidths=1.3, zorder=4, clip_on=False)
        ax.set_title("migrations: state moved by each", loc="left", fontweight="normal")
        handles = [Line2D([], [], marker="o", linestyle="", color=color, markersize=6,
                          label="state moved (area ∝ downtime)")]
        if n_zero:
            handles.append(Line2D([], [], marker="D", linestyle="", markerfacecolor="white",
                                  markeredgecolor=color, markersize=5, label=f"no state to move, 0 B ({n_zero:,})"))
        ax.legend(handles=handles, loc="lower right", bbox_to_anchor=(1.0, 1.0), ncols=2, borderaxespad=0.2)
        top = b.max() / scale if b.size else 0
        high = (top if top > 0 else 1.0) * 1.5
        ax.set_ylim(-0.09 * high, high)
        labelled = _label_migrations(ax, migrations, t / unit, np.where(zero, 0.0, b / scale), b, d,
                                     (start / unit, stop / unit if stop > start else start / unit + 1),
                                     (-0.09 * high, high))
    if not labelled:
        high = (top if top > 0 else 1.0) * 1.15
        ax.set_ylim(-0.09 * high, high)
    _set_ticks(ax.yaxis, 0, top * 1.1 if top > 0 else 0, most=4)
    ax.set_ylabel(f"state moved ({uname_b})")


def _node_short(name: Any, limit: int = 22) -> str:
    return _short_name("?" if name is None else name, limit)


def _label_migrations(ax, migrations: list[dict], x: np.ndarray, y: np.ndarray, b: np.ndarray, d: np.ndarray,
                      xlim: tuple[float, float], ylim: tuple[float, float], sized: bool = False) -> int:
    """Label all migrations when there are few, else the largest (most state,
    then longest downtime, then earliest): ``task: from → to (cause)``, with
    ``sized`` the state moved too. A label that would cover another is
    raised a line, until it covers none."""
    n = len(migrations)
    if n <= MIGRATION_LABELS:
        picked = list(range(n))
    else:
        order = sorted(range(n), key=lambda i: (-b[i], -d[i], x[i], str(migrations[i].get("task"))))
        picked = order[:MIGRATION_LABELS // 2 if sized else MIGRATION_LABELS]
    picked.sort(key=lambda i: (x[i], -y[i], str(migrations[i].get("task"))))
    box = ax.get_position()
    fig_w, fig_h = ax.figure.get_size_inches()
    width_pt, height_pt = box.width * fig_w * 72, box.height * fig_h * 72
    xspan, yspan = (xlim[1] - xlim[0]) or 1.0, (ylim[1] - ylim[0]) or 1.0
    size, line = 6.5, 10.0
    placed: list[tuple[float, float, float]] = []  # (left, right, bottom) of labels, in points
    for i in picked:
        m = migrations[i]
        cause = ", ".join(([_bytes(b[i])] if sized else []) + ([str(m["cause"])] if m.get("cause") else []))
        cause = f" ({cause})" if cause else ""
        text = (f"{_short_name(m.get('task'), 34)}: {_node_short(m.get('from'))} → "
                f"{_node_short(m.get('to'))}{cause}")
        px = (x[i] - xlim[0]) / xspan * width_pt
        py = (y[i] - ylim[0]) / yspan * height_pt
        wide = len(text) * size * 0.56 + 4
        right = px + 5 + wide > width_pt and px - 5 - wide >= -40  # no room to the right: to the left
        left_pt, right_pt = (px - 5 - wide, px - 5) if right else (px + 5, px + 5 + wide)
        level = 0
        while any(lo < right_pt and left_pt < hi and abs(py + 5 + line * level - bottom) < line - 0.5
                  for lo, hi, bottom in placed) and level < 12:
            level += 1
        placed.append((left_pt, right_pt, py + 5 + line * level))
        ax.annotate(text, (x[i], y[i]), xytext=(-5 if right else 5, 5 + line * level), textcoords="offset points",
                    ha="right" if right else "left", va="bottom", fontsize=size, color="#1f3b57",
                    annotation_clip=False, bbox={"boxstyle": "square,pad=0.1", "facecolor": "white",
                                                 "edgecolor": "none", "alpha": 0.8},
                    arrowprops={"arrowstyle": "-", "color": "#9bb7d4", "linewidth": 0.6,
                                "shrinkA": 0, "shrinkB": 3} if level else None)
    return len(picked)


def _lane_names(tasks: list[str], limit: int = 38) -> list[str]:
    """Task names short enough for the lanes' axis, each still different:
    the middle gives way (the application's start and the member's index stay)."""
    for size in (limit, limit + 12, limit + 30, 10 ** 6):
        out = [t if len(t) <= size else t[: size // 2 - 1] + "…" + t[-(size - size // 2):] for t in tasks]
        if len(set(out)) == len(out):
            return out
    return list(tasks)  # pragma: no cover (names are different)


def _lanes_chart(ch: _Charts, lanes: list[dict], title: str, start: float, stop: float) -> str:
    """One lane per task: where it ran (a bar per place, coloured by tier, or
    by site when tiers are not known; its site written on it when it fits;
    the part before a migrated state arrived lighter), its waits (dashed),
    its stops (×) and the moves that put it somewhere else (▶)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    unit, uname = _time_unit(stop - start)
    n = len(lanes)
    row = 0.3
    width, left, right = 10.0, 3.0, 0.25
    height = 0.72 + 0.55 + row * n
    fig = ch.figure(width, height, left=left, right=right, top=0.72, bottom=0.55)
    ax = fig.subplots(1, 1)
    lo, hi = start / unit, (stop / unit if stop > start else start / unit + 1)
    pt_per_x = (width - left - right) * 72 / (hi - lo)
    sites = list(dict.fromkeys(span[3] for lane in lanes for span in lane.get("ran") or () if len(span) > 3))
    site_color = {site: SITE_COLORS[i % len(SITE_COLORS)] for i, site in enumerate(sites)}
    tiers_known = all(len(span) > 4 and span[4] in TIER_COLORS for lane in lanes for span in lane.get("ran") or ())

    def color_of(span: list) -> str:
        return TIER_COLORS[span[4]] if tiers_known else site_color.get(span[3], "#999999")

    bars: dict[str, list] = {"y": [], "left": [], "width": [], "color": [], "alpha": []}
    waits: list[tuple[float, float, float]] = []
    stops: dict[str, list[tuple[float, float]]] = {}
    arrivals: list[tuple[float, float]] = []
    used: dict[str, str] = {}  # legend: tier or site -> colour
    for i, lane in enumerate(lanes):
        y = n - 1 - i  # the first lane at the top
        ran = [s for s in lane.get("ran") or () if len(s) >= 4 and _num(s[0]) is not None and _num(s[1]) is not None]
        for span in ran:
            a, b = _num(span[0]) / unit, _num(span[1]) / unit
            serves = _num(span[5]) if len(span) > 5 else None
            ready = min(max(serves / unit, a), b) if serves is not None else a
            color = color_of(span)
            used[span[4] if tiers_known else str(span[3])] = color
            for x0, x1, alpha in ((a, ready, 0.35), (ready, b, 1.0)):
                if x1 > x0:
                    bars["y"].append(y)
                    bars["left"].append(x0)
                    bars["width"].append(max(x1 - x0, 0.0))
                    bars["color"].append(color)
                    bars["alpha"].append(alpha)
            label = _short_name(span[3], 24)
            if (b - a) * pt_per_x >= len(label) * 7 * 0.7 + 8:  # bold digits are wide
                ax.text((a + b) / 2, y, label, ha="center", va="center", fontsize=7, color="white",
                        fontweight="bold", clip_on=True, zorder=4)
        starts = sorted(_num(s[0]) for s in ran)
        for mark in lane.get("marks") or ():
            at = _num(mark.get("t"))
            if at is None:
                continue
            kind = mark.get("kind")
            if kind in STOP_KINDS:
                stops.setdefault(kind, []).append((at / unit, y))
                after = [s for s in starts if s >= at]
                until = after[0] if after else (stop if lane.get("status") == "pending" else None)
                if until is not None and until > at:
                    waits.append((y, at / unit, until / unit))
            elif kind in ("migrated", "placed"):
                arrivals.append((at / unit, y))
    if bars["y"]:
        colors = [_rgba(c, a) for c, a in zip(bars["color"], bars["alpha"])]
        ax.barh(bars["y"], bars["width"], left=bars["left"], height=0.62, color=colors, linewidth=0, zorder=2)
    for y, a, b in waits:
        ax.plot([a, b], [y, y], linestyle=(0, (2, 2)), color="#888888", linewidth=1.0, zorder=1)
    from matplotlib.transforms import ScaledTranslation

    # a stop and the move it leads to often share an instant: the stop a little left, the arrival right
    before = ax.transData + ScaledTranslation(-3.5 / 72, 0, fig.dpi_scale_trans)
    after = ax.transData + ScaledTranslation(3.5 / 72, 0, fig.dpi_scale_trans)
    for kind, points in stops.items():
        xs, ys = zip(*points)
        ax.scatter(xs, ys, marker="x", s=30, linewidths=1.6, color=KIND_COLORS[kind], zorder=5, transform=before)
    if arrivals:
        xs, ys = zip(*arrivals)
        ax.scatter(xs, ys, marker=">", s=26, color="#1d2330", zorder=5, transform=after)
    names = _lane_names([str(lane.get("task")) for lane in lanes])
    ax.set_yticks(range(n - 1, -1, -1), [f"{name}  ({lane.get('moves', 0)})" for name, lane in zip(names, lanes)],
                  fontsize=7.5)
    ax.set_ylim(-0.6, n - 0.4)
    ax.grid(axis="y", visible=False)
    fig.text(0.1 / width, 1 - 0.12 / height, title, ha="left", va="top", fontsize=10, fontweight="bold")
    handles = [Patch(color=c, label=_short_name(k, 18)) for k, c in list(used.items())[:8]]
    handles.append(Patch(color=_rgba("#777777", 0.35), label="moved, state on its way"))
    handles.append(Line2D([], [], linestyle=(0, (2, 2)), color="#888888", label="waiting"))
    for kind in STOP_KINDS:
        if kind in stops:
            handles.append(Line2D([], [], marker="x", linestyle="", color=KIND_COLORS[kind], markeredgewidth=1.6,
                                  label=kind))
    if arrivals:
        handles.append(Line2D([], [], marker=">", linestyle="", color="#1d2330", label="placed again"))
    ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncols=min(len(handles), 6),
              fontsize=7, borderaxespad=0.3, columnspacing=1.2, handlelength=1.6)
    _time_axis(ax, unit, uname, start, stop)
    return ch.img(fig, "where each task that moved ran over time, one lane per task: "
                  + ", ".join(str(lane.get("task")) for lane in lanes))


def _rgba(color: str, alpha: float) -> tuple[float, float, float, float]:
    from matplotlib.colors import to_rgba

    return to_rgba(color, alpha)


def _fairness_chart(ch: _Charts, timeline: dict, end: float, jain_index: Any) -> str | None:
    t = _array(timeline.get("t"))
    shares = timeline.get("dominant_share") or {}
    if t.size == 0 or not shares:
        return None
    tenants = list(shares)
    ys = [_aligned(shares[n], t.size) * 100 for n in tenants]
    finals = [float(y[-1]) if y.size and np.isfinite(y[-1]) else 0.0 for y in ys]
    peaks = [float(np.nanmax(y)) if y.size and np.isfinite(y).any() else 0.0 for y in ys]
    tt, hi, lo = decimate(t, ys)
    stop = max(end, float(t[-1]))
    tt, hi, lo = _hold_to(stop, tt, hi, lo)
    unit, uname = _time_unit(stop - float(t[0]))
    x = tt / unit
    fig = ch.figure(10, 3.8, left=0.8, right=2.7, top=0.4, bottom=0.55)
    ax = fig.subplots(1, 1)
    # busiest tenants first in the legend; idle tenants drawn faint and listed last
    order = sorted(range(len(tenants)), key=lambda i: (-peaks[i], tenants[i]))
    legend_max = 12
    for rank, i in enumerate(order):
        color = TENANT_COLORS[rank % len(TENANT_COLORS)]
        idle = peaks[i] == 0
        name = _short_name(tenants[i], 20)
        label = f"{name}  now {finals[i]:.1f}%, peak {peaks[i]:.1f}%" if not idle else f"{name}  (idle)"
        if lo is not None and not idle:
            ax.fill_between(x, lo[i], hi[i], step="post", color=color, alpha=0.12, linewidth=0)
        _steps(ax, x, hi[i], color="#bbbbbb" if idle else color, linewidth=0.8 if idle else 1.4,
               label=label if rank < legend_max else None, zorder=3 if not idle else 2)
    top = max(peaks) if peaks else 0.0
    high = (top if top > 0 else 1.0) * 1.08
    ax.set_ylim(-0.03 * high, high)
    _set_ticks(ax.yaxis, 0, high, suffix="%", most=5)
    ax.set_ylabel("dominant share")
    j = _num(jain_index)
    ax.set_title("dominant share per tenant" + (f"  ·  final Jain index {j:.3f}" if j is not None else ""),
                 loc="left")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if len(tenants) > legend_max:
        ax.text(1.02, 0.0, f"+{len(tenants) - legend_max} more tenants (see table)", transform=ax.transAxes,
                fontsize=8, color="#666666")
    _time_axis(ax, unit, uname, float(t[0]), stop)
    return ch.img(fig, "dominant share per tenant over time")


# ----------------------------------------------------------------- html pieces


CSS = """
:root{--fg:#1d2330;--muted:#667085;--line:#e4e7ec;--bg:#f7f8fa;--card:#fff;--accent:#2f6fdf}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 -apple-system,BlinkMacSystemFont,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;
color:var(--fg);background:var(--bg)}
main{max-width:1080px;margin:0 auto;padding:28px 24px 60px}
header h1{margin:0 0 4px;font-size:26px;letter-spacing:-.01em}
header .sub{color:var(--muted);margin:0 0 18px}
header .sub b{color:var(--fg);font-weight:600}
nav{margin:0 0 8px;font-size:13px}
nav a{color:var(--accent);text-decoration:none;margin-right:14px}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:0 0 8px}
.card{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:10px 14px;min-width:112px}
.card .v{font-size:22px;font-weight:650;font-variant-numeric:tabular-nums}
.card .k{color:var(--muted);font-size:12px;text-transform:uppercase;letter-spacing:.04em}
.card.finished .v{color:#1a7f37}.card.running .v{color:#2f6fdf}
.card.pending .v{color:#b35900}.card.failed .v{color:#c0392b}.card.omitted .v{color:#667085}.card.withdrawn .v{color:#667085}
.card.zero .v{color:#98a2b3}
section{background:var(--card);border:1px solid var(--line);border-radius:12px;padding:16px 20px;margin:18px 0}
section h2{font-size:17px;margin:0 0 4px}
section p.note{color:var(--muted);margin:0 0 10px;font-size:13px}
img.chart{display:block;max-width:100%;height:auto;margin:6px 0}
.empty{color:var(--muted);font-style:italic;padding:18px 0}
table{border-collapse:collapse;width:100%;font-size:13px;margin:6px 0}
th,td{text-align:left;padding:5px 8px;border-bottom:1px solid var(--line);vertical-align:top}
th{color:var(--muted);font-weight:600;font-size:12px;text-transform:uppercase;letter-spacing:.03em}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tbody tr:nth-child(even){background:#fafbfc}
td code,.chips code{font:12px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
.chips{display:flex;flex-wrap:wrap;gap:6px;margin:8px 0}
.chip{background:#eef2f7;border-radius:999px;padding:2px 10px;font-size:12px}
.chip b{font-variant-numeric:tabular-nums}
.bar{position:relative}
.bar span{position:relative;z-index:1}
.bar i{position:absolute;left:0;top:3px;bottom:3px;background:#dbe7fb;border-radius:3px;z-index:0}
.reason{display:inline-block;background:#fff4e5;border-radius:4px;padding:0 6px;margin:1px 4px 1px 0;font-size:12px}
.more{color:var(--muted);font-size:12px}
footer{color:var(--muted);font-size:12px;text-align:center;margin-top:24px}
"""


def _cards(tasks: dict) -> str:
    out = []
    keys = list(STATUSES) + [k for k in tasks if k not in STATUSES]
    for k in keys:
        v = tasks.get(k, 0) or 0
        cls = f"card {_esc(k)}" + (" zero" if not v and k != "submitted" else "")
        out.append(f'<div class="{cls}"><div class="v">{_esc(f"{v:,}" if isinstance(v, int) else v)}</div>'
                   f'<div class="k">{_esc(k)}</div></div>')
    return '<div class="cards">' + "".join(out) + "</div>"


def _section(anchor: str, title: str, note: str, body: str) -> str:
    note_html = f'<p class="note">{note}</p>' if note else ""
    return f'<section id="{_esc(anchor)}"><h2>{_esc(title)}</h2>{note_html}{body}</section>'


def _empty(text: str) -> str:
    return f'<p class="empty">{_esc(text)}</p>'


def _table(head: Sequence[tuple[str, bool]], rows: Iterable[Sequence[str]]) -> str:
    """``head``: (title, numeric); cells of ``rows`` are already-escaped HTML."""
    th = "".join(f'<th class="n">{_esc(h)}</th>' if n else f"<th>{_esc(h)}</th>" for h, n in head)
    body = "".join("<tr>" + "".join(f'<td class="n">{c}</td>' if n else f"<td>{c}</td>"
                                    for c, (_, n) in zip(row, head)) + "</tr>" for row in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _reasons_read_first(u: dict) -> list[str]:
    """A pending task's reasons as chips: the binding constraint first, in
    figures (``why``), then the others by nodes ruled out."""
    why = u.get("why")
    if not why:
        reasons = u.get("reasons") or {}
        items = sorted(reasons.items(), key=lambda kv: (-(_num(kv[1]) or 0), str(kv[0])))
        return [f'<span class="reason">{_esc(r)} ×{_esc(n)}</span>' for r, n in items]
    out = []
    for w in why:
        if w.get("binding"):
            out.append(f'<span class="reason"><b>{_esc(binding_line(w))}</b></span>')
        else:
            out.append(f'<span class="reason">{_esc(w.get("reason"))} ×{_esc(w.get("count"))}</span>')
    return out


def _pending_table(unscheduled: list, end: float, pending_reasons: dict, total: int | None = None) -> str:
    """The first ``PENDING_ROWS`` waiting tasks (``total``: how many wait, when
    ``unscheduled`` holds the first only)."""
    total = len(unscheduled) if total is None else total
    if not total:
        return _empty("Nothing was pending when the run ended.")
    parts = []
    if pending_reasons:
        top = list(pending_reasons.items())[:8]
        parts.append('<p class="note">Pending tasks by what holds each back (the constraint that binds first):</p>'
                     '<div class="chips">' + "".join(
            f'<span class="chip">{_esc(r)} <b>{_esc(n)}</b></span>' for r, n in top) + "</div>")
    rows = []
    for u in unscheduled[:PENDING_ROWS]:
        items = _reasons_read_first(u)
        shown = "".join(items[:3])
        if len(items) > 3:
            shown += f'<span class="more">+{len(items) - 3} more</span>'
        since = _num(u.get("since_s"))
        rows.append([f"<code>{_esc(u.get('task'))}</code>", _esc(u.get("tenant")), _esc(u.get("vc")),
                     _esc(duration(since)) if since is not None else "–",
                     _esc(duration(end - since)) if since is not None else "–", shown or "–"])
    table = _table([("task", False), ("tenant", False), ("vc", False), ("submitted at", True),
                    ("since submission", True), ("why (what binds first, then nodes ruled out)", False)], rows)
    more = ""
    if total > PENDING_ROWS:
        more = (f'<p class="more">… and {total - PENDING_ROWS:,} more pending tasks '
                "(see result.json).</p>")
    return "".join(parts) + table + more


def _allocation_table(averages: dict, timeline: dict) -> str:
    if not averages:
        return _empty("No allocation was recorded.")
    keys = list(dict.fromkeys(k for res in averages.values() for k in (res or {})))
    peaks: dict[tuple[str, str], float] = {}
    for tier, res in (timeline.get("by_tier") or {}).items():
        for k, vals in (res or {}).items():
            a = _array(vals)
            a = a[np.isfinite(a)]
            if a.size:
                peaks[(tier, k)] = float(a.max())
    rows = []
    for tier, res in averages.items():
        row = [f"<b>{_esc(tier)}</b>"]
        for k in keys:
            v = _num((res or {}).get(k))
            if v is None:
                row.append("–")
                continue
            peak = peaks.get((tier, k))
            w = max(0.0, min(1.0, v)) * 100
            peak_html = f' <span class="more">peak {_esc(_pct(peak))}</span>' if peak is not None else ""
            row.append(f'<div class="bar"><i style="width:{w:.1f}%"></i><span>{_esc(_pct(v))}</span>'
                       f"{peak_html}</div>")
        rows.append(row)
    return _table([("tier", False)] + [(_resource_label(k), False) for k in keys], rows)


def _tenant_table(by_tenant: dict, fairness: dict) -> str:
    dominant = fairness.get("dominant_share") or {}
    weighted = fairness.get("weighted_share") or {}
    tenants = list(dict.fromkeys(list(by_tenant) + list(dominant)))
    if not tenants:
        return _empty("No tenants.")
    rows = []
    for n in tenants:
        q = by_tenant.get(n) or {}
        count = q.get("count", 0) or 0
        cut = q.get("censored")
        rows.append([_esc(n), _esc(f"{count:,}" if isinstance(count, int) else count),
                     _esc(f"{cut:,}" if isinstance(cut, int) else "–")]
                    + [_esc(duration(q.get(p))) if count else "–" for p in ("p50", "p90", "p99", "max")]
                    + [_esc(_pct(dominant.get(n))), _esc(_pct(weighted.get(n)))])
    return _table([("tenant", False), ("waits", True), ("censored", True), ("wait p50", True), ("p90", True),
                   ("p99", True), ("max", True), ("dominant share", True), ("÷ weight", True)], rows)


def _lanes_table(lanes: list[dict]) -> str:
    """The lanes as text: each task, where it ran in order, its stops and moves."""
    rows = []
    for lane in lanes:
        ran = [s for s in lane.get("ran") or () if len(s) >= 4]
        path = " → ".join(f"{s[3]} ({duration(s[0])}–{duration(s[1])})" for s in ran[:8])
        if len(ran) > 8:
            path += f" … +{len(ran) - 8} more"
        marks = []
        for m in (lane.get("marks") or ())[:8]:
            kind = m.get("kind")
            if kind in ("migrated", "placed"):
                what = f"{m.get('from')} → {m.get('to')}"
                if kind == "migrated":
                    what += f", {_bytes(m.get('bytes'))}" + (f", {m['cause']}" if m.get("cause") else "")
                else:
                    what = "placed " + what
            else:
                what = f"{kind} on {m.get('node')}" + (f" ({m['cause']})" if m.get("cause") else "")
            marks.append(f"{duration(m.get('t'))}: {what}")
        left = len(lane.get("marks") or ()) - 8
        rows.append([f"<code>{_esc(lane.get('task'))}</code>", _esc(lane.get("tenant") or "–"),
                     _esc(lane.get("moves", 0)), _esc(path or "never placed"),
                     "<br>".join(_esc(x) for x in marks)
                     + (f' <span class="more">+{left} more</span>' if left > 0 else ""),
                     _esc(lane.get("status") or "–")])
    return _table([("task", False), ("tenant", False), ("moves", True), ("where it ran", False),
                   ("stops and moves", False), ("at the end", False)], rows)


def _incident_table(events: list[dict]) -> str:
    rows = []
    for e in events:
        if e.get("kind") not in INCIDENT_KINDS:
            continue
        what = e.get("node") if e.get("node") is not None else " ↔ ".join(map(str, e.get("between") or ()))
        rows.append([_esc(duration(e.get("t"))), _esc(e.get("kind")), f"<code>{_esc(what)}</code>"])
    if not rows:
        return ""
    more = f'<p class="more">… and {len(rows) - PENDING_ROWS:,} more.</p>' if len(rows) > PENDING_ROWS else ""
    return ("<h3 style='font-size:14px;margin:14px 0 0'>Infrastructure incidents</h3>"
            + _table([("at", True), ("kind", False), ("what", False)], rows[:PENDING_ROWS]) + more)


def _migration_note(migrations: list[dict]) -> str:
    if not migrations:
        return ""
    b = [x for x in (_num(m.get("bytes")) for m in migrations) if x is not None]
    d = [x for x in (_num(m.get("downtime_s")) for m in migrations) if x is not None]
    bits = [f"{len(migrations):,} migrations"]
    if b:
        big = max(migrations, key=lambda m: (_num(m.get("bytes")) or 0.0, -(_num(m.get("t")) or 0.0)))
        bits.append(f"{_bytes(sum(b))} of state moved (largest {_bytes(max(b))}: {big.get('task')} "
                    f"{big.get('from')} → {big.get('to')} at {duration(big.get('t'))})")
        none = sum(1 for x in b if x <= 0)
        if none:
            bits.append(f"{none:,} carried no state (0 B)")
    if d:
        bits.append(f"downtime total {duration(sum(d))}, median {duration(float(np.median(d)))}, "
                    f"max {duration(max(d))}")
    return f'<p class="note">{_esc("; ".join(bits))}.</p>'


def _largest_migrations(migrations: list[dict], rows: int = 10) -> str:
    """The largest migrations as a table (most state, then longest downtime,
    then earliest), when there are more than the chart labels."""
    if len(migrations) <= MIGRATION_LABELS:
        return ""
    key = lambda m: (-(_num(m.get("bytes")) or 0.0), -(_num(m.get("downtime_s")) or 0.0),  # noqa: E731
                     _num(m.get("t")) or 0.0, str(m.get("task")))
    top = sorted(migrations, key=key)[:rows]
    body = [[_esc(duration(m.get("t"))), f"<code>{_esc(m.get('task'))}</code>",
             f"<code>{_esc(m.get('from'))}</code> → <code>{_esc(m.get('to'))}</code>", _esc(_bytes(m.get("bytes"))),
             _esc(duration(m.get("downtime_s"))), _esc(m.get("cause") or "–")] for m in top]
    return (f"<h3 style='font-size:14px;margin:14px 0 0'>The {len(top)} largest migrations</h3>"
            + _table([("at", True), ("task", False), ("from → to", False), ("state", True), ("downtime", True),
                      ("cause", False)], body))


def _causes_note(metrics: dict) -> str:
    """Why work was disturbed, and whether anything ran beyond its near bound."""
    causes = (metrics.get("moves") or {}).get("causes") or {}
    near = metrics.get("near_violations") or {}
    bits = []
    if causes:
        bits.append("Why work was stopped or moved: " + ", ".join(f"{k} {v:,}" for k, v in causes.items()))
    if _num(near.get("max_concurrent")):
        bits.append(f"tasks beyond their near bound: up to {near.get('max_concurrent')} at once, "
                    f"{duration(near.get('task_seconds'))} task-time in all, {near.get('at_end')} at the end")
    return f'<p class="note">{_esc("; ".join(bits))}.</p>' if bits else ""


# ----------------------------------------------------------------- entry point


def _count(items) -> int:
    """A list's length, or the count written in its place (a streamed result)."""
    return items if isinstance(items, int) else len(items or ())


OMITTED_BY = {"quota": "their tenant's quota", "capacity": "too little room", "domain": "their coupling domain's room",
              "elastic": "the size their gang was placed at"}


def _omitted_note(tasks: dict, omitted_by: dict) -> str:
    """Members elastic gangs ran without: not needed, not failed."""
    n = int(_num(tasks.get("omitted")) or 0)
    if not n:
        return ""
    why = ", ".join(f"{int(_num(k) or 0):,} left out by {OMITTED_BY.get(code, code)}"
                    for code, k in (omitted_by or {}).items())
    text = (f"{n:,} member{'s' if n != 1 else ''} of elastic gangs {'were' if n != 1 else 'was'} not needed: "
            f"{'their gangs' if n != 1 else 'its gang'} ran without {'them' if n != 1 else 'it'}"
            + (f" ({why})" if why else "") + ". Omitted, not failed.")
    return f'<p class="note">{_esc(text)}</p>'


def _lanes_of(metrics: dict, events: list[dict], end: float, tasks: Iterable[str] | None
              ) -> tuple[list[dict] | None, int, int]:
    """The lanes to draw, how many tasks moved and how many more were only
    stopped: of the ``tasks`` named (from the events), else the result's
    ``metrics.lanes``, else from the events when they are the whole log;
    None when there is nothing to make them of."""
    if tasks is not None:
        got = task_lanes(events, end, tasks=list(tasks))
    elif isinstance(metrics.get("lanes"), dict):
        got = metrics["lanes"]
    elif any(e.get("kind") == "placed" for e in events):
        got = task_lanes(events, end)
    else:
        return None, 0, 0
    lanes = [lane for lane in got.get("tasks") or () if isinstance(lane, dict)]
    return lanes, int(_num(got.get("moved")) or 0), int(_num(got.get("stopped")) or 0)


def _lanes_title(n: int, moved: int, stopped: int, named: bool) -> str:
    if named:
        return f"where each of the {n:,} task{'s' if n != 1 else ''} named ran · (N) = its moves"
    bits = []
    if moved:
        bits.append(f"{moved:,} task{'s' if moved != 1 else ''} moved")
    if stopped:
        bits.append(f"{stopped:,} {'more ' if moved else ''}only stopped")
    shown = "all shown" if n >= moved + stopped else f"{n:,} shown, most moves first"
    return "where each task ran: " + ", ".join(bits) + f"; {shown} · (N) = its moves"


def _lanes_section(lanes: list[dict] | None, moved: int, stopped: int, named: bool, img: str | None) -> str:
    if lanes is None:
        body = _empty("No lanes: the result has no metrics.lanes and the events given are not the whole log.")
    elif not lanes:
        body = _empty("None of the tasks named has events." if named
                      else "No task moved or was stopped during the run.")
    else:
        body = img + ("<details><summary>The tasks of the lanes, as text</summary>" + _lanes_table(lanes)
                      + "</details>")
    left = moved + stopped - len(lanes or ())
    note = ("One lane per task named." if named else
            "One lane per task that moved (migrated; preempted, requeued or lost and placed again elsewhere; "
            "returned), then per task only stopped (placed back where it was, or still waiting), at most "
            f"{LANES}, the most moves first; bars are where it ran, coloured by tier, with the site written on "
            "them when it fits.")
    if not named and lanes and left > 0:
        note += (f" {left:,} more task{'s' if left != 1 else ''} {'are' if left != 1 else 'is'} left out "
                 "(see events.jsonl).")
    return _section("lanes", "4 · Tasks that moved", note, body)


def render_report(result: dict, events: Iterable[dict], count: int | None = None,
                  tasks: Iterable[str] | None = None) -> str:
    """The report of a simulated run as one self-contained HTML document.

    ``result`` is the object of ``result.json`` (its hosts and placements
    may be given as their counts); ``events`` the event log
    (``events.jsonl`` as dicts), or only its moves and incidents
    (``EventLog.notable``: all the report draws one by one) with ``count``
    the length of the whole log. The lanes are those of ``metrics.lanes``
    (the tasks that moved most), or with ``tasks``, of the tasks named,
    drawn from ``events`` (which must then be the whole log). Missing or
    empty parts are reported as such.
    """
    result = result or {}
    events = list(events or ())
    count = len(events) if count is None else count
    metrics = result.get("metrics") or {}
    timeline = result.get("timeline") or {}
    scenario = result.get("scenario")
    title = f"Simulation report — {scenario}" if scenario else "Simulation report"

    t_all = [x for x in (_num(e.get("t")) for e in events) if x is not None]
    tl = [x for x in (_num(v) for v in (timeline.get("t") or ())) if x is not None]
    end = _num(result.get("end_s"))
    if end is None:
        end = _num(metrics.get("end_s"))
    if end is None:
        end = max(t_all + tl + [0.0])
    start = min(t_all + tl + [0.0])
    until = _num(result.get("until_s"))

    by_kind: dict[str, list[float]] = {k: [] for k in MOVE_KINDS}
    migrations = []
    for e in events:
        kind, t = e.get("kind"), _num(e.get("t"))
        if kind in by_kind and t is not None:
            by_kind[kind].append(t)
            if kind == "migrated":
                migrations.append(e)
    kinds_np = {k: np.asarray(v, dtype=float) for k, v in by_kind.items()}
    lanes, moved, stopped = _lanes_of(metrics, events, end, tasks)
    lanes_title = _lanes_title(len(lanes or ()), moved, stopped, tasks is not None)

    import matplotlib

    ch = _Charts()
    with matplotlib.rc_context():  # restored afterwards; the caller's style does not leak in
        matplotlib.rcdefaults()
        matplotlib.rcParams.update(RC)
        alloc_img = _allocation_chart(ch, timeline, end)
        delay_img = _delay_chart(ch, metrics)
        moves_img = _moves_chart(ch, kinds_np, migrations, start, max(end, start))
        lanes_img = _lanes_chart(ch, lanes, lanes_title, start, max(end, start)) if lanes else None
        fairness = metrics.get("fairness") or {}
        fair_img = _fairness_chart(ch, timeline, end, fairness.get("jain_weighted"))

    span = duration(end)
    sub = [f"seed <b>{_esc(result.get('seed'))}</b>", f"simulated <b>{_esc(span)}</b>"]
    if until is not None and end is not None and abs(until - end) > 1e-9:
        sub.append(f"horizon {_esc(duration(until))}")
    sub.append(f"{_count(result.get('hosts')):,} hosts")
    sub.append(f"{_count(result.get('placements')):,} placements at the end")
    sub.append(f"{count:,} events")
    n_samples = len(timeline.get("t") or ())

    counts = metrics.get("events") or {}
    chips = '<p class="note">All events by kind:</p><div class="chips">' + "".join(
        f'<span class="chip"><code>{_esc(k)}</code> <b>{_esc(f"{v:,}" if isinstance(v, int) else v)}</b></span>'
        for k, v in counts.items()) + "</div>" if counts else ""

    jain = _num(fairness.get("jain_weighted"))
    sections = [
        _section("allocation", "1 · Allocation by tier over time",
                 f"Share of each tier's capacity allocated, per resource ({n_samples:,} samples, step plot).",
                 alloc_img or _empty("No allocation samples were recorded.")),
        _section("delays", "2 · Queueing delay and completion time by workload class",
                 "Queueing delay counts every wait: from submission, or from each stop (preempted, requeued, "
                 "lost), to the next placement; a wait still open when the run ends, or cut short by its task's "
                 "end (deleted while it waited), is counted up to then: censored, a lower bound. p50 / p90 / p99 "
                 "bars with the maximum as a dash; a log scale is used when values span two decades or more.",
                 delay_img),
        _section("moves", "3 · Moves and incidents over time",
                 "Nodes and links going down and up, tasks lost with a node, requeued, preempted and "
                 "migrated.", moves_img + _migration_note(migrations) + _largest_migrations(migrations)
                 + _causes_note(metrics) + chips
                 + _incident_table(events)),
        _lanes_section(lanes, moved, stopped, tasks is not None, lanes_img),
        _section("fairness", "5 · Fairness",
                 "Dominant share per tenant over time (the largest fraction of any one resource of the "
                 "fleet the tenant holds)"
                 + (f"; final Jain index over weight-adjusted shares: <b>{jain:.3f}</b> "
                    "(1 = all equal, 1/n = one tenant takes everything)." if jain is not None else "."),
                 fair_img or _empty("No fairness samples were recorded.")),
        _section("pending", "Pending at the end",
                 f"Tasks still waiting when the run ended (first {PENDING_ROWS}), with the reasons nodes "
                 "were ruled out on the last attempt.",
                 _pending_table(result.get("unscheduled") or [], end,
                                metrics.get("pending_by_first_reason") or metrics.get("pending_reasons") or {},
                                result.get("unscheduled_total"))),
        _section("allocation-average", "Allocation, time-averaged",
                 "Time-weighted mean share of each tier's capacity allocated, with the peak sample.",
                 _allocation_table(metrics.get("allocation_time_average") or {}, timeline)),
        _section("tenants", "Queueing by tenant",
                 "Waits (from submission or a stop to the next placement; censored: those still open at the "
                 "end, or cut short by the task's end, counted up to then), and each tenant's final dominant "
                 "share (and the share divided by the tenant's weight, which orders tenants).",
                 _tenant_table(metrics.get("queueing_delay_by_tenant_s") or {}, fairness)),
    ]
    nav = "<nav>" + "".join(f'<a href="#{a}">{_esc(t)}</a>' for a, t in (
        ("allocation", "Allocation"), ("delays", "Delays"), ("moves", "Moves"), ("lanes", "Tasks"),
        ("fairness", "Fairness"),
        ("pending", "Pending"), ("allocation-average", "Averages"), ("tenants", "Tenants"))) + "</nav>"
    header = (f"<header><h1>{_esc(scenario if scenario else 'Simulated run')}</h1>"
              f'<p class="sub">{" · ".join(sub)}</p>'
              f"{_cards(metrics.get('tasks') or {})}"
              f"{_omitted_note(metrics.get('tasks') or {}, metrics.get('omitted_by') or {})}{nav}</header>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{_esc(title)}</title><style>{CSS}</style></head><body><main>"
            + header + "".join(sections)
            + "<footer>suanli simulation report · self-contained, charts drawn with matplotlib</footer>"
            + "</main></body></html>\n")
