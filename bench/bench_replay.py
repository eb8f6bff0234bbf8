"""Benchmark: a long trace replayed through the simulator, end to end.

Builds, from a seed, an openb-format trace much larger than the published
one and replays it with ``suanli simulate`` (the real CLI, as a subprocess):

- nodes: the openb node list (all 1,523 nodes: cpu-only and GPU nodes of
  several models) repeated under new names up to ``--nodes`` (10,000);
- pods: ``--tasks`` pods (1,000,000) drawn with replacement from the openb
  default trace (cpu, memory, GPUs, GPU share, allowed models), arriving at
  a steady ``--rate`` (a million a day, 11.6 per second: a busy 10,000-node
  cluster), each staying for a lifetime drawn from the trace's own
  lifetimes, scaled so that about ``--concurrency`` pods (40,000) run at
  once (at the default rate, 58 minutes on average): every pod arrives and
  leaves inside the replay.

It records wall time and the child's peak resident memory, and fails unless
result.json accounts for every pod (each in exactly one final state) and the
figures are inside ``--max-s`` and ``--max-rss-gib``. For scale, the
pure-Python reference of ``bench_decisions.py`` then decides ``--check``
pods (100) on the same nodes after the trace's first ``--warm`` (20,000)
were placed there, as the scheduler's placement step does them (the two
must agree), and the speed-up is the replay's pods
per second (arrivals, departures and outputs included) over the reference's
decisions per second (deciding only).

    .venv/bin/python bench/bench_replay.py [--nodes 10000] [--tasks 1000000] [--seed 42]
"""

from __future__ import annotations

import argparse
import csv
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
DATA = ROOT.parent / "shared" / "data" / "alibaba-gpu-2023"


def write_trace(out: Path, n_nodes: int, n_tasks: int, concurrency: int, seed: int,
                rate: float = 1e6 / 86_400) -> Path:
    """nodes.csv, pods.csv and scenario.yaml in ``out``; the scenario's path."""
    rng = np.random.default_rng(seed)
    out.mkdir(parents=True, exist_ok=True)
    with open(DATA / "openb_node_list_all_node.csv", newline="") as f:
        rows = list(csv.reader(f))
    header, nodes = rows[0], rows[1:]
    with open(out / "nodes.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        for i in range(n_nodes):
            src = nodes[i % len(nodes)]
            w.writerow([f"node-{i:06d}", *src[1:]])
    with open(DATA / "openb_pod_list_default.csv", newline="") as f:
        reader = csv.DictReader(f)
        pods = [r for r in reader]
    life = np.array([int(p["deletion_time"]) - int(p["creation_time"]) for p in pods], float)
    life = life[life > 0]
    horizon = n_tasks / rate  # seconds of arrivals
    scale = concurrency / (rate * life.mean())  # Little: running = rate x mean lifetime
    pick = rng.integers(len(pods), size=n_tasks)
    arrive = np.sort(rng.uniform(0, horizon, n_tasks)).round().astype(np.int64)
    stay = np.maximum(1, (rng.choice(life, n_tasks) * scale).round()).astype(np.int64)
    cols = ["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos", "pod_phase",
            "creation_time", "deletion_time", "scheduled_time"]
    with open(out / "pods.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for i, (k, a, s) in enumerate(zip(pick.tolist(), arrive.tolist(), stay.tolist())):
            p = pods[k]
            w.writerow([f"pod-{i:07d}", p["cpu_milli"], p["memory_mib"], p["num_gpu"], p["gpu_milli"],
                        p["gpu_spec"], p["qos"], "Running", a, a + s, a])
    scenario = out / "scenario.yaml"
    scenario.write_text(
        "apiVersion: suanli/v1\nkind: Tenant\nmetadata: {name: alibaba}\n---\n"
        "apiVersion: suanli/v1\nkind: Scenario\nmetadata: {name: replay}\nspec:\n  traces:\n"
        "    - {format: openb, tenant: alibaba, nodes: nodes.csv, pods: pods.csv}\n")
    return scenario


def reference(scenario: Path, n: int, seed: int, warm: int) -> dict:
    """The trace's first ``warm`` pods placed on the replay's own nodes by the
    scheduler's placement step, and the next ``n`` decided by it and by the
    pure-Python reference of ``bench_decisions.py`` (which must agree), with no
    departures: the reference's decisions per second on this work."""
    from itertools import islice

    from bench_decisions import decide

    from suanli.scheduling.request import compile_request
    from suanli.sim.workload import openb_arrivals
    from suanli.spec.build import load_world

    world = load_world([scenario])
    fleet = world.fleet
    everywhere = {"arch": set(fleet.node_arch.tolist()), "sites": set(range(len(fleet.sites)))}
    shapes, order, index = [], [], {}
    for arrival in islice(openb_arrivals(world.scenario.spec.traces[0], world.base_dir, fleet), warm + n):
        comp = arrival.app.components[0]
        res, near = comp.resources, comp.near
        if (res, near) in index:  # pods of one shape share one request, as in the simulator
            order.append(index[res, near])
            continue
        order.append(index.setdefault((res, near), len(shapes)))
        acc = res.accelerators[0] if res.accelerators else None
        models = None if acc is None or acc.models is None else {fleet.models.get(m) for m in acc.models}
        plain = {"vec": None, "kind": fleet.kinds.get(acc.kind) if acc else None, "milli": acc.milli if acc else 0,
                 "models": models, "near": fleet.site_index[near.site] if near else None, **everywhere}
        req = compile_request(fleet, res, near=near)
        plain["vec"] = req.vec.tolist()
        shapes.append((req, plain))
    got = decide(fleet, shapes, order, warm + n + 1, seed, n, warm)["reference"]
    return {"what": f"the trace's {n} pods after its first {warm} on these nodes", "decisions": got["decisions"],
            "agreed": got["agreed"], "decisions_per_s": got["decisions_per_s"]}


def check(result: dict, n_tasks: int) -> list[str]:
    tasks = result.get("metrics", {}).get("tasks", {})
    failures = []
    if tasks.get("submitted") != n_tasks:
        failures.append(f"{tasks.get('submitted')} pods submitted, expected {n_tasks}")
    states = {k: v for k, v in tasks.items() if k not in ("submitted",) and isinstance(v, int)}
    if sum(states.values()) != n_tasks:
        failures.append(f"final states {states} do not add up to {n_tasks}")
    return failures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--tasks", type=int, default=1_000_000)
    ap.add_argument("--concurrency", type=int, default=40_000)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--rate", type=float, default=1e6 / 86_400, help="arrivals per second (default: a million a day)")
    ap.add_argument("--max-s", type=float, default=300.0)
    ap.add_argument("--max-rss-gib", type=float, default=2.0)
    ap.add_argument("--check", type=int, default=100, help="pods the pure-Python reference decides")
    ap.add_argument("--warm", type=int, default=20_000, help="pods placed before the reference takes over")
    ap.add_argument("--out", type=Path, default=HERE / "out" / "replay")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    scenario = write_trace(args.out, args.nodes, args.tasks, args.concurrency, args.seed, args.rate)
    gen_s = time.perf_counter() - t0
    result_dir = args.out / "run"
    cmd = [sys.executable, "-m", "suanli.cli", "simulate", str(scenario), "--out", str(result_dir)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    rss_gib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    failures = []
    if proc.returncode != 0:
        failures.append(f"suanli simulate exited {proc.returncode}: {proc.stderr[-2000:]}")
        result = {}
    else:
        result = json.loads((result_dir / "result.json").read_text())
        failures += check(result, args.tasks)
    ref = reference(scenario, args.check, args.seed, args.warm)
    if ref["agreed"] != args.check:
        failures.append(f"the reference agreed on {ref['agreed']} of {args.check} pods")
    if wall > args.max_s:
        failures.append(f"{wall:.1f} s, more than {args.max_s:g} s")
    if rss_gib > args.max_rss_gib:
        failures.append(f"peak RSS {rss_gib:.2f} GiB, more than {args.max_rss_gib:g} GiB")
    report = {
        "benchmark": "trace replay through suanli simulate",
        "command": " ".join(["suanli", *cmd[3:]]),
        "nodes": args.nodes, "tasks": args.tasks, "target_concurrency": args.concurrency,
        "arrivals_per_s": round(args.rate, 3),
        "generate_s": round(gen_s, 2), "wall_s": round(wall, 2), "peak_rss_gib": round(rss_gib, 3),
        "tasks_per_s": round(args.tasks / wall),
        "result_tasks": result.get("metrics", {}).get("tasks"),
        "reference": {**ref, "speedup": round(args.tasks / wall / ref["decisions_per_s"])},
        "ok": not failures, "failures": failures,
    }
    print(json.dumps(report, indent=2))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
