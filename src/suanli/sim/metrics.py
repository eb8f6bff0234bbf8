"""Metrics of a simulated run: what was used over time, how long work waited.

``Recorder`` samples allocation (by tier and resource) and tenants' dominant
shares after every instant that changed something. ``summarize`` turns the
samples and the task records into the ``metrics`` object of ``result.json``
(documented in docs/simulation.md).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any, Iterable

import numpy as np

from suanli.model.fleet import TIERS
from suanli.scheduling.state import PlacementState


class Recorder:
    def __init__(self, state: PlacementState) -> None:
        self.state = state
        fleet = state.fleet
        self.capacity = np.zeros((len(TIERS), len(fleet.resources)), np.int64)
        np.add.at(self.capacity, fleet.node_tier, fleet.node_capacity)
        self.times: list[float] = []
        self.used: list[np.ndarray] = []  # [tier, resource] per sample
        self.shares: list[dict[str, float]] = []

    def sample(self, t: float) -> None:
        used = np.zeros_like(self.capacity)
        tier = self.state.fleet.node_tier
        for p in self.state.placements.values():
            used[tier[p.host.node]] += p.alloc.vec
        if self.times and self.times[-1] == t:
            self.used[-1], self.shares[-1] = used, self._shares()
            return
        self.times.append(t)
        self.used.append(used)
        self.shares.append(self._shares())

    def _shares(self) -> dict[str, float]:
        return {name: round(self.state.dominant_share(name) * t.weight, 6)
                for name, t in self.state.world.tenants.items()}

    def timeline(self) -> dict[str, Any]:
        """Allocation ratios over time, per tier and resource (for charts)."""
        keys = self.state.fleet.resource_keys
        out: dict[str, Any] = {"t": [round(t, 3) for t in self.times], "by_tier": {}}
        used = np.array(self.used) if self.used else np.zeros((0,) + self.capacity.shape)
        for ti, tier in enumerate(TIERS):
            if not self.capacity[ti].any():
                continue
            out["by_tier"][tier] = {
                key: [round(float(x), 4) for x in used[:, ti, ri] / self.capacity[ti, ri]]
                for ri, key in enumerate(keys) if self.capacity[ti, ri]
            }
        out["dominant_share"] = {name: [s[name] for s in self.shares] for name in self.state.world.tenants}
        return out

    def time_average(self, end: float) -> dict[str, dict[str, float]]:
        """Time-weighted mean allocation ratio per tier and resource up to ``end``."""
        if not self.times:
            return {}
        t = np.array(self.times + [max(end, self.times[-1])])
        weights = np.diff(t)
        total = weights.sum()
        used = np.array(self.used)
        keys = self.state.fleet.resource_keys
        out: dict[str, dict[str, float]] = {}
        for ti, tier in enumerate(TIERS):
            if not self.capacity[ti].any():
                continue
            out[tier] = {}
            for ri, key in enumerate(keys):
                if self.capacity[ti, ri]:
                    ratio = used[:, ti, ri] / self.capacity[ti, ri]
                    mean = float((ratio * weights).sum() / total) if total > 0 else float(ratio[-1])
                    out[tier][key] = round(mean, 6)
        return out


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
    for rec in sim.tasks.values():
        if rec.unit < 0:
            continue
        klass = sim.units[rec.unit].klass
        if rec.first_placed_at is not None:
            waits[klass].append(rec.first_placed_at - rec.submitted_at)
            tenant_waits[rec.tenant].append(rec.first_placed_at - rec.submitted_at)
        if rec.status == "finished" and rec.component.lifetime == "job" and rec.ended_at is not None:
            completion[klass].append(rec.ended_at - rec.submitted_at)
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
        "fairness": {
            "dominant_share": {n: round(s * state.world.tenants[n].weight, 6) for n, s in weighted.items()},
            "weighted_share": {n: round(s, 6) for n, s in weighted.items()},
            "jain_weighted": jain(weighted.values()),
        },
        "events": dict(sorted(kinds.items())),
        "moves": {"migrations": kinds.get("migrated", 0), "preemptions": kinds.get("preempted", 0),
                  "lost": kinds.get("lost", 0), "requeued": kinds.get("requeued", 0)},
    }
