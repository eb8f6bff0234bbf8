"""Benchmark: submissions to a live control plane at a steady rate.

Starts ``suanli serve`` (the real CLI, as a subprocess) on a free loopback
port with the city fleet and its tenants, a fresh SQLite database in a
temporary directory (or ``--db URL``, e.g. an empty PostgreSQL database) and
a per-token rate limit far above the load. It mints a tenant token, sends a
short unmeasured warm-up, then submits applications open loop: request ``i``
is due at ``start + i / --rate``, whichever of the ``--workers`` client
threads is free sends it, and its latency is counted from the time it was
due, so a slow answer delays the requests behind it and they count it too
(no coordinated omission). The service time (from the actual send) is
reported beside it. Each application is one job task of ``--task-duration``
(default 2 s): tasks arrive, run and leave all through the run, so the
scheduler's thread works while requests are answered.

After the last submission it waits for the scheduler to drain: no task of
the tenant pending. During the run it samples the pending count once a
second, and at the end it reads every task's submission and start times
(placement delay) and ``/metrics`` (task and request counts), then reads the
server's peak resident memory and CPU time and stops it with SIGTERM.

Prints one JSON object; exits with status 1 if a check fails: any answer
other than 201, the achieved rate under 0.97 of ``--rate``, submit latency
p99 over ``--p99-ms`` (20), a task still pending ``--drain-s`` (5) seconds
after the last submission, task or request counts that disagree with the
submissions, or a server that does not stop cleanly.

    .venv/bin/python bench/bench_serve.py [--rate 200] [--seconds 20] [--workers 8] [--db URL] [--p99-ms 20]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import httpx
import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
EXAMPLES = ROOT.parent / "shared" / "examples"
FLEET_FILES = ("city-fleet.yaml", "tenants.yaml")
TENANT = "acme-ai"
STREAM_TENANT = "hpc-lab"  # the idle streams' tenant: none of the load's events are its
ADMIN_TOKEN = "sl_bench_admin_" + uuid.uuid4().hex


# ---------------------------------------------------------------- the server


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(files: list[Path], db: str, port: int, max_rate: float, log: Path) -> subprocess.Popen:
    env = {**os.environ, "SUANLI_ADMIN_TOKEN": ADMIN_TOKEN}
    cmd = [sys.executable, "-m", "suanli.cli", "serve", *map(str, files), "--db", db,
           "--host", "127.0.0.1", "--port", str(port), "--speed", "1", "--max-rate", f"{max_rate:g}"]
    with open(log, "wb") as fh:
        return subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT)


def wait_healthy(proc: subprocess.Popen, base: str, timeout: float, log: Path) -> float:
    """Seconds until /healthz answers ok; fails if the server exits or never answers."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        if proc.poll() is not None:
            raise SystemExit(f"suanli serve exited with status {proc.returncode}:\n{log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{base}/healthz", timeout=1.0).status_code == 200:
                return time.perf_counter() - t0
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise SystemExit(f"suanli serve did not answer /healthz within {timeout:g} s")


def proc_status(pid: int) -> dict[str, float]:
    """Peak and current resident memory (MiB) and CPU seconds of a process, from /proc."""
    out: dict[str, float] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                out[key] = int(value.split()[0]) / 1024
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        out["cpu_s"] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
    except (OSError, IndexError, ValueError):
        pass
    return out


def machine_busy_s() -> float:
    """CPU seconds the whole machine has been busy (all cores, from /proc/stat)."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def stop_server(proc: subprocess.Popen, timeout: float = 20.0) -> dict:
    """SIGTERM, then wait; killed only if it does not stop in time."""
    t0 = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout)
        killed = False
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
        killed = True
    return {"exit_status": code, "stop_s": round(time.perf_counter() - t0, 3), "killed": killed}


# ---------------------------------------------------------------- the load


def application(name: str, duration: str) -> bytes:
    doc = {"apiVersion": "suanli/v1", "kind": "Application", "metadata": {"name": name},
           "spec": {"components": [{"name": "c", "lifetime": "job", "replicas": 1, "duration": duration,
                                    "resources": {"cpu": 1, "memory": "1Gi"}}]}}
    return json.dumps(doc, separators=(",", ":")).encode()


class OpenLoop:
    """``n`` submissions, request ``i`` due at ``start + i / rate``, sent by the
    first free worker. Per request: due, sent and answered times (perf_counter)
    and the status (0: no answer)."""

    def __init__(self, base: str, token: str, n: int, rate: float, workers: int, prefix: str,
                 duration: str) -> None:
        self.base, self.token, self.n, self.rate, self.workers = base, token, n, rate, workers
        self.prefix, self.duration = prefix, duration
        self.due = np.zeros(n)
        self.sent = np.zeros(n)
        self.done = np.zeros(n)
        self.status = np.zeros(n, dtype=np.int32)
        self.failures: list[str] = []  # the first few answers other than 201
        self._next = 0
        self._lock = threading.Lock()
        self.start = 0.0  # set when every worker has its client and connection open
        self._ready = threading.Barrier(workers + 1, action=self._set_start)

    def _set_start(self) -> None:
        self.start = time.perf_counter() + 0.01

    def _take(self) -> int:
        with self._lock:
            i = self._next
            self._next += 1
            return i

    def _work(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        with httpx.Client(base_url=self.base, headers=headers, timeout=30.0) as http:
            http.get("/healthz")  # the connection is open before the first request is due
            self._ready.wait()
            while (i := self._take()) < self.n:
                name = f"{self.prefix}-{i:06d}"
                body = application(name, self.duration)
                due = self.start + i / self.rate
                delay = due - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                sent = time.perf_counter()
                try:
                    r = http.post("/v1/applications", content=body, headers={"Idempotency-Key": name})
                    status = r.status_code
                    if status != 201 and len(self.failures) < 5:
                        self.failures.append(f"{name}: {status} {r.text[:300]}")
                except httpx.HTTPError as exc:
                    status = 0
                    if len(self.failures) < 5:
                        self.failures.append(f"{name}: {type(exc).__name__}: {exc}")
                self.due[i], self.sent[i], self.done[i], self.status[i] = due, sent, time.perf_counter(), status

    def run(self) -> None:
        threads = [threading.Thread(target=self._work, name=f"client-{k}") for k in range(self.workers)]
        # no collection of this process's garbage while it measures: a full one stops
        # every client thread for tens of milliseconds, and would count as the server's latency
        gc.collect()
        gc.disable()
        try:
            for t in threads:
                t.start()
            self._ready.wait()
            for t in threads:
                t.join()
        finally:
            gc.enable()


class PendingSampler:
    """The tenant's pending task count, sampled every ``every`` seconds in its own thread."""

    def __init__(self, http: httpx.Client, every: float) -> None:
        self.http, self.every = http, every
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pending-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.samples.append(len(self.http.get("/v1/tasks", params={"status": "pending", "limit": 10_000}).json()))
            except (httpx.HTTPError, ValueError):
                pass

    def __enter__(self) -> PendingSampler:
        if self.every > 0:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()


class IdleStreams:
    """``n`` event streams of a tenant with nothing to see, held open (a thread each,
    on the client's side) through the run: each reads its keep-alives."""

    def __init__(self, base: str, admin_token: str, n: int) -> None:
        self.n, self.base = n, base
        per_token = 8  # the server's cap of streams per token
        tokens = []
        for _ in range(-(-n // per_token)):
            r = httpx.post(f"{base}/v1/tokens", json={"tenant": STREAM_TENANT},
                           headers={"Authorization": f"Bearer {admin_token}"}, timeout=10.0)
            if r.status_code != 201:
                raise SystemExit(f"minting a stream token answered {r.status_code}: {r.text}")
            tokens.append(r.json()["token"])
        self._stop = threading.Event()
        self._open = 0
        self._lock = threading.Lock()
        self.keepalives = 0
        self.refused: list[int] = []
        self._threads = [threading.Thread(target=self._hold, args=(tokens[i // per_token],), daemon=True)
                         for i in range(n)]
        for t in self._threads:
            t.start()
        end = time.monotonic() + 30
        while self._open + len(self.refused) < n and time.monotonic() < end:
            time.sleep(0.05)

    def _hold(self, token: str) -> None:
        with httpx.Client(base_url=self.base, timeout=httpx.Timeout(30.0)) as http:
            with http.stream("GET", "/v1/events/stream", headers={"Authorization": f"Bearer {token}"}) as r:
                if r.status_code != 200:
                    with self._lock:
                        self.refused.append(r.status_code)
                    return
                with self._lock:
                    self._open += 1
                try:
                    for line in r.iter_lines():
                        if line.startswith(": keep-alive"):
                            with self._lock:
                                self.keepalives += 1
                        if self._stop.is_set():
                            break
                finally:
                    with self._lock:
                        self._open -= 1

    def close(self) -> dict:
        seen = {"asked": self.n, "open_at_end": self._open, "refused": self.refused, "keepalives": self.keepalives}
        self._stop.set()
        for t in self._threads:
            t.join(5)
        return seen


def all_tasks(http: httpx.Client) -> list[dict]:
    """Every task of the tenant, following the listing's pages."""
    out, params = [], {}
    while True:
        r = http.get("/v1/tasks", params=params)
        out += r.json()
        cursor = r.headers.get("x-next-cursor")
        if not cursor:
            return out
        params = {"cursor": cursor}


def wait_drained(http: httpx.Client, timeout: float) -> tuple[float | None, int]:
    """Seconds until the tenant has no pending task (None if it still has some
    after ``timeout``), and the pending count last seen."""
    t0 = time.perf_counter()
    while True:
        pending = len(http.get("/v1/tasks", params={"status": "pending", "limit": 10_000}).json())
        elapsed = time.perf_counter() - t0
        if pending == 0:
            return elapsed, 0
        if elapsed > timeout:
            return None, pending
        time.sleep(0.05)


def metric(text: str, name: str) -> float | None:
    """The value of one sample (``name`` with its labels, exactly) in Prometheus text."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def pct(values: np.ndarray, q: float, scale: float = 1e3) -> float | None:
    return round(float(np.percentile(values, q)) * scale, 2) if values.size else None


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=200.0, help="submissions per second (default 200)")
    ap.add_argument("--seconds", type=float, default=20.0, help="length of the measured run (default 20)")
    ap.add_argument("--workers", type=int, default=8, help="client threads, one connection each (default 8)")
    ap.add_argument("--db", default=None, help="database URL (default: a new SQLite file in a temporary "
                                                "directory); a PostgreSQL database must be empty")
    ap.add_argument("--p99-ms", type=float, default=20.0, help="submit latency p99 target in ms (default 20)")
    ap.add_argument("--min-rate-ratio", type=float, default=0.97,
                    help="fail if the achieved rate is under this fraction of --rate (default 0.97)")
    ap.add_argument("--drain-s", type=float, default=5.0,
                    help="every task must be placed this long after the last submission (default 5)")
    ap.add_argument("--task-duration", default="2s", help="each task's run time (default 2s)")
    ap.add_argument("--warmup", type=int, default=50, help="unmeasured submissions first (default 50)")
    ap.add_argument("--sample-s", type=float, default=1.0,
                    help="seconds between samples of the pending count during the run (0: none)")
    ap.add_argument("--streams", type=int, default=0,
                    help="idle event streams held open through the run, by another tenant (default 0)")
    ap.add_argument("--examples", type=Path, default=EXAMPLES,
                    help=f"directory of {' and '.join(FLEET_FILES)} (default {EXAMPLES})")
    args = ap.parse_args(argv)
    if args.rate <= 0 or args.seconds <= 0 or args.workers < 1:
        ap.error("--rate and --seconds must be above 0, --workers at least 1")
    files = [args.examples / f for f in FLEET_FILES]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        ap.error(f"not found: {', '.join(missing)} (see --examples)")

    n = max(1, round(args.rate * args.seconds))
    max_rate = max(10_000.0, 10 * args.rate)  # the per-token limit never throttles the load
    failures: list[str] = []
    load_at_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        tmp_dir = Path(tmp)
        db = args.db or f"sqlite:///{tmp_dir / 'suanli.db'}"
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        log = tmp_dir / "serve.log"
        proc = start_server(files, db, port, max_rate, log)
        tenant: httpx.Client | None = None
        idle = None
        try:
            ready_s = wait_healthy(proc, base, 60.0, log)
            admin = httpx.post(f"{base}/v1/tokens", json={"tenant": TENANT},
                               headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=10.0)
            if admin.status_code != 201:
                raise SystemExit(f"minting a tenant token answered {admin.status_code}: {admin.text}")
            token = admin.json()["token"]
            tenant = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30.0)

            warm = OpenLoop(base, token, args.warmup, min(args.rate, 50.0), 1, "warm", args.task_duration)
            warm.run()
            if args.warmup and not (warm.status == 201).all():
                raise SystemExit(f"warm-up submissions failed: {warm.failures}")
            if wait_drained(tenant, 30.0)[0] is None:
                raise SystemExit("warm-up tasks still pending after 30 s")

            idle = IdleStreams(base, ADMIN_TOKEN, args.streams) if args.streams else None
            cpu_before = proc_status(proc.pid).get("cpu_s", 0.0)
            client_cpu0 = time.process_time()
            busy0 = machine_busy_s()
            load = OpenLoop(base, token, n, args.rate, args.workers, "app", args.task_duration)
            with PendingSampler(tenant, args.sample_s) as sampler:
                load.run()
            client_cpu = time.process_time() - client_cpu0
            cpu_during = proc_status(proc.pid).get("cpu_s", 0.0) - cpu_before
            others_cpu = machine_busy_s() - busy0 - cpu_during - client_cpu
            drain_s, still_pending = wait_drained(tenant, args.drain_s)

            tasks = all_tasks(tenant)
            metrics_text = httpx.get(f"{base}/metrics", timeout=30.0,
                                     headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}).text
            streams_seen = idle.close() if idle is not None else None
            server = proc_status(proc.pid)
        finally:
            if tenant is not None:
                tenant.close()
            if idle is not None:
                idle.close()
            stopped = stop_server(proc)
        serve_log = log.read_text(errors="replace")

    # ------------------------------------------------------------ figures
    ok = load.status == 201
    latency = load.done - load.due  # from the time the request was due (open loop)
    service = load.done - load.sent  # from the time it was sent
    send_lag = load.sent - load.due  # how late it was sent: every worker busy, or the client itself slow
    span = float(load.done.max() - load.start) if n else 0.0
    achieved = n / span if span > 0 else 0.0
    errors = int((~ok).sum())
    statuses = {str(s): int(c) for s, c in zip(*np.unique(load.status, return_counts=True))}

    mine = [t for t in tasks if t["task"].startswith("app-")]
    started = [t for t in mine if t.get("started_at")]
    placement = np.array([datetime.fromisoformat(t["started_at"]).timestamp()
                          - datetime.fromisoformat(t["submitted_at"]).timestamp() for t in started])
    by_status: dict[str, int] = {}
    for t in mine:
        by_status[t["status"]] = by_status.get(t["status"], 0) + 1

    total_tasks = sum(metric(metrics_text, f'suanli_tasks{{status="{s}"}}') or 0
                      for s in ("pending", "running", "finished", "failed"))
    created = metric(metrics_text,
                     'suanli_http_requests_total{method="POST",route="/v1/applications",status="201"}')
    sched_errors = metric(metrics_text, "suanli_scheduler_errors_total")
    turns = metric(metrics_text, "suanli_scheduler_instants_total")

    p99 = pct(latency[ok], 99)
    if errors:
        failures.append(f"{errors} of {n} submissions did not answer 201 ({statuses}); first: {load.failures}")
    if achieved < args.min_rate_ratio * args.rate:
        failures.append(f"achieved {achieved:.1f} requests/s, under {args.min_rate_ratio:g} x {args.rate:g}")
    if p99 is None or p99 > args.p99_ms:
        failures.append(f"submit latency p99 {p99} ms is over the {args.p99_ms:g} ms target")
    if drain_s is None:
        failures.append(f"{still_pending} tasks still pending {args.drain_s:g} s after the last submission")
    if len(mine) != int(ok.sum()):
        failures.append(f"the server holds {len(mine)} of the run's tasks, {int(ok.sum())} were accepted")
    if len(started) != len(mine):
        failures.append(f"{len(mine) - len(started)} of the run's tasks never started")
    if total_tasks != args.warmup + int(ok.sum()):
        failures.append(f"/metrics counts {total_tasks:g} tasks, expected {args.warmup + int(ok.sum())}")
    if created != args.warmup + int(ok.sum()):
        failures.append(f"/metrics counts {created} applications created, expected {args.warmup + int(ok.sum())}")
    if streams_seen is not None and streams_seen["open_at_end"] != args.streams:
        failures.append(f"{args.streams} idle streams were asked for, {streams_seen['open_at_end']} were open at the end")
    if sched_errors:
        failures.append(f"the scheduler reported {sched_errors:g} errors")
    # uvicorn shuts down gracefully on SIGTERM, then raises the signal again: -15 is a clean stop
    if stopped["killed"] or stopped["exit_status"] not in (0, -signal.SIGTERM):
        failures.append(f"the server did not stop cleanly on SIGTERM: {stopped}")
    if "Traceback" in serve_log:
        failures.append("the server logged a traceback: " + serve_log[serve_log.index("Traceback"):][:1500])

    report = {
        "benchmark": "suanli serve: submissions at a steady rate, open loop",
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "database": "sqlite (temporary file)" if args.db is None else db.split("://", 1)[0],
        "fleet": [f.name for f in files],
        "target_rate": args.rate,
        "seconds": args.seconds,
        "workers": args.workers,
        "idle_streams": streams_seen,
        "task_duration": args.task_duration,
        "submissions": n,
        "accepted": int(ok.sum()),
        "errors": errors,
        "statuses": statuses,
        "achieved_rate": round(achieved, 1),
        "latency_ms": {"p50": pct(latency[ok], 50), "p90": pct(latency[ok], 90), "p99": p99,
                       "p999": pct(latency[ok], 99.9), "max": pct(latency[ok], 100)},
        "service_ms": {"p50": pct(service[ok], 50), "p90": pct(service[ok], 90), "p99": pct(service[ok], 99),
                       "max": pct(service[ok], 100)},
        "client_send_lag_ms": {"p99": pct(send_lag, 99), "max": pct(send_lag, 100)},
        "p99_target_ms": args.p99_ms,
        "scheduler": {
            "drain_s": None if drain_s is None else round(drain_s, 3),
            "pending_sampled_max": max(sampler.samples, default=None),
            "pending_samples": len(sampler.samples),
            "turns_recorded": None if turns is None else int(turns),
            "tasks": by_status,
            "placement_delay_ms": {"p50": pct(placement, 50), "p99": pct(placement, 99),
                                   "max": pct(placement, 100)},
        },
        "server": {
            "ready_s": round(ready_s, 2),
            "peak_rss_mib": round(server.get("VmHWM", 0.0), 1) or None,
            "cpu_s_during_load": round(cpu_during, 2),
            "cpu_ms_per_request": round(cpu_during / n * 1e3, 3),
            **stopped,
        },
        "client_cpu_s": round(client_cpu, 2),
        "other_processes_cpu_s": round(max(others_cpu, 0.0), 2),  # the rest of the machine, during the load
        "machine": {"cpu_count": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform(), "load_avg_1m_at_start": round(load_at_start, 2)},
        "ok": not failures,
        "failures": failures,
    }
    print(json.dumps(report, indent=2))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
