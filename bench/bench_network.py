"""Benchmark: `suanli schedule` on a fleet of many single-node device sites.

One cloud site (200 nodes), 100 edge sites (4 nodes each, linked to the cloud
and in a ring) and ``--devices`` single-node device sites, each linked to one
edge. One service per sampled device (``--services``, default 1,000) is bound
``near`` its device within ``--max-rtt`` ms. Writes the documents, runs
``suanli schedule ... -o json`` once and prints JSON: the wall time and the
peak resident memory of that process, and what it placed.

    .venv/bin/python bench/bench_network.py --devices 10000 [--services 1000] [--seed 42]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

HERE = Path(__file__).resolve().parent
EDGES = 100


def _doc(kind: str, name: str, spec: dict, **meta) -> dict:
    return {"apiVersion": "suanli/v1", "kind": kind, "metadata": {"name": name, **meta}, "spec": spec}


def _site(name: str, tier: str, count: int, cpu: int, memory: str) -> dict:
    return {"name": name, "tier": tier,
            "nodeGroups": [{"name": "n", "count": count, "arch": "x86_64", "cpu": cpu, "memory": memory}]}


def _link(a: str, b: str, rtt: float, bandwidth: str) -> dict:
    return {"between": [a, b], "rttMs": rtt, "bandwidth": bandwidth}


def make_documents(n_devices: int, n_services: int, max_rtt: float, seed: int) -> list[dict]:
    """The fleet, one tenant and one application of ``near`` services."""
    rng = np.random.default_rng(seed)
    edges = [f"edge-{i}" for i in range(EDGES)]
    devices = [f"dev-{i}" for i in range(n_devices)]
    sites = [_site("cloud-0", "cloud", 200, 64, "256Gi")]
    sites += [_site(e, "edge", 4, 16, "64Gi") for e in edges]
    sites += [_site(d, "device", 1, 4, "8Gi") for d in devices]
    links = [_link("cloud-0", e, 20.0, "10Gbps") for e in edges]
    links += [_link(edges[i], edges[(i + 1) % EDGES], 5.0, "1Gbps") for i in range(EDGES)]
    home = rng.integers(0, EDGES, n_devices)
    links += [_link(d, edges[int(h)], 2.0, "100Mbps") for d, h in zip(devices, home)]
    sampled = rng.choice(n_devices, size=min(n_services, n_devices), replace=False)
    components = [{"name": f"svc-{int(d)}", "lifetime": "service",
                   "resources": {"cpu": 1, "memory": "1Gi"},
                   "near": {"site": devices[int(d)], "maxRttMs": max_rtt}} for d in sorted(sampled)]
    return [_doc("Fleet", "devices", {"sites": sites, "links": links}),
            _doc("Tenant", "t", {}),
            _doc("Application", "near", {"components": components}, tenant="t")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--devices", type=int, default=1_000)
    ap.add_argument("--services", type=int, default=1_000)
    ap.add_argument("--max-rtt", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--out", type=Path, default=HERE / "out" / "network")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"world-{args.devices}.yaml"
    t0 = time.perf_counter()
    docs = make_documents(args.devices, args.services, args.max_rtt, args.seed)
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    path.write_text(yaml.dump_all(docs, Dumper=dumper, sort_keys=False))
    t1 = time.perf_counter()
    suanli = Path(sys.executable).with_name("suanli")
    proc = subprocess.run([str(suanli), "schedule", str(path), "-o", "json"], capture_output=True)
    t2 = time.perf_counter()
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr.decode(errors="replace"))
        return proc.returncode
    out = json.loads(proc.stdout)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    placements = out.get("placements", [])
    print(json.dumps({
        "benchmark": "suanli schedule, single-node device sites", "devices": args.devices,
        "sites": 1 + EDGES + args.devices, "services": min(args.services, args.devices),
        "generate_s": round(t1 - t0, 1), "schedule_wall_s": round(t2 - t1, 2),
        "peak_rss_gib": round(peak, 3), "placed": len(placements),
        "unscheduled": len(out.get("unscheduled", [])),
        "placed_on_own_device": sum(1 for p in placements if p.get("site") == f"dev-{p['task'].split('/')[1][4:]}"),
    }, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
