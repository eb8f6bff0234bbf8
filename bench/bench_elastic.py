"""What a resize decision costs, and Pollux's workloads under each elastic policy.

1. ``decide``: one pass of ``scheduling/elastic.py`` over ``--gangs``
   running elastic gangs (widths 1..64 of one-GPU members, measured-like
   concave speed-ups with noise, random work left and restart costs),
   several tenants with weights and quotas, room for about half of what
   they would take: the median and the worst of ``--repeat`` passes, per
   policy, and how many gangs changed width (the pass is not vacuous);
   the first call apart (it loads the compiled loop).
2. ``simulation``: a simulation's turns over ``--sim-gangs`` elastic gangs
   (``bench_simulation``).
3. ``hosts``: hosts that follow (``bench_hosts``): one gang in an explicit
   VC of whole 8-GPU hosts (1 to ``--vc-hosts`` of them) grown from 8
   members to all the hosts can hold at the first turn: the turn's time,
   the hosts grown and the width reached.
4. ``pollux``: ``suanli experiment pollux``'s replay of every workload in
   ``--workloads`` under none, greedy and goodput: average JCT beside the
   artifact's Pollux, Optimus and Tiresias at ``--load``.

Prints one JSON object.

    .venv/bin/python bench/bench_elastic.py [--gangs 1000] [--repeat 20] [--sim-gangs 1000,3000]
        [--vc-hosts 32,320] [--workloads ../shared/data/pollux-osdi21/workloads] [--load 1.0]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from suanli.experiments import pollux
from suanli.model.profiles import Profile
from suanli.scheduling.elastic import Jobs, decide

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "pollux-osdi21"


def gangs(n: int, rng: np.random.Generator, tenants: int = 20) -> tuple[Jobs, float, np.ndarray, np.ndarray]:
    top = 64
    w = np.arange(top + 1)
    alpha = rng.uniform(0.4, 0.95, n)
    noise = 1 + 0.03 * rng.standard_normal((n, top + 1))
    speed = np.where(w[None, :] > 0, (w[None, :] ** alpha[:, None]) * noise, 0.0)
    most = rng.integers(1, top + 1, n)
    current = np.minimum(rng.integers(0, top + 1, n), most)
    room = float((most * 0.5).sum())
    while current.sum() > 0.9 * room:  # what runs fits
        current[rng.integers(0, n)] = 0
    jobs = Jobs(current=current, least=np.ones(n, dtype=np.int64), most=most, units=np.ones(n), speed=speed,
                left=rng.uniform(60, 1e6, n), waited=rng.uniform(0, 1e5, n), alone=rng.uniform(60, 1e5, n),
                restart=rng.uniform(10, 60, n), order=np.arange(n, dtype=float),
                tenant=rng.integers(0, tenants, n), preemptible=rng.random(n) < 0.9)
    return jobs, room, rng.uniform(1, 4, tenants), rng.uniform(room / tenants, 3 * room / tenants, tenants)


def bench_decide(n: int, repeat: int) -> dict:
    rng = np.random.default_rng(7)
    out = {}
    jobs, room, shares, quotas = gangs(n, rng)
    t0 = time.perf_counter()
    decide("goodput", jobs, room, shares=shares, quotas=quotas)  # the compiled loop's first call
    out["first_call_ms"] = round(1e3 * (time.perf_counter() - t0), 1)
    for policy in ("none", "greedy", "goodput"):
        times, changed = [], []
        for _ in range(repeat):
            jobs, room, shares, quotas = gangs(n, rng)
            t0 = time.perf_counter()
            width = decide(policy, jobs, room, shares=shares, quotas=quotas)
            times.append(time.perf_counter() - t0)
            assert (width * jobs.units).sum() <= room + 1e-9
            changed.append(int((width != jobs.current).sum()))
        out[policy] = {"median_ms": round(1e3 * float(np.median(times)), 2), "max_ms": round(1e3 * max(times), 2),
                       "changed_median": int(np.median(changed))}
    assert out["goodput"]["changed_median"] > 0
    return out


def timed_turns(sim) -> list[float]:
    """Run ``sim``; the seconds each of its elastic turns took."""
    from suanli.sim import elastic

    turns: list[float] = []
    turn = elastic.Resizer.turn

    def timed(self, t):
        t0 = time.perf_counter()
        turn(self, t)
        turns.append(time.perf_counter() - t0)
    elastic.Resizer.turn = timed
    try:
        sim.run()
    finally:
        elastic.Resizer.turn = turn
    return turns


def bench_simulation(n: int, policy: str = "goodput") -> dict:
    """A simulation's turns over ``n`` elastic gangs (4-32 one-GPU members,
    up to twice that, a measured table each; ten tenants) arriving over two
    hours on ib domains of 32 nodes x 8 GPUs (one domain per 16 gangs): the
    median and the worst turn (the decision and the resizes' placements)."""
    import random
    import tempfile

    import yaml

    from suanli.sim.simulation import Simulation
    from suanli.spec.build import load_world

    rnd = random.Random(3)
    groups = [{"name": f"g{d}", "count": 32, "arch": "x86_64", "cpu": 128, "memory": "1Ti",
               "fabrics": {"ib": f"ib-{d}"}, "accelerators": [{"kind": "gpu", "model": "A100", "count": 8}]}
              for d in range(max(1, n // 16))]
    docs = [{"apiVersion": "suanli/v1", "kind": "Fleet", "metadata": {"name": "f"},
             "spec": {"sites": [{"name": "dc", "tier": "cloud", "nodeGroups": groups}]}}]
    docs += [{"apiVersion": "suanli/v1", "kind": "Tenant", "metadata": {"name": f"t{k}"}, "spec": {"weight": 1 + k % 3}}
             for k in range(10)]
    arrivals = []
    for i in range(n):
        size = rnd.choice([4, 8, 16, 32])
        docs.append({"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": f"j{i}", "tenant": f"t{i % 10}"},
                     "spec": {"components": [{"name": "train", "lifetime": "job", "coupling": "ib",
                                              "gang": {"size": size, "minSize": max(1, size // 4), "maxSize": size * 2,
                                                       "resizeCost": "30s"},
                                              "resources": {"cpu": 4, "memory": "16Gi",
                                                            "accelerators": [{"kind": "gpu", "count": 1}]},
                                              "work": f"{rnd.choice([10, 50, 200])}h",
                                              "scaling": {"table": {1: 1, 2: 1.9, 4: 3.6, 8: 6.5, 16: 11, 32: 18,
                                                                    64: 26}}}]}})
        arrivals.append({"app": f"j{i}", "at": f"{rnd.randint(0, 7200)}s"})
    docs.append({"apiVersion": "suanli/v1", "kind": "Scenario", "metadata": {"name": "s"},
                 "spec": {"until": "4h", "policy": {"elastic": policy}, "arrivals": arrivals}})
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "w.yaml"
        path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
        sim = Simulation(load_world([path]), seed=1)
    t0 = time.perf_counter()
    turns = timed_turns(sim)
    wall = time.perf_counter() - t0
    assert sim.shard.resizer.resizes > 0 and turns
    return {"gangs": n, "turns": len(turns), "resizes": sim.shard.resizer.resizes,
            "turn_median_ms": round(1e3 * float(np.median(turns)), 1), "turn_max_ms": round(1e3 * max(turns), 1),
            "wall_s": round(wall, 1)}


def bench_hosts(hosts: int) -> dict:
    """One gang (8 one-GPU members, up to 8 per host) in a VC of whole-node
    hosts, 1 to ``hosts`` of them, on ``hosts`` nodes of 8 GPUs in one ib
    domain: the first turn grows it to every GPU, its hosts with it."""
    import tempfile

    import yaml

    from suanli.sim.simulation import Simulation
    from suanli.spec.build import load_world

    docs = [{"apiVersion": "suanli/v1", "kind": "Fleet", "metadata": {"name": "f"},
             "spec": {"sites": [{"name": "dc", "tier": "cloud", "nodeGroups": [
                 {"name": "g", "count": hosts, "arch": "x86_64", "cpu": 128, "memory": "1Ti", "fabrics": {"ib": "ib-0"},
                  "accelerators": [{"kind": "gpu", "model": "A100", "count": 8}]}]}]}},
            {"apiVersion": "suanli/v1", "kind": "Tenant", "metadata": {"name": "t"}, "spec": {}},
            {"apiVersion": "suanli/v1", "kind": "VirtualCluster", "metadata": {"name": "pool", "tenant": "t"},
             "spec": {"hostGroups": [{"name": "gpus", "min": 1, "max": hosts, "resources": "whole",
                                      "coupling": "ib"}]}},
            {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": "j", "tenant": "t"},
             "spec": {"virtualCluster": "pool", "components": [
                 {"name": "train", "lifetime": "job", "coupling": "ib",
                  "gang": {"size": 8, "minSize": 1, "maxSize": 8 * hosts, "resizeCost": "30s"},
                  "resources": {"cpu": 4, "memory": "16Gi", "accelerators": [{"kind": "gpu", "count": 1}]},
                  "work": f"{100 * hosts}h", "scaling": {"efficiency": 0.95}}]}},
            {"apiVersion": "suanli/v1", "kind": "Scenario", "metadata": {"name": "s"},
             "spec": {"until": "61s", "policy": {"elastic": "goodput"}, "arrivals": [{"app": "j", "at": "0s"}]}}]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "w.yaml"
        path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
        sim = Simulation(load_world([path]), seed=1)
    turns = timed_turns(sim)
    events = sim.events.take()
    resized = [e for e in events if e["kind"] == "resized"]
    assert resized and turns
    return {"vc_hosts_max": hosts, "hosts": sum(1 for e in events if e["kind"] == "hostAdded"),
            "width": resized[-1]["to"], "turn_ms": round(1e3 * max(turns), 1)}


def bench_pollux(workloads: Path, load: float) -> dict:
    profiles = {d.name: Profile.load(d) for d in sorted((DATA / "traces").iterdir()) if d.is_dir()}
    out = {}
    for path in sorted(workloads.glob("workload-*.csv"), key=lambda p: int(p.stem.split("-")[1])):
        jobs = pollux.load_workload(path)
        row = {}
        for policy in ("none", "greedy", "goodput"):
            run = pollux.replay(jobs, profiles, policy, path.stem)
            s = run.summary()
            assert s["jobs"] == len(jobs)
            row[policy] = s["avg_jct_s"]
            row[f"{policy}_replay_s"] = s["replay_s"]
        for name, ref in pollux.artifact(DATA, path.stem, load).items():
            row[f"artifact_{name}"] = ref["avg_jct_s"]
        if "artifact_pollux" in row:
            row["goodput_vs_pollux"] = round(row["goodput"] / row["artifact_pollux"], 3)
        row["goodput_vs_none"] = round(row["goodput"] / row["none"], 3)
        out[path.stem] = row
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gangs", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--workloads", type=Path, default=DATA / "workloads")
    ap.add_argument("--load", type=float, default=1.0)
    ap.add_argument("--sim-gangs", default="1000", help="gangs of the simulations, comma-separated (0: none)")
    ap.add_argument("--vc-hosts", default="32,320", help="the most hosts of the VC whose hosts follow (0: none)")
    args = ap.parse_args()
    sims = [bench_simulation(int(n)) for n in args.sim_gangs.split(",") if int(n) > 0]
    hosts = [bench_hosts(int(n)) for n in args.vc_hosts.split(",") if int(n) > 0]
    print(json.dumps({"decide": {"gangs": args.gangs, **bench_decide(args.gangs, args.repeat)},
                      "simulation": sims, "hosts": hosts, "pollux": bench_pollux(args.workloads, args.load)}, indent=1))


if __name__ == "__main__":
    main()
