"""Benchmark: a million pending tasks on 100,000 nodes, in one process.

Writes the mixed workload of ``bench_static.py`` at ``--tasks`` (1,000,000)
on ``--nodes`` (100,000), loads it and runs one ``schedule`` pass, which
starts with every task pending. Prints JSON: times per step, decisions per
second, peak resident memory; exits with status 1 unless every task is
placed or unscheduled and the figures are inside ``--min-rate`` and
``--max-rss-gib``.

    .venv/bin/python bench/bench_size.py [--nodes 100000] [--tasks 1000000] [--seed 42]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_static import write_world  # noqa: E402

from suanli.scheduling.static import schedule  # noqa: E402
from suanli.spec.build import load_world  # noqa: E402


def rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--tasks", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--min-rate", type=float, default=5_000.0, help="decisions per second required")
    ap.add_argument("--max-rss-gib", type=float, default=2.0)
    ap.add_argument("--out", type=Path, default=HERE / "out" / "size")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    fleet, work, n_apps = write_world(args.out, args.nodes, args.tasks, args.seed)
    t1 = time.perf_counter()
    world = load_world([fleet, work])
    t2 = time.perf_counter()
    rss_loaded = rss_gib()
    outcome = schedule(world)
    t3 = time.perf_counter()
    placed, unscheduled = len(outcome.state.placements), len(outcome.unscheduled)
    rate = args.tasks / (t3 - t2)
    failures = []
    if placed + unscheduled != args.tasks:
        failures.append(f"{placed} placed + {unscheduled} unscheduled != {args.tasks}")
    if rate < args.min_rate:
        failures.append(f"{rate:.0f} decisions/s, below {args.min_rate:g}")
    if rss_gib() > args.max_rss_gib:
        failures.append(f"peak RSS {rss_gib():.2f} GiB, above {args.max_rss_gib:g}")
    print(json.dumps({
        "benchmark": "a million pending tasks, one schedule pass", "nodes": args.nodes, "tasks": args.tasks,
        "applications": n_apps, "generate_s": round(t1 - t0, 1), "load_s": round(t2 - t1, 1),
        "schedule_s": round(t3 - t2, 1), "decisions_per_s": round(rate), "placed": placed,
        "unscheduled": unscheduled, "rss_gib_after_load": round(rss_loaded, 3), "peak_rss_gib": round(rss_gib(), 3),
        "ok": not failures, "failures": failures,
    }, indent=2))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
