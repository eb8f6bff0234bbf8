"""The local executor: every placed task is a real process on this machine.

Each fleet node is a folder under the executor's work directory; a task runs
in its own process group, confined to its slice where the OS allows
(``confine.py``), with its output appended to ``logs/TASK.log`` (every run of
the task, each after a header line; kept under a cap, ``logs.py``), its state in ``nodes/NODE/state/TASK``,
which it finds in ``SUANLI_STATE_DIR``, and a folder of its own,
``nodes/NODE/home/TASK`` (its ``HOME``).

Its working directory is the scenario's folder (``suanli run``: one user,
whose programs are there) or, under a control plane (``isolate_tenants``),
its own folder; there it also runs as its tenant's user, and every folder
is private (``tasks.py``, docs/executors.md).

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
is killed with no last word; its folders there are gone, and it starts again
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
from typing import TYPE_CHECKING, IO, Collection

from suanli.executors.base import Note, Run, TaskExited
from suanli.executors.confine import Confinement
from suanli.executors.logs import DEFAULT_MAX_LOG, LogFolder, LogPump
from suanli.executors.probes import Prober, command_check, network_check
from suanli.executors.sim import keep_progress
from suanli.executors.tasks import (CHECKPOINT_MARK, FIRST_UID, MAX_PIDS, PRIVATE, SHARED, USERS_FILE, Launch,
                                    Orphans, Users, ask_until, await_checkpoint, copy_tree, folder_size, gang_of, give,
                                    launch, make_dir, merge_trees, origin_wall, pid_namespace, process_env, regrouped,
                                    safe, signal_task, speed_of, task_command, tenant_nproc, user_switch)

if TYPE_CHECKING:
    from suanli.executors.base import Attachment
    from suanli.model.work import Probe


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
    killed_why: str | None = None  # why the executor killed it (its liveness failed)


class LocalExecutor:
    name = "local"
    runs_probes = True  # a component's readiness and liveness probes (``probes.py``)
    regroups = True  # restarts a gang at another width, its state shared (``tasks.regrouped``)

    def __init__(self, given: "Attachment", work_dir: Path, *, cwd: Path | None = None,
                 confine: bool = True, isolate_tenants: bool = False, max_pids: int = MAX_PIDS,
                 log_max_bytes: int = DEFAULT_MAX_LOG) -> None:
        """``cwd``: where commands run (default: the scenario's folder), unless
        ``isolate_tenants`` (a control plane's tenants): then each task runs in
        its own folder, as its tenant's user where this process may switch
        users, and the work directory's folders are private. ``log_max_bytes``:
        a task's log rotates past it (``logs.py``)."""
        self.view, self.loop = given.view, given.loop  # what it reads, and where it reports
        self.work = Path(work_dir).resolve()
        self.isolate = isolate_tenants
        self.cwd = None if isolate_tenants else Path(cwd or given.world.base_dir).resolve()
        why_not = user_switch() if isolate_tenants else "one user (run)"
        self.users = Users(self.work / USERS_FILE) if why_not is None else None
        self._dir(self.work, SHARED)
        for sub, mode in (("nodes", SHARED), ("logs", PRIVATE), ("checkpoints", PRIVATE), ("gangs", PRIVATE)):
            self._dir(self.work / sub, mode)
        self.logs = LogFolder(self.work / "logs")
        self.pump = LogPump(log_max_bytes, private=isolate_tenants, on_rotate=lambda task, written, cap: self.post(
            "logRotated", task=task, bytes=written, cap_bytes=cap))
        self.confinement = Confinement() if confine else None
        self.max_pids = max_pids
        self.unshare, no_namespace = pid_namespace()
        self.nproc = tenant_nproc() if self.users else None
        # without pid namespaces, what a task leaves behind is found as this process's
        # orphans (it is their subreaper) and by its control group
        self.orphans = Orphans() if self.unshare is None else None
        self.procs: dict[str, Proc] = {}  # task -> its process now
        self.state_home: dict[str, str] = {}  # task -> node whose folder holds its state
        self.home_at: dict[str, str] = {}  # task -> node whose folder holds its own folder
        self.lost_nodes: set[str] = set()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._ticker = threading.Thread(target=self._checkpoints, name="suanli-checkpoints", daemon=True)
        self._ticker.start()
        how = self.confinement.description if self.confinement else "off (asked for)"
        users = (f"one per tenant, from uid {FIRST_UID} ({USERS_FILE})" if self.users
                 else f"the executor's (uid {os.geteuid()}): {why_not}")
        ends = ("a pid namespace per task" if self.unshare else
                f"this process as the tasks' subreaper (no pid namespaces: {no_namespace})")
        self.post("executor", executor=self.name, work_dir=str(self.work), confinement=how, users=users,
                  cwd=self._cwd_said(), origin_wall=origin_wall(self.loop), containment=self._containment(ends),
                  max_pids=max_pids)

    def _cwd_said(self) -> str:
        return str(self.cwd) if self.cwd else "each task's own folder"

    def _containment(self, processes: str) -> str:
        """How all of a task is kept together and ended (``processes``: how a process task is)."""
        return processes

    def post(self, kind: str, **fields: object) -> None:
        self.loop.post(Note(kind, tuple(fields.items())))

    # ------------------------------------------------------------ paths

    def state_dir(self, node: str, task: str) -> Path:
        return self.work / "nodes" / safe(node) / "state" / safe(task)

    def checkpoint_dir(self, task: str) -> Path:
        return self.work / "checkpoints" / safe(task)

    def gang_dir(self, gang: str) -> Path:
        """What a regrouped gang's members left when it last stopped (``tasks.regrouped``)."""
        return self.work / "gangs" / safe(gang)

    def home_dir(self, node: str, task: str) -> Path:
        return self.work / "nodes" / safe(node) / "home" / safe(task)

    def _dir(self, path: Path, mode: int, uid: int | None = None) -> Path:
        """A folder of the work directory; its mode and owner matter only
        when tenants are kept apart."""
        return make_dir(path, mode, uid) if self.isolate else make_dir(path)

    def _node_dir(self, node: str, kind: str) -> Path:
        """``nodes/NODE/KIND`` (state, home): folders others may cross, not list."""
        for path in (self.work / "nodes" / safe(node), self.work / "nodes" / safe(node) / kind):
            self._dir(path, SHARED)
        return path

    def uid(self, ln: Launch) -> int | None:
        """The user a task runs as: its tenant's; None: the executor's."""
        return self.users.of(ln.tenant) if self.users else None

    # ------------------------------------------------------------ the executor interface

    def start(self, run: Run, now: float) -> None:
        run.started_at = now
        launches = [launch(self.view, run, task, speed_of(self.loop)) for task in run.tasks]
        gang = regrouped(self.view, run)
        if gang is not None and self.gang_dir(gang).exists():
            self._share_state(gang, launches)
        for ln in launches:
            self._spawn(ln)

    def restart(self, run: Run, task: str, now: float) -> None:
        if task not in self.procs:  # not started again meanwhile (by a move)
            self._spawn(launch(self.view, run, task, speed_of(self.loop)))

    def stop(self, run: Run, now: float) -> None:
        keep_progress(run, now)
        self._end(run.tasks, keep_state=True)
        gang = regrouped(self.view, run)
        if gang is not None:
            self._gather_state(gang, run)

    def move(self, run: Run, task: str, now: float) -> None:
        self._end([task], keep_state=True)
        self._spawn(launch(self.view, run, task, speed_of(self.loop)))

    def release(self, run: Run, now: float) -> None:
        self._end(run.tasks, keep_state=False)
        gang = regrouped(self.view, run)
        if gang is not None:  # its members it ended without, too
            self._end([task for task in self.state_home if gang_of(task) == gang], keep_state=False)
            shutil.rmtree(self.gang_dir(gang), ignore_errors=True)

    def node_down(self, node: int, now: float) -> None:
        self.lose_node(self.view.world.fleet.node_name(node))

    def lose_node(self, name: str) -> None:
        """The node's processes are killed without warning and its folder is lost."""
        self.lost_nodes.add(name)
        doomed = [p for p in self.procs.values() if p.launch.node == name]
        for p in doomed:
            p.stopping = True
            self._signal(p, signal.SIGKILL)
        for p in doomed:
            p.ended.wait(5)
        shutil.rmtree(self.work / "nodes" / safe(name), ignore_errors=True)
        for task in [t for t, n in self.home_at.items() if n == name]:
            del self.home_at[task]

    def close(self) -> None:
        self._closed.set()
        self._end(list(self.procs), keep_state=True)
        if self.confinement is not None:
            self.confinement.close()
        if self.orphans is not None:
            self.orphans.end(set())
        self.pump.close()

    def forget(self, app: str) -> None:
        """A deleted application's tasks have ended (``release``): their logs go."""
        tasks = self.logs.take(app)
        self.pump.drop(tasks.__contains__, lambda: self.logs.remove(tasks))

    def sweep(self, tasks: Collection[str]) -> None:
        """At start: the logs of tasks not among ``tasks`` go (their applications
        were deleted while no executor ran)."""
        self.logs.sweep(tasks)

    # ------------------------------------------------------------ processes

    def _spawn(self, ln: Launch) -> None:
        uid = self.uid(ln)
        state = self._bring_state(ln, uid)
        home = self._own_folder(ln, uid)
        key = f"{safe(ln.task)}.{ln.run_id}"
        procs = self.confinement.group(key, ln.cpu_milli, ln.mem_mib, self.max_pids) if self.confinement else []
        log = self.pump.open(ln.task, self.logs.note(ln.task))  # through a pipe: kept under its cap
        log.write(f"--- suanli: {ln.task} run {ln.run_id} on {ln.node} at "
                  f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n".encode())
        log.flush()
        refused = self._refused(ln)
        if refused is not None:  # it cannot run here: it exits at once, saying why in its log
            log.write(f"suanli: {refused}\n".encode())
            log.close()
            self.loop.post(TaskExited(ln.run_id, ln.task, 127, refused))
            return
        with self._lock:  # started and known together: the orphans' sweep never takes one for a leftover
            try:
                popen = self._popen(ln, key, procs, uid, state, home, log)
            except OSError as exc:  # no such program: the task exits at once, with the shell's status for it
                log.write(f"suanli: cannot start {ln.command[0]}: {exc.strerror or exc}\n".encode())
                log.close()
                self.loop.post(TaskExited(ln.run_id, ln.task, 127))
                return
            p = Proc(ln, popen, log, key)
            if ln.checkpoint_every_s:
                p.next_checkpoint = time.monotonic() + ln.checkpoint_every_s
            self.procs[ln.task] = p
        threading.Thread(target=self._watch, args=(p,), name=f"suanli-wait-{popen.pid}", daemon=True).start()
        if ln.readiness is not None or ln.liveness is not None:
            Prober(ln.readiness, ln.liveness, lambda probe: self._check(p, probe), p.ended,
                   lambda kind, **f: self.post(kind, task=ln.task, node=ln.node, run=ln.run_id, **f),
                   lambda why: self._liveness_failed(p, why), key).start()

    def _refused(self, ln: Launch) -> str | None:
        """Why ``ln`` cannot run on this executor (None: it can)."""
        if ln.containerized:
            return (f"{ln.task} runs a container image, and the {self.name} executor runs processes: "
                    "run it with --executor podman")
        return None

    def _popen(self, ln: Launch, key: str, procs: list[Path], uid: int | None, state: Path, home: Path,
               log: IO[bytes]) -> subprocess.Popen:
        """Start the task's process in its groups (``procs``), its output to ``log``."""
        env = process_env(ln.env, state, home, ln.cpu_milli)
        env["SUANLI_LOG_MAX_BYTES"] = str(self.pump.max_bytes)
        return subprocess.Popen(task_command(ln.command, procs, uid, self.unshare, self.nproc), env=env,
                                cwd=self.cwd or home, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)

    def _check(self, p: Proc, probe: Probe) -> tuple[bool, str]:
        """One probe of a task's: exec runs as the task does (its user, environment, folder)."""
        if probe.kind != "exec":
            return network_check(probe)
        ln = p.launch
        home = self.home_dir(ln.node, ln.task)
        env = process_env(ln.env, self.state_dir(ln.node, ln.task), home, ln.cpu_milli)
        return command_check(list(task_command(probe.command, [], self.uid(ln), None, self.nproc)), probe, env=env,
                             cwd=self.cwd or home, start_new_session=True)

    def _liveness_failed(self, p: Proc, why: str) -> None:
        """Its liveness failed: killed at once, it ends with ``why``."""
        with p.lock:
            if p.stopping or p.ended.is_set():
                return
            p.killed_why = why
            self._signal(p, signal.SIGKILL)

    def _watch(self, p: Proc) -> None:
        code = p.popen.wait()
        p.log.close()
        reason = p.killed_why
        if self.confinement is not None:
            if reason is None and code in (-signal.SIGKILL, 128 + signal.SIGKILL) and not p.stopping \
                    and self.confinement.memory_exceeded(p.key):
                reason = f"killed over its memory limit ({p.launch.mem_mib} MiB)"
            self.confinement.remove(p.key)  # whatever of the task is left in its groups ends with it
        with self._lock:
            if self.procs.get(p.launch.task) is p:
                del self.procs[p.launch.task]
            if self.orphans is not None:  # what it left behind, reparented here
                self.orphans.end({q.launch.run_id for q in self.procs.values()},
                                 {q.popen.pid for q in self.procs.values()})
        p.ended.set()
        self._ended(p)
        if not p.stopping and not self._closed.is_set():
            self.loop.post(TaskExited(p.launch.run_id, p.launch.task, code, reason))

    def _ended(self, p: Proc) -> None:
        """What is left of a task whose process ended (its container's, say)."""

    def _signal(self, p: Proc, sig: int) -> bool:
        return signal_task(p.popen.pid, sig, self.unshare is not None)

    def _ask(self, p: Proc, sig: int, within_s: float) -> bool:
        """``sig`` to the task (``_signal``), sent again until it reaches the
        task's command (or the task ended, or ``within_s`` passed)."""
        return ask_until(lambda: self._signal(p, sig), p.ended.is_set, within_s)

    def _end(self, tasks, keep_state: bool) -> None:
        """Ask the tasks' processes to save and exit (SIGTERM), all at once; kill
        the process groups of those still there after their grace."""
        ending = [p for task in tasks if (p := self.procs.get(task)) is not None]
        began = time.monotonic()
        for p in ending:
            p.lock.acquire()  # a checkpoint under way finishes first
            p.stopping = True
            self._ask(p, signal.SIGTERM, began + p.launch.grace_s - time.monotonic())
        for p in ending:
            if not p.ended.wait(max(0.0, began + p.launch.grace_s - time.monotonic())):
                self._signal(p, signal.SIGKILL)
                p.ended.wait(5)
            self._signal(p, signal.SIGKILL)  # what the task left behind in its group
            p.lock.release()
        for task in () if keep_state else tasks:
            home = self.state_home.pop(task, None)
            if home is not None:
                shutil.rmtree(self.state_dir(home, task), ignore_errors=True)
            shutil.rmtree(self.checkpoint_dir(task), ignore_errors=True)
            node = self.home_at.pop(task, None)
            if node is not None:
                shutil.rmtree(self.home_dir(node, task), ignore_errors=True)

    # ------------------------------------------------------------ state

    def _own_folder(self, ln: Launch, uid: int | None) -> Path:
        """The task's own folder on its node (its ``HOME``; its working
        directory under a control plane), kept while it stays there; the one
        on the node it left is removed."""
        left = self.home_at.get(ln.task)
        if left is not None and left != ln.node:
            shutil.rmtree(self.home_dir(left, ln.task), ignore_errors=True)
        self._node_dir(ln.node, "home")
        self.home_at[ln.task] = ln.node
        return self._dir(self.home_dir(ln.node, ln.task), PRIVATE, uid)

    def _bring_state(self, ln: Launch, uid: int | None) -> Path:
        """The task's state folder on its node: where it was left, brought
        over from the node it left, or its last checkpoint after a loss."""
        dest = self.state_dir(ln.node, ln.task)
        home = self.state_home.get(ln.task)
        if home == ln.node and dest.exists():
            return dest
        self._node_dir(ln.node, "state")
        shutil.rmtree(dest, ignore_errors=True)
        source = self.state_dir(home, ln.task) if home is not None else None
        began = time.monotonic()
        if source is not None and source.exists():
            self._copy_in(source, dest, uid, owner=uid)
            shutil.rmtree(source)
            self.post("stateMoved", task=ln.task, **{"from": home}, to=ln.node, bytes=folder_size(dest),
                      took_s=round(time.monotonic() - began, 6))
        elif self.checkpoint_dir(ln.task).exists():
            self._copy_in(self.checkpoint_dir(ln.task), dest, uid)
            self.post("stateRestored", task=ln.task, node=ln.node, bytes=folder_size(dest),
                      reason=f"the state on {home} was lost; from the last checkpoint")
        else:
            self._dir(dest, PRIVATE, uid)
        self.state_home[ln.task] = ln.node
        return dest

    def _gather_state(self, gang: str, run: Run) -> None:
        """A regrouped gang stopped: what its members left (each its state
        folder, or its last checkpoint where its node was lost), merged in
        rank order into the gang's folder, which its next run starts from."""
        sources = []
        for task in run.tasks:
            node = self.state_home.get(task)
            here = self.state_dir(node, task) if node is not None else None
            if here is not None and here.exists():
                sources.append((here, self.users.of(self.view.tasks[task].tenant) if self.users else None))
            elif self.checkpoint_dir(task).exists():
                sources.append((self.checkpoint_dir(task), None))
        keep = self.gang_dir(gang)
        tmp = keep.with_name(keep.name + ".new")
        shutil.rmtree(tmp, ignore_errors=True)
        merge_trees(sources, tmp)
        shutil.rmtree(keep, ignore_errors=True)
        tmp.rename(keep)
        self.post("gangStateSaved", gang=gang, run=run.run_id, members=len(run.tasks), bytes=folder_size(keep))

    def _share_state(self, gang: str, launches: list[Launch]) -> None:
        """Each member of a regrouped gang's new run starts with the gang's state
        (its own folder of before, wherever it was, replaced by a copy)."""
        keep = self.gang_dir(gang)
        for ln in launches:
            home = self.state_home.pop(ln.task, None)
            if home is not None:
                shutil.rmtree(self.state_dir(home, ln.task), ignore_errors=True)
            self._node_dir(ln.node, "state")
            dest = self.state_dir(ln.node, ln.task)
            shutil.rmtree(dest, ignore_errors=True)
            self._copy_in(keep, dest, self.uid(ln))
            self.state_home[ln.task] = ln.node
        self.post("gangStateShared", gang=gang, run=launches[0].run_id, members=len(launches),
                  bytes=folder_size(keep))

    def _copy_in(self, source: Path, dest: Path, uid: int | None, owner: int | None = None) -> None:
        """Copy ``source`` to the state folder ``dest``, given to ``uid``
        before it appears under its name. ``owner``: the user whose files
        alone are copied (a task's state folder, as the task left it)."""
        tmp = dest.with_name(dest.name + ".new")
        shutil.rmtree(tmp, ignore_errors=True)
        copy_tree(source, tmp, owner)
        if uid is not None:
            give(tmp, uid)
        tmp.rename(dest)

    def _checkpoints(self) -> None:
        """Ask running stateful tasks for their checkpoints when due."""
        while not self._closed.wait(0.05):
            now = time.monotonic()
            for p in list(self.procs.values()):
                if p.next_checkpoint is not None and now >= p.next_checkpoint and not p.stopping:
                    p.next_checkpoint = now + p.launch.checkpoint_every_s
                    try:
                        self._checkpoint(p)
                    except OSError as exc:  # no room for the copy, say: the previous checkpoint stays
                        self.post("checkpointMissed", task=p.launch.task, node=p.launch.node,
                                  reason=f"cannot copy the state: {exc.strerror or exc}")

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
            copy_tree(state, tmp, self.uid(p.launch), skip=(CHECKPOINT_MARK,))
            shutil.rmtree(keep, ignore_errors=True)
            tmp.rename(keep)
            self.post("checkpointed", task=p.launch.task, node=p.launch.node, bytes=folder_size(keep),
                      took_s=round(time.monotonic() - began, 6))
        finally:
            p.lock.release()
