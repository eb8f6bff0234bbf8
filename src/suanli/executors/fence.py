"""An agent's fence keeper: kills the agent's tasks when the agent cannot.

Started by the agent (``agent.py``) as ``python -m suanli.executors.fence
AGENT_PID RUNTIME``, it reads lines from the agent: ``deadline T`` (a
``time.monotonic()`` reading: the node's tasks must be gone by then unless a
later deadline comes), ``pid G`` and ``-pid G`` (a task's process group
started, ended) and ``done`` (the agent ends on its own). When a
deadline passes, or the agent is gone without saying ``done``, every process
group the agent started and every process in its control groups
(``suanli.AGENT_PID``) is killed, and with
``podman`` every container it started (label ``suanli.executor``) too.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")


def _signal(kill, ids) -> int:
    """SIGKILL by ``kill`` (``os.kill``, ``os.killpg``) to each of ``ids``; how many were there."""
    n = 0
    for i in ids:
        try:
            kill(i, signal.SIGKILL)
            n += 1
        except (ProcessLookupError, PermissionError):
            pass
    return n


def kill_all(agent: int, runtime: str, groups: set[int]) -> int:
    """Kill what the agent ``agent`` runs (``groups``: its tasks' process
    groups, as it said); the processes and containers killed."""
    killed = _signal(os.killpg, groups)
    groups.clear()
    mine = [ROOT / f"suanli.{agent}", *(c / f"suanli.{agent}" for c in ROOT.iterdir() if c.is_dir())] \
        if ROOT.is_dir() else []
    for procs in (p for g in mine if g.is_dir() for p in g.rglob("cgroup.procs")):
        try:
            killed += _signal(os.kill, [int(x) for x in procs.read_text().split()])
        except OSError:
            continue
    if runtime == "podman":
        from suanli.executors.podman import LABEL, podman

        gone: set[str] = set()
        for _ in range(5):  # (one that was stopping as it was asked may need asking again)
            try:
                names = subprocess.run([*podman(), "ps", "-aq", "--filter", f"label={LABEL}={agent}"],
                                       capture_output=True, text=True, timeout=30).stdout.split()
                if not names:
                    break
                gone.update(names)
                subprocess.run([*podman(), "rm", "-f", "-t", "0", *names], capture_output=True, timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                pass
            time.sleep(0.2)
        killed += len(gone)
    return killed


def main(argv: list[str]) -> None:
    agent, runtime = int(argv[0]), argv[1]
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # (a Ctrl-C meant for the agent)
    deadline: float | None = None
    groups: set[int] = set()
    buf = b""
    fd = sys.stdin.fileno()
    while True:
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready, _, _ = select.select([fd], [], [], wait)
        if not ready:  # the deadline passed with no later one: the agent could not renew
            n = kill_all(agent, runtime, groups)
            print(f"suanli fence: agent {agent}'s deadline passed: killed {n} by {time.time():.3f}", file=sys.stderr,
                  flush=True)
            deadline = None
            continue
        chunk = os.read(fd, 4096)
        if not chunk:  # the agent is gone
            n = kill_all(agent, runtime, groups)
            print(f"suanli fence: agent {agent} is gone: killed {n} by {time.time():.3f}", file=sys.stderr, flush=True)
            return
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            word, _, rest = line.decode().partition(" ")
            if word == "deadline":
                deadline = float(rest)
            elif word == "pid":
                groups.add(int(rest))
            elif word == "-pid":
                groups.discard(int(rest))
            elif word == "done":
                return


if __name__ == "__main__":
    main(sys.argv[1:])
