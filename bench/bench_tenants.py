"""Benchmark: weighted fair share with 10,000 tenants.

Generates, from a fixed seed, a fleet (the generated fleet of
``bench_static.py``, default 1,000 nodes) and a workload of many tenants
(default 10,000, weights 1 to 4) holding 20,000 pending cpu-and-memory tasks
spread over them at random, all on their default virtual clusters. Measures,
best of ``--repeat``:

- ``schedule``: the static schedule (``scheduling.static.schedule``);
- ``business_pass``: one business-layer pass over all units on a fresh
  state (the global layer's hosts placed first, not timed);
- ``all_shares``: the weighted dominant share of every tenant at once, as the
  rescheduler, the simulator and the metrics read it.

Checks the work done (every task placed or unscheduled, at least
``--min-placed`` of them placed, every tenant with a share), prints one JSON
object and exits with status 1 if a check fails.

    .venv/bin/python bench/bench_tenants.py [--nodes 1000] [--tenants 10000] [--tasks 20000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_static import make_fleet  # noqa: E402

from suanli.scheduling.business_layer import BusinessLayer, build_units  # noqa: E402
from suanli.scheduling.global_layer import GlobalLayer  # noqa: E402
from suanli.scheduling.policies import policy_for  # noqa: E402
from suanli.scheduling.state import PlacementState  # noqa: E402
from suanli.scheduling.static import schedule  # noqa: E402
from suanli.spec.build import load_world  # noqa: E402


def make_work(n_tenants: int, n_tasks: int, rng: np.random.Generator) -> list[dict]:
    """Tenant documents and Applications of one to three replicas, each of a
    tenant drawn at random, holding exactly ``n_tasks`` tasks."""
    docs = [{"apiVersion": "suanli/v1", "kind": "Tenant", "metadata": {"name": f"t{i:05d}"},
             "spec": {"weight": int(rng.integers(1, 5))}} for i in range(n_tenants)]
    left, app_no = n_tasks, 0
    while left > 0:
        replicas = min(int(rng.integers(1, 4)), left)
        left -= replicas
        comp = {"name": "c", "lifetime": "service", "replicas": replicas,
                "resources": {"cpu": str(rng.choice(["250m", "500m", "1", "2"])),
                              "memory": str(rng.choice(["256Mi", "1Gi", "2Gi"]))}}
        docs.append({"apiVersion": "suanli/v1", "kind": "Application",
                     "metadata": {"name": f"a{app_no:05d}", "tenant": f"t{int(rng.integers(n_tenants)):05d}"},
                     "spec": {"priority": int(rng.choice([0, 100])), "components": [comp]}})
        app_no += 1
    return docs


def write_world(out: Path, n_nodes: int, n_tenants: int, n_tasks: int, seed: int) -> list[Path]:
    """Write the fleet and the work as YAML into ``out``; return the paths."""
    rng = np.random.default_rng(seed)
    fleet, _ = make_fleet(n_nodes, rng)
    out.mkdir(parents=True, exist_ok=True)
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    paths = [out / "tenants-fleet.yaml", out / "tenants-work.yaml"]
    for path, docs in zip(paths, ([fleet], make_work(n_tenants, n_tasks, rng))):
        path.write_text(yaml.dump_all(docs, Dumper=dumper, sort_keys=False), encoding="utf-8")
    return paths


def all_shares(state: PlacementState) -> np.ndarray:
    """Every tenant's weighted dominant share, the vectorized way when the
    state has it."""
    if hasattr(state, "dominant_shares"):
        return state.dominant_shares()
    return np.array([state.dominant_share(t) for t in state.world.tenants])


def business_pass(world) -> tuple[float, int, int]:
    """One business-layer pass over every unit on a fresh state: seconds,
    tasks placed, tasks unscheduled."""
    rng = np.random.default_rng(world.seed)
    state = PlacementState(world)
    global_layer = GlobalLayer(state, rng)
    global_layer.place_initial()
    units = build_units(world.apps)
    business = BusinessLayer(state, global_layer, rng, policy=policy_for(world, None))
    t0 = time.perf_counter()
    business.run(units)
    return time.perf_counter() - t0, len(state.placements), len(business.unscheduled)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--tenants", type=int, default=10_000)
    ap.add_argument("--tasks", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--min-placed", type=float, default=0.9)
    ap.add_argument("--out", type=Path, default=HERE / "out")
    args = ap.parse_args(argv)

    world = load_world(write_world(args.out, args.nodes, args.tenants, args.tasks, args.seed))
    times: dict[str, float] = {"schedule": float("inf"), "business_pass": float("inf"), "all_shares": float("inf")}
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        outcome = schedule(world)
        times["schedule"] = min(times["schedule"], time.perf_counter() - t0)
        t0 = time.perf_counter()
        shares = all_shares(outcome.state)
        times["all_shares"] = min(times["all_shares"], time.perf_counter() - t0)
        seconds, placed, unscheduled = business_pass(world)
        times["business_pass"] = min(times["business_pass"], seconds)

    n_placed = len(outcome.state.placements)
    errors = []
    if n_placed + len(outcome.unscheduled) != args.tasks or placed + unscheduled != args.tasks:
        errors.append("placed + unscheduled != tasks")
    if n_placed < args.min_placed * args.tasks:
        errors.append(f"only {n_placed} of {args.tasks} tasks placed")
    if placed != n_placed:
        errors.append("the business pass placed a different number of tasks than the schedule")
    if len(shares) != args.tenants or not np.all(np.isfinite(shares)) or not (shares > 0).any():
        errors.append("shares missing or not finite")
    tenants_used = len({p.tenant for p in outcome.state.placements.values()})
    print(json.dumps({"nodes": world.fleet.n_nodes, "tenants": len(world.tenants), "tasks": args.tasks,
                      "placed": n_placed, "tenants_placed": tenants_used,
                      "seconds": {k: round(v, 4) for k, v in times.items()},
                      "errors": errors}, indent=2))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
