"""The recorder's incremental figures against a plain recomputation.

``Recorder`` keeps per-node figures up to date from the tables' change logs
and integrates totals over time. Here a reference recomputes, after every
instant, what is held, used (held minus what explicit VC hosts leave idle)
and stranded, node by node from the whole tables, and integrates the same way;
time averages, per-site means and peaks, fragmentation and near violations
must agree, on the examples (VCs, hosts added and removed, moves) and a
dynamic variant.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from suanli.model.fleet import TIERS
from suanli.sim.simulation import Simulation
from suanli.spec.build import load_world

EXAMPLES = Path(__file__).resolve().parents[2] / "shared" / "examples"


class Reference:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.samples: list[tuple[float, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]] = []

    def __call__(self, t: float) -> None:
        state, fleet = self.sim.state, self.sim.state.fleet
        nodes = state.nodes
        held = (nodes.view("cap") - nodes.view("free")).astype(float)
        idle = np.zeros(held.shape)
        for vc in state.vcs.values():
            if vc.default or vc.table.n == 0:
                continue
            tb = vc.table
            for r in range(held.shape[0]):
                idle[r] += np.bincount(tb.view("node"), weights=tb.view("free")[r], minlength=nodes.n)
        used = held - idle
        tiers, sites = len(TIERS), len(fleet.sites)
        used_tier = np.stack([np.bincount(fleet.node_tier, weights=u, minlength=tiers) for u in used], axis=1)
        held_tier = np.stack([np.bincount(fleet.node_tier, weights=h, minlength=tiers) for h in held], axis=1)
        used_site = np.stack([np.bincount(fleet.node_site, weights=u, minlength=sites) for u in used], axis=1)
        free, cap = nodes.view("dev_free"), nodes.view("dev_cap")
        partly = nodes.view("dev_shareable") & (cap == 1000) & (free > 0) & (free < 1000)
        stranded = np.bincount(nodes.view("dev_kind")[partly], weights=free[partly], minlength=len(fleet.kinds))
        if self.samples and self.samples[-1][0] == t:
            self.samples.pop()
        self.samples.append((t, used_tier, held_tier, used_site, stranded, self.beyond()))
        assert self.sim._near_violations() == self.samples[-1][5], t  # kept as things change: the same count

    def beyond(self) -> int:
        """Running tasks farther from their near site than their bound, counted afresh."""
        sim = self.sim
        fleet, state = sim.world.fleet, sim.state
        count = 0
        for task, rec in sim.view.tasks.items():
            comp, p = rec.component, state.placements.get(task)
            if p is None or comp is None or comp.near is None or comp.near.max_rtt_ms is None:
                continue
            rtt = fleet.network.rtt(int(fleet.node_site[p.host.node]), fleet.site_index[comp.near.site])
            count += rtt > comp.near.max_rtt_ms
        return count


def run(path: Path, until: float | None = None):
    world = load_world([path])
    holder: list[Reference] = []
    sim = Simulation(world, seed=7, until=until, on_instant=lambda t: holder[0](t))
    holder.append(Reference(sim))
    end = sim.run()
    holder[0](end)
    return sim, holder[0], end


def vc_scenario(tmp_path: Path) -> Path:
    """Explicit VCs (a fixed and an elastic group, with idle room), jobs coming and
    going on them and on the default VC, a node drained."""
    from builders import app, component, gpu, node_group, site, vc
    from test_dynamics import scenario

    pool = {"name": "pool", "min": 1, "max": 4, "resources": {"cpu": 8, "memory": "16Gi"}}
    fixed = {"name": "f", "count": 2, "resources": {"cpu": 6, "memory": "8Gi"}}
    jobs = component("j", lifetime="job", replicas=5, cpu=4, memory="4Gi", duration="10m")
    svc = component("s", replicas=2, cpu=2, accelerators=[{"kind": "gpu", "count": 0.25}])
    later = component("k", lifetime="job", replicas=3, cpu=3, memory="2Gi", duration="25m")
    path = scenario(tmp_path, [site("s", groups=[node_group(count=4, cpu=8), node_group("g", count=2, cpu=16,
                                                                                      accelerators=[gpu(2)])])],
                    [app("w", components=[jobs], virtualCluster="v"), app("x", components=[svc]),
                     app("y", components=[later], virtualCluster="u")],
                    vcs=[vc("v", groups=[pool], autoscale={"scaleDownAfter": "5m"}), vc("u", groups=[fixed])],
                    arrivals=[{"at": "20m", "app": "y"}],
                    events=[{"at": "40m", "kind": "nodeDrain", "node": "s/n-3"}])
    return path


MOVING = """
apiVersion: suanli/v1
kind: Fleet
metadata: {name: f}
spec:
  sites:
    - {name: cloud-0, tier: cloud, nodeGroups: [{name: n, count: 4, arch: x86_64, cpu: 64, memory: 256Gi}]}
    - {name: edge-0, tier: edge, nodeGroups: [{name: n, count: 2, arch: x86_64, cpu: 32, memory: 64Gi}]}
    - {name: edge-1, tier: edge, nodeGroups: [{name: n, count: 2, arch: x86_64, cpu: 32, memory: 64Gi}]}
    - {name: edge-2, tier: edge, nodeGroups: [{name: n, count: 2, arch: x86_64, cpu: 32, memory: 64Gi}]}
  links:
    - {between: [edge-0, cloud-0], rttMs: 10, bandwidth: 10Gbps}
    - {between: [edge-1, cloud-0], rttMs: 10, bandwidth: 10Gbps}
    - {between: [edge-2, cloud-0], rttMs: 10, bandwidth: 10Gbps}
  populations:
    - name: cars
      count: 24
      sites: car-##
      nodeGroups: [{name: soc, count: 1, arch: aarch64, cpu: 4, memory: 8Gi}]
      attach: {to: {tier: [edge]}, rttMs: uniform(1, 4), bandwidth: 1Gbps}
      private: true
---
apiVersion: suanli/v1
kind: Tenant
metadata: {name: t}
spec: {}
---
apiVersion: suanli/v1
kind: Application
metadata: {name: assist, tenant: t}
spec:
  each: cars
  components:
    - {name: a, lifetime: service, resources: {cpu: 8, memory: 4Gi}, near: {site: "{site}", maxRttMs: 8}}
    - {name: b, lifetime: service, resources: {cpu: 1, memory: 1Gi}, near: {site: "{site}", maxRttMs: 30}}
---
apiVersion: suanli/v1
kind: Scenario
metadata: {name: moving}
spec:
  seed: 3
  until: 3h
  mobility:
    - {population: cars, handovers: 2/1h, offline: 1/4h, offlineFor: exponential(10m)}
  events:
    - {at: 50m, kind: linkDown, between: [edge-1, cloud-0]}
    - {at: 80m, kind: linkUp, between: [edge-1, cloud-0]}
  policy:
    rescheduling: {enabled: %s}
"""


@pytest.mark.parametrize("example", ["autodrive.yaml", "ai-hpc-mix.yaml", "vcs", "moving", "moving, left"])
def test_incremental_figures_equal_a_recomputation(example, tmp_path):
    if example.startswith("moving"):  # devices handed over, offline, an edge cut off: bounds break
        path = tmp_path / "moving.yaml"
        path.write_text(MOVING % ("false" if "left" in example else "true"))
    else:
        path = vc_scenario(tmp_path) if example == "vcs" else EXAMPLES / example
    sim, ref, end = run(path, until=3 * 3600.0)
    if example == "vcs":  # the case is about idle room in explicit VC hosts
        assert any(not vc.default and vc.table.n for vc in sim.state.vcs.values())
    if example == "moving, left":  # not vacuous: work left beyond its bound, and counted
        assert max(s[5] for s in ref.samples) > 0
    rec = sim.recorder
    t = np.array([s[0] for s in ref.samples] + [max(end, ref.samples[-1][0])])
    w = np.diff(t)
    span = t[-1] - t[0]
    cap = rec.capacity
    for series, index in (("used", 1), ("reserved", 2)):
        arr = np.array([s[index] for s in ref.samples])
        mean = (arr * w[:, None, None]).sum(axis=0) / span
        got = rec.time_average(end, series)
        for ti, tier in enumerate(TIERS):
            for ri, key in enumerate(sim.state.fleet.resource_keys):
                if cap[ti, ri]:
                    assert got[tier][key] == pytest.approx(mean[ti, ri] / cap[ti, ri], abs=2e-6), (series, tier, key)
    site = np.array([s[3] for s in ref.samples])
    site_mean = (site * w[:, None, None]).sum(axis=0) / span
    by_site = rec.by_site(end)
    listed = sim.state.fleet.site_table.population_of < 0  # a population's sites are one entry
    site_capacity = rec.site_capacity
    for si, s in enumerate(sim.state.fleet.sites):
        if not listed[si]:
            continue
        for ri, key in enumerate(sim.state.fleet.resource_keys):
            c = site_capacity[si, ri]
            if c:
                assert by_site[s.name][key]["mean"] == pytest.approx(site_mean[si, ri] / c, abs=2e-6)
                assert by_site[s.name][key]["peak"] == pytest.approx(site[:, si, ri].max() / c, abs=2e-6)
    blocks = used = 0  # a population's sites: one entry, integrated as one (``metrics._SiteFigures``)
    for first, count, pattern in sim.state.fleet.site_table.names.blocks():
        rows = slice(first, first + count)
        used += bool(site[:, rows].any())
        for ri, key in enumerate(sim.state.fleet.resource_keys):
            c = site_capacity[rows, ri]
            if c.sum():
                blocks += 1
                assert by_site[str(pattern)][key]["mean"] == pytest.approx(site_mean[rows, ri].sum() / c.sum(),
                                                                           abs=2e-6)
                assert by_site[str(pattern)][key]["peak"] == pytest.approx(
                    (site[:, rows, ri].max(axis=0) / np.maximum(c, 1)).max(), abs=2e-6)
    if example.startswith("moving"):  # not vacuous: the devices are a population, and used
        assert blocks and used
    total = cap.sum(axis=0)[2:]
    frag = np.array([s[4] for s in ref.samples]) / np.where(total > 0, total, 1)
    got = rec.fragmentation(end)
    for k, kind in enumerate(sim.state.fleet.kinds.names):
        assert got[kind]["mean"] == pytest.approx((frag[:, k] * w).sum() / span, abs=2e-6)
        assert got[kind]["peak"] == pytest.approx(frag[:, k].max(), abs=2e-6)
        assert got[kind]["at_end"] == pytest.approx(frag[-1, k], abs=2e-6)
    v = np.array([s[5] for s in ref.samples], float)
    near = rec.near(end)
    assert near["max_concurrent"] == int(v.max()) and near["at_end"] == int(v[-1])
    assert near["task_seconds"] == pytest.approx((v * w).sum(), abs=1e-3)
    assert len(rec.times) <= rec.MAX_POINTS


def test_the_series_is_thinned_but_keeps_its_ends(monkeypatch):
    from suanli.sim import metrics

    monkeypatch.setattr(metrics.Recorder, "MAX_POINTS", 16)
    sim, ref, end = run(EXAMPLES / "ai-hpc-mix.yaml", until=3600.0)
    rec = sim.recorder
    assert len(ref.samples) > 16 >= len(rec.times)
    assert rec.times[0] == ref.samples[0][0] and rec.times[-1] == ref.samples[-1][0]
    assert rec.times == sorted(rec.times)


def test_site_figures_of_a_grown_fleet_carry_over_and_new_sites_start_at_the_growth():
    """A population's sites integrated as one, and the fleet grown by a listed
    site and a second population: what was integrated carries over; the new
    sites count from the growth on (a reference integrates site by site)."""
    from suanli.sim.metrics import _SiteFigures

    class Names:
        def __init__(self, listed, blocks):
            self._listed, self._blocks = listed, blocks

        def listed(self):
            return np.array(self._listed, np.int64)

        def blocks(self):
            return [(first, count, f"p{first}") for first, count in self._blocks]

    class Table:
        def __init__(self, listed, blocks):
            self.names = Names(listed, blocks)

    rng = np.random.default_rng(3)
    fig = _SiteFigures(Table([0, 1], [(2, 5)]), 7, 2, most=100)
    ref_now, ref_area = np.zeros((10, 2)), np.zeros((10, 2))
    t = 0.0
    fig.start(t)
    for step in range(40):
        if step == 20:  # a listed site and a population of two join
            fig = _SiteFigures(Table([0, 1, 7], [(2, 5), (8, 2)]), 10, 2, most=100, old=fig)
        n = 7 if step < 20 else 10
        t += float(rng.uniform(0.5, 3.0))
        sites = np.unique(rng.integers(0, n, 3))
        ref_area[:n] += ref_now[:n] * (t - last) if step else 0
        in_blocks = fig.integrate(sites, t)
        fig.now[sites] = rng.integers(0, 50, (sites.size, 2))
        ref_now[sites] = fig.now[sites]
        fig.changed(sites, in_blocks)
        last = t
    stop = t + 2.0
    ref_area += ref_now * (stop - last)
    for si in (0, 1, 7):
        np.testing.assert_allclose(fig.area_of(si, stop), ref_area[si], rtol=1e-12)
    np.testing.assert_allclose(fig.block_area(2, stop), ref_area[2:7].sum(axis=0), rtol=1e-12)
    np.testing.assert_allclose(fig.block_area(8, stop), ref_area[8:10].sum(axis=0), rtol=1e-12)
    assert ref_area[8:10].any() and ref_area[7].any()  # (the new sites were used)
