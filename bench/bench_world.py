"""Benchmark: load and validate the world at its real size.

100 cloud sites of 100 nodes, 1,000 edge sites of 10 nodes (each edge linked
to two clouds, the clouds in a ring with chords), a population of
``--devices`` single-node device sites attached to the edges (``--multi``:
the share with two homes), and ``--tenants`` tenants. Writes the documents,
then in a fresh process runs ``load_world`` (YAML, validation, references,
the population's expansion, the network) and prints JSON: wall time, peak
RSS and what was built. Fails unless the counts are exactly the ones written.

    .venv/bin/python bench/bench_world.py [--devices 1000000] [--tenants 10000] [--multi 0.1]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
CLOUDS, CLOUD_NODES, EDGES, EDGE_NODES = 100, 100, 1000, 10


def _doc(kind: str, name: str, spec: dict, **meta) -> dict:
    return {"apiVersion": "suanli/v1", "kind": kind, "metadata": {"name": name, **meta}, "spec": spec}


def fleet_docs(devices: int, multi: float) -> list[dict]:
    group = lambda n, cpu, mem, arch="x86_64": {"name": "n", "count": n, "arch": arch, "cpu": cpu, "memory": mem}  # noqa: E731
    sites = [{"name": f"cloud-{c:03d}", "tier": "cloud", "region": f"r{c % 10}",
              "nodeGroups": [{**group(CLOUD_NODES, 128, "512Gi"),
                              "accelerators": [{"kind": "gpu", "model": "A100", "count": 8, "shareable": True}]}]}
             for c in range(CLOUDS)]
    sites += [{"name": f"edge-{e:04d}", "tier": "edge", "region": f"r{e % 10}",
               "nodeGroups": [group(EDGE_NODES, 64, "256Gi")]} for e in range(EDGES)]
    link = lambda a, b, rtt, bw: {"between": [a, b], "rttMs": rtt, "bandwidth": bw}  # noqa: E731
    links = [link(f"cloud-{c:03d}", f"cloud-{(c + k) % CLOUDS:03d}", 5.0 * k, "100Gbps")
             for c in range(CLOUDS) for k in (1, 7)]
    links += [link(f"edge-{e:04d}", f"cloud-{(e + k) % CLOUDS:03d}", 8.0 + 4 * k, "10Gbps")
              for e in range(EDGES) for k in (0, 3)]
    device = {"name": "soc", "count": 1, "arch": "aarch64", "cpu": 12, "memory": "32Gi",
              "accelerators": [{"kind": "npu", "model": "Orin", "count": 1, "shareable": True}]}
    attach = lambda homes: {"to": {"tier": "edge"}, "homes": homes, "rttMs": "uniform(1, 5)",  # noqa: E731
                            "bandwidth": "lognormal(100Mbps, 0.5)"}
    two = int(devices * multi)
    pops = [{"name": "cars", "count": devices - two, "sites": "car-#######", "nodeGroups": [device],
             "attach": attach(1)}]
    if two:
        pops.append({"name": "vans", "count": two, "sites": "van-#######", "nodeGroups": [device],
                     "attach": attach(2)})
    return [_doc("Fleet", "world", {"sites": sites, "links": links, "populations": pops})]


def write_docs(out: Path, files: dict[str, list[dict]]) -> list[str]:
    """Each file's documents written as YAML under ``out``; their paths."""
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    for name, docs in files.items():
        (out / name).write_text(yaml.dump_all(docs, Dumper=dumper, sort_keys=False))
    return [str(out / name) for name in files]


def tenant_docs(n: int) -> list[dict]:
    return [_doc("Tenant", f"t{i:05d}", {"weight": 1 + i % 4, **({"allowedSites": ["cloud-*", "edge-*"]} if i % 3 == 0 else {})})
            for i in range(n)]


CHILD = """
import json, resource, sys, time
t0 = time.perf_counter()
from suanli.spec.build import load_world
world = load_world(sys.argv[1:])
t1 = time.perf_counter()
f = world.fleet
f.network.rtt_to(f.site_index["car-0000000"])  # one column: the network answers
print(json.dumps({"load_s": round(t1 - t0, 2), "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
                  "sites": len(f.sites), "nodes": f.n_nodes, "links": len(f.link_arrays), "tenants": len(world.tenants)}))
"""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--devices", type=int, default=1_000_000)
    ap.add_argument("--tenants", type=int, default=10_000)
    ap.add_argument("--multi", type=float, default=0.1)
    ap.add_argument("--out", type=Path, default=HERE / "out" / "world")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    fleet, tenants = args.out / "fleet.yaml", args.out / "tenants.yaml"
    dump = lambda docs, p: p.write_text(yaml.dump_all(docs, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False))  # noqa: E731
    dump(fleet_docs(args.devices, args.multi), fleet)
    dump(tenant_docs(args.tenants), tenants)
    t0 = time.perf_counter()
    run = subprocess.run([sys.executable, "-c", CHILD, str(fleet), str(tenants)], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if run.returncode != 0:
        print(run.stderr, file=sys.stderr)
        return 1
    got = json.loads(run.stdout)
    sites = CLOUDS + EDGES + args.devices
    two = int(args.devices * args.multi)
    want = {"sites": sites, "nodes": CLOUDS * CLOUD_NODES + EDGES * EDGE_NODES + args.devices,
            "links": CLOUDS * 2 + EDGES * 2 + (args.devices - two) + 2 * two, "tenants": args.tenants}
    out = {"devices": args.devices, "tenants": args.tenants, "multi_homed": two, "wall_s": round(wall, 2),
           **got, "fleet_yaml_kib": fleet.stat().st_size // 1024}
    print(json.dumps(out, indent=2))
    bad = {k: (got[k], v) for k, v in want.items() if got[k] != v}
    if bad:
        print(f"counts differ (got, want): {bad}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
