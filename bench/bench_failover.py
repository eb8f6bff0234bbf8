"""Benchmark: takeovers of the controller under ``bench_serve.py``'s load.

Two ``suanli serve`` processes (the real CLI) on one PostgreSQL database
(``--db``, an empty database: they are failover peers); client threads
submit applications at ``--rate`` per second, open loop, each to one of the
servers in turn and to the other when it gets no answer (both accept
writes; only one controller is active). Every ``--kill-every`` seconds the
server whose controller is active is killed with SIGKILL and started again
(it then stands by). A takeover is the time from the kill to the other
server's ``/healthz`` saying ``running``.

Prints one JSON object; exits with status 1 if a takeover takes longer than
``--takeover-s`` (5), a submission is answered with anything but 201 (after
retries on the other server), or an acknowledged application is missing or
was made twice afterwards.

    .venv/bin/python bench/bench_failover.py --db postgresql+psycopg://USER@HOST:PORT/DB [--rate 200] [--seconds 40]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_serve import (ADMIN_TOKEN, EXAMPLES, FLEET_FILES, TENANT, application, free_port,  # noqa: E402
                         pct, start_server, stop_server, wait_healthy)


class Peer:
    def __init__(self, db: str, name: str, where: Path) -> None:
        self.db, self.name, self.port = db, name, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = where / f"{name}.log"
        self.proc = None

    def start(self) -> None:
        files = [EXAMPLES / f for f in FLEET_FILES]
        self.proc = start_server(files, self.db, self.port, 1e6, self.log)
        # (each start appends to its own log: start_server truncates, so keep the last one)
        wait_healthy(self.proc, self.url, 120, self.log)

    def state(self) -> str | None:
        try:
            return httpx.get(self.url + "/healthz", timeout=1).json()["controller"]
        except (httpx.TransportError, ValueError):
            return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True, help="an empty PostgreSQL database both servers share")
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--seconds", type=float, default=40.0)
    ap.add_argument("--kill-every", type=float, default=10.0)
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--takeover-s", type=float, default=5.0)
    args = ap.parse_args(argv)
    os.environ["SUANLI_PLAIN_HTTP"] = "1"  # (the servers are this benchmark's own, on loopback)
    where = Path(tempfile.mkdtemp(prefix="suanli-bench-failover-"))
    os.chdir(where)  # the servers' secret file, shared: both start here
    peers = [Peer(args.db, "a", where), Peer(args.db, "b", where)]
    for p in peers:
        p.start()
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    token = httpx.post(peers[0].url + "/v1/tokens", json={"tenant": TENANT}, headers=admin).json()["token"]
    total = int(args.rate * args.seconds)
    acked: dict[str, int] = {}
    answers: Counter = Counter()
    latencies: list[float] = []
    lock = threading.Lock()
    start = time.monotonic() + 0.5
    nxt = iter(range(total))

    def client() -> None:
        with httpx.Client(timeout=10) as http:
            while True:
                with lock:
                    i = next(nxt, None)
                if i is None:
                    return
                due = start + i / args.rate
                time.sleep(max(0.0, due - time.monotonic()))
                name, turn = f"app-{i:06d}", i
                while True:
                    peer = peers[turn % 2]
                    turn += 1
                    try:
                        r = http.post(peer.url + "/v1/applications", content=application(name, "2s"),
                                      headers={"Authorization": f"Bearer {token}", "Idempotency-Key": name,
                                               "Content-Type": "application/json"})
                    except httpx.TransportError:
                        time.sleep(0.01)
                        continue
                    with lock:
                        answers[r.status_code] += 1
                    if r.status_code in (200, 201):
                        with lock:
                            acked[name] = 1
                            latencies.append(time.monotonic() - due)
                        break
                    time.sleep(0.01)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(args.workers)]
    for t in threads:
        t.start()
    takeovers = []
    kills = int(args.seconds // args.kill_every) - (1 if args.seconds % args.kill_every == 0 else 0)
    try:
        for k in range(kills):
            time.sleep(max(0.0, start + (k + 1) * args.kill_every - time.monotonic()))
            active = next(p for p in peers if p.state() == "running")
            other = next(p for p in peers if p is not active)
            active.proc.kill()
            active.proc.wait()
            killed = time.monotonic()
            while other.state() != "running":
                if time.monotonic() - killed > 60:
                    break
                time.sleep(0.01)
            takeovers.append(round(time.monotonic() - killed, 3))
            active.start()  # it stands by
        for t in threads:
            t.join()
        live = next(p for p in peers if p.state() == "running")
        http = httpx.Client(base_url=live.url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
        names: Counter = Counter()
        cursor = None
        while True:
            r = http.get("/v1/applications", params={"limit": 10_000, **({"cursor": cursor} if cursor else {})})
            names.update(a["name"] for a in r.json())
            cursor = r.headers.get("x-next-cursor")
            if not cursor:
                break
    finally:
        stops = [stop_server(p.proc) for p in peers if p.proc is not None and p.proc.poll() is None]
    lat = np.array(latencies)
    out = {"bench": "failover", "rate": args.rate, "seconds": args.seconds, "submitted": total, "acked": len(acked),
           "answers": dict(answers), "takeovers_s": takeovers, "takeover_limit_s": args.takeover_s,
           "latency_ms": {"p50": pct(lat, 50), "p99": pct(lat, 99), "max": pct(lat, 100)},
           "apps_in_store": len(names), "made_twice": sum(1 for n in names.values() if n > 1), "stops": stops}
    print(json.dumps(out, indent=1))
    ok = (takeovers and max(takeovers) <= args.takeover_s and len(acked) == total and set(names) == set(acked)
          and out["made_twice"] == 0 and set(answers) <= {200, 201, 503})
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
