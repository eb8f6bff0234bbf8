"""The local executor: every placed task is a real process on this machine.

Each fleet node is a folder under the executor's work directory; a task runs
in its own process group, confined to its slice where the OS allows
(``confine.py``), with its output appended to ``logs/TASK.log`` (every run of
the task, each after a header line) and its state in
``nodes/NODE/state/TASK``, which it finds in ``SUANLI_STATE_DIR``.

The checkpoint protocol (docs/executors.md):

- ``SIGUSR1``: write your state into ``SUANLI_STATE_DIR``, then create the file
  ``.checkpointed`` there; keep running. Asked every ``checkpointEvery`` of
  a stateful component; the executor then copies the folder to
  ``checkpoints/TASK``, the copy a lost node's task restarts from.
- ``SIGTERM``: write your state and exit. Asked when the task stops to move;
  after ``stopGrace`` the process group is killed.

When a stopped task starts on another node, its state folder travels there
first (it is copied, then removed from the node it left), so the task starts
with exactly what it wrote when it stopped. A task on a node that goes down
is killed with no last word; its folder there is gone, and it starts again
from its last checkpoint.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, IO

from suanli.executors.base import Note, Run, TaskExited
from suanli.executors.confine import Confinement, wrap
from suanli.executors.sim import keep_progress
from suanli.executors.tasks import (CHECKPOINT_MARK, Launch, await_checkpoint, guarded, launch, origin_wall,
                                    process_env, resolve, safe)

if TYPE_CHECKING:
    from suanli.sim.simulation import Simulation


@dataclass
class Proc:
    launch: Launch
    popen: subprocess.Popen
    log: IO[bytes]
    key: str  # its control groups' name
    stopping: bool = False
    ended: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)  # a checkpoint or a stop, one at a time
    next_checkpoint: float | None = None  # time.monotonic()


def folder_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


class LocalExecutor:
    def __init__(self, sim: "Simulation", work_dir: Path, *, cwd: Path | None = None,
                 confine: bool = True) -> None:
        self.sim = sim
        self.loop = sim.loop
        self.work = Path(work_dir).resolve()
        self.cwd = Path(cwd or sim.world.base_dir).resolve()
        for sub in ("nodes", "logs", "checkpoints"):
            (self.work / sub).mkdir(parents=True, exist_ok=True)
        self.confinement = Confinement() if confine else None
        self.procs: dict[str, Proc] = {}  # task -> its process now
        self.state_home: dict[str, str] = {}  # task -> node whose folder holds its state
        self.lost_nodes: set[str] = set()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._ticker = threading.Thread(target=self._checkpoints, name="suanli-checkpoints", daemon=True)
        self._ticker.start()
        how = self.confinement.description if self.confinement else "off (asked for)"
        self.post("executor", executor="local", work_dir=str(self.work), confinement=how,
                  origin_wall=origin_wall(sim))

    def post(self, kind: str, **fields: object) -> None:
        self.loop.post(Note(kind, tuple(fields.items())))

    # ------------------------------------------------------------ paths

    def state_dir(self, node: str, task: str) -> Path:
        return self.work / "nodes" / safe(node) / "state" / safe(task)

    def checkpoint_dir(self, task: str) -> Path:
        return self.work / "checkpoints" / safe(task)

    def log_path(self, task: str) -> Path:
        return self.work / "logs" / f"{safe(task)}.log"

    # ------------------------------------------------------------ the executor interface

    def start(self, run: Run, now: float) -> None:
        run.started_at = now
        for task in run.tasks:
            self._spawn(launch(self.sim, run, task))

    def restart(self, run: Run, task: str, now: float) -> None:
        if task not in self.procs:  # not started again meanwhile (by a move)
            self._spawn(launch(self.sim, run, task))

    def stop(self, run: Run, now: float) -> None:
        keep_progress(run, now)
        self._end(run.tasks, keep_state=True)

    def move(self, run: Run, task: str, now: float) -> None:
        self._end([task], keep_state=True)
        self._spawn(launch(self.sim, run, task))

    def release(self, run: Run, now: float) -> None:
        self._end(run.tasks, keep_state=False)

    def node_down(self, node: int, now: float) -> None:
        """The node's processes are killed without warning and its folder is lost."""
        name = self.sim.world.fleet.node_name(node)
        self.lost_nodes.add(name)
        doomed = [p for p in self.procs.values() if p.launch.node == name]
        for p in doomed:
            p.stopping = True
            self._signal(p, signal.SIGKILL)
        for p in doomed:
            p.ended.wait(5)
        shutil.rmtree(self.work / "nodes" / safe(name), ignore_errors=True)

    def close(self) -> None:
        self._closed.set()
        self._end(list(self.procs), keep_state=True)
        if self.confinement is not None:
            self.confinement.close()

    # ------------------------------------------------------------ processes

    def _spawn(self, ln: Launch) -> None:
        state = self._bring_state(ln)
        env = process_env(ln.env, state, ln.cpu_milli)
        key = f"{safe(ln.task)}.{ln.run_id}"
        procs = self.confinement.group(key, ln.cpu_milli, ln.mem_mib) if self.confinement else []
        log = open(self.log_path(ln.task), "ab")
        log.write(f"--- suanli: {ln.task} run {ln.run_id} on {ln.node} at "
                  f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n".encode())
        log.flush()
        try:
            popen = subprocess.Popen(guarded(wrap(resolve(ln.command), procs)), env=env, cwd=self.cwd, stdin=subprocess.DEVNULL,
                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:  # no such program: the task exits at once, with the shell's status for it
            log.write(f"suanli: cannot start {ln.command[0]}: {exc.strerror or exc}\n".encode())
            log.close()
            self.loop.post(TaskExited(ln.run_id, ln.task, 127))
            return
        p = Proc(ln, popen, log, key)
        if ln.checkpoint_every_s:
            p.next_checkpoint = time.monotonic() + ln.checkpoint_every_s
        with self._lock:
            self.procs[ln.task] = p
        threading.Thread(target=self._watch, args=(p,), name=f"suanli-wait-{popen.pid}", daemon=True).start()

    def _watch(self, p: Proc) -> None:
        code = p.popen.wait()
        p.log.close()
        if self.confinement is not None:
            self.confinement.remove(p.key)
        with self._lock:
            if self.procs.get(p.launch.task) is p:
                del self.procs[p.launch.task]
        p.ended.set()
        if not p.stopping and not self._closed.is_set():
            self.loop.post(TaskExited(p.launch.run_id, p.launch.task, code))

    def _signal(self, p: Proc, sig: int) -> None:
        try:
            os.killpg(p.popen.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _end(self, tasks, keep_state: bool) -> None:
        """Ask the tasks' processes to save and exit (SIGTERM), all at once; kill
        the process groups of those still there after their grace."""
        ending = [p for task in tasks if (p := self.procs.get(task)) is not None]
        for p in ending:
            p.lock.acquire()  # a checkpoint under way finishes first
            p.stopping = True
            self._signal(p, signal.SIGTERM)
        for p in ending:
            if not p.ended.wait(p.launch.grace_s):
                self._signal(p, signal.SIGKILL)
                p.ended.wait(5)
            self._signal(p, signal.SIGKILL)  # what the task left behind in its group
            p.lock.release()
        for task in () if keep_state else tasks:
            home = self.state_home.pop(task, None)
            if home is not None:
                shutil.rmtree(self.state_dir(home, task), ignore_errors=True)
            shutil.rmtree(self.checkpoint_dir(task), ignore_errors=True)

    # ------------------------------------------------------------ state

    def _bring_state(self, ln: Launch) -> Path:
        """The task's state folder on its node: where it was left, brought
        over from the node it left, or its last checkpoint after a loss."""
        dest = self.state_dir(ln.node, ln.task)
        home = self.state_home.get(ln.task)
        if home == ln.node and dest.exists():
            return dest
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(dest, ignore_errors=True)
        source = self.state_dir(home, ln.task) if home is not None else None
        began = time.monotonic()
        if source is not None and source.exists():
            shutil.copytree(source, dest)
            shutil.rmtree(source)
            self.post("stateMoved", task=ln.task, **{"from": home}, to=ln.node, bytes=folder_size(dest),
                      took_s=round(time.monotonic() - began, 6))
        elif self.checkpoint_dir(ln.task).exists():
            shutil.copytree(self.checkpoint_dir(ln.task), dest)
            self.post("stateRestored", task=ln.task, node=ln.node, bytes=folder_size(dest),
                      reason=f"the state on {home} was lost; from the last checkpoint")
        else:
            dest.mkdir()
        self.state_home[ln.task] = ln.node
        return dest

    def _checkpoints(self) -> None:
        """Ask running stateful tasks for their checkpoints when due."""
        while not self._closed.wait(0.05):
            now = time.monotonic()
            for p in list(self.procs.values()):
                if p.next_checkpoint is not None and now >= p.next_checkpoint and not p.stopping:
                    p.next_checkpoint = now + p.launch.checkpoint_every_s
                    self._checkpoint(p)

    def _checkpoint(self, p: Proc) -> None:
        if not p.lock.acquire(blocking=False):
            return  # it is being stopped
        try:
            state = self.state_dir(p.launch.node, p.launch.task)
            began = time.monotonic()
            if not await_checkpoint(state, lambda: self._signal(p, signal.SIGUSR1), p.ended.is_set,
                                    p.launch.grace_s):
                self.post("checkpointMissed", task=p.launch.task, node=p.launch.node,
                          reason=f"no {CHECKPOINT_MARK} within {p.launch.grace_s:g}s")
                return
            keep = self.checkpoint_dir(p.launch.task)
            tmp = keep.with_name(keep.name + ".new")
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(state, tmp, ignore=shutil.ignore_patterns(CHECKPOINT_MARK))
            shutil.rmtree(keep, ignore_errors=True)
            tmp.rename(keep)
            self.post("checkpointed", task=p.launch.task, node=p.launch.node, bytes=folder_size(keep),
                      took_s=round(time.monotonic() - began, 6))
        finally:
            p.lock.release()
