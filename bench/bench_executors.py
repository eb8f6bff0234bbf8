"""Benchmark: scheduling overhead per real task, submit -> process running.

Runs a scenario of ``--tasks`` short jobs (one per application, arriving
``--rate`` per second) through ``suanli run`` on a real executor: ``local``
(processes on this machine) or ``ray`` (a three-node Ray cluster started on
this machine, labelled car-1, edge-1 and cloud-north). Each job is
``bash -c 'echo $EPOCHREALTIME'``: the first thing its process does is print
the wall time it began.

For each task, from its arrival's due time (open loop: a late instant counts
against every task in it) to the time its process printed: the scheduler's
turn, the executor's start (a process, or an actor and its process) and the
program's own start. Prints one JSON object with that distribution; exits 1
unless every task was placed, ran and finished. For scale, it also times the
same program started straight from Python (``bare_process_start_ms``).

``--loud BYTES`` measures a task's output instead: one job writes BYTES to
its stdout (``head -c BYTES /dev/zero``) and prints the wall times it began
and ended. Its time through the executor (a pipe read by the executor's log
thread, into a log rotated at ``--max-log``) is set against the same
program writing straight to a file, as a task's output was written before
logs had a cap; with the CPU time of the ``run`` process and its children.

    .venv/bin/python bench/bench_executors.py [--executor local|ray] [--tasks 1000] [--rate 100] [--no-confine]
    .venv/bin/python bench/bench_executors.py --loud 500000000 [--max-log 64Mi]
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

FLEET = {
    "apiVersion": "suanli/v1", "kind": "Fleet", "metadata": {"name": "bench"},
    "spec": {"sites": [
        {"name": site, "tier": tier, "nodeGroups": [{"name": "cpu", "count": 4, "arch": "x86_64", "cpu": 64,
                                                     "memory": "256Gi"}]}
        for site, tier in (("car-1", "device"), ("edge-1", "edge"), ("cloud-north", "cloud"))],
        "links": [{"between": ["car-1", "edge-1"], "rttMs": 8, "bandwidth": "200Mbps"},
                  {"between": ["edge-1", "cloud-north"], "rttMs": 20, "bandwidth": "40Gbps"}]},
}


def scenario(folder: Path, tasks: int, rate: float) -> Path:
    docs = [FLEET, {"apiVersion": "suanli/v1", "kind": "Tenant", "metadata": {"name": "bench"}, "spec": {}}]
    for i in range(tasks):
        docs.append({"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": f"t{i}", "tenant": "bench"},
                     "spec": {"components": [{"name": "j", "lifetime": "job", "duration": "1s",
                                              "resources": {"cpu": "100m", "memory": "64Mi"},
                                              "run": {"command": ["bash", "-c", "echo $EPOCHREALTIME"]}}]}})
    until = tasks / rate + 5
    docs.append({"apiVersion": "suanli/v1", "kind": "Scenario", "metadata": {"name": "overhead"},
                 "spec": {"until": f"{until:.0f}s",
                          "arrivals": [{"at": f"{i / rate:.6f}s", "app": f"t{i}"} for i in range(tasks)]}})
    path = folder / "overhead.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


def pct(values: np.ndarray) -> dict:
    ms = values * 1000
    return {k: round(float(np.percentile(ms, q)), 2) for k, q in (("p50", 50), ("p90", 90), ("p99", 99))} | {
        "max": round(float(ms.max()), 2), "mean": round(float(ms.mean()), 2)}


def bare_starts(n: int = 200) -> np.ndarray:
    """The same program started straight from Python, n times: what a process start costs here at all."""
    out = []
    for _ in range(n):
        began = time.time()
        p = subprocess.run(["bash", "-c", "echo $EPOCHREALTIME"], capture_output=True, text=True)
        out.append(float(p.stdout) - began)
    return np.array(out)


LOUD = "S=$EPOCHREALTIME; head -c {n} /dev/zero; echo; echo \"wrote $S $EPOCHREALTIME\""


def loud(args: argparse.Namespace, folder: Path) -> int:
    """One task writing ``args.loud`` bytes, through the executor and straight to a file."""
    import resource

    docs = [FLEET, {"apiVersion": "suanli/v1", "kind": "Tenant", "metadata": {"name": "bench"}, "spec": {}},
            {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": "loud", "tenant": "bench"},
             "spec": {"components": [{"name": "j", "lifetime": "job", "duration": "1s",
                                      "resources": {"cpu": 1, "memory": "64Mi"},
                                      "run": {"command": ["bash", "-c", LOUD.format(n=args.loud)]}}]}},
            {"apiVersion": "suanli/v1", "kind": "Scenario", "metadata": {"name": "loud"},
             "spec": {"until": f"{args.until_s}s", "arrivals": [{"at": "0s", "app": "loud"}]}}]
    path = folder / "loud.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    work = folder / "work"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.time()
    run = subprocess.run([sys.executable, "-m", "suanli.cli", "run", str(path), "--work-dir", str(work),
                          "--max-log", args.max_log, *(["--no-confine"] if args.no_confine else [])],
                         capture_output=True, text=True)
    wall = time.time() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if run.returncode != 0:
        print(run.stderr, file=sys.stderr)
        return 1
    logs = sorted((work / "logs").iterdir())
    last = [line for line in logs[0].read_text(errors="replace").splitlines() if line.startswith("wrote ")][-1]
    through = float(last.split()[2]) - float(last.split()[1])
    bare = folder / "bare.out"
    with open(bare, "wb") as out:
        began = time.time()
        subprocess.run(["bash", "-c", LOUD.format(n=args.loud)], stdout=out, check=True)
        straight = time.time() - began
    bare.unlink()
    print(json.dumps({
        "bench": "a task's output", "bytes": args.loud, "max_log": args.max_log,
        "task_s_through_the_executor": round(through, 3), "task_s_straight_to_a_file": round(straight, 3),
        "log_files_bytes": {p.name: p.stat().st_size for p in logs},
        "run_wall_s": round(wall, 2),
        "run_cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 2),
        "machine": {"cpus": __import__("os").cpu_count(), "python": platform.python_version()},
    }))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--executor", choices=("local", "ray"), default="local")
    ap.add_argument("--tasks", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=100.0, help="arrivals per second")
    ap.add_argument("--no-confine", action="store_true", help="local: without control groups")
    ap.add_argument("--loud", type=int, help="one task writing this many bytes instead (local)")
    ap.add_argument("--max-log", default="64Mi", help="with --loud: the log's cap")
    ap.add_argument("--until-s", type=int, default=60, help="with --loud: how long the run lasts (the task must end "
                    "within it)")
    args = ap.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="suanli-bench-exec-"))
    if args.loud:
        return loud(args, folder)
    path = scenario(folder, args.tasks, args.rate)
    work = folder / "work"
    cluster = None
    extra: list[str] = ["--no-confine"] if args.no_confine else []
    if args.executor == "ray":
        sys.path.insert(0, str(ROOT / "tests"))
        from raycluster import LocalRayCluster

        cluster = LocalRayCluster(["cloud-north", "car-1", "edge-1"]).start()
        extra = ["--ray-address", cluster.address]
    try:
        began = time.time()
        run = subprocess.run([sys.executable, "-m", "suanli.cli", "run", str(path), "--executor", args.executor,
                              "--work-dir", str(work), *extra], capture_output=True, text=True)
        wall = time.time() - began
    finally:
        if cluster is not None:
            cluster.stop()
    if run.returncode != 0:
        print(run.stderr, file=sys.stderr)
        return 1

    events = [json.loads(line) for line in open(work / "out" / "events.jsonl")]
    origin = float(next(e for e in events if e["kind"] == "executor")["origin_wall"])
    submitted = {e["task"]: origin + e["t"] for e in events if e["kind"] == "submitted"}
    placed = {e["task"] for e in events if e["kind"] == "placed"}
    finished = {e["task"] for e in events if e["kind"] == "finished"}
    running = {}
    for task in submitted:
        log = (work / "logs" / f"{task.replace('/', '%2F')}.log").read_text()
        stamps = [line for line in log.splitlines() if line and line[0].isdigit()]
        if stamps:
            running[task] = float(stamps[0])
    tasks = sorted(submitted)
    ok = len(placed) == len(running) == len(finished) == args.tasks
    total = np.array([running[t] - submitted[t] for t in tasks if t in running])
    out = {
        "bench": "executor overhead", "executor": args.executor,
        "confinement": next(e for e in events if e["kind"] == "executor").get("confinement"), "tasks": args.tasks, "rate_per_s": args.rate,
        "placed": len(placed), "ran": len(running), "finished": len(finished),
        "submit_to_running_ms": pct(total), "bare_process_start_ms": pct(bare_starts()),
        "wall_s": round(wall, 1), "machine": {"cpus": __import__("os").cpu_count(), "python": platform.python_version()},
    }
    print(json.dumps(out))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
