"""Benchmark: a container's start through suanli against ``podman run`` alone.

``--containers`` short jobs (one per application, arriving ``--gap`` seconds
apart) run through ``suanli run --executor podman``; each container's first
act is to print the machine's uptime (``cat /proc/uptime``, read by every
container from the same kernel clock, to the hundredth of a second). A
task's start latency is from its arrival's due time (the scheduler's turn,
the executor's folders, control groups and ``podman run``) to that line.
Then the same number of ``podman --runtime runc run --rm`` of the same
image and command, started straight from Python the same gap apart, each
timed from its start to its line: with the options suanli gives (the
machine's network, an init, no log driver; the ratio is against these),
and with podman's defaults (a bridge network per container). All in one
run, on one machine.

Prints one JSON object: p50/p90/p99 of each, their ratio (suanli over
podman alone) and the work done; exits 1 unless every container ran.

    .venv/bin/python bench/bench_containers.py [--containers 100] [--gap 0.5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

from suanli.executors.images import busybox_image
from suanli.executors.podman import NOFILE, podman_problem

FLEET = {"apiVersion": "suanli/v1", "kind": "Fleet", "metadata": {"name": "bench"},
         "spec": {"sites": [{"name": "here", "tier": "edge", "nodeGroups": [
             {"name": "cpu", "count": 4, "arch": os.uname().machine, "cpu": 64, "memory": "256Gi"}]}]}}
COMMAND = ["cat", "/proc/uptime"]


def offset() -> float:
    """Wall time minus uptime, now (both read on this machine)."""
    return time.time() - float(Path("/proc/uptime").read_text().split()[0])


def scenario(folder: Path, image: str, n: int, gap: float) -> Path:
    docs = [FLEET, {"apiVersion": "suanli/v1", "kind": "Tenant", "metadata": {"name": "bench"}, "spec": {}}]
    for i in range(n):
        docs.append({"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": f"c{i}", "tenant": "bench"},
                     "spec": {"components": [{"name": "j", "lifetime": "job", "duration": "1s",
                                              "resources": {"cpu": "500m", "memory": "64Mi"},
                                              "run": {"image": image, "command": COMMAND}}]}})
    docs.append({"apiVersion": "suanli/v1", "kind": "Scenario", "metadata": {"name": "containers"},
                 "spec": {"until": f"{n * gap + 10:.0f}s",
                          "arrivals": [{"at": f"{1 + i * gap:.6f}s", "app": f"c{i}"} for i in range(n)]}})
    path = folder / "containers.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


def pct(seconds: list[float]) -> dict:
    ms = np.array(seconds) * 1000
    return {k: round(float(np.percentile(ms, q)), 1) for k, q in (("p50", 50), ("p90", 90), ("p99", 99))} | {
        "max": round(float(ms.max()), 1), "mean": round(float(ms.mean()), 1)}


def through_suanli(folder: Path, image: str, n: int, gap: float) -> list[float]:
    path = scenario(folder, image, n, gap)
    work = folder / "work"
    run = subprocess.run([sys.executable, "-m", "suanli.cli", "run", str(path), "--executor", "podman",
                          "--work-dir", str(work)], capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(run.stderr)
    shift = offset()
    events = [json.loads(line) for line in open(work / "out" / "events.jsonl")]
    origin = float(next(e for e in events if e["kind"] == "executor")["origin_wall"])
    submitted = {e["task"]: origin + e["t"] for e in events if e["kind"] == "submitted"}
    out = []
    for task, at in sorted(submitted.items()):
        lines = (work / "logs" / f"{task.replace('/', '%2F')}.log").read_text().splitlines()
        up = [line.split()[0] for line in lines if line and line[0].isdigit()]
        if up:
            out.append(float(up[0]) + shift - at)
    return out


def alone(image: str, n: int, gap: float, *flags: str) -> list[float]:
    podman = shutil.which("podman")
    argv = [podman, "--runtime", "runc", "run", "--rm", "--ulimit", f"nofile={NOFILE}:{NOFILE}",
            "--ulimit", "nproc=4096:4096", "--cpus", "0.5", "--memory", "64m", *flags, image, *COMMAND]
    out, shift = [], offset()
    began = time.time()
    for i in range(n):
        time.sleep(max(0.0, began + i * gap - time.time()))
        start = time.time()
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode == 0:
            out.append(float(done.stdout.split()[0]) + shift - start)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--containers", type=int, default=100)
    ap.add_argument("--gap", type=float, default=0.5, help="seconds between two starts")
    args = ap.parse_args()
    if (why := podman_problem()) is not None:
        raise SystemExit(why)
    image = busybox_image()
    folder = Path(tempfile.mkdtemp(prefix="suanli-bench-containers-"))
    began = time.time()
    ours = through_suanli(folder, image, args.containers, args.gap)
    # podman alone as suanli starts it (the machine's network, an init, no log driver) and as it starts by
    # default (a bridge network of its own per container)
    theirs = alone(image, args.containers, args.gap, "--network", "host", "--init", "--log-driver", "none")
    default = alone(image, args.containers, args.gap)
    a, b = pct(ours), pct(theirs)
    out = {"bench": "container start", "containers": args.containers, "gap_s": args.gap,
           "ran_through_suanli": len(ours), "ran_alone": len(theirs), "ran_alone_default": len(default),
           "suanli_ms": a, "podman_alone_ms": b, "podman_alone_default_network_ms": pct(default),
           "ratio": {k: round(a[k] / b[k], 3) for k in ("p50", "p90", "p99")},
           "clock": "/proc/uptime, 10 ms steps", "wall_s": round(time.time() - began, 1),
           "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                       "podman": subprocess.run(["podman", "--version"], capture_output=True,
                                                text=True).stdout.strip()}}
    print(json.dumps(out))
    shutil.rmtree(folder, ignore_errors=True)
    return 0 if len(ours) == len(theirs) == len(default) == args.containers else 1


if __name__ == "__main__":
    sys.exit(main())
