"""Benchmark: a controller's rebuild of a large store (a restart, a takeover).

Makes a SQLite store (or uses ``--db URL``, an empty PostgreSQL database)
with the city fleet and its tenants and ``--apps`` applications of
``--tasks-per-app`` job tasks each, spread over the tenants, through the
store's own writes (as the API makes them), and with a share of the tasks
marked running, finished or failed as a live store has them. Then, in this
process, times what a controller does when it starts: ``load_config`` (the
world from the stored documents and agents), ``Controller.start`` (the
scheduler rebuilt: every application checked again and submitted, ended
tasks recorded as ended, those that were running requeued) and the first turn
that places what waits. ``--repeat`` times it again on the same store.

Prints one JSON object; exits with status 1 when the rebuild (load and start,
best of the repeats) takes longer than ``--limit-s`` (10).

    .venv/bin/python bench/bench_rebuild.py [--apps 10000] [--tasks-per-app 10] [--repeat 3] [--db URL]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
EXAMPLES = ROOT.parent / "shared" / "examples"
sys.path.insert(0, str(ROOT / "src"))


def make_store(db: str, apps: int, per_app: int) -> dict:
    from suanli.server.config import seed
    from suanli.server.store import Store
    from suanli.spec.loader import load_documents

    store = Store(db)
    problems = seed(store, load_documents([EXAMPLES / "city-fleet.yaml", EXAMPLES / "tenants.yaml"]))
    assert not problems, problems
    tenants = ("acme-ai", "city-services", "hpc-lab")
    began = time.perf_counter()
    for i in range(apps):
        tenant = tenants[i % len(tenants)]
        doc = {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": f"app-{i}", "tenant": tenant},
               "spec": {"components": [{"name": "c", "lifetime": "job", "duration": f"{60 + i % 600}s",
                                        "replicas": per_app, "resources": {"cpu": "100m", "memory": "64Mi"}}]}}
        store.create_app(tenant, f"app-{i}", doc, [f"app-{i}/c/{k}" for k in range(per_app)], None)
    made = time.perf_counter() - began
    store.close()
    return {"made_s": round(made, 1), "tasks": reset(db)}


def reset(db: str) -> dict:
    """The store as a live one has it when its server stops: a fifth of the tasks ran
    to the end, a fifth runs, the rest wait; no event yet."""
    from sqlalchemy import delete, update

    from suanli.server.store import EventRow, Store, TaskRow

    store = Store(db, upgrade=False)
    with store.engine.begin() as conn:
        conn.execute(delete(EventRow))
        conn.execute(update(TaskRow).values(status="pending", node=None, started_at=None, ended_at=None))
        conn.execute(update(TaskRow).where(TaskRow.app_id % 5 == 1).values(status="finished", ended_at=time.time()))
        conn.execute(update(TaskRow).where(TaskRow.app_id % 5 == 2).values(status="running", node="cloud-north/cpu-0",
                                                                            started_at=time.time()))
    counts = store.task_counts()
    store.close()
    return counts


def rebuild(db: str) -> dict:
    from suanli.server.controller import Controller, load_config
    from suanli.server.store import Store

    store = Store(db, upgrade=False)
    t0 = time.perf_counter()
    loaded = load_config(store)
    t1 = time.perf_counter()
    controller = Controller(loaded, store)
    controller.sim.start()
    controller.cmd_seen = store.last_command()
    controller._restore()
    t2 = time.perf_counter()
    controller._turn()
    t3 = time.perf_counter()
    out = {"load_config_s": round(t1 - t0, 3), "restore_s": round(t2 - t1, 3), "first_turn_s": round(t3 - t2, 3),
           "rebuild_s": round(t2 - t0, 3), "apps": len(controller.app_ids)}
    store.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--apps", type=int, default=10_000)
    ap.add_argument("--tasks-per-app", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--db", default=None, help="an empty database (default: a new SQLite file)")
    ap.add_argument("--limit-s", type=float, default=10.0)
    ap.add_argument("--reuse", action="store_true", help="--db holds a store this made before: use it as it is")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="suanli-bench-rebuild-")
    db = args.db or f"sqlite:///{tmp}/s.db"
    made = make_store(db, args.apps, args.tasks_per_app) if not args.reuse else {"tasks": reset(db)}
    runs = []
    for _ in range(args.repeat):
        reset(db)
        runs.append(rebuild(db))
    best = min(r["rebuild_s"] for r in runs)
    out = {"bench": "rebuild", "db": db.split(":", 1)[0], "apps": args.apps, "tasks_per_app": args.tasks_per_app,
           "store": made, "runs": runs, "best_rebuild_s": best, "limit_s": args.limit_s,
           "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
           "machine": {"cpus": os.cpu_count(), "python": platform.python_version()}}
    print(json.dumps(out, indent=1))
    return 0 if best <= args.limit_s else 1


if __name__ == "__main__":
    sys.exit(main())
