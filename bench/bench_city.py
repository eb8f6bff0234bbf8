"""Benchmark: an hour of the city-scale autodrive case at a given size.

Runs ``suanli simulate examples/city-autodrive.yaml --population cars=N`` as a
subprocess (``--cars``, default a million: 3,000,000 infotainment services,
autopilot on a tenth of the cars, handovers and offline spells over the
hour) and prints JSON: wall time, peak RSS (the child's own, from wait4),
the run's counts and what it wrote. Fails unless every car's three services
were submitted, every move of a stateful service carried its state (a
``migrated`` event with the state's bytes), events were streamed, and the
report stays small (its charts aggregate: no mark per car).

    .venv/bin/python bench/bench_city.py [--cars 1000000] [--until 1h]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench_scale import SUANLI, run

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parent / "examples" / "city-autodrive.yaml"
STATEFUL = ("/game/", "/music/")  # the infotainment services with state
REPORT_MAX = 4 * 2**20  # bytes: charts of aggregates, whatever the number of cars


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cars", type=int, default=1_000_000)
    ap.add_argument("--until", default=None, help="simulated time (default: the scenario's hour)")
    ap.add_argument("--out", type=Path, default=HERE / "out" / "city")
    args = ap.parse_args()
    cmd = [*SUANLI, "simulate", str(EXAMPLE), "--population", f"cars={args.cars}", "--out", str(args.out)]
    if args.until:
        cmd += ["--until", args.until]
    wall, rss, proc = run(cmd, None)
    if proc.returncode != 0:
        print(proc.stderr, file=sys.stderr)
        return 1
    result = json.loads((args.out / "result.json").read_text())
    metrics = result["metrics"]
    tasks, moves, events = metrics["tasks"], metrics["moves"], metrics["events"]
    moved = without_state = 0
    with open(args.out / "events.jsonl", "rb") as f:  # only the move lines are parsed
        for line in f:
            if b'"migrated"' not in line:
                continue
            e = json.loads(line)
            if e.get("kind") != "migrated":
                continue
            moved += 1
            without_state += any(s in e["task"] for s in STATEFUL) and not e.get("bytes")
    report = (args.out / "report.html").stat().st_size
    out = {
        "cars": args.cars, "wall_s": round(wall, 1), "peak_rss_gib": round(rss, 3),
        "simulated_s": metrics["end_s"], "tasks": tasks,
        "handovers": events.get("handover", 0), "offline": events.get("deviceOffline", 0),
        "migrations": moves["migrations"], "preemptions": moves["preemptions"], "lost": moves["lost"],
        "moved_bytes": moves["bytes"], "near_violations": metrics["near_violations"],
        "events_bytes": (args.out / "events.jsonl").stat().st_size, "report_bytes": report,
    }
    print(json.dumps(out, indent=2))
    problems = []
    if tasks["submitted"] < 3 * args.cars:
        problems.append(f"{tasks['submitted']} tasks submitted, fewer than 3 per car")
    if moved != moves["migrations"]:
        problems.append(f"{moved} migrated events against {moves['migrations']} counted")
    if without_state:
        problems.append(f"{without_state} moves of a stateful service carried no state")
    if not moved:
        problems.append("nothing moved")
    if report > REPORT_MAX:
        problems.append(f"report of {report} bytes: its charts do not aggregate")
    for p in problems:
        print("FAILED:", p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
