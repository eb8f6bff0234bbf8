"""Benchmark: a static world of phones on many cells, placed once.

``--edges`` edge sites listed one by one (one node each) under ``--edges /
250`` regional clouds, and a population of ``--phones`` phones linked to
``--homes`` cells each (phones relay nothing). Each phone has an assistant
bound near it (too large for the phone: it goes to a cell within its
bound) and a small sync service that fits on the phone. ``suanli schedule
-o summary`` runs in a child process under ``/usr/bin/time``; prints JSON:
wall time, peak resident size, tasks placed. Fails unless every task was
placed or explained. With ``--simulate MINUTES``, ``suanli simulate``
instead: the assistants arrive at once, phones hand over and go offline
now and then; it prints the events by kind.

    .venv/bin/python bench/bench_phone_world.py [--phones 81600] [--edges 12500] [--homes 2] [--simulate 10]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent


def documents(phones: int, edges: int, homes: int, minutes: float = 0) -> list[dict]:
    clouds = max(1, edges // 250)
    sites = [{"name": f"cloud-{c:03d}", "tier": "cloud", "region": f"r{c}",
              "nodeGroups": [{"name": "n", "count": 50, "arch": "x86_64", "cpu": 64, "memory": "256Gi"}]}
             for c in range(clouds)]
    sites += [{"name": f"cell-{e:05d}", "tier": "edge", "region": f"r{e % clouds}",
               "nodeGroups": [{"name": "mec", "count": 1, "arch": "x86_64", "cpu": 32, "memory": "128Gi"}]}
              for e in range(edges)]
    links = [{"between": [f"cell-{e:05d}", f"cloud-{e % clouds:03d}"], "rttMs": 8, "bandwidth": "10Gbps"}
             for e in range(edges)]
    links += [{"between": [f"cloud-{c:03d}", f"cloud-{(c + 1) % clouds:03d}"], "rttMs": 15, "bandwidth": "100Gbps"}
              for c in range(clouds) if clouds > 1 and (clouds > 2 or c == 0)]
    fleet = {"apiVersion": "suanli/v1", "kind": "Fleet", "metadata": {"name": "cells"},
             "spec": {"sites": sites, "links": links, "populations": [
                 {"name": "phones", "count": phones, "sites": "phone-#######",
                  "nodeGroups": [{"name": "soc", "count": 1, "arch": "aarch64", "cpu": 8, "memory": "8Gi"}],
                  "attach": {"to": {"tier": "edge"}, "homes": homes, "rttMs": "uniform(2, 6)",
                             "bandwidth": "lognormal(200Mbps, 0.3)"}}]}}
    tenant = {"apiVersion": "suanli/v1", "kind": "Tenant", "metadata": {"name": "owners"}, "spec": {}}
    app = {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": "assist", "tenant": "owners"},
           "spec": {"each": "phones", "components": [
               {"name": "assistant", "lifetime": "service", "resources": {"cpu": 2, "memory": "4Gi"},
                "sites": {"tier": "edge"}, "near": {"site": "{site}", "maxRttMs": 12}},
               {"name": "sync", "lifetime": "service", "resources": {"cpu": "250m", "memory": "256Mi"},
                "near": {"site": "{site}", "maxRttMs": 1}}]}}
    docs = [fleet, tenant, app]
    if minutes:  # the same world simulated: the phones hand over and go offline now and then
        docs.append({"apiVersion": "suanli/v1", "kind": "Scenario", "metadata": {"name": "phones"},
                     "spec": {"seed": 1, "until": f"{minutes}m", "arrivals": [{"at": 0, "app": "assist"}],
                              "mobility": [{"population": "phones", "handovers": "1/2h", "offline": "1/20h",
                                            "offlineFor": "lognormal(5m, 0.5)"}]}})
    return docs


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--phones", type=int, default=81_600)
    ap.add_argument("--edges", type=int, default=12_500)
    ap.add_argument("--homes", type=int, default=2)
    ap.add_argument("--simulate", type=float, default=0, metavar="MINUTES",
                    help="simulate that long (handovers, phones offline) instead of one static pass")
    ap.add_argument("--out", type=Path, default=HERE / "out" / "phones")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "world.yaml"
    path.write_text(yaml.safe_dump_all(documents(args.phones, args.edges, args.homes, args.simulate),
                                       sort_keys=False))
    suanli = str(Path(sys.executable).parent / "suanli")
    command = [suanli, "simulate", str(path), "--out", str(args.out / "run")] if args.simulate else \
        [suanli, "schedule", str(path), "-o", "json"]
    t0 = time.perf_counter()
    run = subprocess.run(["/usr/bin/time", "-v", *command], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if run.returncode != 0:
        print(run.stderr[-3000:], file=sys.stderr)
        return 1
    peak_kib = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", run.stderr).group(1))
    if args.simulate:
        kinds: dict[str, int] = {}
        with open(args.out / "run" / "events.jsonl") as f:
            for line in f:
                kind = json.loads(line)["kind"]
                kinds[kind] = kinds.get(kind, 0) + 1
        out = {"phones": args.phones, "edges": args.edges, "homes": args.homes, "minutes": args.simulate,
               "wall_s": round(wall, 1), "peak_rss_gib": round(peak_kib / 2**20, 2),
               "started": kinds.get("started", 0), "handovers": kinds.get("handover", 0), "events": kinds}
        print(json.dumps(out, indent=1))
        return 0 if out["started"] >= args.phones and out["handovers"] > 0 else 1
    got = json.loads(run.stdout)
    placed, waiting = len(got["placements"]), len(got["unscheduled"])
    out = {"phones": args.phones, "edges": args.edges, "homes": args.homes, "wall_s": round(wall, 1),
           "peak_rss_gib": round(peak_kib / 2**20, 2), "placed": placed, "unscheduled": waiting,
           "tasks": 2 * args.phones}
    print(json.dumps(out, indent=1))
    return 0 if placed + waiting == 2 * args.phones and placed >= args.phones else 1


if __name__ == "__main__":
    sys.exit(main())
