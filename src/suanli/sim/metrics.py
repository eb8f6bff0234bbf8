"""Metrics of a simulated run: what was used over time, how long work waited.

``Recorder`` samples allocation (by tier and resource) and tenants' dominant
shares after every instant that changed something. ``summarize`` turns the
samples and the task records into the ``metrics`` object of ``result.json``
(documented in docs/simulation.md).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any, Callable, Iterable

import numpy as np

from suanli.model.fleet import TIERS
from suanli.phrases import reasons_json
from suanli.scheduling import kernels
from suanli.scheduling.state import PlacementState
from suanli.scheduling.table import CandidateTable


class Recorder:
    """Samples, after each instant: what tasks use (by tier, per resource), the
    free share stranded on partly used shareable devices, tenants' dominant
    shares and ``near`` violations.

    A sample costs what changed since the last one, not the fleet's size: per
    node figures are kept and updated for the rows the tables touched
    (``CandidateTable.since``), and totals by tier and site by their
    differences. Means are exact time integrals; the series kept for charts
    is thinned to at most ``MAX_POINTS`` samples (when full, every other one is
    dropped and from then on one sample in two, four, ... is kept, the last of
    a run always), so memory does not grow with the length of the run."""

    MAX_POINTS = 4096

    def __init__(self, state: PlacementState, near_violations: Callable[[], int] | None = None) -> None:
        self.state = state
        fleet = state.fleet
        n_res, n_kinds = len(fleet.resources), len(fleet.kinds)
        self.capacity = np.zeros((len(TIERS), n_res), np.int64)
        np.add.at(self.capacity, fleet.node_tier, fleet.node_capacity)
        self.site_capacity = np.zeros((len(fleet.sites), n_res), np.int64)
        np.add.at(self.site_capacity, fleet.node_site, fleet.node_capacity)
        self.near_violations = near_violations or (lambda: 0)
        # the series (thinned) for charts: one sample in ``_stride`` is kept
        self.times: list[float] = []
        self.used: list[np.ndarray] = []  # [tier, resource] per sample
        self.reserved: list[np.ndarray] = []  # [tier, resource]: held by hosts and claims
        self.fragmented: list[np.ndarray] = []  # [kind]: stranded free share / capacity
        self.shares: list[np.ndarray] = []  # per sample: float[T] unweighted dominant shares, by tenant index
        self.violations: list[int] = []
        self._stride, self._skipped = 1, 0
        # per node, kept up to date: held, idle inside explicit VC hosts, stranded share per kind
        n = fleet.n_nodes
        self._held = np.zeros((n_res, n))
        self._used = np.zeros((n_res, n))
        self._idle = np.zeros((n_res, n))
        self._stranded_total = np.zeros(n_kinds)
        self._kind_capacity = self.capacity.sum(axis=0)[2:]
        self._stranded = np.zeros((n_kinds, n))
        self._cursor = _Cursor()
        self._vc_seen: dict[int, tuple[CandidateTable, _Cursor, np.ndarray]] = {}
        # totals now, as views into one vector so that one operation integrates them all
        shapes = {"used": self.capacity.shape, "reserved": self.capacity.shape, "fragmented": (n_kinds,),
                  "violations": (1,)}
        # per site (a million of them with a population): integrated site by site as they change,
        # not all at every instant; each one's integral runs up to ``_site_last``
        self._site_now = np.zeros(self.site_capacity.shape)
        self._site_area = np.zeros(self.site_capacity.shape)
        self._site_peak = np.zeros(self.site_capacity.shape)
        self._site_last = np.zeros(len(fleet.sites))
        size = sum(int(np.prod(v)) for v in shapes.values())
        self._vec = np.zeros(size)
        self._area_vec = np.zeros(size)  # time integrals since the first sample
        self._peak_vec = np.zeros(size)  # highest values sampled
        self._now: dict[str, np.ndarray] = {}
        self._area: dict[str, np.ndarray] = {}
        self._peak: dict[str, np.ndarray] = {}
        at = 0
        for name, shape in shapes.items():
            n_items = int(np.prod(shape))
            for store, vec in ((self._now, self._vec), (self._area, self._area_vec), (self._peak, self._peak_vec)):
                store[name] = vec[at:at + n_items].reshape(shape)
            at += n_items
        self._first: float | None = None
        self._last: float | None = None

    # ------------------------------------------------------------ sampling

    def _changed_nodes(self) -> list[int] | np.ndarray | None:
        """Nodes whose figures may have changed since the last sample, ascending
        (None: all); on the way, the idle share of explicit VC hosts is brought
        up to date."""
        rows = self._cursor.touched(self.state.nodes)
        touched = [rows] if rows is not None else None
        for vc in self.state.vcs.values():
            if vc.default or vc.table.n == 0:
                continue
            t = vc.table
            seen = self._vc_seen.get(id(t))
            if seen is None or seen[0] is not t:
                seen = (t, _Cursor(), np.zeros((t.free.shape[0], 0)))
            _, cursor, snap = seen
            changed = cursor.rows(t)
            if snap.shape[1] < t.n:  # rows were added (the cursor then reads all)
                snap = np.hstack([snap, np.zeros((snap.shape[0], t.n - snap.shape[1]))])
            if changed is None:
                changed = np.arange(t.n)
            if changed.size:
                now = t.free[:, changed].astype(np.float64)
                where = t.node[changed].astype(np.int64)
                for r in range(now.shape[0]):
                    np.add.at(self._idle[r], where, now[r] - snap[r, changed])
                snap[:, changed] = now
                if touched is not None:
                    touched.append(where)
            self._vc_seen[id(t)] = (t, cursor, snap)
        if touched is None:
            return None
        return np.unique(np.concatenate([np.asarray(x, np.int64) for x in touched])) if len(touched) > 1 else touched[0]

    def sample(self, t: float, keep: bool = False) -> None:
        """The figures after the instant ``t``; ``keep``: this sample stays in the
        series (the last of a run)."""
        fleet = self.state.fleet
        nodes = self.state.nodes
        changed = self._changed_nodes()
        if self._first is None:
            self._site_last[:] = t
        self._advance(t)
        if changed is None:
            changed = np.arange(fleet.n_nodes)
        sites = np.unique(fleet.node_site[np.asarray(changed, np.int64)])
        self._site_area[sites] += self._site_now[sites] * (t - self._site_last[sites])[:, None]
        self._site_last[sites] = t
        d_stranded = np.zeros(self._stranded.shape[0])
        kernels.node_figures(np.asarray(changed, np.int64), nodes.cap, nodes.free, nodes.dev_free, nodes.dev_cap,
                             nodes.dev_kind, nodes.dev_shareable, self._idle, fleet.node_tier, fleet.node_site,
                             self._held, self._used, self._stranded, self._now["used"], self._now["reserved"],
                             self._site_now, d_stranded)
        if d_stranded.any():
            self._add_stranded(d_stranded)
        self._now["violations"][0] = self.near_violations()
        np.maximum(self._peak_vec, self._vec, out=self._peak_vec)
        self._site_peak[sites] = np.maximum(self._site_peak[sites], self._site_now[sites])
        self._record(t, keep)

    def _add_stranded(self, delta: np.ndarray) -> None:
        """Stranded share changed by ``delta`` per kind: the total and its ratio to capacity."""
        self._stranded_total += delta
        total = self._kind_capacity
        np.divide(self._stranded_total, total, out=self._now["fragmented"], where=total > 0)

    def _advance(self, t: float) -> None:
        """Integrate the totals up to ``t``."""
        if self._last is not None and t > self._last:
            self._area_vec += self._vec * (t - self._last)
        if self._first is None:
            self._first = t
        self._last = max(t, self._last) if self._last is not None else t

    def _record(self, t: float, keep: bool) -> None:
        """Keep this sample in the series when it is the stride's, replaces one of
        the same instant, or is to be kept; when the series is full, every
        other sample is dropped and the stride doubles."""
        same = bool(self.times) and self.times[-1] == t
        self._skipped += 1
        if not (same or keep or self._skipped >= self._stride):
            return
        self._skipped = 0
        if same:
            for lst in (self.used, self.reserved, self.fragmented, self.shares, self.violations):
                lst.pop()
            self.times.pop()
        self.times.append(t)
        self.used.append(self._now["used"].copy())
        self.reserved.append(self._now["reserved"].copy())
        self.fragmented.append(self._now["fragmented"].copy())
        self.shares.append(self._shares())
        self.violations.append(int(self._now["violations"][0]))
        if len(self.times) > self.MAX_POINTS:  # thin: every other sample, the last kept
            for name in ("times", "used", "reserved", "fragmented", "shares", "violations"):
                lst = getattr(self, name)
                setattr(self, name, lst[:-1:2] + lst[-1:])
            self._stride *= 2

    def _shares(self) -> np.ndarray:
        """Tenants' dominant shares now, float[T] by tenant index (one array
        operation; rounded only when the timeline is read)."""
        return self.state.dominant_shares() * self.state.weights

    # ------------------------------------------------------------ figures

    def timeline(self) -> dict[str, Any]:
        """Ratios over time, per tier and resource, and the other series (for charts)."""
        keys = self.state.fleet.resource_keys
        out: dict[str, Any] = {"t": [round(t, 3) for t in self.times], "by_tier": {}, "reserved_by_tier": {}}
        for name, series in (("by_tier", self.used), ("reserved_by_tier", self.reserved)):
            arr = np.array(series) if series else np.zeros((0,) + self.capacity.shape)
            for ti, tier in enumerate(TIERS):
                if not self.capacity[ti].any():
                    continue
                out[name][tier] = {
                    key: [round(float(x), 4) for x in arr[:, ti, ri] / self.capacity[ti, ri]]
                    for ri, key in enumerate(keys) if self.capacity[ti, ri]
                }
        frag = np.array(self.fragmented) if self.fragmented else np.zeros((0, len(self.state.fleet.kinds)))
        out["fragmented_share"] = {kind: [round(float(x), 4) for x in frag[:, k]]
                                   for k, kind in enumerate(self.state.fleet.kinds.names)}
        out["near_violations"] = list(self.violations)
        out["dominant_share"] = self._share_series()
        return out

    def _share_series(self) -> dict[str, list[float]]:
        """Each tenant's dominant share per sample, rounded to 6 places."""
        names = list(self.state.tenant_index)
        arr = np.array(self.shares).reshape(len(self.shares), len(names))
        return {name: [round(x, 6) for x in arr[:, i].tolist()] for i, name in enumerate(names)}

    def _mean(self, name: str, end: float):
        """Time-weighted mean of a total from the first sample to ``end`` (the value
        now when no time has passed)."""
        stop = max(end, self._last)
        span = stop - self._first
        if span <= 0:
            return self._now[name]
        return (self._area[name] + self._now[name] * (stop - self._last)) / span

    def time_average(self, end: float, series: str = "used") -> dict[str, dict[str, float]]:
        """Time-weighted mean ratio per tier and resource up to ``end``."""
        if self._first is None:
            return {}
        mean = self._mean(series, end)
        keys = self.state.fleet.resource_keys
        out: dict[str, dict[str, float]] = {}
        for ti, tier in enumerate(TIERS):
            if not self.capacity[ti].any():
                continue
            out[tier] = {key: round(float(mean[ti, ri] / self.capacity[ti, ri]), 6)
                         for ri, key in enumerate(keys) if self.capacity[ti, ri]}
        return out

    def by_site(self, end: float) -> dict[str, dict[str, dict[str, float]]]:
        """Per site and resource: time-averaged and peak used / capacity."""
        if self._first is None:
            return {}
        stop = max(end, self._last)
        span = stop - self._first
        now = self._site_now
        area = self._site_area + now * (stop - self._site_last)[:, None]
        out = {}
        keys = self.state.fleet.resource_keys
        table = self.state.fleet.site_table
        peak = self._site_peak

        def entry(cap, area_, now_, peak_ratio):
            return {key: {"mean": round(float(area_[r] / span / cap[r]) if span > 0 else float(now_[r] / cap[r]), 6),
                          "peak": round(float(peak_ratio[r]), 6)}
                    for r, key in enumerate(keys) if cap[r]}

        for si in table.names.listed().tolist():
            cap = self.site_capacity[si]
            out[table.names.name(si)] = entry(cap, area[si], now[si], peak[si] / np.maximum(cap, 1))
        for first, count, pattern in table.names.blocks():  # a population: one entry, its pattern
            rows = slice(first, first + count)
            cap = self.site_capacity[rows]
            ratio = (peak[rows] / np.maximum(cap, 1)).max(axis=0)  # the busiest of its sites
            out[str(pattern)] = entry(cap.sum(axis=0), area[rows].sum(axis=0), now[rows].sum(axis=0), ratio)
        return out

    def fragmentation(self, end: float) -> dict[str, dict[str, float]]:
        if self._first is None:
            return {}
        mean = self._mean("fragmented", end)
        now = self._now["fragmented"]
        return {kind: {"mean": round(float(mean[k]), 6), "peak": round(float(self._peak["fragmented"][k]), 6),
                       "at_end": round(float(now[k]), 6)}
                for k, kind in enumerate(self.state.fleet.kinds.names)}

    def near(self, end: float) -> dict[str, float]:
        if self._first is None:
            return {"max_concurrent": 0, "at_end": 0, "task_seconds": 0.0}
        stop = max(end, self._last)
        seconds = float(self._area["violations"][0] + self._now["violations"][0] * (stop - self._last))
        return {"max_concurrent": int(self._peak["violations"][0]), "at_end": int(self._now["violations"][0]),
                "task_seconds": round(float(seconds), 3)}


class _Cursor:
    """A reader of a table's change log: the rows touched since it last read."""

    __slots__ = ("table", "pos", "version")

    def __init__(self) -> None:
        self.table = None
        self.pos = self.version = -1

    def touched(self, table: CandidateTable) -> list[int] | None:
        """Rows touched since the last call, ascending, or None when that is not
        known (read all)."""
        changed = table.since(self.pos) if self.table is table and self.version == table.version else None
        self.table, self.pos, self.version = table, table.logged, table.version
        if changed is None:
            return None
        return sorted(set(changed.tolist())) if changed.size <= 64 else np.unique(changed).tolist()

    def rows(self, table: CandidateTable) -> np.ndarray | None:
        """``touched`` as an array."""
        out = self.touched(table)
        return None if out is None else np.array(out, np.int64)


def percentiles(values: Iterable[float]) -> dict[str, float | int]:
    v = np.asarray(list(values), dtype=float)
    if v.size == 0:
        return {"count": 0}
    p50, p90, p99 = np.percentile(v, [50, 90, 99])
    return {"count": int(v.size), "p50": round(float(p50), 3), "p90": round(float(p90), 3),
            "p99": round(float(p99), 3), "max": round(float(v.max()), 3)}


def jain(values: Iterable[float]) -> float:
    """Jain's fairness index: 1 when all equal, 1/n when one takes everything."""
    x = np.asarray(list(values), dtype=float)
    if x.size == 0 or not x.any():
        return 1.0
    return round(float(x.sum() ** 2 / (x.size * (x ** 2).sum())), 6)


def summarize(sim, end: float) -> dict[str, Any]:
    status = sim.view.counts()
    waits: dict[str, list[float]] = defaultdict(list)
    tenant_waits: dict[str, list[float]] = defaultdict(list)
    completion: dict[str, list[float]] = defaultdict(list)
    tenant_completion: dict[str, list[float]] = defaultdict(list)
    for rec in sim.view.tasks.values():
        klass = rec.klass
        if not klass:
            continue
        if rec.first_placed_at is not None:
            waits[klass].append(rec.first_placed_at - rec.submitted_at)
            tenant_waits[rec.tenant].append(rec.first_placed_at - rec.submitted_at)
        if rec.status == "finished" and rec.job and rec.ended_at is not None:
            completion[klass].append(rec.ended_at - rec.submitted_at)
            tenant_completion[rec.tenant].append(rec.ended_at - rec.submitted_at)
    reasons: Counter = Counter()
    for rec in sim.view.pending():
        reasons.update(rec.reasons.keys())
    state = sim.state
    weighted = state.share_by_tenant()
    log = sim.events
    kinds = log.kinds
    return {
        "end_s": round(end, 6),
        "tasks": {"submitted": len(sim.view), **status},
        "queueing_delay_s": {k: percentiles(v) for k, v in sorted(waits.items())},
        "completion_time_s": {k: percentiles(v) for k, v in sorted(completion.items())},
        "queueing_delay_by_tenant_s": {k: percentiles(v) for k, v in sorted(tenant_waits.items())},
        "pending_reasons": reasons_json(reasons),
        "allocation_time_average": sim.recorder.time_average(end),
        "reserved_time_average": sim.recorder.time_average(end, "reserved"),
        "allocation_by_site": sim.recorder.by_site(end),
        "fragmentation": sim.recorder.fragmentation(end),
        "near_violations": sim.recorder.near(end),
        "completion_time_by_tenant_s": {k: percentiles(v) for k, v in sorted(tenant_completion.items())},
        "fairness": {
            "dominant_share": {n: round(s * state.world.tenants[n].weight, 6) for n, s in weighted.items()},
            "weighted_share": {n: round(s, 6) for n, s in weighted.items()},
            "jain_weighted": jain(weighted.values()),
        },
        "events": dict(sorted(kinds.items())),
        "moves": {"migrations": kinds.get("migrated", 0), "preemptions": kinds.get("preempted", 0),
                  "lost": kinds.get("lost", 0), "requeued": kinds.get("requeued", 0),
                  "bytes": log.migrated_bytes, "downtime_s": round(log.migrated_downtime_s, 6),
                  # why work was disturbed: each preemption, and each move of running work, once
                  "causes": dict(sorted(log.causes.items()))},
    }
