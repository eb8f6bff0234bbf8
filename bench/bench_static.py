"""Benchmark: one static placement of a large generated world.

Generates, from a fixed seed, a fleet (default 10,000 nodes over 40 cloud,
edge and device sites) and a workload (default exactly 20,000 tasks of several
weighted tenants, all on their default virtual clusters), writes them as YAML,
then measures:

- end to end: the real CLI as a subprocess,
  ``suanli schedule fleet.yaml work.yaml -o json > out.json``
  (start-up, loading, scheduling and output included), best of ``--repeat``;
- in process: the same work split into phases (``load_world``, ``schedule``,
  ``outcome_json``, ``json.dumps``), best of ``--repeat`` per phase, and the
  cost per placement decision in microseconds per task.

It checks the work done (every task is either placed or unscheduled, the
counts agree between the CLI and the in-process run, and at least
``--min-placed`` of the tasks are placed), prints one JSON object with the
figures and exits with status 1 if a check fails. ``--profile`` also runs one
in-process pass under cProfile and prints the top entries to stderr.

    .venv/bin/python bench/bench_static.py [--nodes 10000] [--tasks 20000] [--repeat 3] [--seed 42]
"""

from __future__ import annotations

import argparse
import cProfile
import copy
import gc
import io
import json
import os
import platform
import pstats
import resource
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_OUT = HERE / "out"
TARGET_S = 10.0  # end-to-end target for the default size

# ---------------------------------------------------------------- the fleet

# Site counts per tier and each tier's share of the nodes.
TIER_SITES = {"cloud": 8, "edge": 20, "device": 12}
TIER_SHARE = {"cloud": 0.75, "edge": 0.20, "device": 0.05}
REGIONS = ("north", "south", "east", "west")

def _dev(kind: str, model: str, count: int, memory: str | None = None,
         shareable: bool | None = None) -> dict:
    d = {"kind": kind, "model": model, "count": count, "memory": memory, "shareable": shareable}
    return {k: v for k, v in d.items() if v is not None}


def _node(arch: str, cpu: int, memory: str, fabrics: str | None = None, cost: float | None = None,
          devices: list[dict] | None = None) -> dict:
    """Fields of a node group; ``fabrics`` names a pattern of ``_fabrics``."""
    g: dict = {"arch": arch, "cpu": cpu, "memory": memory}
    if fabrics:
        g["fabrics"] = fabrics
    if cost is not None:
        g["costPerHour"] = cost
    if devices:
        g["accelerators"] = list(devices)
    return g


# Node-group templates per tier: (name, share of the site's nodes, probability
# that a site has this group, fields of the node group).
GROUPS = {
    "cloud": [
        ("cpu", 0.34, 1.0, _node("x86_64", 64, "256Gi", "roce", 2.5)),
        ("bigmem", 0.10, 1.0, _node("x86_64", 96, "768Gi", cost=6.0)),
        ("arm", 0.15, 1.0, _node("aarch64", 128, "512Gi", cost=2.0)),
        ("a100", 0.12, 1.0, _node("x86_64", 96, "1Ti", "ib+roce", 32.0,
                                  [_dev("gpu", "A100-80G", 8, "80Gi", True)])),
        ("h100", 0.08, 0.5, _node("x86_64", 112, "2Ti", "nvl+ib", 98.0,
                                  [_dev("gpu", "H100", 8, "80Gi", False)])),
        ("l40s", 0.12, 1.0, _node("x86_64", 64, "512Gi", "roce", 9.0,
                                  [_dev("gpu", "L40S", 4, "48Gi", True)])),
        ("ascend", 0.09, 0.5, _node("aarch64", 192, "1Ti", "roce-npu", 20.0,
                                    [_dev("npu", "Ascend-910B", 8, "64Gi")])),
    ],
    "edge": [
        ("cpu", 0.45, 1.0, _node("x86_64", 32, "64Gi")),
        ("arm", 0.20, 1.0, _node("aarch64", 32, "64Gi")),
        ("t4", 0.25, 1.0, _node("x86_64", 32, "128Gi",
                                devices=[_dev("gpu", "T4", 2, "16Gi", True)])),
        ("a10", 0.10, 0.6, _node("x86_64", 48, "192Gi", "roce",
                                 devices=[_dev("gpu", "A10", 4, "24Gi", True)])),
    ],
    "device": [
        ("soc", 0.70, 1.0, _node("aarch64", 12, "32Gi",
                                 devices=[_dev("npu", "Orin", 2, shareable=True)])),
        ("jetson", 0.20, 1.0, _node("aarch64", 8, "16Gi",
                                    devices=[_dev("gpu", "Jetson-Orin", 1, shareable=True)])),
        ("riscv", 0.10, 0.5, _node("riscv64", 4, "8Gi")),
    ],
}


def _split(total: int, weights: list[float]) -> list[int]:
    """Integers proportional to ``weights`` that sum to exactly ``total`` (largest remainder)."""
    w = np.asarray(weights, float)
    raw = total * w / w.sum()
    out = np.floor(raw).astype(int)
    for i in np.argsort(-(raw - out), kind="stable")[: total - int(out.sum())]:
        out[i] += 1
    return [int(x) for x in out]


def _fabrics(kind: str, site: str, group: str) -> dict[str, str]:
    return {
        "roce": {"roce": f"roce-{site}"},
        "ib+roce": {"ib": f"ib-{site}-{group}", "roce": f"roce-{site}"},
        "nvl+ib": {"coherent": f"nvl-{site}-{group}", "ib": f"ib-{site}-{group}"},
        "roce-npu": {"roce": f"roce-{site}-npu"},
    }[kind]


def make_fleet(n_nodes: int, rng: np.random.Generator) -> tuple[dict, dict[str, list[str]]]:
    """The Fleet document, and the site names per tier."""
    names: dict[str, list[str]] = {
        "cloud": [f"cloud-{REGIONS[i % 4]}-{i // 4 + 1}" for i in range(TIER_SITES["cloud"])],
        "edge": [f"edge-{i + 1:02d}" for i in range(TIER_SITES["edge"])],
        "device": [f"dev-{i + 1:02d}" for i in range(TIER_SITES["device"])],
    }
    tiers = list(TIER_SITES)
    per_tier = dict(zip(tiers, _split(n_nodes, [TIER_SHARE[t] for t in tiers])))
    sites = []
    for tier in tiers:
        weights = rng.uniform(0.6, 1.4, len(names[tier]))
        for i, (name, count) in enumerate(zip(names[tier], _split(per_tier[tier], list(weights)))):
            # every site has the tier's first group; the others by their probability
            chosen = [g for j, g in enumerate(GROUPS[tier]) if j == 0 or rng.random() < g[2]]
            groups = []
            for (gname, _, _, fields), gcount in zip(chosen, _split(count, [g[1] for g in chosen])):
                g = {"name": gname, "count": gcount}
                g.update({k: copy.deepcopy(v) for k, v in fields.items() if k != "fabrics"})
                if "fabrics" in fields:
                    g["fabrics"] = _fabrics(fields["fabrics"], name, gname)
                groups.append(g)
            region = REGIONS[i % 4] if tier != "cloud" else name.split("-")[1]
            sites.append({"name": name, "tier": tier, "region": region, "nodeGroups": groups})

    links = []
    clouds, edges, devices = names["cloud"], names["edge"], names["device"]
    for i, a in enumerate(clouds):  # a ring of clouds, plus chords across it
        links.append(_link(a, clouds[(i + 1) % len(clouds)], rng.uniform(15, 40), "100Gbps"))
    for i in range(0, len(clouds) // 2):
        links.append(_link(clouds[i], clouds[i + len(clouds) // 2], rng.uniform(30, 60), "40Gbps"))
    for i, e in enumerate(edges):  # each edge to its region's clouds; edges of a region in a chain
        same = [c for c in clouds if c.split("-")[1] == REGIONS[i % 4]] or clouds
        links.append(_link(e, same[0], rng.uniform(8, 25), "40Gbps"))
        if len(same) > 1 and rng.random() < 0.5:
            links.append(_link(e, same[1], rng.uniform(10, 30), "10Gbps"))
        if i >= 4:
            links.append(_link(e, edges[i - 4], rng.uniform(2, 6), "10Gbps"))
    for i, d in enumerate(devices):  # each device to one or two edges
        links.append(_link(d, edges[i % len(edges)], rng.uniform(4, 12), "200Mbps"))
        if rng.random() < 0.5:
            links.append(_link(d, edges[(i + 4) % len(edges)], rng.uniform(6, 15), "100Mbps"))
    doc = {"apiVersion": "suanli/v1", "kind": "Fleet", "metadata": {"name": "bench"},
           "spec": {"sites": sites, "links": links}}
    return doc, names


def _link(a: str, b: str, rtt: float, bandwidth: str) -> dict:
    return {"between": [a, b], "rttMs": round(float(rtt), 1), "bandwidth": bandwidth}


# ---------------------------------------------------------------- the workload

TENANTS = [  # name, weight, allowed sites (None: all)
    ("search", 3, None),
    ("vision", 2, ["cloud-*", "edge-*"]),
    ("llm", 4, ["cloud-*"]),
    ("iot", 1, ["edge-*", "dev-*"]),
    ("batch", 1, None),
    ("city", 2, ["cloud-*", "edge-*"]),
]

# Component classes: (name, share of tasks, tenants that submit it).
CLASSES = [
    ("web", 0.22, ["search", "city", "vision"]),  # cpu-only services
    ("batch", 0.22, ["batch", "search", "city"]),  # cpu-only jobs
    ("arm", 0.08, ["search", "batch", "city"]),  # aarch64-only
    ("frac-gpu", 0.18, ["vision", "llm", "search"]),  # gpu count 0.25 / 0.5
    ("whole-gpu", 0.10, ["llm", "vision"]),  # gpu count 1..8
    ("npu", 0.04, ["llm"]),  # whole Ascend NPUs
    ("near", 0.12, ["iot"]),  # latency bound to a device or edge site
    ("near-npu", 0.035, ["iot"]),  # fractional Orin NPU near a device
    ("impossible", 0.005, ["batch"]),  # an arch with no image on it, or bigger than any node
]
PRIORITIES = [0, 100, 300, 500, 700]


def _pick(rng: np.random.Generator, items):
    return items[int(rng.integers(len(items)))]


def make_component(cls: str, name: str, replicas: int, rng: np.random.Generator,
                   sites: dict[str, list[str]], tenant: str) -> dict:
    c: dict = {"name": name}
    job = cls in ("batch", "whole-gpu", "npu", "impossible") or (
        cls == "frac-gpu" and rng.random() < 0.3)
    c["lifetime"] = "job" if job else "service"
    c["replicas"] = replicas
    if cls == "web":
        res = {"cpu": _pick(rng, ["500m", 1, 2, 4]),
               "memory": _pick(rng, ["1Gi", "2Gi", "4Gi", "8Gi"])}
        if rng.random() < 0.5:
            c["platform"] = {"arch": ["x86_64", "aarch64"]}
    elif cls == "batch":
        res = {"cpu": _pick(rng, [1, 2, 4, 8, 16]),
               "memory": _pick(rng, ["2Gi", "8Gi", "16Gi", "64Gi"])}
        if rng.random() < 0.5:
            c["platform"] = {"arch": ["x86_64"]}
        if rng.random() < 0.2:
            c["data"] = {"source": _pick(rng, sites["cloud"])}
    elif cls == "arm":
        res = {"cpu": _pick(rng, [2, 4, 8]), "memory": _pick(rng, ["4Gi", "8Gi", "16Gi"])}
        c["platform"] = {"arch": ["aarch64"]}
    elif cls == "frac-gpu":
        accel = {"kind": "gpu", "count": _pick(rng, [0.25, 0.25, 0.5])}
        models = [None, None, ["L40S", "A100-80G"], ["A100-80G"]]
        if tenant != "llm":  # llm may only use cloud sites, where there are no T4 or A10
            models.append(["T4", "A10"])
        model = _pick(rng, models)
        if model:
            accel["model"] = model
        res = {"cpu": _pick(rng, [2, 4, 8]), "memory": _pick(rng, ["8Gi", "16Gi", "32Gi"]),
               "accelerators": [accel]}
    elif cls == "whole-gpu":
        accel = {"kind": "gpu", "count": _pick(rng, [1, 1, 2, 4, 8])}
        model = _pick(rng, [None, ["A100-80G", "H100"], ["H100"], ["L40S", "A100-80G"]])
        if model:
            accel["model"] = model
        n = accel["count"]
        res = {"cpu": 8 * n, "memory": f"{64 * n}Gi", "accelerators": [accel]}
        c["platform"] = {"arch": ["x86_64"]}
    elif cls == "npu":
        n = _pick(rng, [1, 2, 4])
        res = {"cpu": 16 * n, "memory": f"{64 * n}Gi",
               "accelerators": [{"kind": "npu", "model": "Ascend-910B", "count": n}]}
        c["platform"] = {"arch": ["aarch64"]}
    elif cls == "near":
        res = {"cpu": _pick(rng, ["250m", "500m", 1, 2]),
               "memory": _pick(rng, ["256Mi", "512Mi", "1Gi", "2Gi"])}
        target = _pick(rng, sites["device"] + sites["edge"])
        bound = _pick(rng, [1, 10, 20, 30]) if target.startswith("dev-") else _pick(rng, [1, 5, 15])
        c["near"] = {"site": target, "maxRttMs": bound}
    elif cls == "near-npu":
        res = {"cpu": _pick(rng, [1, 2]), "memory": _pick(rng, ["1Gi", "2Gi"]),
               "accelerators": [{"kind": "npu", "model": "Orin", "count": _pick(rng, [0.25, 0.5])}]}
        c["near"] = {"site": _pick(rng, sites["device"]), "maxRttMs": _pick(rng, [1, 15])}
    else:  # impossible
        if rng.random() < 0.5:
            res = {"cpu": 1, "memory": "1Gi"}
            c["platform"] = {"arch": ["ppc64le"]}
        else:
            res = {"cpu": 256, "memory": "8Gi"}
    c["resources"] = res
    if job:
        c["duration"] = _pick(rng, ["10m", "30m", "1h", "2h"])
    return c


def make_workload(n_tasks: int, rng: np.random.Generator,
                  sites: dict[str, list[str]]) -> list[dict]:
    """Tenant and Application documents holding exactly ``n_tasks`` tasks."""
    docs = []
    for name, weight, allowed in TENANTS:
        spec: dict = {"weight": weight}
        if allowed:
            spec["allowedSites"] = allowed
        docs.append({"apiVersion": "suanli/v1", "kind": "Tenant", "metadata": {"name": name},
                     "spec": spec})
    shares = np.array([s for _, s, _ in CLASSES])
    shares /= shares.sum()
    left = n_tasks
    app_no = 0
    while left > 0:
        cls_i = int(rng.choice(len(CLASSES), p=shares))
        cls, _, tenants = CLASSES[cls_i]
        tenant = _pick(rng, tenants)
        comps = []
        for k in range(int(rng.integers(1, 4))):  # one to three components per application
            if left == 0:
                break
            if cls in ("whole-gpu", "npu"):
                replicas = int(rng.integers(1, 9))
            elif cls == "impossible":
                replicas = int(rng.integers(1, 5))
            else:
                replicas = int(rng.integers(2, 41))
            replicas = min(replicas, left)
            left -= replicas
            comps.append(make_component(cls, f"c{k}", replicas, rng, sites, tenant))
        docs.append({
            "apiVersion": "suanli/v1",
            "kind": "Application",
            "metadata": {"name": f"{cls}-{app_no:05d}", "tenant": tenant},
            "spec": {"priority": _pick(rng, PRIORITIES), "components": comps},
        })
        app_no += 1
    return docs


def make_gang_workload(n_gangs: int, size: int, rng: np.random.Generator) -> list[dict]:
    """A tenant's ``n_gangs`` applications, each one gang of ``size`` members
    coupled over InfiniBand: every other gang needs a GPU per member (any
    model), the rest cpu and memory only."""
    docs = [{"apiVersion": "suanli/v1", "kind": "Tenant", "metadata": {"name": "train"}, "spec": {"weight": 1}}]
    for i in range(n_gangs):
        res: dict = {"cpu": int(rng.choice([4, 8])), "memory": f"{int(rng.choice([16, 32, 64]))}Gi"}
        if i % 2 == 0:
            res["accelerators"] = [{"kind": "gpu", "count": 1}]
        comp = {"name": "worker", "lifetime": "job", "duration": "1h", "gang": {"size": size},
                "coupling": "ib", "resources": res}
        docs.append({"apiVersion": "suanli/v1", "kind": "Application",
                     "metadata": {"name": f"gang-{i:04d}", "tenant": "train"},
                     "spec": {"priority": _pick(rng, PRIORITIES), "components": [comp]}})
    return docs


def write_world(out: Path, n_nodes: int, n_tasks: int, seed: int,
                gangs: int = 0, gang_size: int = 16) -> tuple[Path, Path, int]:
    """Write fleet.yaml and work.yaml into ``out``; also return the number of
    applications. With ``gangs``, the work is that many ib gangs of ``gang_size``."""
    rng = np.random.default_rng(seed)
    fleet, sites = make_fleet(n_nodes, rng)
    work = make_gang_workload(gangs, gang_size, rng) if gangs else make_workload(n_tasks, rng, sites)
    out.mkdir(parents=True, exist_ok=True)
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    fleet_path, work_path = out / "fleet.yaml", out / "work.yaml"
    what = f"--gangs {gangs} --gang-size {gang_size}" if gangs else f"--tasks {n_tasks}"
    header = f"# generated by bench/bench_static.py --nodes {n_nodes} {what} --seed {seed}\n"
    for path, docs in ((fleet_path, [fleet]), (work_path, work)):
        text = yaml.dump_all(docs, Dumper=dumper, sort_keys=False, default_flow_style=None,
                             width=120)
        path.write_text(header + text, encoding="utf-8")
    return fleet_path, work_path, sum(1 for d in work if d["kind"] == "Application")


# ---------------------------------------------------------------- measuring


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_cli(suanli: Path, files: list[Path], out_json: Path,
            repeat: int) -> tuple[list[float], list[float]]:
    """Wall seconds and CPU seconds (user + system) of each end-to-end CLI run,
    stdout to ``out_json``. CPU time is the steadier figure on a busy machine."""
    walls, cpus = [], []
    for _ in range(repeat):
        with open(out_json, "wb") as fh:
            c0 = _children_cpu()
            t0 = time.perf_counter()
            proc = subprocess.run([str(suanli), "schedule", *map(str, files), "-o", "json"],
                                  stdout=fh, stderr=subprocess.PIPE)
            walls.append(time.perf_counter() - t0)
            cpus.append(_children_cpu() - c0)
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr.decode(errors="replace"))
            raise SystemExit(f"suanli schedule exited with status {proc.returncode}")
    return walls, cpus


def run_in_process(files: list[Path]) -> tuple[dict[str, float], dict[str, float], dict, int]:
    """One in-process run: wall and CPU seconds per phase, the result, the fleet's node count."""
    from suanli.output import outcome_json
    from suanli.scheduling.static import schedule
    from suanli.spec.build import load_world

    names = ("load_world", "schedule", "outcome_json", "json_dumps")
    walls, cpus = [time.perf_counter()], [time.process_time()]

    def lap() -> None:
        walls.append(time.perf_counter())
        cpus.append(time.process_time())

    world = load_world(files)
    lap()
    outcome = schedule(world, None)
    lap()
    result = outcome_json(outcome)
    lap()
    json.dumps(result, indent=2)
    lap()
    phases = {n: walls[i + 1] - walls[i] for i, n in enumerate(names)}
    phases_cpu = {n: cpus[i + 1] - cpus[i] for i, n in enumerate(names)}
    return phases, phases_cpu, result, world.fleet.n_nodes


def profile_in_process(files: list[Path], top: int, dump: Path) -> None:
    """One in-process run under cProfile; the top entries by cumulative time, then the
    package's own functions by own time, go to stderr."""
    prof = cProfile.Profile()
    prof.enable()
    run_in_process(files)
    prof.disable()
    prof.dump_stats(str(dump))
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf)
    stats.sort_stats("cumulative").print_stats(top)
    buf.write("Inside src/suanli, by own time:\n")
    stats.sort_stats("tottime").print_stats(r"src/suanli", 15)
    sys.stderr.write(buf.getvalue())
    sys.stderr.write(f"(profile saved to {dump})\n")


def source_version() -> dict:
    """The commit measured, and whether src/ differs from it (read-only git calls)."""
    def git(*args: str) -> str | None:
        try:
            proc = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                                  timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return proc.stdout.strip() if proc.returncode == 0 else None

    commit = git("rev-parse", "--short", "HEAD")
    status = git("status", "--porcelain", "--", "src")
    return {"commit": commit, "src_modified": None if status is None else bool(status)}


def check(result: dict, n_tasks: int, min_placed: float) -> list[str]:
    """What must hold of a run's JSON; one message per failed check."""
    failures = []
    m = result.get("metrics", {}).get("tasks", {})
    placed, unscheduled = len(result.get("placements", [])), len(result.get("unscheduled", []))
    if m.get("total") != n_tasks:
        failures.append(f"metrics.tasks.total is {m.get('total')}, expected {n_tasks}")
    if placed + unscheduled != n_tasks:
        failures.append(f"placed + unscheduled = {placed} + {unscheduled} != {n_tasks}")
    if (m.get("placed"), m.get("unscheduled")) != (placed, unscheduled):
        failures.append(f"metrics.tasks {m} disagree with the lists "
                        f"({placed} placed, {unscheduled} unscheduled)")
    names = {p["task"] for p in result.get("placements", [])}
    names |= {u["task"] for u in result.get("unscheduled", [])}
    if len(names) != n_tasks:
        failures.append(f"{len(names)} distinct task names, expected {n_tasks}")
    if n_tasks and placed / n_tasks < min_placed:
        failures.append(f"only {placed / n_tasks:.2%} of tasks placed, floor is {min_placed:.0%}")
    return failures


def check_gangs(result: dict) -> list[str]:
    """Every gang placed whole inside one ib domain (one node group of one site:
    the generated fleet's ib domains)."""
    groups: dict[str, set[str]] = {}
    for p in result.get("placements", []):
        app = p["task"].split("/")[0]
        groups.setdefault(app, set()).add(p["node"].rsplit("-", 1)[0])
    return [f"{app} spans {sorted(g)}" for app, g in groups.items() if len(g) != 1]


def reference(files: list[Path], seed: int, decisions: int = 30) -> dict:
    """``bench_decisions.reference_rate`` on this benchmark's fleet."""
    from bench_decisions import reference_rate

    from suanli.spec.build import load_world

    return reference_rate(load_world(files[:1]).fleet, seed, decisions)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=None, help="nodes in the fleet (default 10000; 5000 with --gangs)")
    ap.add_argument("--tasks", type=int, default=20_000,
                    help="tasks in the workload (default 20000)")
    ap.add_argument("--gangs", type=int, default=0,
                    help="instead of the mixed tasks: this many ib gangs (the fleet defaults to 5000 nodes)")
    ap.add_argument("--gang-size", type=int, default=16, help="members per gang (default 16)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs of each measurement; the best is kept (default 3)")
    ap.add_argument("--seed", type=int, default=42,
                    help="seed of the generated fleet and workload (default 42)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT,
                    help="directory for the YAML and JSON (default bench/out)")
    ap.add_argument("--min-placed", type=float, default=0.97,
                    help="fail below this fraction of tasks placed (default 0.97; seeds 1, 2 "
                         "and 42 place 99.7-99.9%% at the default size)")
    ap.add_argument("--profile", action="store_true",
                    help="also profile one in-process run; top 25 by cumulative time to stderr "
                         "(and bench/out/schedule.prof)")
    args = ap.parse_args(argv)
    if args.nodes is None:
        args.nodes = 5_000 if args.gangs else 10_000
    if args.gangs:
        args.tasks = args.gangs * args.gang_size
    if args.nodes < 1 or args.tasks < 1 or args.repeat < 1:
        ap.error("--nodes, --tasks and --repeat must be at least 1")

    suanli = Path(sys.executable).parent / "suanli"
    if not suanli.exists():
        ap.error(f"no suanli command beside {sys.executable}; run from the project's virtualenv")

    load_at_start = os.getloadavg()[0]
    version = source_version()
    t0 = time.perf_counter()
    if args.gangs:
        args.out = args.out / "gangs"
    *files, n_apps = write_world(args.out, args.nodes, args.tasks, args.seed, args.gangs, args.gang_size)
    gen_s = time.perf_counter() - t0
    out_json = args.out / "out.json"

    cli_walls, cli_cpus = run_cli(suanli, files, out_json, args.repeat)
    cli_result = json.loads(out_json.read_text(encoding="utf-8"))
    failures = [f"cli: {f}" for f in check(cli_result, args.tasks, args.min_placed)]
    if args.gangs:
        failures += [f"cli: {f}" for f in check_gangs(cli_result)]

    best: dict[str, float] = {}
    best_cpu: dict[str, float] = {}
    runs = []
    n_nodes = 0
    for _ in range(args.repeat):
        gc.collect()
        phases, phases_cpu, result, n_nodes = run_in_process(files)
        runs.append(phases)
        for k, v in phases.items():
            best[k] = min(best.get(k, v), v)
        for k, v in phases_cpu.items():
            best_cpu[k] = min(best_cpu.get(k, v), v)
        failures += [f"in-process: {f}" for f in check(result, args.tasks, args.min_placed)]
        if result["metrics"]["tasks"] != cli_result["metrics"]["tasks"]:
            failures.append(f"in-process tasks {result['metrics']['tasks']} differ from the CLI's "
                            f"{cli_result['metrics']['tasks']}")
        del result
    if n_nodes != args.nodes:
        failures.append(f"the fleet has {n_nodes} nodes, expected {args.nodes}")

    if args.profile:
        profile_in_process(files, 25, args.out / "schedule.prof")

    tasks = cli_result["metrics"]["tasks"]
    wall = min(cli_walls)
    ref = reference(files, args.seed)
    if ref["agreed"] != ref["decisions"]:
        failures.append(f"the reference agreed on {ref['agreed']} of {ref['decisions']} decisions")
    report = {
        "benchmark": "suanli schedule (static), end to end and in process",
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": f"suanli schedule {files[0].name} {files[1].name} -o json > {out_json.name}",
        "source": version,
        "seed": args.seed,
        "nodes": n_nodes,
        "sites": sum(TIER_SITES.values()),
        "applications": n_apps,
        "tasks": tasks["total"],
        "placed": tasks["placed"],
        "unscheduled": tasks["unscheduled"],
        "placed_ratio": round(tasks["placed"] / max(tasks["total"], 1), 4),
        "unscheduled_reasons": cli_result["metrics"].get("unscheduled_reasons", {}),
        "input_kib": {p.name: round(p.stat().st_size / 1024, 1) for p in files},
        "output_mib": round(out_json.stat().st_size / 2**20, 2),
        "generate_s": round(gen_s, 3),
        "end_to_end": {
            "wall_s_best": round(wall, 3),
            "wall_s_runs": [round(t, 3) for t in cli_walls],
            "cpu_s_runs": [round(t, 3) for t in cli_cpus],
            "target_s": TARGET_S,
            "meets_target": wall < TARGET_S,
        },
        "in_process": {
            "phases_s_best": {k: round(v, 3) for k, v in best.items()},
            "phases_cpu_s_best": {k: round(v, 3) for k, v in best_cpu.items()},
            "total_s_best": round(min(sum(r.values()) for r in runs), 3),
            "runs": [{k: round(v, 3) for k, v in r.items()} for r in runs],
        },
        "us_per_task": {
            "schedule": round(best["schedule"] / args.tasks * 1e6, 1),
            "in_process_total": round(sum(best.values()) / args.tasks * 1e6, 1),
            "end_to_end": round(wall / args.tasks * 1e6, 1),
        },
        "reference": {**ref, "speedup_end_to_end": round(1e6 / ref["decisions_per_s"] / (wall / args.tasks * 1e6)),
                      "speedup_schedule": round(1e6 / ref["decisions_per_s"] / (best["schedule"] / args.tasks * 1e6))},
        "machine": {
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "platform": platform.platform(),
            "load_avg_1m_at_start": round(load_at_start, 2),
        },
        "ok": not failures,
        "failures": failures,
    }
    print(json.dumps(report, indent=2))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
