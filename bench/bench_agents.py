"""What a node registering itself costs the scheduler: the fleet grown in
place (``config.grown_fleet`` + ``Simulation.grow_fleet``) by a batch of
agents' nodes, on fleets that already have many, with a population of
devices beside them (whose devices come and go as a flag of their site).

    python bench/bench_agents.py [--nodes 1000,10000] [--batch 1,100] [--devices 100000]
"""

from __future__ import annotations

import argparse
import time

from suanli.server.config import documents, grown_fleet
from suanli.sim.simulation import Simulation
from suanli.spec.build import build_world


def world(devices: int):
    fleet = {"apiVersion": "suanli/v1", "kind": "Fleet", "metadata": {"name": "f"}, "spec": {
        "sites": [{"name": f"edge-{i}", "tier": "edge", "nodeGroups": [
            {"name": "gw", "count": 1, "arch": "x86_64", "cpu": "8", "memory": "16Gi"}]} for i in range(100)],
        "links": [{"between": [f"edge-{i}", f"edge-{i + 1}"], "rttMs": 2, "bandwidth": "10Gbps"} for i in range(99)],
        "populations": [{"name": "cars", "sites": "car-#######", "count": devices, "tier": "device",
                         "attach": {"to": {"tier": "edge"}, "rttMs": 10, "bandwidth": "100Mbps"},
                         "nodeGroups": [{"name": "soc", "count": 1, "arch": "arm64", "cpu": "4",
                                         "memory": "8Gi"}]}] if devices else []}}
    tenant = {"apiVersion": "suanli/v1", "kind": "Tenant", "metadata": {"name": "t"}, "spec": {}}
    docs, problems = documents([("Fleet", "f", fleet), ("Tenant", "t", tenant)])
    assert not problems, problems
    return docs


def agents(start: int, n: int) -> list:
    return [(f"edge-{i % 100}/node-{i}", f"edge-{i % 100}", {"cpu": "16", "memory": "32Gi", "arch": "x86_64"}, True)
            for i in range(start, start + n)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", default="1000,10000")
    ap.add_argument("--batch", default="1,100")
    ap.add_argument("--devices", type=int, default=100_000)
    args = ap.parse_args()
    docs = world(args.devices)
    for n in map(int, args.nodes.split(",")):
        sim = Simulation(build_world(docs))
        sim.start()
        registered = agents(0, n)
        t0 = time.perf_counter()
        grown, _, paths = grown_fleet(sim.world.fleet, docs, registered)
        sim.grow_fleet(1.0, grown, paths)
        first = time.perf_counter() - t0
        for batch in map(int, args.batch.split(",")):
            times = []
            for k in range(5):
                registered = registered + agents(len(registered), batch)
                t0 = time.perf_counter()
                grown, _, paths = grown_fleet(sim.world.fleet, docs, registered)
                sim.grow_fleet(2.0 + k, grown, paths)
                sim.step(2.0 + k)
                times.append(time.perf_counter() - t0)
            times.sort()
            print(f"{n:>7,} agents' nodes (+{args.devices:,} devices): a batch of {batch:>4} more registered in "
                  f"{1000 * times[len(times) // 2]:7.1f} ms (median of 5); the first {n:,} at once {first:.2f} s")


if __name__ == "__main__":
    main()
