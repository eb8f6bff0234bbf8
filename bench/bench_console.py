"""Benchmark: the console's views at size, over HTTP, recorded and live.

Recorded: the city scenario simulated with ``--cars`` cars (3.2 tasks each,
so 31,250 cars make 100,000 tasks) for ``--until``, opened with ``suanli
view``; each view is asked ``--repeat`` times and the slowest answer kept.
The slider's instants (the world at the start, the middle, the end) are
asked too, since each instant is a pass over every event.

Live: ``suanli serve`` over the city's fleet with ``--devices`` cars (a
million: the scale issue's world), ``--tasks`` services submitted as
applications of 1,000 replicas, then every view asked as an admin and as a
tenant.

    .venv/bin/python bench/bench_console.py [--cars 31250] [--devices 1000000] [--tasks 100000]

Prints JSON: load times, each view's slowest answer in seconds, sizes.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CITY = ROOT / "examples" / "city-autodrive.yaml"
ADMIN = "sl_bench-admin-7Hq2vKx9Rm4WbZ8pLc3N"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def up(url: str, proc: subprocess.Popen, path: str = "/", limit: float = 900, ok: int = 500) -> float:
    start = time.monotonic()
    while time.monotonic() - start < limit:
        try:
            if httpx.get(url + path, timeout=5).status_code < ok:
                return time.monotonic() - start
        except httpx.TransportError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode}")
        time.sleep(0.2)
    raise RuntimeError("did not come up")


def timed(client: httpx.Client, path: str, repeat: int) -> float:
    worst = 0.0
    for _ in range(repeat):
        t = time.perf_counter()
        r = client.get(path)
        worst = max(worst, time.perf_counter() - t)
        assert r.status_code == 200, (path, r.status_code, r.text[:300])
    return round(worst, 4)


def recorded(cars: int, until: str, repeat: int, out: Path) -> dict:
    t = time.monotonic()
    subprocess.run([sys.executable, "-m", "suanli.cli", "simulate", str(CITY), "--population", f"cars={cars}",
                    "--until", until, "--out", str(out)], check=True, capture_output=True)
    simulated = time.monotonic() - t
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "suanli.cli", "view", str(out), "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        load = up(url, proc)
        end = json.loads((out / "result.json").read_text())["end_s"]
        tasks = json.loads((out / "result.json").read_text())["metrics"]["tasks"]["submitted"]
        events = sum(1 for _ in open(out / "events.jsonl", "rb"))
        with httpx.Client(base_url=url, timeout=60) as c:
            some = c.get("/tasks", params={"state": "running", "tier": "edge"}).text
            task = some.split('data-task="', 1)[1].split('"', 1)[0] if 'data-task="' in some else "x"
            paths = ["/", "/topology", "/tenants", "/tasks", "/tasks?page=1000", "/tasks?state=pending",
                     "/tasks?tier=edge&state=running", "/tasks?q=game", f"/tasks/{task}", "/events",
                     "/events?kind=migrated", f"/?at={end / 2}", "/?at=0", f"/tasks?at={end / 3}&tier=edge"]
            views = {p: timed(c, p, repeat) for p in paths}
        return {"cars": cars, "until": until, "tasks": tasks, "events": events, "simulate_s": round(simulated, 1),
                "open_s": round(load, 2), "views_s": views, "slowest_s": max(views.values())}
    finally:
        proc.terminate()
        proc.wait()


def live(devices: int, tasks: int, repeat: int, work: Path) -> dict:
    docs = list(yaml.safe_load_all(CITY.read_text()))
    kept = [d for d in docs if d and d.get("kind") in ("Fleet", "Tenant", "VirtualCluster")]
    for d in kept:
        if d["kind"] == "Fleet":
            for p in d["spec"].get("populations") or []:
                p["count"] = devices
    fleet = work / "fleet.yaml"
    fleet.write_text(yaml.safe_dump_all(kept, sort_keys=False))
    tenants = [d["metadata"]["name"] for d in kept if d["kind"] == "Tenant"]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "SUANLI_ADMIN_TOKEN": ADMIN}
    t = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "suanli.cli", "serve", str(fleet), "--db",
                             f"sqlite:///{work / 'suanli.db'}", "--port", str(port), "--max-rate", "100000",
                             "--speed", "100"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        load = up(url, proc, "/readyz", ok=300)  # the controller has the world loaded
        admin = {"Authorization": f"Bearer {ADMIN}"}
        with httpx.Client(base_url=url, timeout=120) as c:
            tenant = tenants[0]
            token = c.post("/v1/tokens", json={"tenant": tenant}, headers=admin).json()["token"]
            who = {"Authorization": f"Bearer {token}"}
            t = time.monotonic()
            for i in range(tasks // 1000):
                doc = {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": f"svc-{i}"},
                       "spec": {"components": [{"name": "c", "lifetime": "service", "replicas": 1000,
                                                "resources": {"cpu": 0.1, "memory": "64Mi"}}]}}
                r = c.post("/v1/applications", json=doc, headers=who)
                assert r.status_code == 201, r.text
            submitted = time.monotonic() - t
            # every task placed and running (the controller has written those instants)
            while c.get(f"/v1/applications/svc-{tasks // 1000 - 1}", headers=who).json()["tasks"]["running"] < 1000:
                time.sleep(0.5)
            placed = time.monotonic() - t
            time.sleep(2)
            out = {}
            for name, tok in (("admin", ADMIN), ("tenant", token)):
                c.cookies.clear()
                r = c.post("/login", data={"token": tok, "next": "/"}, headers={"origin": url}, follow_redirects=False)
                assert r.status_code == 303, r.text
                q = f"?tenant={tenant}" if name == "admin" else ""
                paths = ["/", "/topology", "/tenants", "/tasks", "/tasks?page=1000", "/tasks?state=running",
                         "/tasks?tier=cloud", "/tasks?q=svc-7", f"/tasks/svc-3/c/7{q}", "/events"]
                out[name] = {p: timed(c, p, repeat) for p in paths}
        slowest = max(v for views in out.values() for v in views.values())
        return {"devices": devices, "tasks": tasks, "serve_up_s": round(load, 1), "submit_s": round(submitted, 1),
                "all_running_s": round(placed, 1),
                "views_s": out, "slowest_s": slowest}
    finally:
        proc.terminate()
        proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cars", type=int, default=31_250)
    ap.add_argument("--until", default="1h")
    ap.add_argument("--devices", type=int, default=1_000_000)
    ap.add_argument("--tasks", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", choices=["recorded", "live"], default=None)
    args = ap.parse_args()
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        if args.only in (None, "recorded"):
            out["recorded"] = recorded(args.cars, args.until, args.repeat, Path(tmp) / "run")
        if args.only in (None, "live"):
            out["live"] = live(args.devices, args.tasks, args.repeat, Path(tmp))
    out["ok"] = all(part["slowest_s"] <= 1.0 for part in out.values() if isinstance(part, dict))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
