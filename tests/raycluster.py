"""A Ray cluster of several labelled nodes on this machine, for tests and
benchmarks: a head and workers started with ``ray start``, each with
``--labels suanli.node=NAME``, on a port and a temp folder of their own, and
stopped (every process of theirs) at the end.

Ray's processes rename themselves (``ray::...``), so they are found through a
control group of the cluster's own, which ``ray start`` is started in and
every process it starts inherits; without writable control groups, by the
cluster's temp folder and port on their command lines.

The head's health checks are tightened so that a killed raylet is declared
dead within about two seconds rather than Ray's default of about fifteen."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RAY = Path(sys.executable).with_name("ray")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalRayCluster:
    def __init__(self, names: list[str], cpus: int = 2, object_store_mb: int = 100) -> None:
        self.names = names
        self.cpus = cpus
        self.store = object_store_mb * 10**6
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.temp = Path(tempfile.mkdtemp(prefix="suanli-ray-"))
        self.env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_ADDRESS": ""}
        self.group = Path("/sys/fs/cgroup/pids") / f"suanli-ray-{self.port}"
        try:
            self.group.mkdir()
        except OSError:
            self.group = None

    def _ray(self, *args: str) -> None:
        command = [str(RAY), *args]
        if self.group is not None:
            command = ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.group / "cgroup.procs"), *command]
        r = subprocess.run(command, capture_output=True, text=True, env=self.env, timeout=180)
        if r.returncode != 0:
            raise RuntimeError(f"ray {' '.join(args)} failed:\n{r.stdout}\n{r.stderr}")

    def start(self) -> "LocalRayCluster":
        head, *workers = self.names
        common = [f"--num-cpus={self.cpus}", f"--object-store-memory={self.store}", "--disable-usage-stats"]
        health = '{"health_check_period_ms": 500, "health_check_timeout_ms": 500, "health_check_failure_threshold": 3}'
        self._ray("start", "--head", f"--port={self.port}", f"--temp-dir={self.temp}", "--include-dashboard=false",
                  f"--dashboard-port={free_port()}", f"--dashboard-agent-listen-port={free_port()}",
                  f"--labels=suanli.node={head}", f"--system-config={health}", *common)
        for name in workers:
            self.join(name)
        return self

    def join(self, name: str, site: str | None = None) -> None:
        """Start a worker node labelled ``name`` (and ``site``; again, after its raylet was killed): a
        port of its own for its agent (not the default, which the head has), no log monitor left behind."""
        labels = f"suanli.node={name}" + (f",suanli.site={site}" if site else "")
        self._ray("start", f"--address={self.address}", f"--labels={labels}",
                  f"--dashboard-agent-listen-port={free_port()}", "--include-log-monitor=false",
                  f"--num-cpus={self.cpus}", f"--object-store-memory={self.store}", "--disable-usage-stats")

    def raylet_pid(self, name: str) -> int:
        out = subprocess.run(["pgrep", "-f", f'raylet/raylet .*--gcs-address=[^ ]*:{self.port} .*suanli.node": "{name}"'],
                             capture_output=True, text=True).stdout.split()
        if not out:
            raise LookupError(f"no raylet labelled {name}")
        return int(out[0])

    def kill_raylet(self, name: str) -> None:
        os.kill(self.raylet_pid(name), signal.SIGKILL)

    def pids(self) -> list[int]:
        """Every process of this cluster."""
        if self.group is not None:
            procs = self.group / "cgroup.procs"
            return sorted(int(p) for p in procs.read_text().split()) if procs.exists() else []
        found = set()
        for key in (str(self.temp), f"{self.port}"):
            out = subprocess.run(["pgrep", "-f", key], capture_output=True, text=True).stdout.split()
            found.update(int(p) for p in out)
        found.discard(os.getpid())
        return sorted(found)

    def stop(self) -> None:
        """Kill this cluster's processes (not other clusters' on the machine)."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in self.pids():
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            time.sleep(1.0)
        if self.group is not None:
            try:
                self.group.rmdir()
            except OSError:
                pass
