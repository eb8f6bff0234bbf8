"""Benchmark: link events, handovers and neighbourhoods on a network of a million devices.

100 cloud sites in a full mesh, 1,000 edge sites each linked to one or two
clouds, and ``--devices`` single-node device sites each linked to one edge
(about 1,000 per edge; with ``--multi`` a tenth also to a second edge), built
directly as arrays. Measures building the network; a link down between an
edge carrying about 1,000 devices and one of its clouds (an edge on two
clouds, whose devices go round by the other, and an edge on one, cut off),
until 10 columns to cloud sites are read again; the link back up; 1,000
handovers of a device to another edge (``attach``); and ``within(device,
10 ms)``. Every result is checked against a network built afresh from the
links of the moment, and ``within`` against the thresholded column. Prints JSON.

    .venv/bin/python bench/bench_network_events.py [--devices 1000000] [--multi] [--seed 42]
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import numpy as np

from suanli.model.network import Network

CLOUDS, EDGES, COLUMNS = 100, 1_000, 10


def make_world(n_devices: int, multi: bool, seed: int):
    """(intra, a, b, rtt, bw, edge_clouds, device_links): the links as arrays;
    ``edge_clouds[e]`` the clouds of edge ``e`` (-1: none second) and
    ``device_links[d]`` the indices of device ``d``'s links (-1: none second)."""
    rng = np.random.default_rng(seed)
    c = np.arange(CLOUDS)
    ca, cb = np.triu_indices(CLOUDS, 1)
    e = CLOUDS + np.arange(EDGES)
    home = rng.integers(0, CLOUDS, EDGES)
    second = (home + rng.integers(1, CLOUDS, EDGES)) % CLOUDS
    two = rng.random(EDGES) < 0.5
    dev = CLOUDS + EDGES + np.arange(n_devices)
    on = e[rng.integers(0, EDGES, n_devices)]
    many = np.flatnonzero(rng.random(n_devices) < 0.1) if multi else np.zeros(0, np.int64)
    other = CLOUDS + (on[many] - CLOUDS + rng.integers(1, EDGES, len(many))) % EDGES
    a = np.concatenate([c[ca], e, e[two], dev, dev[many]])
    b = np.concatenate([c[cb], home, second[two], on, other])
    rtt = np.concatenate([rng.uniform(10, 60, len(ca)), rng.uniform(5, 15, EDGES + two.sum()),
                          rng.uniform(1, 4, n_devices + len(many))]).round(2)
    bw = np.concatenate([np.full(len(ca), 1e5), rng.choice([1e3, 1e4], EDGES + two.sum()),
                         rng.choice([50.0, 100.0, 200.0], n_devices + len(many))])
    intra = np.concatenate([np.full(CLOUDS, 0.1), np.full(EDGES, 0.2), np.full(n_devices, 0.5)])
    edge_clouds = np.stack([home, np.where(two, second, -1)], axis=1)
    first = len(ca) + EDGES + two.sum()
    device_links = np.full((n_devices, 2), -1, np.int64)
    device_links[:, 0] = first + np.arange(n_devices)
    device_links[many, 1] = first + n_devices + np.arange(len(many))
    return intra, a, b, rtt, bw, edge_clouds, device_links


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1e3, 3)


def _same(net: Network, ref: Network, sites) -> bool:
    return all(np.array_equal(net.rtt_to(s), ref.rtt_to(s)) and np.array_equal(net.bandwidth_to(s), ref.bandwidth_to(s))
               for s in sites)


def _link_event(net, world, clouds, edge, cloud, base_rtt) -> dict:
    """``edge``–``cloud`` down, the columns to ``clouds`` read again for the
    edge's devices, checked; then up again."""
    intra, a, b, rtt, bw = world[:5]
    devs = net.within(edge, 1e9)[0]
    devs = devs[net.leaf[devs] & (net.parent[devs] == edge)]
    t0 = time.perf_counter()
    assert net.link_down(edge, cloud)
    call = _ms(t0)
    got = [(net.rtt_to(c)[devs], net.bandwidth_to(c)[devs]) for c in clouds]
    until = _ms(t0)
    ref = Network.from_arrays(intra, a, b, rtt, bw, np.array([[edge, cloud]]))
    assert _same(net, ref, clouds) and np.array_equal(net.component, ref.component)
    moved = int(sum((g[0] != base_rtt[i][devs]).sum() for i, g in enumerate(got)))
    assert moved > 0  # the devices' paths to the clouds did change
    unreachable = int(np.isinf(got[0][0]).sum())
    t0 = time.perf_counter()
    assert net.link_up(edge, cloud)
    up_call = _ms(t0)
    back = [net.rtt_to(c) for c in clouds]
    up_until = _ms(t0)
    assert all(np.array_equal(back[i], base_rtt[i]) for i in range(len(clouds)))
    return {"edge": int(edge), "devices": len(devs),
            "down_call_ms": call, f"down_until_{len(clouds)}_columns_ms": until,
            "device_paths_changed": moved, "devices_unreachable": unreachable,
            "up_call_ms": up_call, f"up_until_{len(clouds)}_columns_ms": up_until}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--devices", type=int, default=1_000_000)
    ap.add_argument("--multi", action="store_true", help="a tenth of the devices on a second edge too")
    ap.add_argument("--handovers", type=int, default=1_000)
    ap.add_argument("--within", type=int, default=1_000, help="within() calls timed")
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed + 1)
    tiny = make_world(50, args.multi, 0)  # the compiled code loaded before any timing
    warm = Network.from_arrays(*tiny[:5])
    warm.rtt_to(0), warm.within(CLOUDS + EDGES, 10.0), warm.link_down(0, 1), warm.rtt_to(0), warm.link_up(0, 1)

    world = make_world(args.devices, args.multi, args.seed)
    intra, a, b, rtt, bw, edge_clouds, device_links = world
    t0 = time.perf_counter()
    net = Network.from_arrays(intra, a, b, rtt, bw)
    build_s = round(time.perf_counter() - t0, 3)
    out: dict = {"sites": len(intra), "links": len(a), "core_sites": len(net.core), "multi": args.multi,
                 "build_s": build_s}

    # an edge on two clouds and one on one, of about 1,000 devices each, whose
    # link to its first cloud is its shortest way there (multi-homed devices
    # may offer another); the columns read: those two clouds and 8 others
    kids = net._kids
    direct = rtt[CLOUDS * (CLOUDS - 1) // 2:][:EDGES]  # each edge's link to its first cloud
    chosen = {}
    for name, ok in (("link_two_clouds", edge_clouds[:, 1] >= 0), ("link_one_cloud", edge_clouds[:, 1] < 0)):
        cand = np.flatnonzero(ok & (direct < 7.0))
        chosen[name] = int(CLOUDS + cand[np.argmin(np.abs(kids[CLOUDS + cand] - args.devices / EDGES))])
    homes = [int(edge_clouds[e - CLOUDS, 0]) for e in chosen.values()]
    clouds = list(dict.fromkeys(homes + rng.permutation(CLOUDS).tolist()))[:COLUMNS]
    t0 = time.perf_counter()
    for c in clouds:
        net.rtt_to(c), net.bandwidth_to(c)
    out["column_ms"] = round(_ms(t0) / COLUMNS, 3)  # one computed afresh: a Dijkstra and every leaf
    base_rtt = [net.rtt_to(c).copy() for c in clouds]

    for (name, e), home in zip(chosen.items(), homes):
        out[name] = _link_event(net, world, clouds, e, home, base_rtt)
    assert out["link_two_clouds"]["devices_unreachable"] == 0
    if not args.multi:  # else devices on two edges keep it in touch
        assert out["link_one_cloud"]["devices_unreachable"] == out["link_one_cloud"]["devices"] > 0

    # handovers: a device to another edge (a multi-homed one to two others)
    b, rtt = b.copy(), rtt.copy()
    dev0 = CLOUDS + EDGES
    times: dict[str, list[float]] = {"single": [], "multi": []}
    movers = rng.choice(args.devices, args.handovers, replace=False)
    for d in movers.tolist():
        links = device_links[d][device_links[d] >= 0]
        to = CLOUDS + rng.choice(EDGES, len(links), replace=False)
        r = rng.uniform(1, 4, len(links)).round(2)
        t0 = time.perf_counter()
        net.attach(dev0 + d, to, r, np.full(len(links), 100.0))
        times["single" if len(links) == 1 else "multi"].append(time.perf_counter() - t0)
        a[links], b[links], rtt[links], bw[links] = dev0 + d, to, r, 100.0
    t0 = time.perf_counter()
    for c in clouds:
        net.rtt_to(c), net.bandwidth_to(c)
    after = _ms(t0)
    ref = Network.from_arrays(intra, a, b, rtt, bw)
    assert _same(net, ref, clouds + (dev0 + movers[:5]).tolist()) and np.array_equal(net.component, ref.component)
    moved = int(sum((net.rtt_to(c) != base_rtt[i]).sum() for i, c in enumerate(clouds)))
    assert moved > 0
    out["handover"] = {kind: {"count": len(t), "mean_us": round(1e6 * float(np.mean(t)), 1),
                              "p50_us": round(1e6 * float(np.median(t)), 1), "max_us": round(1e6 * float(np.max(t)), 1)}
                       for kind, t in times.items() if t}
    out["handover"][f"then_{COLUMNS}_columns_ms"] = after
    out["handover"]["column_entries_changed"] = moved

    # within(device, 10 ms)
    probe = dev0 + rng.choice(args.devices, args.within, replace=False)
    t0 = time.perf_counter()
    sizes = [len(net.within(int(d), 10.0)[0]) for d in probe]
    per = (time.perf_counter() - t0) / len(probe)
    for d in probe[:20].tolist():
        got, val = net.within(d, 10.0)
        col = ref.rtt_to(d)
        want = np.flatnonzero(col <= 10.0)
        assert np.array_equal(got, want) and np.array_equal(val, col[want])
    assert np.mean(sizes) > 1
    out["within_10ms"] = {"calls": len(probe), "mean_us": round(per * 1e6, 1),
                          "mean_sites": round(float(np.mean(sizes)), 1),
                          "max_sites": int(np.max(sizes))}
    out["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
