"""Benchmark: the world suanli is for, at a given number of tasks.

The fleet of ``bench_world.py`` (100 cloud sites of 100 nodes with 8 A100
each, 1,000 edge sites of 10 nodes, the clouds in a ring with chords, each
edge linked to two clouds) with ``--tasks``/10 devices, cut into ten
operators' populations (each a tenth vans), and ``--tenants`` tenants. The
work, from templates:

- on every device (``each``), ten micro-services of its operator (the
  operator's tenant), bound to the device itself (``near`` within 0.2 ms);
- on every van, ``assist``: a 16-core service bound within 30 ms of its van,
  so it lands on an edge or a cloud;
- batch jobs: every other tenant runs one application of short jobs,
  5% of ``--tasks`` in all, a quarter of a core each, on clouds;
- GPU gangs: ``--gangs`` two-member gangs of 8 GPUs each, coupled over
  Ethernet, of as many tenants.

Writes the documents, runs ``suanli schedule ... -o summary`` in a child
process and prints JSON: wall time, peak RSS, the counts of the summary,
and bytes and microseconds per task. Fails unless every task is counted
once (placed or unscheduled) and at least 99% are placed.

With ``--workers N`` the pass is split over N shard actors and a global
actor on Ray (a local Ray started for the run, or ``--ray HOST:PORT``); the
JSON then also has how the work split, each phase's seconds, and the peak
RSS summed over the driver and every actor; with ``--compare`` one process
runs first on the same documents, and the two summaries must be the same.

    .venv/bin/python bench/bench_seed_world.py [--tasks 1000000] [--tenants 10000] [--gangs 300]
        [--workers N [--ray HOST:PORT] [--compare]]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_scale import SUANLI, run  # noqa: E402
from bench_world import _doc, fleet_docs, tenant_docs, write_docs  # noqa: E402

OPERATORS = 10  # populations of devices, each an operator tenant's
SERVICES = ("camera", "lidar", "fusion", "planner", "maps", "voice", "music", "telemetry", "ota", "health")
BATCH_SHARE = 0.05


def fleet(devices: int) -> list[dict]:
    docs = fleet_docs(devices, 0.0)
    spec = docs[0]["spec"]
    cars = spec["populations"][0]
    pops = []
    for k in range(OPERATORS):
        n = devices // OPERATORS + (1 if k < devices % OPERATORS else 0)
        vans = n // 10
        pops.append({**cars, "name": f"cars{k}", "count": n - vans, "sites": f"c{k}-#######"})
        pops.append({**cars, "name": f"vans{k}", "count": vans, "sites": f"v{k}-#######"})
    spec["populations"] = pops
    return docs


def apps(tasks: int, tenants: int, gangs: int) -> tuple[list[dict], dict[str, int]]:
    """The applications, and the tasks of each kind they make."""
    docs, counts = [], {"device": 0, "assist": 0, "batch": 0, "gang": 0}
    micro = [{"name": s, "lifetime": "service", "resources": {"cpu": "500m", "memory": "1Gi"},
              "near": {"site": "{site}", "maxRttMs": 0.2}} for s in SERVICES]
    assist = {"name": "assist", "lifetime": "service", "resources": {"cpu": 16, "memory": "16Gi"},
              "near": {"site": "{site}", "maxRttMs": 30}}
    names = [f"t{i:05d}" for i in range(tenants)]
    operators = [t for i, t in enumerate(names) if i % 3][:OPERATORS]  # (every third tenant keeps off devices)
    for k, tenant in enumerate(operators):
        docs.append(_doc("Application", f"car{k}", {"each": f"cars{k}", "components": micro}, tenant=tenant))
        docs.append(_doc("Application", f"van{k}", {"each": f"vans{k}", "components": micro}, tenant=tenant))
        docs.append(_doc("Application", f"assist{k}", {"each": f"vans{k}", "components": [assist]}, tenant=tenant))
    others = [t for t in names if t not in set(operators)]
    gang_tenants, batch_tenants = others[:gangs], others[gangs:] or others
    for i, tenant in enumerate(gang_tenants):
        gang = {"name": "train", "lifetime": "job", "gang": {"size": 2}, "coupling": "ethernet", "duration": "2h",
                "resources": {"cpu": 16, "memory": "64Gi",
                              "accelerators": [{"kind": "gpu", "model": "A100", "count": 8}]}}
        docs.append(_doc("Application", f"train{i}", {"components": [gang]}, tenant=tenant))
        counts["gang"] += 2
    batch = int(tasks * BATCH_SHARE)
    per, extra = divmod(batch, len(batch_tenants))
    for i, tenant in enumerate(batch_tenants):
        n = per + (1 if i < extra else 0)
        if not n:
            continue
        job = {"name": "etl", "lifetime": "job", "replicas": n, "duration": "10m",
               "resources": {"cpu": "250m", "memory": "512Mi"}, "sites": {"tier": ["cloud"]}}
        docs.append(_doc("Application", f"batch{i}", {"components": [job]}, tenant=tenant))
        counts["batch"] += n
    return docs, counts


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=1_000_000, help="about this many tasks (devices: a tenth)")
    ap.add_argument("--tenants", type=int, default=10_000)
    ap.add_argument("--gangs", type=int, default=300)
    ap.add_argument("--out", type=Path, default=HERE / "out" / "seed")
    ap.add_argument("--workers", type=int, default=None, help="shard actors on Ray (default: one process)")
    ap.add_argument("--ray", default=None, help="with --workers: a Ray cluster's HOST:PORT (default: a local one)")
    ap.add_argument("--compare", action="store_true", help="with --workers: run one process first, compare")
    args = ap.parse_args()
    devices = args.tasks // len(SERVICES)
    args.out.mkdir(parents=True, exist_ok=True)
    app_docs, counts = apps(args.tasks, args.tenants, args.gangs)
    vans = sum(p["count"] for p in fleet(devices)[0]["spec"]["populations"] if p["name"].startswith("vans"))
    counts["device"], counts["assist"] = devices * len(SERVICES), vans
    files = {"fleet.yaml": fleet(devices), "tenants.yaml": tenant_docs(args.tenants), "apps.yaml": app_docs}
    paths = write_docs(args.out, files)
    total = sum(counts.values())
    out = {"devices": devices, "tenants": args.tenants, "tasks": total, "by_kind": counts}
    problems = []
    command = [*SUANLI, "schedule", *paths, "-o", "summary"]
    if args.workers and args.compare:
        one_path = args.out / "summary-one.txt"
        wall, rss, done = run(command, one_path)
        if done.returncode != 0:
            print(done.stderr, file=sys.stderr)
            return 1
        out["one_process"] = {"wall_s": round(wall, 1), "peak_rss_gib": round(rss, 2)}
    if args.workers:
        command += ["--workers", str(args.workers)] + (["--ray", args.ray] if args.ray else [])
    summary_path = args.out / "summary.txt"
    wall, rss, done = run(command, summary_path)
    if done.returncode != 0:
        print(done.stderr, file=sys.stderr)
        return 1
    said = re.search(r"(\d+)/(\d+) tasks placed, (\d+) unscheduled", summary_path.read_text())
    if said is None:
        print(f"no summary in {summary_path}", file=sys.stderr)
        return 1
    placed, _, unscheduled = (int(x) for x in said.groups())
    out.update({"wall_s": round(wall, 1), "peak_rss_gib": round(rss, 2),
                "bytes_per_task": round(rss * 2**30 / total), "us_per_task": round(wall * 1e6 / total, 1),
                "placed": placed, "unscheduled": unscheduled})
    if args.workers:
        split = re.search(r"split: .*", done.stderr)
        if split is None:
            problems.append("the shards' answers did not stand: " + done.stderr.strip().splitlines()[-1])
        else:
            line = split[0]
            numbers = [float(x) for x in re.findall(r"(\d+(?:\.\d+)?) GiB in all \(global actor first: ([\d., ]+)\)",
                                                     line)[0][1].split(", ")]
            out["workers"] = args.workers
            out["split"] = line
            out["peak_rss_gib_all_processes"] = round(rss + sum(numbers), 2)
        if args.compare:
            same = (args.out / "summary-one.txt").read_text() == summary_path.read_text()
            out["same_summary"] = same
            out["wall_ratio"] = round(wall / out["one_process"]["wall_s"], 3)
            if not same:
                problems.append("the summaries differ")
    print(json.dumps(out, indent=2))
    if placed + unscheduled != total:
        problems.append(f"{placed} placed + {unscheduled} unscheduled, want {total}")
    if placed < 0.99 * total:
        problems.append(f"only {placed} of {total} placed")
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
