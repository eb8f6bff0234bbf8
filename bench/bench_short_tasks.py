"""Short tasks by the hundred thousand: PureEdgeSim's default world at N devices.

Writes the world with ``../shared/worlds/pureedgesim_default.py N`` (1,000
devices: 113,100 tasks expected over ten minutes; phones, Raspberry Pis,
laptops and sensors behind two WiFi access points of one edge data centre,
a cloud 60 ms away), simulates it in this process and prints CPU seconds
per 100,000 tasks, asserting the tasks were done. A world of 20 devices is
simulated first, untimed, so that compiling the compiled loops (a fresh
worktree of ``--against`` has no cache of them) is not counted.
``--minutes M`` makes the devices generate for M minutes instead of ten
(at 10,000 devices the edge and the cloud cannot keep up, and the backlog
of ten minutes takes long to simulate), ``--seconds S`` for S seconds (at
100,000 devices). With ``--profile``, the
run is made under the profiler and its time is split into phases by the
functions that own them (inclusive times, each phase counted once where
phases nest: a decision's events are the decision's):

- ``load``: reading and checking the documents, building the world;
- ``arrivals``: the generators' draws and each arrival's application;
- ``decisions``: the scheduling passes (the business layer's placements);
- ``events``: writing events (the event log and its JSON);
- ``ledger``: task records' transitions (start, end, finished runs);
- ``metrics``: the recorder's samples at each instant;
- ``output``: result.json, events.jsonl, the report;
- ``other``: the rest of the loop (instants, queues).

Prints one JSON object.

    .venv/bin/python bench/bench_short_tasks.py [--devices 1000] [--minutes 10 | --seconds S] [--profile]
                                                [--against REV]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORLDS = Path(__file__).resolve().parents[2] / "shared" / "worlds"

# phase -> functions (file suffix, name) whose inclusive time is the phase's, outermost first
PHASES = {
    "load": [("spec/build.py", "load_world")],
    "arrivals": [("sim/simulation.py", "_arrive"), ("sim/simulation.py", "_queue_next")],
    "decisions": [("sim/shard.py", "schedule")],
    "ledger": [("sim/shard.py", "finished")],
    "metrics": [("sim/metrics.py", "sample")],
    "output": [("sim/results.py", "write_outputs")],
}
EVENTS = [("sim/logbook.py", "log")]  # an event made, kept and written in batches


def write_world(devices: int, minutes: float, folder: Path) -> Path:
    """The world at ``devices``, its devices generating for ``minutes``
    (whole minutes, or seconds when not whole)."""
    path = folder / "w.yaml"
    subprocess.run([sys.executable, str(WORLDS / "pureedgesim_default.py"), str(devices), str(path)], check=True,
                   capture_output=True)
    if minutes != 10:  # the generators (and the devices' moves) stop sooner; the backlog is still done
        text = path.read_text()
        assert text.count("until: 10m") >= 2, "the world's generators end at 10m"
        until = f"{minutes:g}m" if float(minutes).is_integer() else f"{round(minutes * 60, 6):g}s"
        path.write_text(text.replace("until: 10m", f"until: {until}"))
    return path


def simulate(path: Path, folder: Path) -> dict:
    """``suanli simulate`` of ``path`` in this process, its outputs in ``folder``: its result."""
    from suanli.sim.results import write_outputs
    from suanli.sim.simulation import Simulation
    from suanli.spec.build import load_world

    world = load_world([path])
    sim = Simulation(world, until=world.scenario.spec.until, events_to=folder / "events.jsonl.part")
    write_outputs(sim, sim.run(), folder / "out")
    return json.loads((folder / "out" / "result.json").read_text())


def run(devices: int, profile: bool, minutes: float = 10) -> dict:
    with tempfile.TemporaryDirectory() as tmp:  # compiled loops compiled (or read from their cache) before the
        simulate(write_world(20, 10, Path(tmp)), Path(tmp))  # clock starts, in either tree
    with tempfile.TemporaryDirectory() as tmp:
        path = write_world(devices, minutes, Path(tmp))
        prof = cProfile.Profile() if profile else None
        cpu, wall = time.process_time(), time.perf_counter()
        if prof:
            prof.enable()
        result = simulate(path, Path(tmp))
        if prof:
            prof.disable()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    tasks = result["metrics"]["tasks"]
    done = tasks.get("finished", 0)
    assert done > 10 * minutes * devices, tasks  # (11.3 tasks a device a minute are expected)
    out = {"devices": devices, "minutes": round(minutes, 6), "tasks_finished": done, "cpu_s": round(cpu, 1),
           "wall_s": round(wall, 1),
           "cpu_s_per_100k_tasks": round(cpu / done * 1e5, 2), "cpu_ms_per_task": round(cpu / done * 1e3, 3)}
    if prof:
        out["profile"] = phases(pstats.Stats(prof), done)
    return out


def phases(stats: pstats.Stats, tasks: int) -> dict:
    """Inclusive seconds per phase (``PHASES``), the events' writing apart
    wherever it happened, and the rest; each also as microseconds a task."""
    raw = stats.stats  # (file, line, name) -> (cc, nc, tt, ct, callers)
    total = max(ct for (_, _, _), (_, _, _, ct, _) in raw.items())

    def inclusive(owners) -> float:
        return sum(ct for (f, _, name), (_, _, _, ct, _) in raw.items()
                   if any(f.endswith(suffix) and name == fn for suffix, fn in owners))
    out = {phase: inclusive(owners) for phase, owners in PHASES.items()}
    out["events"] = inclusive(EVENTS)
    out["other"] = max(total - sum(out.values()) + out["events"], 0.0)  # (events are inside the others)
    return {phase: {"s": round(s, 2), "us_per_task": round(s / tasks * 1e6, 1)} for phase, s in out.items()} | {
        "total_s_under_profiler": round(total, 2), "top": top(stats)}


def top(stats: pstats.Stats, n: int = 15) -> list[str]:
    """The functions of most time of their own."""
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:n]
    return [f"{tt:.2f}s {Path(f).name}:{line} {name} ({nc} calls)" for (f, line, name), (_, nc, tt, _, _) in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=1000)
    ap.add_argument("--minutes", type=int, default=10, help="minutes the devices generate tasks (the world's: 10)")
    ap.add_argument("--seconds", type=float, help="seconds the devices generate tasks (instead of --minutes)")
    ap.add_argument("--profile", action="store_true", help="run under the profiler and split the time into phases")
    ap.add_argument("--against", metavar="REV", help="also run the code of git revision REV on the same world, "
                    "in the same invocation, and report the ratio of CPU a task")
    args = ap.parse_args()
    if args.seconds is not None:
        args.minutes = args.seconds / 60
    out = run(args.devices, args.profile, minutes=args.minutes)
    if args.against:
        out["against"] = against(args.against, args.devices, args.minutes)
        assert out["against"]["tasks_finished"] == out["tasks_finished"], out  # the same work done
        out["cpu_ratio_to_against"] = round(out["cpu_s_per_100k_tasks"] / out["against"]["cpu_s_per_100k_tasks"], 3)
    print(json.dumps(out, indent=1))


def against(rev: str, devices: int, minutes: float) -> dict:
    """The same measurement with the code of ``rev`` (a worktree of it, its
    ``src`` first on the path), in a child process; the tasks must be the same."""
    repo = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(repo), "worktree", "add", "-q", "--detach", str(tree), rev], check=True)
        try:
            env = dict(os.environ, PYTHONPATH=str(tree / "src"))
            whole = float(minutes).is_integer()
            when = ["--minutes", str(int(minutes))] if whole else ["--seconds", str(minutes * 60)]
            got = subprocess.run([sys.executable, __file__, "--devices", str(devices), *when],
                                 env=env, check=True,
                                 capture_output=True, text=True)
        finally:
            subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)], check=True)
    out = json.loads(got.stdout)
    out["rev"] = rev
    return out


if __name__ == "__main__":
    main()
