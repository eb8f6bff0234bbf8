"""The model built from documents: nodes, names, paths, fabrics, tasks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from builders import app, component, gpu, link, node_group, site, world
from suanli.model.fleet import Link, Site
from suanli.model.network import Network
from suanli.spec.build import load_world


def _net(n_sites, links, down=frozenset()):
    sites = [Site(i, f"s{i}", "cloud") for i in range(n_sites)]
    return Network.build(sites, [Link(a, b, rtt, bw) for a, b, rtt, bw in links], down)


@pytest.mark.parametrize(
    "links, a, b, rtt, bw",
    [
        ([(0, 1, 5, 100)], 0, 1, 5, 100),
        ([(0, 1, 5, 100), (1, 2, 7, 40)], 0, 2, 12, 40),
        # the lower-rtt path wins even when narrower
        ([(0, 2, 30, 1000), (0, 1, 5, 100), (1, 2, 7, 40)], 0, 2, 12, 40),
        # equal rtt: the wider path
        ([(0, 2, 12, 10), (0, 1, 5, 100), (1, 2, 7, 40)], 0, 2, 12, 40),
        ([(0, 1, 5, 100)], 0, 2, math.inf, 0),
    ],
    ids=["direct", "two-hops-bottleneck", "lowest-rtt-path", "tie-wider", "unreachable"],
)
def test_paths_have_summed_rtt_and_bottleneck_bandwidth(links, a, b, rtt, bw):
    net = _net(3, links)
    assert net.rtt(a, b) == rtt and net.rtt(b, a) == rtt
    assert net.bandwidth(a, b) == bw


def test_intra_site_rtt_on_the_diagonal_and_components():
    net = _net(4, [(0, 1, 5, 100), (2, 3, 1, 10)])
    assert np.allclose([net.rtt(s, s) for s in range(4)], 0.2)
    assert net.component[0] == net.component[1] != net.component[2] == net.component[3]


def test_a_link_down_is_left_out():
    net = _net(3, [(0, 1, 5, 100), (1, 2, 5, 100)], down=frozenset({frozenset((1, 2))}))
    assert not net.reachable(0, 2) and not np.isfinite(net.rtt(0, 2))


def test_nodes_are_named_site_group_index(tmp_path):
    sites = [site("edge-1", groups=[node_group("t4", count=3, accelerators=[gpu(2, model="T4")]), node_group("cpu", count=2)])]
    w = load_world([world(tmp_path, sites=sites)])
    f = w.fleet
    names = [f.node_name(i) for i in range(f.n_nodes)]
    assert names == ["edge-1/t4-0", "edge-1/t4-1", "edge-1/t4-2", "edge-1/cpu-0", "edge-1/cpu-1"]
    assert f.node_by_name("edge-1/cpu-1") == 4
    assert f.resource_keys == ("cpu_milli", "mem_mib", "gpu_milli")
    assert f.node_capacity[0].tolist() == [16000, 65536, 2000]
    # every node has an ethernet domain: its site's, by default
    assert len(set(f.node_fabric[:, 3].tolist())) == 1


def test_fabric_domains_are_shared_by_name_across_sites(tmp_path):
    sites = [site("a", groups=[node_group(fabrics={"roce": "r1"})]), site("b", groups=[node_group(fabrics={"roce": "r1"})])]
    f = load_world([world(tmp_path, sites=sites, links=[link("a", "b")])]).fleet
    assert f.node_fabric[0, 2] == f.node_fabric[1, 2] >= 0
    assert f.node_fabric[0, 0] == -1  # no coherent domain


def test_components_expand_into_named_tasks(tmp_path):
    comps = [component("w", lifetime="job", gang={"size": 3, "minSize": 2}, coupling="ib"),
             component("s", replicas=2, priority=7)]
    w = load_world([world(tmp_path, apps=[app("x", components=comps, priority=3, preemptible=False)])])
    (a,) = w.apps
    assert a.vc == "t/default" and w.vcs["t/default"].default
    gang, svc = a.components
    assert [gang.task_name(i) for i in range(gang.size)] == ["x/w/0", "x/w/1", "x/w/2"]
    assert (gang.gang, gang.min_size, gang.coupling, gang.priority) == (True, 2, "ib", 3)
    assert (svc.size, svc.priority, svc.preemptible) == (2, 7, False)


def test_sites_able_is_each_resource_of_some_node_of_the_site(examples):
    """``Fleet.sites_able_ignoring_private`` (a site passes when, for each
    resource asked, one of its nodes has that much: its largest node's
    capacity, read without a column of them) equals the per-site maxima's
    test, on a fleet of multi-node sites and one of single-node devices,
    for vectors that some, all and no sites hold."""
    from pathlib import Path

    city = Path(__file__).resolve().parents[1] / "examples" / "city-autodrive.yaml"
    rng = np.random.default_rng(5)
    seen = {"some": 0, "none": 0, "all": 0}
    for fleet in (load_world([city], {"cars": "50"}).fleet,
                  load_world([examples / "city-fleet.yaml", examples / "tenants.yaml"]).fleet):
        most = np.zeros((len(fleet.site_table), len(fleet.resources)), np.int64)
        np.maximum.at(most, fleet.node_site, fleet.node_capacity)
        caps = fleet.node_capacity
        vecs = [caps[i] for i in rng.integers(len(caps), size=20)]
        vecs += [np.zeros(len(fleet.resources), np.int64), caps.max(axis=0) + 1, caps.max(axis=0)]
        vecs += [(caps[i] * rng.uniform(0.2, 1.3, caps.shape[1])).astype(np.int64) for i in range(0, len(caps), 7)]
        for vec in vecs:
            got = fleet.sites_able_ignoring_private(vec)
            assert got.tolist() == (most >= vec).all(axis=1).tolist()
            seen["all" if got.all() else "none" if not got.any() else "some"] += 1
    assert min(seen.values()) > 0, seen  # every outcome was compared
