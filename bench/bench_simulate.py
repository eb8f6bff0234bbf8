"""Benchmark: simulating scenarios end to end through `suanli simulate`.

Runs each case as a subprocess (loading, 3 simulated hours or a whole trace,
result.json, events.jsonl and report.html included), keeps the best wall
time of --repeat runs, and asserts the work done from result.json so a
speed-up cannot quietly change behaviour. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
SUANLI = [sys.executable, "-m", "suanli.cli"]


def _openb_scenario(tmp: Path) -> Path:
    data = SHARED / "data" / "alibaba-gpu-2023"
    path = tmp / "openb.yaml"
    path.write_text(
        "apiVersion: suanli/v1\nkind: Tenant\nmetadata: {name: alibaba}\n---\n"
        "apiVersion: suanli/v1\nkind: Scenario\nmetadata: {name: openb-default}\nspec:\n  traces:\n"
        f"    - {{format: openb, tenant: alibaba, nodes: {data / 'openb_node_list_all_node.csv'}, "
        f"pods: {data / 'openb_pod_list_default.csv'}}}\n"
    )
    return path


def run_case(name: str, scenario: Path, repeat: int, check) -> dict:
    walls = []
    with tempfile.TemporaryDirectory() as out:
        for _ in range(repeat):
            start = time.perf_counter()
            subprocess.run([*SUANLI, "simulate", str(scenario), "--out", out], check=True,
                           capture_output=True, cwd=ROOT)
            walls.append(round(time.perf_counter() - start, 3))
        result = json.loads((Path(out) / "result.json").read_text())
        events = sum(1 for _ in open(Path(out) / "events.jsonl"))
    tasks = result["metrics"]["tasks"]
    failures = check(result)
    return {"case": name, "wall_s_best": min(walls), "wall_s_runs": walls, "simulated_s": result["end_s"],
            "tasks": tasks, "events": events, "ok": not failures, "failures": failures}


def check_ai_mix(result: dict) -> list[str]:
    t = result["metrics"]["tasks"]
    out = []
    if result["end_s"] != 3 * 3600:
        out.append(f"simulated to {result['end_s']} s, not 3 h")
    if t["submitted"] < 1300 or t["finished"] < 1200:
        out.append(f"too little work done: {t}")
    if t["submitted"] != t["finished"] + t["running"] + t["pending"] + t["failed"]:
        out.append(f"tasks not conserved: {t}")
    return out


def check_openb(result: dict) -> list[str]:
    t = result["metrics"]["tasks"]
    return [] if t["submitted"] == 8152 else [f"expected 8,152 pods, got {t}"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cases = [
            run_case("ai-hpc-mix (3 h)", SHARED / "examples" / "ai-hpc-mix.yaml", args.repeat, check_ai_mix),
            run_case("openb default trace", _openb_scenario(Path(tmp)), args.repeat, check_openb),
        ]
    report = {
        "benchmark": "suanli simulate, end to end",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cases": cases,
        "machine": {"cpu_count": os.cpu_count(), "python": sys.version.split()[0]},
    }
    print(json.dumps(report, indent=2))
    return 0 if all(c["ok"] for c in cases) else 1


if __name__ == "__main__":
    sys.exit(main())
