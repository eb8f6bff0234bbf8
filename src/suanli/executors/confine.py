"""Confining a local task to its slice, and ending all of it, with Linux control groups.

Found at run time, in this order:

- cgroup v2 (``/sys/fs/cgroup`` is a cgroup2 mount whose root can hand the
  ``cpu`` and ``memory`` controllers down): a group per task under
  ``suanli.PID`` with ``cpu.max``, ``memory.max`` and, where the ``pids``
  controller is there, ``pids.max``;
- cgroup v1 (writable ``cpu`` and ``memory`` hierarchies): a group per task in
  each, with ``cpu.cfs_quota_us`` over a 100 ms period and
  ``memory.limit_in_bytes``; in the ``pids`` hierarchy with ``pids.max`` and
  in the ``freezer`` one, where they are mounted;
- neither (not root, a container without delegation, not Linux): no limits.
  The task still learns its slice from ``SUANLI_CPU_MILLI`` and
  ``SUANLI_MEMORY_MIB`` (and ``OMP_NUM_THREADS``), and the executor says at
  start that it cannot confine.

A task's process is put in its groups by a small shell step before the
command is executed, so no line of the task runs outside them, nor any
process it starts: a process that leaves its session or its process group
(``setsid``, a double fork) stays in its task's groups. So a task's group is
also how all of it is ended (``kill``): frozen where a freezer is, every
process in it killed, until it is empty.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000
KILL_WAIT_S = 5.0  # what a task's group takes at most to empty once its processes are sent SIGKILL


class Confinement:
    """Makes, empties and removes the groups of one executor (``suanli.PID``)."""

    def __init__(self, root: Path = ROOT) -> None:
        self.root = root
        self.kind = "none"
        self.reason = ""
        self.bases: list[Path] = []
        self.pids: Path | None = None  # the base whose groups take pids.max (v1: the pids hierarchy's)
        self.freezer: Path | None = None  # v1: the freezer hierarchy's base
        try:
            self._detect()
        except OSError as exc:
            self.kind, self.bases = "none", []
            self.reason = f"cannot make control groups: {exc.strerror or exc}"

    @property
    def description(self) -> str:
        if self.kind == "none":
            return f"none ({self.reason})"
        return f"cgroup {self.kind} ({', '.join(self.controllers)})"

    @property
    def controllers(self) -> list[str]:
        return ["cpu", "memory"] + (["pids"] if self.pids is not None else []) + \
            (["freezer"] if self.freezer is not None or self.kind == "v2" else [])

    def _detect(self) -> None:
        self._sweep()
        name = f"suanli.{os.getpid()}"
        if (self.root / "cgroup.controllers").exists():
            controllers = (self.root / "cgroup.controllers").read_text().split()
            if not {"cpu", "memory"} <= set(controllers):
                self.reason = "the cgroup v2 root offers no cpu and memory controllers"
                return
            wanted = "+cpu +memory" + (" +pids" if "pids" in controllers else "")
            base = self.root / name
            base.mkdir(exist_ok=True)
            (self.root / "cgroup.subtree_control").write_text(wanted)
            (base / "cgroup.subtree_control").write_text(wanted)
            self.kind, self.bases = "v2", [base]
            self.pids = base if "pids" in controllers else None
            return
        cpu, mem = self.root / "cpu", self.root / "memory"
        if not ((cpu / "cgroup.procs").exists() and (mem / "cgroup.procs").exists()):
            self.reason = "no cgroup v1 cpu and memory hierarchies mounted"
            return
        bases = [cpu / name, mem / name]
        for extra in ("pids", "freezer"):
            if (self.root / extra / "cgroup.procs").exists():
                bases.append(self.root / extra / name)
        for b in bases:
            b.mkdir(exist_ok=True)
        self.kind, self.bases = "v1", bases
        self.pids = next((b for b in bases if b.parent.name == "pids"), None)
        self.freezer = next((b for b in bases if b.parent.name == "freezer"), None)

    def _sweep(self) -> None:
        """Empty and remove the groups of executors that are gone (killed before
        they could remove their own: a Ray actor is, when its node's work ends).
        What a task of theirs left running there is killed: it outlived its task."""
        for parent in (self.root, *(self.root / h for h in ("cpu", "memory", "pids", "freezer"))):
            for base in parent.glob("suanli.*") if parent.is_dir() else ():
                pid = base.name.split(".", 1)[1]
                if not pid.isdigit() or Path(f"/proc/{pid}").exists():
                    continue
                for d in base.glob("*"):
                    if d.is_dir():
                        _empty(d, None)
                        _rmdir(d)
                _rmdir(base)

    def group(self, key: str, cpu_milli: int, mem_mib: int, max_pids: int | None = None) -> list[Path]:
        """Make the groups of one task's process; the ``cgroup.procs`` files to join."""
        if self.kind == "none":
            return []
        dirs = [b / key for b in self.bases]
        for d in dirs:
            d.mkdir(exist_ok=True)
        if self.kind == "v2":
            d = dirs[0]
            if cpu_milli:
                (d / "cpu.max").write_text(f"{max(cpu_milli * PERIOD_US // 1000, 1000)} {PERIOD_US}")
            if mem_mib:
                (d / "memory.max").write_text(str(mem_mib * 2**20))
                if (d / "memory.swap.max").exists():
                    (d / "memory.swap.max").write_text("0")
        else:
            cpu, mem = dirs[:2]
            if cpu_milli:
                (cpu / "cpu.cfs_period_us").write_text(str(PERIOD_US))
                (cpu / "cpu.cfs_quota_us").write_text(str(max(cpu_milli * PERIOD_US // 1000, 1000)))
            if mem_mib:
                (mem / "memory.limit_in_bytes").write_text(str(mem_mib * 2**20))
                swap = mem / "memory.memsw.limit_in_bytes"
                if swap.exists():
                    try:
                        swap.write_text(str(mem_mib * 2**20))
                    except OSError:
                        pass  # swap accounting off: the memory limit alone holds
        if max_pids and self.pids is not None:
            (self.pids / key / "pids.max").write_text(str(max_pids))
        return [d / "cgroup.procs" for d in dirs]

    def memory_exceeded(self, key: str) -> bool:
        """Whether a task's memory group reached its limit (the kernel then
        reclaims, and kills when it cannot: a task killed with this true was
        killed over its memory)."""
        if self.kind == "v2":
            try:
                events = dict(line.split() for line in (self.bases[0] / key / "memory.events").read_text()
                              .splitlines())
            except (OSError, ValueError):
                return False
            return int(events.get("oom_kill", 0)) > 0 or int(events.get("oom", 0)) > 0
        mem = next((b for b in self.bases if b.parent.name == "memory"), None)
        if mem is None:
            return False
        group = mem / key

        def read(name: str) -> int:
            try:
                return int((group / name).read_text())
            except (OSError, ValueError):
                return 0
        # the limit hit (a count of either limit's failures, or the peak at the limit: with swap
        # accounting the kernel may count the failure on neither)
        limit = read("memory.limit_in_bytes")
        return read("memory.failcnt") > 0 or read("memory.memsw.failcnt") > 0 or \
            (0 < limit <= read("memory.max_usage_in_bytes"))

    def group_path(self, key: str) -> str:
        """A task's groups' path under each hierarchy's root (what a container
        runtime takes as its cgroup parent)."""
        return f"/{self.bases[0].name}/{key}"

    def pids_in(self, key: str) -> list[int]:
        """The processes in a task's groups now."""
        return _procs(self.bases[0] / key) if self.bases else []

    def kill(self, key: str) -> int:
        """End every process in a task's groups (whatever session, process group or
        user it took on); the number killed."""
        if not self.bases:
            return 0
        first = self.bases[0] / key
        if self.kind == "v2" and (first / "cgroup.kill").exists():
            try:
                before = len(_procs(first))
                (first / "cgroup.kill").write_text("1")
                _await_empty(first)
                return before
            except OSError:
                pass
        return _empty(first, self.freezer / key if self.freezer is not None else None)

    def remove(self, key: str) -> None:
        """End what is left of one task and remove its groups."""
        self.kill(key)
        for b in self.bases:
            _rmdir(b / key)

    def close(self) -> None:
        for b in self.bases:
            for d in b.glob("*"):
                if d.is_dir():
                    self.kill(d.name)
                    _rmdir(d)
        for b in self.bases:
            _rmdir(b)


def _procs(group: Path) -> list[int]:
    try:
        return [int(p) for p in (group / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _empty(group: Path, freezer: Path | None) -> int:
    """SIGKILL every process of ``group`` until none is left (frozen first where
    ``freezer`` is given, so that none can fork meanwhile); the number killed."""
    killed: set[int] = set()
    frozen = False
    if freezer is not None and _procs(freezer):
        try:
            (freezer / "freezer.state").write_text("FROZEN")
            frozen = True
            end = time.monotonic() + 1.0
            while (freezer / "freezer.state").read_text().strip() != "FROZEN" and time.monotonic() < end:
                time.sleep(0.002)
        except OSError:
            frozen = False
    deadline = time.monotonic() + KILL_WAIT_S
    try:
        while (pids := _procs(group)) and time.monotonic() < deadline:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.add(pid)
                except ProcessLookupError:
                    pass
            if frozen:  # killed while frozen: they die as they thaw
                (freezer / "freezer.state").write_text("THAWED")
                frozen = False
            time.sleep(0.005)
    finally:
        if frozen:
            try:
                (freezer / "freezer.state").write_text("THAWED")
            except OSError:
                pass
    return len(killed)


def _await_empty(group: Path) -> None:
    deadline = time.monotonic() + KILL_WAIT_S
    while _procs(group) and time.monotonic() < deadline:
        time.sleep(0.005)


def _rmdir(d: Path) -> None:
    """Remove a control group and the empty groups under it (a container
    runtime's, made in a task's group)."""
    try:
        below = [c for c in d.iterdir() if c.is_dir()]
    except OSError:
        below = []
    for c in below:
        _rmdir(c)
    try:
        d.rmdir()  # a control group is removed with rmdir, its files and all
    except OSError:
        pass


def wrap(command: tuple[str, ...], procs: list[Path]) -> tuple[str, ...]:
    """``command`` started inside the groups whose ``cgroup.procs`` are given."""
    if not procs:
        return command
    joins = " && ".join(f'echo $$ > "${i + 1}"' for i in range(len(procs)))
    script = (f'{joins} || {{ echo "suanli: cannot join the task\'s control group" >&2; exit 125; }}; '
              f'shift {len(procs)}; exec "$@"')
    return (shutil.which("sh") or "/bin/sh", "-c", script, "suanli-task", *map(str, procs), *command)
