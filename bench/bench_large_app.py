"""Benchmark: one application of 100,000 replicas submitted to a live server.

Starts ``suanli serve`` (the real CLI) with the city fleet and its tenants on a
fresh SQLite database (or ``--db URL``), submits one Application of
``--replicas`` small service replicas (the most one application may have
through the API) and, every half second until every task runs (or
``--timeout-s``), asks ``/healthz`` and a page of ``/v1/tasks`` and notes how
long each took to answer, and the scheduler's ``since_turn_s`` and
``instants``. Then it reads the store's lease and the server's restarts.

Prints one JSON object; exits with status 1 when ``/healthz`` ever answers
other than 200, the controller was started again or fenced (the lease's
epoch moved), an answer took longer than ``--answer-s`` (2), or not every
task runs in the end.

    .venv/bin/python bench/bench_large_app.py [--replicas 100000] [--timeout-s 600]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_serve import (ADMIN_TOKEN, EXAMPLES, FLEET_FILES, TENANT, free_port, proc_status,  # noqa: E402
                         start_server, stop_server, wait_healthy)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, default=100_000)
    ap.add_argument("--db", default=None)
    ap.add_argument("--timeout-s", type=float, default=600.0)
    ap.add_argument("--answer-s", type=float, default=2.0)
    args = ap.parse_args(argv)
    where = Path(tempfile.mkdtemp(prefix="suanli-bench-large-"))
    db = args.db or f"sqlite:///{where}/s.db"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = start_server([EXAMPLES / f for f in FLEET_FILES], db, port, 1e6, where / "server.log")
    started = wait_healthy(proc, base, 120, where / "server.log")
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    doc = {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": "big", "tenant": TENANT},
           "spec": {"components": [{"name": "c", "lifetime": "service", "replicas": args.replicas,
                                    "resources": {"cpu": "10m", "memory": "8Mi"}}]}}
    t0 = time.monotonic()
    r = httpx.post(base + "/v1/applications", json=doc, headers=admin, timeout=300)
    submit_s = time.monotonic() - t0
    samples, bad = [], []
    running = 0
    try:
        while time.monotonic() - t0 < args.timeout_s:
            a = time.monotonic()
            health = httpx.get(base + "/healthz", timeout=60)
            b = time.monotonic()
            page = httpx.get(base + "/v1/tasks", params={"app": "big", "status": "running", "limit": 1},
                             headers={**admin}, timeout=60)
            c = time.monotonic()
            body = health.json()
            counts = httpx.get(base + "/v1/applications/big", params={"tenant": TENANT}, headers=admin,
                               timeout=60).json()["tasks"]
            running = counts["running"]
            samples.append({"t": round(a - t0, 2), "healthz_s": round(b - a, 3), "tasks_page_s": round(c - b, 3),
                            "since_turn_s": body.get("since_turn_s"), "instants": body.get("instants"),
                            "running": running})
            if health.status_code != 200 or page.status_code != 200:
                bad.append(samples[-1] | {"healthz": health.status_code, "page": page.status_code})
            if running >= args.replicas:
                break
            time.sleep(0.5)
        placed_s = time.monotonic() - t0
        restarts = httpx.get(base + "/healthz", timeout=60).json()["restarts"]
        peak = proc_status(proc.pid)
    finally:
        stop = stop_server(proc)
    from suanli.server.store import Store

    store = Store(db, upgrade=False)
    epoch = store.lease("controller").epoch
    store.close()
    slowest = max(max(s["healthz_s"], s["tasks_page_s"]) for s in samples)
    out = {"bench": "large_app", "replicas": args.replicas, "server_start_s": round(started, 2),
           "submit": {"status": r.status_code, "seconds": round(submit_s, 2)},
           "all_running_s": round(placed_s, 1) if running >= args.replicas else None, "running": running,
           "samples": len(samples), "slowest_answer_s": slowest,
           "max_since_turn_s": max((s["since_turn_s"] or 0) for s in samples),
           "instants": samples[-1]["instants"], "not_ok": bad[:5], "restarts": restarts, "lease_epoch": epoch,
           "api_process": peak, "stop": stop, "every_10th_sample": samples[::10]}
    print(json.dumps(out, indent=1))
    ok = (r.status_code == 201 and not bad and restarts == 0 and epoch == 1 and slowest <= args.answer_s
          and running >= args.replicas)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
