"""Benchmark: what a placed, running task keeps in memory.

Loads the city (``examples/city-autodrive.yaml``) at ``--cars`` cars, then
simulates its first ``--until`` seconds, in which every car's services are
placed and run, with the event log streamed to a file (as ``suanli
simulate`` does). Prints JSON: the bytes retained by the run per task (what
the world held before it is not counted), by tracemalloc (``--trace``, with
the allocation sites that hold the most) or by the process's resident size
(its growth over the run; no tracing overhead, for sizes of millions); with
``--trace``, also what the world it runs in holds, a car (its fleet included). Fails
unless nearly every task was placed and is running.

    .venv/bin/python bench/bench_task_memory.py --cars 20000 --trace
    .venv/bin/python bench/bench_task_memory.py --cars 1000000
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parent / "examples" / "city-autodrive.yaml"


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cars", type=int, default=20_000)
    ap.add_argument("--until", type=float, default=30.0, help="simulated seconds (default 30: all placed)")
    ap.add_argument("--trace", action="store_true", help="count with tracemalloc, and list where it is held")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()

    from suanli.sim.simulation import Simulation
    from suanli.spec.build import load_world

    if args.trace:
        load_world([EXAMPLE], {"cars": "10"})  # (what loading imports and caches, before counting)
        tracemalloc.start(1)
    world = load_world([EXAMPLE], {"cars": str(args.cars)})
    gc.collect()
    world_bytes = tracemalloc.get_traced_memory()[0] if args.trace else 0
    with tempfile.TemporaryDirectory() as tmp:
        if args.trace:
            before = tracemalloc.take_snapshot()
        rss0 = rss_bytes()
        began = time.perf_counter()
        sim = Simulation(world, seed=1, until=args.until, events_to=Path(tmp) / "events.jsonl")
        sim.run()
        wall = time.perf_counter() - began
        gc.collect()
        rss1 = rss_bytes()
        counts = sim.view.counts()
        tasks = sum(counts.values())
        out: dict = {"benchmark": "memory a placed task keeps", "cars": args.cars, "until_s": args.until,
                     "tasks": tasks, "running": counts["running"], "pending": counts["pending"],
                     "run_s": round(wall, 2), "rss_growth_bytes_per_task": round((rss1 - rss0) / tasks)}
        if args.trace:
            stats = tracemalloc.take_snapshot().compare_to(before, "lineno")
            tracemalloc.stop()
            out["traced_bytes_per_task"] = round(sum(s.size_diff for s in stats) / tasks)
            out["world_traced_bytes_per_car"] = round(world_bytes / args.cars)  # its fleet included
            out["held_at"] = [{"where": f"{Path(s.traceback[0].filename).name}:{s.traceback[0].lineno}",
                               "bytes_per_task": round(s.size_diff / tasks, 1),
                               "objects_per_task": round(s.count_diff / tasks, 2)}
                              for s in stats[:args.top]]
        sim.events.close()
    print(json.dumps(out, indent=1))
    ok = tasks >= 3 * args.cars and counts["running"] >= 0.99 * tasks
    if not ok:
        print(f"expected about {3 * args.cars} tasks, nearly all running: {counts}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
