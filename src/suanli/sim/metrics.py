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
from suanli.scheduling.state import PlacementState


class Recorder:
    """Samples, after each instant: what tasks use (by tier, per resource), the
    free share stranded on partly used shareable devices, tenants' dominant
    shares and ``near`` violations; per site only time integrals are kept, so
    memory does not grow with sites times samples."""

    def __init__(self, state: PlacementState, near_violations: Callable[[], int] | None = None) -> None:
        self.state = state
        fleet = state.fleet
        self.capacity = np.zeros((len(TIERS), len(fleet.resources)), np.int64)
        np.add.at(self.capacity, fleet.node_tier, fleet.node_capacity)
        self.site_capacity = np.zeros((len(fleet.sites), len(fleet.resources)), np.int64)
        np.add.at(self.site_capacity, fleet.node_site, fleet.node_capacity)
        self.near_violations = near_violations or (lambda: 0)
        self.times: list[float] = []
        self.used: list[np.ndarray] = []  # [tier, resource] per sample
        self.reserved: list[np.ndarray] = []  # [tier, resource]: held by hosts and claims
        self.fragmented: list[np.ndarray] = []  # [kind]: stranded free share / capacity
        self.shares: list[dict[str, float]] = []
        self.violations: list[int] = []
        self._site_area = np.zeros(self.site_capacity.shape)  # time integral of used, per site
        self._site_peak = np.zeros(self.site_capacity.shape)
        self._site_now = np.zeros(self.site_capacity.shape)

    def _used_by_node(self) -> tuple[np.ndarray, np.ndarray]:
        """[R, N] held on each node (hosts, default-VC tasks, claims), and the part
        tasks use: what is held minus what explicit VC hosts leave idle."""
        nodes = self.state.nodes
        held = nodes.view("cap") - nodes.view("free")
        idle = np.zeros(held.shape)
        for vc in self.state.vcs.values():
            if vc.default or vc.table.n == 0:
                continue
            t = vc.table
            for r in range(held.shape[0]):
                idle[r] += np.bincount(t.view("node"), weights=t.view("free")[r], minlength=nodes.n)
        return held, held - idle

    def sample(self, t: float) -> None:
        fleet = self.state.fleet
        held, used = self._used_by_node()
        tiers, sites = len(TIERS), len(fleet.sites)
        used_tier = np.stack([np.bincount(fleet.node_tier, weights=u, minlength=tiers) for u in used], axis=1)
        held_tier = np.stack([np.bincount(fleet.node_tier, weights=h, minlength=tiers) for h in held], axis=1)
        used_site = np.stack([np.bincount(fleet.node_site, weights=u, minlength=sites) for u in used], axis=1)
        if self.times and self.times[-1] == t:
            for lst in (self.used, self.reserved, self.fragmented, self.shares, self.violations):
                lst.pop()
            self.times.pop()
        elif self.times:
            self._site_area += self._site_now * (t - self.times[-1])
        self.times.append(t)
        self.used.append(used_tier)
        self.reserved.append(held_tier)
        self.fragmented.append(self._fragmented())
        self.shares.append(self._shares())
        self.violations.append(int(self.near_violations()))
        self._site_now = used_site
        self._site_peak = np.maximum(self._site_peak, used_site)

    def _fragmented(self) -> np.ndarray:
        """Per accelerator kind: free share on shareable devices that are partly
        used (neither empty nor full), over the kind's capacity."""
        nodes = self.state.nodes
        kinds = len(self.state.fleet.kinds)
        free, cap = nodes.view("dev_free"), nodes.view("dev_cap")
        partly = nodes.view("dev_shareable") & (cap == 1000) & (free > 0) & (free < 1000)
        stranded = np.bincount(nodes.view("dev_kind")[partly], weights=free[partly], minlength=kinds)
        total = self.capacity.sum(axis=0)[2:]
        return np.divide(stranded, total, out=np.zeros(kinds), where=total > 0)

    def _shares(self) -> dict[str, float]:
        return {name: round(self.state.dominant_share(name) * t.weight, 6)
                for name, t in self.state.world.tenants.items()}

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
        out["dominant_share"] = {name: [s[name] for s in self.shares] for name in self.state.world.tenants}
        return out

    def _weights(self, end: float) -> np.ndarray:
        t = np.array(self.times + [max(end, self.times[-1])])
        return np.diff(t)

    def time_average(self, end: float, series: str = "used") -> dict[str, dict[str, float]]:
        """Time-weighted mean ratio per tier and resource up to ``end``."""
        if not self.times:
            return {}
        weights = self._weights(end)
        total = weights.sum()
        arr = np.array(getattr(self, series))
        keys = self.state.fleet.resource_keys
        out: dict[str, dict[str, float]] = {}
        for ti, tier in enumerate(TIERS):
            if not self.capacity[ti].any():
                continue
            out[tier] = {}
            for ri, key in enumerate(keys):
                if self.capacity[ti, ri]:
                    ratio = arr[:, ti, ri] / self.capacity[ti, ri]
                    mean = float((ratio * weights).sum() / total) if total > 0 else float(ratio[-1])
                    out[tier][key] = round(mean, 6)
        return out

    def by_site(self, end: float) -> dict[str, dict[str, dict[str, float]]]:
        """Per site and resource: time-averaged and peak used / capacity."""
        if not self.times:
            return {}
        span = max(end, self.times[-1]) - self.times[0]
        area = self._site_area + self._site_now * (max(end, self.times[-1]) - self.times[-1])
        out = {}
        keys = self.state.fleet.resource_keys
        for si, site in enumerate(self.state.fleet.sites):
            cap = self.site_capacity[si]
            out[site.name] = {
                key: {"mean": round(float(area[si, r] / span / cap[r]) if span > 0 else float(self._site_now[si, r] / cap[r]), 6),
                      "peak": round(float(self._site_peak[si, r] / cap[r]), 6)}
                for r, key in enumerate(keys) if cap[r]
            }
        return out

    def fragmentation(self, end: float) -> dict[str, dict[str, float]]:
        if not self.times:
            return {}
        weights = self._weights(end)
        frag = np.array(self.fragmented)
        total = weights.sum()
        return {kind: {"mean": round(float((frag[:, k] * weights).sum() / total) if total > 0 else float(frag[-1, k]), 6),
                       "peak": round(float(frag[:, k].max()), 6), "at_end": round(float(frag[-1, k]), 6)}
                for k, kind in enumerate(self.state.fleet.kinds.names)}

    def near(self, end: float) -> dict[str, float]:
        if not self.times:
            return {"max_concurrent": 0, "at_end": 0, "task_seconds": 0.0}
        v = np.array(self.violations, dtype=float)
        return {"max_concurrent": int(v.max()), "at_end": int(v[-1]),
                "task_seconds": round(float((v * self._weights(end)).sum()), 3)}


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
    status = Counter(r.status for r in sim.tasks.values())
    waits: dict[str, list[float]] = defaultdict(list)
    tenant_waits: dict[str, list[float]] = defaultdict(list)
    completion: dict[str, list[float]] = defaultdict(list)
    tenant_completion: dict[str, list[float]] = defaultdict(list)
    for rec in sim.tasks.values():
        if rec.unit < 0:
            continue
        klass = sim.units[rec.unit].klass
        if rec.first_placed_at is not None:
            waits[klass].append(rec.first_placed_at - rec.submitted_at)
            tenant_waits[rec.tenant].append(rec.first_placed_at - rec.submitted_at)
        if rec.status == "finished" and rec.component.lifetime == "job" and rec.ended_at is not None:
            completion[klass].append(rec.ended_at - rec.submitted_at)
            tenant_completion[rec.tenant].append(rec.ended_at - rec.submitted_at)
    reasons: Counter = Counter()
    for rec in sim.tasks.values():
        if rec.status == "pending":
            reasons.update(rec.reasons.keys())
    state = sim.state
    weighted = {n: state.dominant_share(n) for n in state.world.tenants}
    kinds = Counter(e["kind"] for e in sim.events)
    return {
        "end_s": round(end, 6),
        "tasks": {"submitted": len(sim.tasks), **{k: status.get(k, 0) for k in ("finished", "running", "pending", "failed")}},
        "queueing_delay_s": {k: percentiles(v) for k, v in sorted(waits.items())},
        "completion_time_s": {k: percentiles(v) for k, v in sorted(completion.items())},
        "queueing_delay_by_tenant_s": {k: percentiles(v) for k, v in sorted(tenant_waits.items())},
        "pending_reasons": dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))),
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
                  "bytes": sum(int(e.get("bytes", 0)) for e in sim.events if e["kind"] == "migrated"),
                  "downtime_s": round(sum(float(e.get("downtime_s", 0.0)) for e in sim.events
                                          if e["kind"] == "migrated"), 6),
                  # why work was disturbed: each preemption, and each move of running work, once
                  "causes": dict(sorted(Counter(e["cause"] for e in sim.events if "cause" in e).items()))},
    }
