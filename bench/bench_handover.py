"""What a handover costs among many running units: phones linked to two
cells each (``attach.homes: 2``), one service per phone bound near it.

A world of ``--edges`` edge sites under two clouds and ``--phones`` phones,
each with a service (``near`` its phone, 40 ms) running there; a mobility
stream hands phones over (each keeps one cell and moves the other). Times
every handover the simulation handles (the network's change and what the
scheduler re-checks for it): the median and the worst, with the running
units at the time; asserts every service ran and handovers came.

Prints one JSON object.

    .venv/bin/python bench/bench_handover.py [--phones 100000] [--edges 200] [--handovers 200]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

from suanli.sim import global_state
from suanli.sim.simulation import Simulation
from suanli.spec.build import load_world


def world(phones: int, edges: int, handovers: int) -> list[dict]:
    sites = [{"name": f"cloud-{k}", "tier": "cloud", "nodeGroups": [{"name": "cpu", "count": 4, "arch": "x86_64",
                                                                      "cpu": 64, "memory": "256Gi"}]} for k in range(2)]
    sites += [{"name": f"edge-{k:04d}", "tier": "edge",
               "nodeGroups": [{"name": "n", "count": 2, "arch": "x86_64", "cpu": 32, "memory": "128Gi"}]}
              for k in range(edges)]
    links = [{"between": [f"edge-{k:04d}", f"cloud-{k % 2}"], "rttMs": 10, "bandwidth": "10Gbps"} for k in range(edges)]
    links.append({"between": ["cloud-0", "cloud-1"], "rttMs": 20, "bandwidth": "100Gbps"})
    fleet = {"apiVersion": "suanli/v1", "kind": "Fleet", "metadata": {"name": "cells"},
             "spec": {"sites": sites, "links": links,
                      "populations": [{"name": "phones", "count": phones, "sites": "phone-#######",
                                       "nodeGroups": [{"name": "soc", "count": 1, "arch": "aarch64", "cpu": 8,
                                                       "memory": "8Gi"}],
                                       "private": True,  # a phone runs its owner's work only
                                       "attach": {"to": {"tier": ["edge"]}, "homes": 2, "rttMs": "uniform(2, 8)",
                                                  "bandwidth": "100Mbps"}}]}}
    tenant = {"apiVersion": "suanli/v1", "kind": "Tenant", "metadata": {"name": "owners"}, "spec": {}}
    app = {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": "app", "tenant": "owners"},
           "spec": {"each": "phones",
                    "components": [{"name": "svc", "lifetime": "service", "resources": {"cpu": 1, "memory": "1Gi"},
                                    "near": {"site": "{site}", "maxRttMs": 40}}]}}
    scenario = {"apiVersion": "suanli/v1", "kind": "Scenario", "metadata": {"name": "s"},
                "spec": {"until": "61s", "arrivals": [{"at": 0, "app": "app"}],
                         "mobility": [{"population": "phones", "start": "1s",
                                       "handovers": f"1/{phones * 60 / handovers:g}s"}]}}  # per phone
    return [fleet, tenant, app, scenario]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--phones", type=int, default=100_000)
    ap.add_argument("--edges", type=int, default=200)
    ap.add_argument("--handovers", type=int, default=200, help="handovers over the minute (all phones together)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "w.yaml"
        docs = world(args.phones, args.edges, args.handovers)
        path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
        t0 = time.perf_counter()
        sim = Simulation(load_world([path]), seed=1)
        load_s = time.perf_counter() - t0
    took: list[float] = []
    running: list[int] = []
    event = global_state.GlobalState.event

    def timed(self, t, ev):
        if ev.kind != "handover":
            return event(self, t, ev)
        t0 = time.perf_counter()
        event(self, t, ev)
        took.append(time.perf_counter() - t0)
        running.append(sum(1 for _ in sim.view.running()))
    global_state.GlobalState.event = timed
    try:
        t0 = time.perf_counter()
        sim.run()
        run_s = time.perf_counter() - t0
    finally:
        global_state.GlobalState.event = event
    started = sum(1 for e in sim.events.take() if e["kind"] == "started")
    assert started >= args.phones and took, (started, len(took))
    ms = np.array(took) * 1e3
    print(json.dumps({"phones": args.phones, "edges": args.edges, "handovers": len(took),
                      "running_units": int(np.median(running)), "handover_median_ms": round(float(np.median(ms)), 3),
                      "handover_p99_ms": round(float(np.percentile(ms, 99)), 3),
                      "handover_max_ms": round(float(ms.max()), 3), "load_s": round(load_s, 1),
                      "run_s": round(run_s, 1)}, indent=1))


if __name__ == "__main__":
    main()
