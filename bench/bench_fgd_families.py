"""The FGD study's comparison on every family of its table: each policy on
each pod file, seeds 42..51, the unallocated GPU % at 100% arrived (mean,
sample standard deviation and median over the seeds), beside the study's
own figures when a CSV of them is given (columns workload,policy,seed,alloc100,
from the artifact's ``analysis_allo_discrete.csv``). Two worker processes.

    .venv/bin/python bench/bench_fgd_families.py [--policies fgd,bestfit,suanli] [--seeds 42-51]
        [--published FILE.csv] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "alibaba-gpu-2023"
sys.path.insert(0, str(ROOT / "src"))

FAMILIES = ("default", "cpu050", "cpu100", "cpu200", "cpu250", "gpushare40", "gpushare60", "gpushare80",
            "gpushare100", "multigpu20", "multigpu30", "multigpu40", "multigpu50", "gpuspec10", "gpuspec20",
            "gpuspec25", "gpuspec33")


def one(args: tuple[str, list[str], list[int]]) -> tuple[str, dict[str, list[float]], float]:
    from suanli.experiments.fgd import experiment

    family, policies, seeds = args
    start = time.perf_counter()
    _, runs = experiment(DATA / "openb_node_list_gpu_node.csv", DATA / f"openb_pod_list_{family}.csv", policies, seeds)
    out: dict[str, list[float]] = {p: [] for p in policies}
    for r in runs:
        out[r.policy].append(round(100.0 - float(r.curve[100]), 4))
    return family, out, time.perf_counter() - start


def stats(values: list[float]) -> dict[str, float]:
    return {"mean": round(statistics.fmean(values), 3), "sd": round(statistics.stdev(values), 3) if len(values) > 1 else 0.0,
            "median": round(statistics.median(values), 3)}


def main() -> None:
    from suanli.experiments.fgd import parse_seeds

    ap = argparse.ArgumentParser()
    ap.add_argument("--policies", default="fgd,bestfit,suanli")
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--published", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    policies, seeds = args.policies.split(","), parse_seeds(args.seeds)
    published: dict[tuple[str, str], list[float]] = {}
    if args.published:
        with open(args.published) as f:
            for row in csv.DictReader(f):
                if int(row["seed"]) in seeds:
                    published.setdefault((row["workload"], row["policy"]), []).append(100.0 - float(row["alloc100"]))
    start = time.perf_counter()
    table = {}
    with ProcessPoolExecutor(2) as pool:
        for family, out, secs in pool.map(one, [(f, policies, seeds) for f in args.families.split(",")]):
            table[family] = {p: {**stats(v), "runs": v} for p, v in out.items()}
            for p in policies:
                if (family, p) in published:
                    table[family][p]["published"] = stats(published[(family, p)])
            line = "  ".join(f"{p} {table[family][p]['mean']:6.2f}"
                             + (f" (study {table[family][p]['published']['mean']:5.2f}±{table[family][p]['published']['sd']:.2f})"
                                if "published" in table[family][p] else "") for p in policies)
            print(f"{family:12s} {line}   [{secs:.0f} s]", flush=True)
    result = {"policies": policies, "seeds": seeds, "seconds": round(time.perf_counter() - start, 1), "table": table}
    print(f"all: {result['seconds']} s")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
