"""Benchmark: a million pending tasks on 100,000 nodes, in one process.

Writes the mixed workload of ``bench_static.py`` at ``--tasks`` (1,000,000)
on ``--nodes`` (100,000), loads it and runs one ``schedule`` pass, which
starts with every task pending. Prints JSON: times per step, decisions per
second, peak resident memory, and the rate of the pure-Python reference of
``bench_decisions.py`` on the same fleet (``--check`` single-task decisions
of 32 shapes, which it and the scheduler must decide alike) with the
speed-up; exits with status 1 unless every task is placed or unscheduled,
the reference agrees and the figures are inside ``--min-rate`` and
``--max-rss-gib`` (the peak is taken before the reference runs).

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

from bench_decisions import reference_rate  # noqa: E402
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
    ap.add_argument("--check", type=int, default=10, help="decisions the pure-Python reference repeats")
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
    peak = rss_gib()  # the scheduler's; the reference below keeps its own copy of the fleet in lists
    fleet = world.fleet
    del outcome, world
    ref = reference_rate(fleet, args.seed, args.check)
    failures = []
    if placed + unscheduled != args.tasks:
        failures.append(f"{placed} placed + {unscheduled} unscheduled != {args.tasks}")
    if rate < args.min_rate:
        failures.append(f"{rate:.0f} decisions/s, below {args.min_rate:g}")
    if peak > args.max_rss_gib:
        failures.append(f"peak RSS {peak:.2f} GiB, above {args.max_rss_gib:g}")
    if ref["agreed"] != args.check:
        failures.append(f"the reference agreed on {ref['agreed']} of {args.check} decisions")
    print(json.dumps({
        "benchmark": "a million pending tasks, one schedule pass", "nodes": args.nodes, "tasks": args.tasks,
        "applications": n_apps, "generate_s": round(t1 - t0, 1), "load_s": round(t2 - t1, 1),
        "schedule_s": round(t3 - t2, 1), "decisions_per_s": round(rate), "placed": placed,
        "unscheduled": unscheduled, "rss_gib_after_load": round(rss_loaded, 3), "peak_rss_gib": round(peak, 3),
        "reference": {**ref, "speedup": round(rate / ref["decisions_per_s"])},
        "ok": not failures, "failures": failures,
    }, indent=2))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
