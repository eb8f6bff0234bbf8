"""Benchmark: the store stays flat under a steady load (retention).

Starts ``suanli serve`` (the city's fleet, SQLite) with short retention:
applications whose tasks all ended kept ``--keep-ended``, events kept
``--keep-events``, pruned every ``--prune-every``. For ``--minutes`` it
submits, at ``--rate`` per second, applications of one job of 2 s, and
every 10 s deletes the services it made (one service application in ten),
and reads ``suanli_store_rows`` from /metrics every ``--sample-s``. Prints
JSON: the series of rows per table and whether the second half stays
within the first half's peak (flat), with the server's peak RSS.

    .venv/bin/python bench/bench_soak.py [--minutes 4] [--rate 20] [--keep-ended 20s] [--keep-events 60s]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT.parent / "shared" / "examples"
ADMIN = "sl_bench-admin-7Hq2vKx9Rm4WbZ8pLc3N"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rows(client: httpx.Client) -> dict[str, float]:
    text = client.get("/metrics", headers={"Authorization": f"Bearer {ADMIN}"}).text
    out = {}
    for line in text.splitlines():
        if line.startswith("suanli_store_rows{"):
            table = line.split('table="', 1)[1].split('"', 1)[0]
            out[table] = float(line.rsplit(" ", 1)[1])
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=4.0)
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--keep-ended", default="20s")
    ap.add_argument("--keep-events", default="60s")
    ap.add_argument("--prune-every", default="5s")
    ap.add_argument("--sample-s", type=float, default=10.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        proc = subprocess.Popen(
            [sys.executable, "-m", "suanli.cli", "serve", str(EXAMPLES / "city-fleet.yaml"),
             str(EXAMPLES / "tenants.yaml"), "--db", f"sqlite:///{Path(tmp) / 'suanli.db'}", "--port", str(port),
             "--max-rate", "100000", "--no-access-log", "--keep-ended", args.keep_ended,
             "--keep-events", args.keep_events, "--prune-every", args.prune_every],
            env={**os.environ, "SUANLI_ADMIN_TOKEN": ADMIN}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            with httpx.Client(base_url=url, timeout=30) as c:
                while True:
                    try:
                        if c.get("/readyz").status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    time.sleep(0.2)
                token = c.post("/v1/tokens", json={"tenant": "acme-ai"},
                               headers={"Authorization": f"Bearer {ADMIN}"}).json()["token"]
                who = {"Authorization": f"Bearer {token}"}
                start = time.monotonic()
                end = start + args.minutes * 60
                series, services, i, next_sample, next_delete = [], [], 0, start, start + 10
                while time.monotonic() < end:
                    now = time.monotonic()
                    if now >= next_sample:
                        series.append({"t": round(now - start, 1), **rows(c)})
                        next_sample += args.sample_s
                    if now >= next_delete:
                        for name in services:
                            c.delete(f"/v1/applications/{name}", headers=who)
                        services, next_delete = [], next_delete + 10
                    service = i % 10 == 0
                    name = f"{'svc' if service else 'job'}-{i}"
                    comp = {"name": "c", "lifetime": "service" if service else "job",
                            "resources": {"cpu": 0.1, "memory": "64Mi"}, **({} if service else {"duration": "2s"})}
                    r = c.post("/v1/applications", json={"apiVersion": "suanli/v1", "kind": "Application",
                                                          "metadata": {"name": name}, "spec": {"components": [comp]}},
                               headers=who)
                    assert r.status_code == 201, r.text
                    if service:
                        services.append(name)
                    i += 1
                    time.sleep(max(0.0, start + i / args.rate - time.monotonic()))
                series.append({"t": round(time.monotonic() - start, 1), **rows(c)})
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    half = len(series) // 2
    flat = {table: max(s.get(table, 0) for s in series[half:]) <= 1.25 * max(s.get(table, 0) for s in series[:half] or [{}])
            for table in ("applications", "tasks", "events")}
    print(json.dumps({"submitted": i, "rate": args.rate, "minutes": args.minutes, "series": series, "flat": flat,
                      "ok": all(flat.values()),
                      "children_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)},
                     indent=1))


if __name__ == "__main__":
    main()
