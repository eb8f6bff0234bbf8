"""Behaviour of the two layers, one rule per case, on small built worlds."""

from __future__ import annotations

from collections import Counter

from builders import app, component, gpu, link, node_group, site, tenant, vc, world
from conftest import schedule_json


def _where(result):
    return {p["task"]: p for p in result["placements"]}


def _why(result):
    return {u["task"]: u["reasons"] for u in result["unscheduled"]}


# ---------------------------------------------------------------- resources and devices


def test_fractional_shares_pack_onto_one_device(tmp_path):
    path = world(tmp_path, sites=[site("s", groups=[node_group(accelerators=[gpu(2)])])],
                 apps=[app(components=[component(replicas=4, accelerators=[{"kind": "gpu", "count": 0.25}])])])
    r = schedule_json(path)
    devices = Counter((p["devices"][0]["index"], p["devices"][0]["milli"]) for p in r["placements"])
    assert devices == {(0, 250): 4}  # best fit fills one device before opening another


def test_fraction_never_lands_on_a_non_shareable_device(tmp_path):
    path = world(tmp_path, sites=[site("s", groups=[node_group(accelerators=[gpu(2, shareable=False)])])],
                 apps=[app(components=[component(accelerators=[{"kind": "gpu", "count": 0.5}])])])
    assert _why(schedule_json(path)) == {"a/c/0": {"gpu not shareable": 1}}


def test_whole_devices_are_distinct_and_on_one_node(tmp_path):
    path = world(tmp_path, sites=[site("s", groups=[node_group(count=2, accelerators=[gpu(4)])])],
                 apps=[app(components=[component(replicas=2, accelerators=[{"kind": "gpu", "count": 3}])])])
    r = schedule_json(path)
    for p in r["placements"]:
        assert len({d["index"] for d in p["devices"]}) == 3
    assert len({p["node"] for p in r["placements"]}) == 2


def test_model_list_is_respected(tmp_path):
    groups = [node_group("a", accelerators=[gpu(1, model="A100")]), node_group("t", accelerators=[gpu(1, model="T4")])]
    path = world(tmp_path, sites=[site("s", groups=groups)],
                 apps=[app(components=[component(accelerators=[{"kind": "gpu", "model": ["T4"], "count": 1}])])])
    assert _where(schedule_json(path))["a/c/0"]["node"] == "s/t-0"


def test_cpu_work_keeps_off_gpu_nodes(tmp_path):
    groups = [node_group("g", accelerators=[gpu(8)]), node_group("cpu")]
    path = world(tmp_path, sites=[site("s", groups=groups)], apps=[app(components=[component(replicas=3)])])
    assert {p["node"] for p in schedule_json(path)["placements"]} == {"s/cpu-0"}


def test_arch_filter_and_reason(tmp_path):
    path = world(tmp_path, sites=[site("s", groups=[node_group(count=3)])],
                 apps=[app(components=[component(platform={"arch": ["aarch64"]})])])
    assert _why(schedule_json(path)) == {"a/c/0": {"arch mismatch": 3}}


def test_unknown_accelerator_kind_is_unscheduled_not_an_error(tmp_path):
    path = world(tmp_path, apps=[app(components=[component(accelerators=[{"kind": "tpu", "count": 1}])])])
    assert _why(schedule_json(path)) == {"a/c/0": {"no tpu": 1}}


# ---------------------------------------------------------------- gangs


def test_gang_stays_in_one_ib_domain_or_is_absent(tmp_path):
    groups = [node_group("x", count=3, fabrics={"ib": "ib-1"}), node_group("y", count=3, fabrics={"ib": "ib-2"})]
    gang = component("w", lifetime="job", cpu=16, gang={"size": 3}, coupling="ib")
    path = world(tmp_path, sites=[site("s", groups=groups)], apps=[app(components=[gang])])
    r = schedule_json(path)
    assert len({p["node"].rsplit("-", 1)[0] for p in r["placements"]}) == 1
    big = component("w", lifetime="job", cpu=16, gang={"size": 4}, coupling="ib")
    path = world(tmp_path, sites=[site("s", groups=groups)], apps=[app(components=[big])])
    r = schedule_json(path)
    assert r["placements"] == [] and len(r["unscheduled"]) == 4


def test_elastic_gang_takes_the_largest_size_that_fits(tmp_path):
    groups = [node_group("x", count=5, fabrics={"ib": "ib-1"})]
    gang = component("w", lifetime="job", cpu=16, gang={"size": 8, "minSize": 2}, coupling="ib")
    r = schedule_json(world(tmp_path, sites=[site("s", groups=groups)], apps=[app(components=[gang])]))
    assert len(r["placements"]) == 5 and len(r["unscheduled"]) == 3


def test_wan_gang_needs_mutually_reachable_sites(tmp_path):
    sites = [site("a", groups=[node_group(count=2)]), site("b", groups=[node_group(count=2)])]
    gang = component("w", lifetime="job", cpu=16, gang={"size": 4}, coupling="wan")
    r = schedule_json(world(tmp_path, sites=sites, apps=[app(components=[gang])]))
    assert r["placements"] == []  # no link: a and b cannot reach each other
    r = schedule_json(world(tmp_path, sites=sites, links=[link("a", "b")], apps=[app(components=[gang])]))
    assert len(r["placements"]) == 4


# ---------------------------------------------------------------- affinity


def test_site_affinity_places_the_group_as_a_unit(tmp_path):
    # site a has room for one member only; the group must go whole to b
    sites = [site("a", groups=[node_group(cpu=4)]), site("b", groups=[node_group(count=2, cpu=4)])]
    comps = [component("x", cpu=4, affinity={"group": "g", "scope": "site"}),
             component("y", cpu=4, affinity={"group": "g", "scope": "site"})]
    r = schedule_json(world(tmp_path, sites=sites, links=[link("a", "b")], apps=[app(components=comps)]))
    assert {p["site"] for p in r["placements"]} == {"b"} and len(r["placements"]) == 2


def test_node_affinity_and_node_anti_affinity(tmp_path):
    sites = [site("s", groups=[node_group(count=3, cpu=8)])]
    together = [component("x", cpu=2, affinity={"group": "g", "scope": "node"}),
                component("y", cpu=2, replicas=2, affinity={"group": "g", "scope": "node"})]
    r = schedule_json(world(tmp_path, sites=sites, apps=[app(components=together)]))
    assert len({p["node"] for p in r["placements"]}) == 1
    apart = [component("z", cpu=1, replicas=3, antiAffinity={"group": "h", "scope": "node"})]
    r = schedule_json(world(tmp_path, sites=sites, apps=[app(components=apart)]))
    assert len({p["node"] for p in r["placements"]}) == 3
    four = [component("z", cpu=1, replicas=4, antiAffinity={"group": "h", "scope": "node"})]
    r = schedule_json(world(tmp_path, sites=sites, apps=[app(components=four)]))
    assert len(r["placements"]) == 3 and "anti-affinity h (node)" in r["unscheduled"][0]["reasons"]


def test_site_anti_affinity(tmp_path):
    sites = [site("a", groups=[node_group(count=2)]), site("b", groups=[node_group(count=2)])]
    comps = [component(replicas=3, antiAffinity={"group": "h", "scope": "site"})]
    r = schedule_json(world(tmp_path, sites=sites, links=[link("a", "b")], apps=[app(components=comps)]))
    assert sorted(p["site"] for p in r["placements"]) == ["a", "b"]


# ---------------------------------------------------------------- near and data


def test_near_is_a_bound_and_a_preference(tmp_path):
    sites = [site("car", tier="device", groups=[node_group(cpu=2)]), site("edge", tier="edge"), site("cloud")]
    links = [link("car", "edge", rtt=8), link("edge", "cloud", rtt=20)]
    comps = [component(replicas=3, cpu=2, near={"site": "car", "maxRttMs": 10})]
    r = schedule_json(world(tmp_path, sites=sites, links=links, apps=[app(components=comps)]))
    sites_used = sorted(p["site"] for p in r["placements"])
    assert sites_used == ["car", "edge", "edge"]  # the car first, then within 10 ms; never the cloud


def test_data_must_be_reachable_and_nearer_is_better(tmp_path):
    sites = [site("a"), site("b"), site("island")]
    comps = [component(data={"source": "b"})]
    r = schedule_json(world(tmp_path, sites=sites, links=[link("a", "b", rtt=30)], apps=[app(components=comps)]))
    assert _where(r)["a/c/0"]["site"] == "b"


# ---------------------------------------------------------------- tenants, VCs, ordering


def test_allowed_sites_and_quota(tmp_path):
    sites = [site("cloud-1", groups=[node_group(count=4)]), site("edge-1", tier="edge", groups=[node_group(cpu=32)])]
    t = tenant(allowedSites=["edge-*"], quota={"cpu": 20})
    comps = [component(replicas=3, cpu=8)]
    r = schedule_json(world(tmp_path, sites=sites, links=[link("cloud-1", "edge-1")], tenants=[t],
                            apps=[app(components=comps)]))
    assert {p["site"] for p in r["placements"]} == {"edge-1"}
    assert len(r["placements"]) == 2  # 2 x 8 cores within the 20-core quota; the third would exceed it
    assert r["unscheduled"][0]["reasons"] == {"site not allowed for tenant": 4, "tenant t quota for cpu: 4 more needed": 1}


def test_fixed_host_group_with_selectors_and_coupling(tmp_path):
    groups = [node_group("x", count=2, fabrics={"ib": "i1"}, labels={"pool": "train"}),
              node_group("y", count=3, fabrics={"ib": "i2"}, labels={"pool": "train"}),
              node_group("z", count=4, fabrics={"ib": "i3"})]
    hg = {"name": "h", "count": 3, "resources": "whole", "coupling": "ib", "sites": {"labels": {"pool": "train"}}}
    r = schedule_json(world(tmp_path, sites=[site("s", groups=groups)], vcs=[vc(groups=[hg])],
                            apps=[app(components=[component(cpu=16)], virtualCluster="v")]))
    assert {h["node"].rsplit("-", 1)[0] for h in r["hosts"] if h["vc"] == "v"} == {"s/y"}
    assert _where(r)["a/c/0"]["vc"] == "v"


def test_elastic_group_grows_within_max(tmp_path):
    hg = {"name": "e", "min": 0, "max": 2, "resources": {"cpu": 8, "memory": "8Gi"}}
    comps = [component(replicas=5, cpu=4, memory="4Gi")]
    r = schedule_json(world(tmp_path, sites=[site("s", groups=[node_group(count=4)])], vcs=[vc(groups=[hg])],
                            apps=[app(components=comps, virtualCluster="v")]))
    assert len([h for h in r["hosts"] if h["vc"] == "v"]) == 2
    assert len(r["placements"]) == 4 and len(r["unscheduled"]) == 1


def test_vc_hosts_are_mutually_reachable(tmp_path):
    sites = [site("a", groups=[node_group(count=1)]), site("b", groups=[node_group(count=4)])]
    hg = {"name": "h", "count": 3, "resources": {"cpu": 8, "memory": "8Gi"}}
    r = schedule_json(world(tmp_path, sites=sites, vcs=[vc(groups=[hg])]))
    assert {h["site"] for h in r["hosts"]} == {"b"}


def test_higher_priority_first_then_fair_share(tmp_path):
    """Across tenants, priority orders work as far as the admin's ceilings let it."""
    sites = [site("s", groups=[node_group(count=1, cpu=4)])]
    tenants = [tenant("p", weight=1, maxPriority=10), tenant("q", weight=1, maxPriority=10)]
    apps = [app("low", tenant="p", components=[component(cpu=4)], priority=1),
            app("high", tenant="q", components=[component(cpu=4)], priority=9)]
    r = schedule_json(world(tmp_path, sites=sites, tenants=tenants, apps=apps))
    assert [p["task"] for p in r["placements"]] == ["high/c/0"]


def test_without_ceilings_tenants_are_peers_and_priority_orders_only_their_own_work(tmp_path):
    sites = [site("s", groups=[node_group(count=2, cpu=4)])]
    tenants = [tenant("p", weight=1), tenant("q", weight=1)]
    apps = [app("p-low", tenant="p", components=[component(cpu=4)], priority=1),
            app("p-high", tenant="p", components=[component(cpu=4)], priority=5),
            app("q-high", tenant="q", components=[component(cpu=4)], priority=9)]
    r = schedule_json(world(tmp_path, sites=sites, tenants=tenants, apps=apps))
    # q's 9 counts for nothing against p: one node each by fair share, and p's 5 before its own 1
    assert sorted(p["task"] for p in r["placements"]) == ["p-high/c/0", "q-high/c/0"]


def test_equal_priority_serves_the_tenant_below_its_share(tmp_path):
    sites = [site("s", groups=[node_group(count=4, cpu=4)])]
    tenants = [tenant("p", weight=1), tenant("q", weight=1)]
    apps = [app("first", tenant="p", components=[component(cpu=4, replicas=4)]),
            app("second", tenant="q", components=[component(cpu=4, replicas=4)])]
    r = schedule_json(world(tmp_path, sites=sites, tenants=tenants, apps=apps))
    assert Counter(p["tenant"] for p in r["placements"]) == {"p": 2, "q": 2}


def test_same_seed_same_result_and_seed_changes_ties(tmp_path):
    path = world(tmp_path, sites=[site("s", groups=[node_group(count=50)])], apps=[app(components=[component(replicas=1)])])
    assert schedule_json(path, seed=1) == schedule_json(path, seed=1)
    nodes = {schedule_json(path, seed=s)["placements"][0]["node"] for s in range(8)}
    assert len(nodes) > 1  # equal candidates: the seeded tie-break spreads choices


# ---------------------------------------------------------------- gangs against their tenant's quota


def _gang_world(tmp_path, nodes, quota_gpus, size, least, coupling):
    g = node_group("h100", count=nodes, cpu=64, memory="512Gi", accelerators=[gpu(8, "H100")], fabrics={"ib": "ib-1"})
    gang = {"size": size} if least is None else {"size": size, "minSize": least}
    comp = component("w", lifetime="job", cpu=8, memory="64Gi", accelerators=[{"kind": "gpu", "count": 8}],
                     gang=gang, **({"coupling": coupling} if coupling else {}))
    return world(tmp_path, sites=[site("cloud-a", groups=[g])], tenants=[tenant(quota={"gpu": quota_gpus})],
                 apps=[app("train", components=[comp])])


def test_gangs_are_sized_by_their_tenants_quota(tmp_path):
    """A gang of 8-GPU members against a GPU quota: an elastic gang is placed at
    the largest size that capacity, its minimum and the quota all allow; a gang
    the quota cannot hold is reported with the quota's gap, not the fabric's."""
    cases = [(nodes, q, size, least, coupling)
             for nodes, q, size, least in [(10, 40, 8, 2), (10, 8, 8, 2), (10, 40, 8, None), (5, 400, 8, 2),
                                           (10, 64, 8, None), (3, 40, 8, 2), (10, 4, 4, 1), (10, 20, 6, 3), (10, 24, 6, 2)]
             for coupling in ("ib", None)]
    shrunk = by_quota = 0
    for i, (nodes, q, size, least, coupling) in enumerate(cases):
        (tmp_path / str(i)).mkdir()
        r = schedule_json(_gang_world(tmp_path / str(i), nodes, q, size, least, coupling))
        by_cap, by_q = min(size, nodes), q // 8
        expect = min(by_cap, by_q)
        if expect < (size if least is None else least):
            expect = 0
        assert len(r["placements"]) == expect, (nodes, q, size, least, coupling, r["unscheduled"][:1])
        left = [u["reasons"] for u in r["unscheduled"]]
        assert len(left) == size - expect
        if by_q < by_cap and left:  # the quota binds: named, with the gap for the whole gang (or its minimum)
            need = size if expect else (size if least is None else least)
            gap = need * 8 - q
            assert all(f"tenant t quota for gpu: {gap} more needed" in reasons for reasons in left), left
            assert not any("fit in one" in k for reasons in left for k in reasons), left
            by_quota += 1
            shrunk += 0 < expect < size
    assert by_quota >= 6 and shrunk >= 3  # the cases exercise the quota bound, shrinking and refusing


# ---------------------------------------------------------------- near as a preference, sites of a component


def _car_drone_edge(tmp_path, comps):
    sites = [site("car-03", tier="device", groups=[node_group("soc", cpu=4, memory="8Gi", arch="aarch64")]),
             site("drone-1", tier="device", groups=[node_group("soc", cpu=4, memory="8Gi", arch="aarch64")]),
             site("edge-1", tier="edge", groups=[node_group(count=2, cpu=16)])]
    links = [link("car-03", "edge-1", rtt=8), link("drone-1", "car-03", rtt=23)]
    return world(tmp_path, sites=sites, links=links, apps=[app("media", components=comps)])


def test_near_without_a_bound_prefers_the_nearer_place_over_a_fuller_one(tmp_path):
    """The car is full; the drone 23 ms away has exactly the room left (the
    best packing), the edge 8 ms away is nearly empty: the edge wins."""
    comps = [component("fill", cpu=4, near={"site": "car-03", "maxRttMs": 0.2}),
             component("dfill", cpu=3, memory="6Gi", near={"site": "drone-1", "maxRttMs": 0.2}),
             component("m", cpu=1, near={"site": "car-03"})]
    where = _where(schedule_json(_car_drone_edge(tmp_path, comps)))
    assert where["media/fill/0"]["site"] == "car-03" and where["media/dfill/0"]["site"] == "drone-1"
    assert where["media/m/0"]["site"] == "edge-1"


def test_a_components_sites_selector_limits_where_its_tasks_go(tmp_path):
    comps = [component("d", cpu=1, sites={"tier": ["device"]}, replicas=2),
             component("e", cpu=1, sites={"names": ["edge-*"]}),
             component("x", cpu=8, sites={"tier": ["device"]})]
    r = schedule_json(_car_drone_edge(tmp_path, comps))
    where = _where(r)
    assert {where[f"media/d/{i}"]["site"] for i in range(2)} <= {"car-03", "drone-1"}
    assert where["media/e/0"]["site"] == "edge-1"
    left = {u["task"]: u for u in r["unscheduled"]}
    assert set(left) == {"media/x/0"}  # 8 cores: only the edge has them, and it is not a device
    assert left["media/x/0"]["reasons"]["tier not selected"] == 2


def test_a_components_selector_that_nothing_matches_is_reported(tmp_path):
    from suanli.spec.problems import SpecError
    from suanli.spec.build import load_world

    comps = [component("d", cpu=1, sites={"tier": ["cloud"]}), component("n", cpu=1, sites={"names": ["core-*"]})]
    path = _car_drone_edge(tmp_path, comps)
    try:
        load_world([path])
        raise AssertionError("a names pattern that matches no site must be an error")
    except SpecError as exc:
        assert [(p.path, p.warning) for p in exc.problems] == [("spec.components[1].sites.names[0]", False)], exc
    comps = [component("d", cpu=1, sites={"tier": ["cloud"]})]
    world_ = load_world([_car_drone_edge(tmp_path, comps)])
    assert [(p.path, "no site or node group has tier 'cloud'" in p.message) for p in world_.warnings] == \
        [("spec.components[0].sites", True)]


def test_scores_read_the_same_whether_inverse_capacities_are_kept_or_computed(examples, monkeypatch):
    """A table past ``INVERSE_KEPT_ROWS`` rows computes 1 / capacity for the
    rows a score reads instead of keeping the column. A static pass on a
    fleet of unlike nodes (the packing score decides there) and the city's
    hour (its batches near each car, its moves to edges and clouds) come out
    the same either way."""
    import json
    from pathlib import Path

    import numpy as np

    import suanli.scheduling.table as table_module
    from suanli.output import outcome_json
    from suanli.scheduling.static import schedule
    from suanli.sim.simulation import Simulation
    from suanli.spec.build import load_world

    city = Path(__file__).resolve().parents[1] / "examples" / "city-autodrive.yaml"

    def both() -> tuple[str, list]:
        static = load_world([examples / "city-fleet.yaml", examples / "tenants.yaml",
                             examples / "static-heterogeneous.yaml"])
        sim = Simulation(load_world([city], {"cars": "300"}), seed=4, until=3600.0)
        sim.run()
        return json.dumps(outcome_json(schedule(static, 0))), list(sim.events)

    kept = both()
    # the values themselves, row by row, for gathers, slices and resource ranges of a table of unlike nodes
    table = schedule(load_world([examples / "city-fleet.yaml", examples / "tenants.yaml"]), 0).state.nodes
    rng = np.random.default_rng(2)
    whole = table.inverse_capacity()[:, :table.n]
    assert len({tuple(c) for c in whole.T.tolist()}) > 3  # capacities differ from row to row
    for limit in (table_module.INVERSE_KEPT_ROWS, 0):
        monkeypatch.setattr(table_module, "INVERSE_KEPT_ROWS", limit)
        for at in (slice(0, table.n), np.sort(rng.choice(table.n, 40, replace=False)), rng.integers(table.n, size=9)):
            for sel in (None, slice(0, 2), slice(1, 3)):
                want = whole[:, at] if sel is None else whole[sel][:, at]
                assert table.inverse_of(at, sel).tolist() == want.tolist()
    computed = []
    real = table_module.CandidateTable.inverse_of

    def counted(self, at, sel=None):
        computed.append(self.n)
        return real(self, at, sel)

    monkeypatch.setattr(table_module, "INVERSE_KEPT_ROWS", 0)
    monkeypatch.setattr(table_module.CandidateTable, "inverse_of", counted)
    assert both() == kept
    assert len(computed) > 100  # the scores read it, computed every time
    assert sum(e["kind"] == "migrated" for e in kept[1]) > 0
