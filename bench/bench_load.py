"""Benchmark: how fast documents load (read, validate, check references).

Writes three sets of documents and loads each with ``load_documents``, as
``suanli simulate`` does before it builds anything:

- ``pes``: PureEdgeSim's default world at ``--devices`` devices
  (``../shared/worlds/pureedgesim_default.py``): a fleet of populations and a
  scenario of one generator per device, written in flow style (dense: about
  270 bytes a generator);
- ``edges``: a fleet of ``--edges`` edge sites listed one by one, block style,
  each linked to its region's hub, with labels;
- ``apps``: ``--apps`` applications of two or three components each, block
  style, and a scenario that submits each.

For each it prints the size, the seconds and the megabytes a second, and the
same with the fast path turned off (the full loader: nodes, marks, then
data) in the same run. Fails unless every document was read and validated.

    .venv/bin/python bench/bench_load.py [--devices 10000] [--edges 12500] [--apps 23871]
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
SHARED = HERE.parent.parent / "shared"


def _dump(docs: list[dict], path: Path) -> Path:
    path.write_text(yaml.dump_all(docs, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False,
                                  default_flow_style=False))
    return path


def _doc(kind: str, name: str, spec: dict, **meta) -> dict:
    return {"apiVersion": "suanli/v1", "kind": kind, "metadata": {"name": name, **meta}, "spec": spec}


def edge_fleet(edges: int) -> list[dict]:
    hubs = max(1, edges // 250)
    sites = [{"name": f"hub-{h:03d}", "tier": "cloud", "region": f"r{h}",
              "nodeGroups": [{"name": "n", "count": 20, "arch": "x86_64", "cpu": 64, "memory": "256Gi"}]}
             for h in range(hubs)]
    sites += [{"name": f"cell-{e:05d}", "tier": "edge", "region": f"r{e % hubs}",
               "labels": {"operator": f"op{e % 3}", "band": "n78" if e % 2 else "n41"},
               "nodeGroups": [{"name": "mec", "count": 1 + e % 2, "arch": "aarch64" if e % 5 == 0 else "x86_64",
                               "cpu": 16, "memory": "64Gi"}]}
              for e in range(edges)]
    links = [{"between": [f"cell-{e:05d}", f"hub-{e % hubs:03d}"], "rttMs": 4 + e % 7, "bandwidth": "10Gbps"}
             for e in range(edges)]
    links += [{"between": [f"hub-{h:03d}", f"hub-{(h + 1) % hubs:03d}"], "rttMs": 12, "bandwidth": "100Gbps"}
              for h in range(hubs) if hubs > 1 and h < (h + 1) % hubs]
    return [_doc("Fleet", "cells", {"sites": sites, "links": links})]


def app_docs(apps: int, edges: int) -> list[dict]:
    out = [_doc("Tenant", f"tenant-{t:02d}", {"weight": 1 + t % 3}) for t in range(20)]
    for a in range(apps):
        comps = [{"name": "api", "lifetime": "service", "replicas": 1 + a % 3,
                  "resources": {"cpu": "500m", "memory": "512Mi"},
                  "near": {"site": f"cell-{a % edges:05d}", "maxRttMs": 20}},
                 {"name": "worker", "lifetime": "job", "duration": f"{1 + a % 9}m",
                  "resources": {"cpu": 2, "memory": "2Gi"}, "sites": {"tier": "cloud"}}]
        if a % 2:
            comps.append({"name": "cache", "lifetime": "service", "resources": {"cpu": 1, "memory": "1Gi"},
                          "state": {"kind": "stateful", "size": "256Mi"},
                          "affinity": {"group": f"g{a}", "scope": "reachable"}})
        out.append(_doc("Application", f"app-{a:05d}", {"priority": a % 5 * 100, "components": comps},
                        tenant=f"tenant-{a % 20:02d}"))
    arrivals = [{"at": f"{a % 600}s", "app": f"app-{a:05d}"} for a in range(apps)]
    out.append(_doc("Scenario", "apps", {"include": ["edges.yaml"], "seed": 1, "until": "1h", "arrivals": arrivals}))
    return out


CHILD = """
import gc, json, os, sys, time
from suanli.spec import fastyaml, loader
import suanli.spec.refs  # imported before the clock starts, as a running CLI has
full = sys.argv[1] == "full"
if full:
    def over(text):
        raise fastyaml.Unusual("measured without the fast path")
    fastyaml.documents = over
paths = sys.argv[2:]
t0 = time.perf_counter()
docs = loader.load_documents(paths)
dt = time.perf_counter() - t0
size = sum(os.path.getsize(p) for p in {*paths, *docs.files})
print(json.dumps({"s": round(dt, 3), "mb": round(size / 1e6, 2), "mb_per_s": round(size / 1e6 / dt, 2),
                  "documents": sum(1 for _ in docs.all()), "generators": sum(len(s.doc.spec.generators) for s in docs.scenarios),
                  "sites": sum(len(f.doc.spec.sites) for f in docs.fleets)}))
"""


def _load(paths: list[Path], full: bool) -> dict:
    run = subprocess.run([sys.executable, "-c", CHILD, "full" if full else "fast", *map(str, paths)],
                         capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(run.stderr)
    return json.loads(run.stdout)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--devices", type=int, default=10_000)
    ap.add_argument("--edges", type=int, default=12_500)
    ap.add_argument("--apps", type=int, default=23_871)
    ap.add_argument("--out", type=Path, default=HERE / "out" / "load")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    pes = args.out / "pes.yaml"
    subprocess.run([sys.executable, str(SHARED / "worlds" / "pureedgesim_default.py"), str(args.devices), str(pes)],
                   check=True, capture_output=True)
    edges = _dump(edge_fleet(args.edges), args.out / "edges.yaml")
    apps = _dump(app_docs(args.apps, args.edges), args.out / "apps.yaml")
    sets = {"pes": ([pes], {"generators": None}), "edges": ([edges], {"sites": args.edges + max(1, args.edges // 250)}),
            "apps": ([apps], {"documents": 20 + args.apps + 1 + 1})}
    out, bad = {}, []
    for name, (paths, want) in sets.items():
        fast, full = _load(paths, False), _load(paths, True)
        for k, v in want.items():
            if v is not None and fast[k] != v:
                bad.append(f"{name}: {k} {fast[k]} != {v}")
        if fast != {**full, "s": fast["s"], "mb_per_s": fast["mb_per_s"]}:
            bad.append(f"{name}: the two paths read different documents: {fast} {full}")
        out[name] = {**fast, "full_loader_s": full["s"], "full_loader_mb_per_s": full["mb_per_s"],
                     "speedup": round(full["s"] / fast["s"], 1)}
    print(json.dumps(out, indent=2))
    if out["pes"]["generators"] < args.devices // 2:
        bad.append("pes: too few generators")
    if bad:
        print("\n".join(bad), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
