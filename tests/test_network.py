"""The on-demand network paths against the all-pairs Floyd–Warshall reference."""

from __future__ import annotations

import time

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from network_reference import all_pairs, matrices
from suanli.model.fleet import Link, Site
from suanli.model.network import Network


@st.composite
def graphs(draw, rtts):
    """Sites with random links: parallel ones, equal-rtt alternatives of other
    widths, separate parts, some links down."""
    n = draw(st.integers(1, 12))
    sites = [Site(i, f"s{i}", "cloud", intra_site_rtt_ms=draw(st.sampled_from([0.0, 0.2, 1.0]))) for i in range(n)]
    pair = st.tuples(st.integers(0, n - 1), st.integers(0, n - 1))
    raw = draw(st.lists(st.tuples(pair, rtts, st.sampled_from([1.0, 5.0, 10.0, 40.0, 100.0])), max_size=3 * n))
    links = [Link(a, b, r, bw) for (a, b), r, bw in raw]
    down = draw(st.sets(st.sampled_from([frozenset((ln.a, ln.b)) for ln in links]), max_size=2)) if links else set()
    return sites, links, frozenset(down)


def _compare(sites, links, down, exact_rtt: bool) -> dict[str, bool]:
    net = Network.build(sites, links, down)
    rtt, bw = matrices(net)
    ref_rtt, ref_bw, ref_comp = all_pairs(sites, links, down)
    assert np.array_equal(np.isinf(rtt), np.isinf(ref_rtt))
    if exact_rtt:
        assert np.array_equal(rtt, ref_rtt)
        assert np.array_equal(bw, ref_bw)
    else:  # sums taken in another order may differ in the last bits
        np.testing.assert_allclose(rtt, ref_rtt, rtol=1e-9, atol=0)
    assert np.array_equal(net.component, ref_comp)
    assert np.array_equal(np.stack([net.reachable_to(b) for b in range(len(sites))], axis=1), np.isfinite(ref_rtt))
    off = ~np.eye(len(sites), dtype=bool)
    up = [ln for ln in links if frozenset((ln.a, ln.b)) not in down and ln.a != ln.b]
    direct = np.zeros_like(off)
    for ln in up:
        direct[ln.a, ln.b] = direct[ln.b, ln.a] = True
    narrow = all_pairs(sites, links, down, wider=False)[1]
    return {
        "ties": bool((narrow[off] != ref_bw[off]).any()),
        "unreachable": bool(np.isinf(ref_rtt[off]).any()),
        "multi-hop": bool((np.isfinite(ref_rtt) & off & ~direct).any()),
        "parallel": len({frozenset((ln.a, ln.b)) for ln in up}) < len(up),
        "leaves": bool(net.leaf.any()),
        "down": bool(down),
    }


def test_paths_match_floyd_warshall_on_random_graphs():
    """Integer rtts: every sum is exact, so rtt and bandwidth match bit for bit."""
    seen: dict[str, int] = {}

    @settings(max_examples=300, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
    @given(graphs(st.integers(0, 6).map(float)))
    def check(g):
        for k, v in _compare(*g, exact_rtt=True).items():
            seen[k] = seen.get(k, 0) + v

    check()
    assert all(seen.get(k, 0) >= 10 for k in ("ties", "unreachable", "multi-hop", "parallel", "leaves", "down")), seen


def test_paths_match_floyd_warshall_with_fractional_rtts():
    @settings(max_examples=150, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
    @given(graphs(st.floats(0.0, 50.0, allow_nan=False)))
    def check(g):
        _compare(*g, exact_rtt=False)

    check()


def test_pairs_and_the_cache_bound():
    sites = [Site(i, f"s{i}", "edge") for i in range(50)]
    links = [Link(i, i + 1, 1.5, 10.0 + i) for i in range(49)] + [Link(0, 10, 3.0, 1.0)]
    ref_rtt, ref_bw, _ = all_pairs(sites, links)
    net = Network.build(sites, links, cache_bytes=3 * 2 * 8 * 50)  # room for three columns
    a = np.arange(50).repeat(50)
    b = np.tile(np.arange(50), 50)
    np.testing.assert_allclose(net.rtt(a, b), ref_rtt[a, b], rtol=1e-9)
    assert np.array_equal(net.bandwidth(a, b), ref_bw[a, b])
    assert net.rtt(3, 7) == ref_rtt[3, 7] and net.bandwidth(7, 3) == ref_bw[7, 3]
    assert len(net._cache) <= 3
    assert not net.rtt_to(5).flags.writeable


def test_a_million_devices_cost_columns_not_squares():
    """One cloud, 100 edges in a ring, a million single-link devices: building
    and a column per device stay far from S×S (8 TB here)."""
    n_dev, edges = 1_000_000, 100
    t0 = time.perf_counter()
    e = 1 + np.arange(edges)
    dev = 1 + edges + np.arange(n_dev)
    a = np.concatenate([np.zeros(edges, np.int64), e, dev])
    b = np.concatenate([e, np.roll(e, 1), 1 + (dev % edges)])
    rtt = np.concatenate([np.full(edges, 20.0), np.full(edges, 5.0), np.full(n_dev, 2.0)])
    bw = np.concatenate([np.full(edges, 1e4), np.full(edges, 1e3), np.full(n_dev, 100.0)])
    net = Network(np.full(1 + edges + n_dev, 0.2), a, b, rtt, bw)
    col = net.rtt_to(int(dev[0]))
    assert col[dev[0]] == 0.2 and col[dev[edges]] == 4.0 and col[0] == 22.0
    assert net.bandwidth_to(int(dev[0]))[dev[1]] == 100.0 and len(net.core) == 1 + edges
    assert time.perf_counter() - t0 < 10
