"""Benchmark: `suanli schedule` on the world at its real size.

The world of ``bench_world.py`` (100 cloud sites of 100 nodes, 1,000 edge
sites of 10 nodes, ``--devices`` single-node devices in two populations,
cars and vans, ``--tenants`` tenants) and two per-device applications of
one tenant:

- ``info`` on every device (``each``): one resident service bound to its own
  device (``near`` within the device's own 0.2 ms);
- ``assist`` on every van (``--vans`` of them, default a tenth): a service
  too big for a device (16 cores), bound within 30 ms of its van, so it
  lands on an edge or a cloud.

Runs ``suanli schedule ... -o ndjson`` and ``-o summary`` as subprocesses and
prints JSON: wall time and peak RSS of each, and what was placed. Fails
unless every task is placed or unscheduled exactly once, every ``info``
task is on its own device and every ``assist`` task is on an edge or cloud
site within its bound.

    .venv/bin/python bench/bench_scale.py [--devices 1000000] [--vans 100000] [--tenants 10000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench_world import _doc, fleet_docs, tenant_docs, write_docs

HERE = Path(__file__).resolve().parent
SUANLI = [sys.executable, "-m", "suanli.cli"]


def app_docs(tenant: str) -> list[dict]:
    info = {"name": "music", "lifetime": "service", "resources": {"cpu": "500m", "memory": "512Mi"},
            "near": {"site": "{site}", "maxRttMs": 0.2}}
    assist = {"name": "assist", "lifetime": "service", "resources": {"cpu": 16, "memory": "16Gi"},
              "near": {"site": "{site}", "maxRttMs": 30}}
    return [_doc("Application", "info", {"each": "cars", "components": [info]}, tenant=tenant),
            _doc("Application", "info-vans", {"each": "vans", "components": [info]}, tenant=tenant),
            _doc("Application", "assist", {"each": "vans", "components": [assist]}, tenant=tenant)]


def run(cmd: list[str], out_path: Path | None) -> tuple[float, float, subprocess.CompletedProcess]:
    """Wall seconds and peak RSS (GiB) of one child process (its own, from wait4)."""
    t0 = time.perf_counter()
    with open(out_path if out_path else os.devnull, "w") as out, open(out_path.with_suffix(".err") if out_path
                                                                     else os.devnull, "w") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, text=True)
        stderr = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.write(stderr)
    wall = time.perf_counter() - t0
    return wall, usage.ru_maxrss / 2**20, subprocess.CompletedProcess(cmd, proc.returncode, "", stderr)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--devices", type=int, default=1_000_000)
    ap.add_argument("--vans", type=int, default=None, help="devices that also get an assist service (default: a tenth)")
    ap.add_argument("--tenants", type=int, default=10_000)
    ap.add_argument("--out", type=Path, default=HERE / "out" / "scale")
    args = ap.parse_args()
    vans = args.devices // 10 if args.vans is None else args.vans
    args.out.mkdir(parents=True, exist_ok=True)
    docs = fleet_docs(args.devices, 0.0)
    pops = docs[0]["spec"]["populations"]
    cars = pops[0]
    cars["count"] = args.devices - vans
    pops.append({**cars, "name": "vans", "count": vans, "sites": "van-#######"})
    files = {"fleet.yaml": docs, "tenants.yaml": tenant_docs(args.tenants), "apps.yaml": app_docs("t00001")}
    paths = write_docs(args.out, files)

    ndjson = args.out / "out.ndjson"
    wall_nd, rss_nd, done = run([*SUANLI, "schedule", *paths, "-o", "ndjson"], ndjson)
    if done.returncode != 0:
        print(done.stderr, file=sys.stderr)
        return 1
    wall_sum, rss_sum, summary = run([*SUANLI, "schedule", *paths, "-o", "summary"], None)
    if summary.returncode != 0:
        print(summary.stderr, file=sys.stderr)
        return 1

    placed, unscheduled, seen, bad = 0, 0, set(), []
    edge_or_cloud = 0
    with open(ndjson) as f:
        for line in f:
            rec = json.loads(line)
            kind = rec["kind"]
            if kind == "placement":
                placed += 1
                task = rec["task"]
                app, _, rest = task.partition("/")
                home = app.partition(".")[2]
                if app.startswith("info") and rec["site"] != home:
                    bad.append(f"{task} on {rec['site']}")
                if app.startswith("assist."):
                    edge_or_cloud += rec["site"].startswith(("edge-", "cloud-"))
                seen.add(task)
            elif kind == "unscheduled":
                unscheduled += 1
                seen.add(rec["task"])
            elif kind == "metrics":
                metrics = rec
    total = args.devices + vans
    out = {
        "devices": args.devices, "vans": vans, "tenants": args.tenants, "tasks": total,
        "ndjson": {"wall_s": round(wall_nd, 1), "peak_rss_gib": round(rss_nd, 2),
                   "mib": round(ndjson.stat().st_size / 2**20, 1)},
        "summary": {"wall_s": round(wall_sum, 1), "peak_rss_gib": round(rss_sum, 2)},
        "placed": placed, "unscheduled": unscheduled, "assist_on_edge_or_cloud": edge_or_cloud,
        "metrics_tasks": metrics["tasks"],
    }
    print(json.dumps(out, indent=2))
    problems = []
    if len(seen) != total or placed + unscheduled != total:
        problems.append(f"{len(seen)} distinct tasks, {placed} placed + {unscheduled} unscheduled, want {total}")
    if bad:
        problems.append(f"{len(bad)} info tasks off their device, e.g. {bad[:3]}")
    if placed == total and edge_or_cloud != vans:
        problems.append(f"{edge_or_cloud} assist tasks on an edge or cloud, want {vans}")
    if placed < total * 0.99:
        problems.append(f"only {placed} of {total} placed")
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    sys.exit(main())
