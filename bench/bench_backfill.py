"""Benchmark: backfill on a Standard Workload Format log, every mode in one run.

Replays one SWF log through ``suanli simulate`` (the real CLI, a subprocess
per mode, the same log and machine) with ``policy.backfill`` set to each of
``off`` (first fit), ``fcfs``, ``easy`` and ``conservative``, and reads, per
job, its submit time and its start (the first ``placed`` of ``rank/0``) from
``events.jsonl``. It prints, per mode, the mean wait, the mean bounded
slowdown (``max(1, (wait + run) / max(run, 10 s))``), the longest wait, the
jobs at least half the machine wide and their mean wait, the reservations
made and the wall time, as one JSON object; it fails unless every job of the
log started (the run lasts until the last one finishes) in every mode.

The log is ``--swf PATH`` (a Parallel Workloads Archive file, plain or .gz:
its ``MaxProcs`` header sizes the machine) or, without it, one made from a
seed: ``--jobs`` jobs on ``--procs`` processors at ``--load`` offered load,
sizes one processor (a quarter of the jobs) or a power of two (most of the
rest) up to the machine, run times log-uniform from 30 s to 8 h, requested
times the run time times a factor uniform in 1 to 4 (users overestimate, as
in the archive's logs), Poisson arrivals at the rate that offers the load.
Jobs state their requested time as their time limit, which is what backfill
plans with (``timeLimit``); they run their recorded run time.

The machine is one site of ``--procs / 8`` nodes of 8 cpus; a job is a gang
of one-cpu tasks (``suanli``'s SWF reader).

    .venv/bin/python bench/bench_backfill.py [--jobs 5000] [--procs 128] [--load 0.9] [--seed 7]
    .venv/bin/python bench/bench_backfill.py --swf SDSC-SP2-1998-4.2-cln.swf.gz
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SUANLI = [sys.executable, "-m", "suanli.cli"]
MODES = ("off", "fcfs", "easy", "conservative")
TAU = 10.0  # bounded slowdown's floor on the run time, seconds (the usual 10 s)


def synthetic_swf(path: Path, jobs: int, procs: int, load: float, seed: int) -> None:
    """An SWF log of ``jobs`` jobs on ``procs`` processors offering ``load``."""
    rng = np.random.default_rng(seed)
    top = int(math.log2(procs))
    serial = rng.random(jobs) < 0.25
    pow2 = rng.random(jobs) < 0.8
    size = np.where(serial, 1, np.where(pow2, 2 ** rng.integers(1, top + 1, jobs), rng.integers(2, procs + 1, jobs)))
    run = np.exp(rng.uniform(math.log(30), math.log(8 * 3600), jobs)).round()
    requested = np.ceil(run * rng.uniform(1, 4, jobs) / 60) * 60
    rate = load * procs / float((size * run).mean())  # jobs per second
    submit = np.cumsum(rng.exponential(1 / rate, jobs)).round()
    submit -= submit[0]
    with open(path, "w") as f:
        f.write(f"; Version: 2.2\n; Computer: synthetic (bench_backfill.py, seed {seed})\n; MaxProcs: {procs}\n"
                f"; MaxNodes: {procs}\n; Note: load {load}\n")
        for i in range(jobs):
            # job, submit, wait, run, procs, cpu, mem, req procs, req time, req mem, status, user, group, exe, queue, ...
            f.write(f"{i + 1} {int(submit[i])} -1 {int(run[i])} {int(size[i])} -1 -1 {int(size[i])} "
                    f"{int(requested[i])} -1 1 1 1 -1 1 -1 -1 -1\n")


def read_swf(path: Path) -> tuple[int, dict[int, tuple[float, float, int]]]:
    """(MaxProcs, job id -> (submit, run time, processors)) of the usable jobs."""
    opener = gzip.open if path.suffix == ".gz" else open
    procs, jobs = 0, {}
    with opener(path, "rt") as f:
        for line in f:
            if line.startswith(";"):
                if "MaxProcs:" in line:
                    procs = int(line.split(":", 1)[1])
                continue
            v = line.split()
            if len(v) < 18:
                continue
            n = int(v[4]) if int(v[4]) > 0 else int(v[7])
            if n > 0:
                jobs[int(v[0])] = (float(v[1]), max(float(v[3]), 0.0), n)
    return procs, jobs


def scenario(tmp: Path, swf: Path, procs: int, mode: str) -> Path:
    nodes = max(1, math.ceil(procs / 8))
    path = tmp / f"{mode}.yaml"
    path.write_text(
        "apiVersion: suanli/v1\nkind: Fleet\nmetadata: {name: machine}\nspec:\n  sites:\n"
        f"    - name: machine\n      tier: cloud\n      nodeGroups:\n"
        f"        - {{name: n, count: {nodes}, arch: x86_64, cpu: 8, memory: 64Gi}}\n---\n"
        "apiVersion: suanli/v1\nkind: Tenant\nmetadata: {name: users}\n---\n"
        f"apiVersion: suanli/v1\nkind: Scenario\nmetadata: {{name: swf-{mode}}}\nspec:\n"
        f"  policy: {{backfill: '{mode}'}}\n"
        f"  traces:\n    - {{format: swf, tenant: users, path: {swf}, site: machine}}\n")
    return path


def run_mode(tmp: Path, swf: Path, procs: int, jobs: dict, mode: str) -> dict:
    out = tmp / f"out-{mode}"
    start = time.perf_counter()
    subprocess.run([*SUANLI, "simulate", str(scenario(tmp, swf, procs, mode)), "--out", str(out)],
                   check=True, capture_output=True, cwd=ROOT)
    wall = time.perf_counter() - start
    began: dict[int, float] = {}
    with open(out / "events.jsonl") as f:
        for line in f:
            if '"placed"' in line and '/rank/0"' in line:
                e = json.loads(line)
                job = int(e["task"].split("/")[0][4:])
                began.setdefault(job, e["t"])
    missing = sorted(set(jobs) - set(began))
    waits, slow, wide = [], [], []
    for job, (submit, run, n) in jobs.items():
        if job not in began:
            continue
        w = began[job] - submit
        waits.append(w)
        slow.append(max(1.0, (w + run) / max(run, TAU)))
        if n * 2 >= procs:
            wide.append(w)
    result = json.loads((out / "result.json").read_text())
    return {"mode": mode, "jobs": len(jobs), "started": len(began), "missing": len(missing),
            "mean_wait_s": round(float(np.mean(waits)), 1), "mean_bounded_slowdown": round(float(np.mean(slow)), 2),
            "max_wait_s": round(float(np.max(waits)), 1), "wide_jobs": len(wide),
            "wide_mean_wait_s": round(float(np.mean(wide)), 1) if wide else None,
            "makespan_s": result["end_s"], "wall_s": round(wall, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--swf", type=Path, help="an SWF log (default: one made from --seed)")
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--procs", type=int, default=128)
    ap.add_argument("--load", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--parallel", type=int, default=2, help="modes simulated at once")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        swf = args.swf.resolve() if args.swf else tmp / "synthetic.swf"
        if not args.swf:
            synthetic_swf(swf, args.jobs, args.procs, args.load, args.seed)
        procs, jobs = read_swf(swf)
        procs = procs or args.procs
        modes = [m.strip() for m in args.modes.split(",")]
        with ThreadPoolExecutor(args.parallel) as pool:
            rows = list(pool.map(lambda m: run_mode(tmp, swf, procs, jobs, m), modes))
    out = {"log": str(args.swf) if args.swf else
           f"synthetic: {args.jobs} jobs, {args.procs} procs, load {args.load}, seed {args.seed}",
           "procs": procs, "modes": rows}
    print(json.dumps(out, indent=1))
    bad = [r["mode"] for r in rows if r["missing"]]
    if bad:
        raise SystemExit(f"jobs never started in {bad}")


if __name__ == "__main__":
    main()
