"""What agents waiting for their assignments cost a server, and how soon a
written assignment reaches its agent.

A ``suanli serve --executor agents`` with ``--agents`` nodes registered
(by the admin: no registration limit), and as many waiting reads open at
once (``GET /v1/agents/NODE/assignments?after=MARK&wait=S``, as ``suanli
agent`` keeps one), for each count of ``--agents``:

- the server's CPU (its processes: API and controller) while they all wait
  and nothing changes, in CPU seconds per second, against the same with no
  read waiting;
- the time from an assignment written to the store (for ``--writes`` nodes
  drawn at random, one at a time, each at a random moment) to its waiting
  read's answer: p50, p99.

Prints one JSON object per count.

    .venv/bin/python bench/bench_agent_reads.py [--agents 10,100,1000] [--writes 50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from suanli.server.store import Store, sqlite_url

ADMIN = "bench-admin-" + "x" * 32


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """User and system CPU of ``pid`` and its children that live (the controller's process)."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    pids = [pid] + [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    for p in pids:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def fleet(n: int) -> str:
    return f"""\
apiVersion: suanli/v1
kind: Fleet
metadata: {{name: f}}
spec:
  sites:
    - name: e1
      tier: edge
      agents: {{nodes: {n}, node: {{cpu: 4, memory: 8Gi}}}}
---
apiVersion: suanli/v1
kind: Tenant
metadata: {{name: t}}
"""


async def measure(url: str, db: str, pid: int, n: int, writes: int, idle_s: float) -> dict:
    headers = {"Authorization": f"Bearer {ADMIN}"}
    limits = httpx.Limits(max_connections=n + 10, max_keepalive_connections=n + 10)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=120, limits=limits) as http:
        for i in range(n):
            r = await http.post("/v1/agents", json={"site": "e1", "name": f"n{i}", "lease": "3600s",
                                                    "node": {"cpu": "4", "memory": "8Gi", "arch": "x86_64"}})
            assert r.status_code == 201, r.text
        marks = {}
        for i in range(n):
            marks[i] = (await http.get(f"/v1/agents/e1/n{i}/assignments")).json()["mark"]
        await asyncio.sleep(1.0)
        before = cpu_seconds(pid)
        await asyncio.sleep(idle_s)
        none_waiting = (cpu_seconds(pid) - before) / idle_s
        answered: dict[int, float] = {}

        async def read(i: int) -> None:
            while True:
                r = await http.get(f"/v1/agents/e1/n{i}/assignments", params={"after": marks[i], "wait": 60})
                got = r.json()
                if got["mark"] != marks[i]:
                    answered[i] = time.monotonic()
                    marks[i] = got["mark"]

        readers = [asyncio.create_task(read(i)) for i in range(n)]
        await asyncio.sleep(2.0)
        before = cpu_seconds(pid)
        await asyncio.sleep(idle_s)
        all_waiting = (cpu_seconds(pid) - before) / idle_s
        store = Store(db, upgrade=False)
        latencies = []
        rng = random.Random(1)
        for k in range(writes):
            i = rng.randrange(n)
            await asyncio.sleep(rng.uniform(0, 0.3))  # (at any moment of the looks' period, not just after one)
            answered.pop(i, None)
            row = {"node": f"e1/n{i}", "task": f"t:bench/c/{k}", "run_id": k + 1, "attempt": 0, "want": "run",
                   "held": False, "adopt": False, "launch": {}, "state": "none"}
            written = time.monotonic()
            await asyncio.to_thread(store.assign, [row])
            while i not in answered:
                await asyncio.sleep(0.002)
            latencies.append(answered[i] - written)
        store.close()
        for t in readers:
            t.cancel()
    lat = np.array(latencies) * 1000
    return {"agents": n, "cpu_per_s_none_waiting": round(none_waiting, 4),
            "cpu_per_s_all_waiting": round(all_waiting, 4),
            "wake_ms_p50": round(float(np.percentile(lat, 50)), 1), "wake_ms_p99": round(float(np.percentile(lat, 99)),
                                                                                          1),
            "writes": writes}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", default="10,100,1000")
    ap.add_argument("--writes", type=int, default=50)
    ap.add_argument("--idle", type=float, default=10.0, help="seconds the CPU is measured over")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # (the server, a child, takes it too)
    for n in [int(x) for x in args.agents.split(",")]:
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "fleet.yaml").write_text(fleet(n))
            db, port = sqlite_url(Path(tmp) / "s.db"), free_port()
            server = subprocess.Popen(
                [sys.executable, "-c", "from suanli.cli import main; main()", "serve", str(Path(tmp) / "fleet.yaml"),
                 "--db", db, "--port", str(port), "--executor", "agents", "--work-dir", str(Path(tmp) / "w"),
                 "--max-rate", "1000000", "--no-access-log"],
                env={**os.environ, "SUANLI_ADMIN_TOKEN": ADMIN}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                url = f"http://127.0.0.1:{port}"
                for _ in range(600):
                    try:
                        if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    time.sleep(0.1)
                print(json.dumps(asyncio.run(measure(url, db, server.pid, n, args.writes, args.idle))), flush=True)
            finally:
                server.send_signal(signal.SIGKILL)
                server.wait()


if __name__ == "__main__":
    main()
