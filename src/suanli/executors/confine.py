"""Confining a local task to its slice with Linux control groups.

Found at run time, in this order:

- cgroup v2 (``/sys/fs/cgroup`` is a cgroup2 mount whose root can hand the
  ``cpu`` and ``memory`` controllers down): a group per task under
  ``suanli.PID`` with ``cpu.max`` and ``memory.max``;
- cgroup v1 (writable ``cpu`` and ``memory`` hierarchies): a group per task in
  each, with ``cpu.cfs_quota_us`` over a 100 ms period and
  ``memory.limit_in_bytes``;
- neither (not root, a container without delegation, not Linux): no limits.
  The task still learns its slice from ``SUANLI_CPU_MILLI`` and
  ``SUANLI_MEMORY_MIB`` (and ``OMP_NUM_THREADS``), and the executor says at
  start that it cannot confine.

A task's process is put in its groups by a small shell step before the
command is executed, so no line of the task runs outside them.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000


class Confinement:
    """Makes and removes the groups of one executor (``suanli.PID``)."""

    def __init__(self, root: Path = ROOT) -> None:
        self.root = root
        self.kind = "none"
        self.reason = ""
        self.bases: list[Path] = []
        try:
            self._detect()
        except OSError as exc:
            self.kind, self.bases, self.reason = "none", [], f"cannot make control groups: {exc.strerror or exc}"

    @property
    def description(self) -> str:
        if self.kind == "none":
            return f"none ({self.reason})"
        return f"cgroup {self.kind} (cpu, memory)"

    def _detect(self) -> None:
        self._sweep()
        name = f"suanli.{os.getpid()}"
        if (self.root / "cgroup.controllers").exists():
            controllers = (self.root / "cgroup.controllers").read_text().split()
            if not {"cpu", "memory"} <= set(controllers):
                self.reason = "the cgroup v2 root offers no cpu and memory controllers"
                return
            base = self.root / name
            base.mkdir(exist_ok=True)
            (self.root / "cgroup.subtree_control").write_text("+cpu +memory")
            (base / "cgroup.subtree_control").write_text("+cpu +memory")
            self.kind, self.bases = "v2", [base]
            return
        cpu, mem = self.root / "cpu", self.root / "memory"
        if not ((cpu / "cgroup.procs").exists() and (mem / "cgroup.procs").exists()):
            self.reason = "no cgroup v1 cpu and memory hierarchies mounted"
            return
        bases = [cpu / name, mem / name]
        for b in bases:
            b.mkdir(exist_ok=True)
        self.kind, self.bases = "v1", bases

    def _sweep(self) -> None:
        """Remove the empty groups of executors that are gone (killed before
        they could remove their own: a Ray actor is, when its node's work ends)."""
        for parent in (self.root, self.root / "cpu", self.root / "memory"):
            for base in parent.glob("suanli.*") if parent.is_dir() else ():
                pid = base.name.split(".", 1)[1]
                if not pid.isdigit() or Path(f"/proc/{pid}").exists():
                    continue
                for d in base.glob("*"):
                    if d.is_dir():
                        _rmdir(d)
                _rmdir(base)

    def group(self, key: str, cpu_milli: int, mem_mib: int) -> list[Path]:
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
            cpu, mem = dirs
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
        return [d / "cgroup.procs" for d in dirs]

    def remove(self, key: str) -> None:
        """Remove one task's groups (its processes have ended)."""
        for b in self.bases:
            _rmdir(b / key)

    def close(self) -> None:
        for b in self.bases:
            for d in b.glob("*"):
                if d.is_dir():
                    _rmdir(d)
            _rmdir(b)


def _rmdir(d: Path) -> None:
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
