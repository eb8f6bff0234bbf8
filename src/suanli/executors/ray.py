"""The Ray executor: every placed task is a process started by an actor on
exactly the Ray node the scheduler chose.

Fleet nodes are mapped to Ray nodes by the label ``suanli.node``
(``ray start --labels suanli.node=NAME``): NAME is a fleet node
(``edge-1/cpu-0``) or a site (``edge-1``: the Ray node serves every fleet
node of the site without one of its own). A fleet node no Ray node serves
is reported lost at start, so nothing is placed there.

Each stateful task gets an actor (``TaskActor``, zero CPUs: the scheduler,
not Ray, accounts for the slice) pinned to its Ray node with hard node
affinity; stateless tasks share one pinned actor per Ray node
(``NodeAgent``), which spares each a Ray worker process of its own (about a
second of a core to start). The actor starts the task's process as the local executor does (same command,
environment, checkpoint protocol and control groups where the node allows;
under a control plane, as its tenant's user where the Ray node runs as
root, in a folder of its own) and waits for it. The process also dies if its actor does
(``PR_SET_PDEATHSIG``), so a lost node leaves no task behind.

State moves through Ray's object store: a checkpoint (every
``checkpointEvery``) or a stop to move returns the task's state folder as
bytes, which the driver puts in the object store; the task's next actor,
wherever it is, gets that object and starts with it. A Ray node that dies
becomes ``nodeLost`` and ``lost`` events; its stateful tasks start again
elsewhere from their last checkpoint. Logs are shipped to the driver's work
directory at each checkpoint and when a process ends, so ``suanli logs``
reads them as for the local executor (what a lost node printed after its
last shipment is lost with it). A log is kept under its cap on the node and
again in the work directory (``logs.py``); a shipment is at most the cap.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Collection

from suanli.executors.base import NodeFound, NodeLost, Note, Run, TaskExited
from suanli.executors.logs import DEFAULT_MAX_LOG, LogFolder, LogPump, RotatingLog, TaskPipe
from suanli.executors.sim import keep_progress
from suanli.executors.tasks import (CHECKPOINT_MARK, FIRST_UID, MAX_PIDS, PRIVATE, SHARED, USERS_FILE, Launch, Users,
                                    ask_task, await_checkpoint, gang_of, give, launch, make_dir, merge_trees,
                                    origin_wall, pack, pid_namespace, process_env, regrouped, safe, signal_task,
                                    speed_of, task_command, tenant_nproc, unpack, user_switch)
from suanli.spec.problems import Problem, SpecError

if TYPE_CHECKING:
    from suanli.executors.base import Attachment

LABEL = "suanli.node"
SITE_LABEL = "suanli.site"  # with LABEL=NAME: the Ray node is the fleet's node SITE/NAME (a label has no /)


def _label_of(labels: dict | None) -> str | None:
    """The fleet name a Ray node's labels give: SITE/NAME with both, else the node label's value."""
    labels = labels or {}
    name = labels.get(LABEL)
    if name is None:
        return None
    site = labels.get(SITE_LABEL)
    return f"{site}/{name}" if site else name
CONNECT_TIMEOUT_S = 3.0
INIT_TIMEOUT_S = 60.0
AGENT_THREADS = 1000  # processes one node's agent can run at once
log = logging.getLogger("suanli.ray")


# ------------------------------------------------------------------ on the Ray node

_pumps: dict[int, LogPump] = {}  # the cap -> this Ray worker's pump of task logs
_pumps_lock = threading.Lock()


def node_pump(max_bytes: int) -> LogPump:
    """The thread that writes the logs of this worker's tasks (one, whatever
    tasks a node's agent runs), for logs of cap ``max_bytes``."""
    with _pumps_lock:
        pump = _pumps.get(max_bytes)
        if pump is None:
            pump = _pumps[max_bytes] = LogPump(max_bytes, private=True)
        return pump


class TaskActor:
    """Runs one task's process on its Ray node (used as a Ray actor).

    Its folder (``home``, root's, others may cross it) holds the task's log
    (``task.log``, 0600: the process writes it through its descriptor), its
    state folder (``state``) and its own folder (``own``: its ``HOME``, and
    its working directory unless it is given one); these two are its user's
    alone."""

    def __init__(self, task: str, run_id: int, confinement: Any = None) -> None:
        from suanli.executors.confine import Confinement

        self.task, self.run_id = task, run_id
        self.own_confinement = confinement is None  # else a node agent's, shared by its tasks
        self.home = Path(tempfile.mkdtemp(prefix=f"suanli-{safe(task)}-{run_id}-"))
        self.state = make_dir(self.home / "state", PRIVATE)
        self.own = make_dir(self.home / "own", PRIVATE)
        self.uid: int | None = None  # the user the process runs as (None: this actor's)
        self.log_path = self.home / "task.log"
        self.pipe: TaskPipe | None = None  # the process's output, on its way to the log
        self.shipped, self.shipped_file = 0, 0  # bytes of the log shipped; the log file they are of (its inode)
        self.proc: subprocess.Popen | None = None
        self.unshare: tuple[str, ...] | None = None  # how its process was put in a pid namespace of its own
        self.stopping = False
        self.started = threading.Event()  # a process is started; cleared when it ends
        self.began = threading.Event()  # the first start has run
        self.lock = threading.Lock()  # a checkpoint or a stop, one at a time
        self.confinement = Confinement() if confinement is None else confinement
        self.procs: list[Path] = []

    def node_id(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def label(self) -> str | None:
        import ray

        return ray.get_runtime_context().get_node_labels().get(LABEL)

    def start(self, command: tuple[str, ...], env: dict[str, str], cwd: str | None, state: bytes | None,
              cpu_milli: int, mem_mib: int, uid: int | None = None) -> float:
        """Start (or start again) the task's process; the wall time it began.
        ``cwd``: where it runs (None, or not a folder here: its own folder);
        ``uid``: its tenant's user, taken where this node may switch users."""
        self._make_room(uid if uid is not None and user_switch() is None else None)
        if state is not None:
            self._restore(state)
        full = process_env(env, self.state, self.own, cpu_milli)
        if not self.procs and self.confinement.kind != "none":
            self.procs = self.confinement.group(f"{safe(self.task)}.{self.run_id}", cpu_milli, mem_mib, MAX_PIDS)
        self.unshare = pid_namespace()[0]  # every process the task starts ends with it (docs/executors.md)
        nproc = tenant_nproc() if self.uid is not None else None
        out = self.pipe = node_pump(int(env.get("SUANLI_LOG_MAX_BYTES") or DEFAULT_MAX_LOG)).open(
            str(self.log_path), self.log_path)  # kept under the task's cap on this node too
        out.write(f"suanli: on Ray node {self.node_id()} labelled {LABEL}={self.label()}\n".encode())
        try:
            self.proc = subprocess.Popen(task_command(command, self.procs, self.uid, self.unshare, nproc), env=full,
                                         cwd=cwd if cwd and os.path.isdir(cwd) else self.own,
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        except OSError as exc:
            out.write(f"suanli: cannot start {command[0]}: {exc.strerror or exc}\n".encode())
            self.proc = None
        out.release()  # the process has its own end of the pipe
        began = time.time()
        self.started.set()
        self.began.set()
        return began

    def _make_room(self, uid: int | None) -> None:
        """The task's folders given to ``uid`` (its own and its state), and
        its actor's folder opened for it to cross."""
        self.uid = uid
        if uid is not None:
            os.chmod(self.home, SHARED)
            make_dir(self.own, PRIVATE, uid)
            make_dir(self.state, PRIVATE, uid)

    def _restore(self, state: bytes) -> None:
        """The state folder replaced by ``state`` (``pack``'s), unpacked in a
        folder of root's alone and given to the task's user before it appears."""
        tmp = make_dir(self.home / "state.new", PRIVATE)
        try:
            unpack(state, tmp)
            if self.uid is not None:
                give(tmp, self.uid)
            shutil.rmtree(self.state, ignore_errors=True)
            tmp.rename(self.state)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def wait(self, after: float | None = None) -> tuple[int, bytes]:
        """The process's exit status (127: it could not start) and its log since
        last shipped. ``after``: the start's result, so that Ray runs this after it."""
        self.started.wait()
        proc = self.proc
        code = 127 if proc is None else proc.wait()
        if self.procs:  # what it left behind ends with it
            self.confinement.kill(f"{safe(self.task)}.{self.run_id}")
        self.started.clear()
        return code, b"" if self.stopping else self.log_since()  # a stop ships the log itself

    def log_since(self) -> bytes:
        """The log since last shipped: at most its cap (after a rotation, the
        new file alone, which begins with the line saying what was dropped)."""
        if self.pipe is not None and (self.proc is None or self.proc.poll() is not None):
            self.pipe.close()  # what the ended process wrote is in the log
        try:
            with open(self.log_path, "rb") as f:
                inode = os.fstat(f.fileno()).st_ino
                if inode != self.shipped_file:
                    self.shipped, self.shipped_file = 0, inode
                f.seek(self.shipped)
                data = f.read()
        except FileNotFoundError:
            return b""
        self.shipped += len(data)
        return data

    def _signal(self, sig: int) -> bool:
        return self.proc is not None and signal_task(self.proc.pid, sig, self.unshare is not None)

    def checkpoint(self, grace_s: float) -> tuple[bytes | None, bytes]:
        """Ask for a checkpoint (SIGUSR1); the state folder packed, or None if
        the task did not write one within ``grace_s``; and the log since last shipped."""
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                return None, self.log_since()
            proc = self.proc
            if not await_checkpoint(self.state, lambda: self._signal(signal.SIGUSR1),
                                    lambda: proc.poll() is not None, grace_s):
                return None, self.log_since()
            return pack(self.state, self.uid), self.log_since()

    def stop(self, grace_s: float, save: bool) -> tuple[bytes | None, bytes]:
        """SIGTERM (save and exit), SIGKILL after ``grace_s``; the state folder
        packed when ``save``, and the log since last shipped."""
        with self.lock:
            self.stopping = True
            self.began.wait(60)  # a stop sent right after the start comes after it
            if self.proc is not None:
                proc, deadline = self.proc, time.monotonic() + grace_s
                ask_task(proc.pid, signal.SIGTERM, self.unshare is not None, lambda: proc.poll() is not None, grace_s)
                try:
                    proc.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
                self._signal(signal.SIGKILL)
                self.proc.wait()
            state = pack(self.state, self.uid) if save else None
            if self.procs:
                self.confinement.remove(f"{safe(self.task)}.{self.run_id}")
            if self.own_confinement:
                self.confinement.close()
            shutil.rmtree(self.state, ignore_errors=True)
            shutil.rmtree(self.own, ignore_errors=True)
            return state, self.log_since()


class NodeAgent:
    """Runs the stateless tasks of one Ray node (used as a Ray actor, one per
    node): a ``TaskActor``'s work for each, without a worker process each."""

    def __init__(self) -> None:
        from suanli.executors.confine import Confinement

        self.tasks: dict[str, TaskActor] = {}
        self.confinement = Confinement()

    def start(self, key: str, task: str, run_id: int, *args: Any) -> float:
        slot = self.tasks.get(key)
        if slot is None:
            slot = self.tasks[key] = TaskActor(task, run_id, self.confinement)
        return slot.start(*args)

    def wait(self, key: str, after: float | None = None) -> tuple[int, bytes]:
        return self.tasks[key].wait()

    def checkpoint(self, key: str, grace_s: float) -> tuple[bytes | None, bytes]:
        return self.tasks[key].checkpoint(grace_s)

    def stop(self, key: str, grace_s: float, save: bool) -> tuple[bytes | None, bytes]:
        slot = self.tasks.get(key)
        return (None, b"") if slot is None else slot.stop(grace_s, save)

    def forget(self, key: str) -> None:
        slot = self.tasks.pop(key, None)
        if slot is not None:
            if slot.procs:
                self.confinement.remove(f"{safe(slot.task)}.{slot.run_id}")
            shutil.rmtree(slot.home, ignore_errors=True)


class Slot:
    """One stateless task on its node's agent, called as a task's actor is."""

    class _Method:
        def __init__(self, method: Any, key: str, prefix: tuple = ()) -> None:
            self.method, self.key, self.prefix = method, key, prefix

        def remote(self, *args: Any) -> Any:
            return self.method.remote(self.key, *self.prefix, *args)

    def __init__(self, agent: Any, key: str, task: str, run_id: int) -> None:
        self.agent, self.key = agent, key
        self.start = self._Method(agent.start, key, (task, run_id))
        self.wait = self._Method(agent.wait, key)
        self.checkpoint = self._Method(agent.checkpoint, key)
        self.stop = self._Method(agent.stop, key)


# ------------------------------------------------------------------ the driver


class RayCluster:
    """A connection to a Ray cluster and its labelled nodes."""

    def __init__(self, ray: Any, address: str) -> None:
        self.ray = ray
        self.address = address
        self.actor_class = ray.remote(num_cpus=0, max_concurrency=4, max_restarts=0)(TaskActor)
        # an agent waits on each of its processes in a thread of its own
        self.agent_class = ray.remote(num_cpus=0, max_concurrency=AGENT_THREADS, max_restarts=0)(NodeAgent)

    def view(self) -> tuple[set[str], dict[str, str]]:
        """The live Ray nodes' ids, and label value -> id for those labelled ``suanli.node``."""
        live = [n for n in self.ray.nodes() if n.get("Alive")]
        return ({n["NodeID"] for n in live},
                {_label_of(n.get("Labels")): n["NodeID"] for n in live if _label_of(n.get("Labels"))})

    def labelled(self) -> dict[str, str]:
        return self.view()[1]

    def resources(self) -> dict[str, dict[str, float]]:
        """Label value -> the Ray resources of each live labelled node (CPU, memory in bytes, GPU ...)."""
        return {_label_of(n.get("Labels")): dict(n.get("Resources") or {}) for n in self.ray.nodes()
                if n.get("Alive") and _label_of(n.get("Labels"))}

    def alive(self) -> set[str]:
        return self.view()[0]

    def executor(self, given: "Attachment", work_dir: Path, cwd: Path | None = None,
                 isolate_tenants: bool = False, log_max_bytes: int = DEFAULT_MAX_LOG) -> "RayExecutor":
        return RayExecutor(given, self, work_dir, cwd=cwd, isolate_tenants=isolate_tenants, log_max_bytes=log_max_bytes)


RAY_NODE_LEASE_S = 30.0  # the lease of a Ray node registered as an agent's (renewed while it lives)


def _an_agents(fleet, name: str) -> bool:
    """The fleet's node ``name`` is one that registered itself (not the Fleet document's)."""
    try:
        return bool(fleet.groups[int(fleet.node_group[fleet.node_by_name(name)])].single)
    except KeyError:
        return False


def ray_node_spec(resources: dict[str, float], kinds: list[str]) -> dict:
    """A node group's spec (without name and count) for a Ray node's resources:
    its CPUs, memory and GPUs (those of a kind the fleet knows), the model from
    Ray's ``accelerator_type:...`` resource."""
    spec: dict = {"cpu": f"{resources.get('CPU', 0):g}", "memory": f"{int(resources.get('memory', 0) // 2**20)}Mi",
                  "arch": "x86_64"}
    gpus = int(resources.get("GPU", 0))
    if gpus and "gpu" in kinds:
        model = next((k.partition(":")[2] for k in resources if k.startswith("accelerator_type:")), "unknown")
        spec["accelerators"] = [{"kind": "gpu", "model": model or "unknown", "count": gpus}]
    return spec


def unreachable(address: str) -> str | None:
    """Why nothing answers at ``address`` (HOST:PORT of a Ray cluster's head,
    perhaps with a scheme); None when something does, or when it names no
    port. Ray waits for an absent cluster for many minutes: look first."""
    host, _, port = address.rpartition(":")
    if not (host and port.isdigit()):
        return None
    try:
        socket.create_connection((host.split("://")[-1], int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        return str(exc.strerror or exc)
    return None


def connect(address: str | None) -> RayCluster:
    """Connect to the Ray cluster at ``address`` (else ``RAY_ADDRESS``, else
    the one started on this machine); ``SpecError`` naming the option when
    Ray or the cluster is missing."""
    try:
        import ray
    except ImportError:
        raise SpecError([Problem("--executor", "the ray executor needs Ray: pip install 'suanli[ray]'")]) from None
    where = address or os.environ.get("RAY_ADDRESS") or "auto"
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    hint = f"start one with `ray start --head --labels {LABEL}=NAME`"
    why = unreachable(where)
    if why is not None:
        raise SpecError([Problem("--ray-address", f"no Ray cluster at {where}: {why}; {hint}")])
    outcome: list[BaseException | None] = []

    def init() -> None:
        try:
            if not ray.is_initialized():
                ray.init(address=where, namespace="suanli", log_to_driver=False, logging_level=logging.WARNING,
                         configure_logging=False)
            outcome.append(None)
        except BaseException as exc:  # Ray raises ConnectionError, ValueError, RuntimeError by case
            outcome.append(exc)

    thread = threading.Thread(target=init, name="suanli-ray-connect", daemon=True)
    thread.start()
    thread.join(INIT_TIMEOUT_S)
    if not outcome or outcome[0] is not None:
        why = f"{str(outcome[0]).strip().splitlines()[0] if str(outcome[0]).strip() else type(outcome[0]).__name__}" \
            if outcome else f"no answer within {INIT_TIMEOUT_S:g}s"
        raise SpecError([Problem("--ray-address", f"no Ray cluster at {where}: {why}; {hint}")])
    return RayCluster(ray, where)


@dataclass
class Handle:
    launch: Launch
    actor: Any
    ray_node: str
    waiting: Any = None  # the ObjectRef of the actor's ``wait``
    stopping: bool = False
    next_checkpoint: float | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class RayExecutor:
    regroups = True  # restarts a gang at another width, its state shared (``tasks.regrouped``)

    def __init__(self, given: "Attachment", cluster: RayCluster, work_dir: Path, cwd: Path | None = None,
                 isolate_tenants: bool = False, log_max_bytes: int = DEFAULT_MAX_LOG) -> None:
        """``cwd``: where commands run on the Ray nodes (default: the
        scenario's folder, where a node has it), unless ``isolate_tenants``:
        then each task runs in its own folder, as its tenant's user on Ray
        nodes that run as root, and the driver's logs are private."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.affinity = NodeAffinitySchedulingStrategy
        self.view, self.loop, self.cluster, self.ray = given.view, given.loop, cluster, cluster.ray
        self.work = Path(work_dir).resolve()
        self.isolate = isolate_tenants
        make_dir(self.work / "logs", PRIVATE if isolate_tenants else None)
        self.logs = LogFolder(self.work / "logs")
        self.log_max_bytes = log_max_bytes
        self._log_lock = threading.Lock()  # shipments come from several threads; one log rotates at a time
        self.cwd = None if isolate_tenants else str(Path(cwd or given.world.base_dir).resolve())
        self.users = Users(self.work / USERS_FILE) if isolate_tenants else None
        self.handles: dict[str, Handle] = {}  # task -> its actor now
        self.state_refs: dict[str, Any] = {}  # task -> ObjectRef of its last saved state
        self.gang_refs: dict[str, tuple[Any, int]] = {}  # regrouped gang -> its members' state merged: ref, bytes
        self.agents: dict[str, Any] = {}  # Ray node id -> its agent, for stateless tasks
        # The controller's: registers a node (name SITE/NAME, site, node spec, lease) that a Ray
        # node labelled with a name the fleet does not have stands for; renews it (name). None: none.
        self.register_node: Callable[[str, str, dict, float], None] | None = None
        self.renew_node: Callable[[str], None] | None = None
        self._registered: dict[str, float] = {}  # label -> when last registered or renewed
        self.exact: set[str] = set()  # fleet nodes only a Ray node labelled with their own name stands for
        self.lost: set[str] = set()  # Ray node ids seen dead
        self._lock = threading.Lock()
        self._closed = threading.Event()
        fleet = given.world.fleet
        labelled = cluster.labelled()
        self.ray_node: dict[str, str] = {}  # fleet node -> Ray node id
        self.site = {fleet.node_name(n): fleet.site_of(n).name for n in range(fleet.n_nodes)}
        self.exact |= {fleet.node_name(int(fleet.group_first_node[g.index])) for g in fleet.groups if g.single}
        missing = []
        for name in self.site:
            rid = self._labelled_as(name, labelled)
            if rid is None:
                missing.append(name)
            else:
                self.ray_node[name] = rid
        self.missing = set(missing)  # fleet nodes no live Ray node stands for now
        users = (f"one per tenant, from uid {FIRST_UID} ({USERS_FILE}), on Ray nodes that run as root with "
                 "setpriv; elsewhere the Ray node's user" if self.users else "the Ray workers' user")
        self.post("executor", executor="ray", address=cluster.address, work_dir=str(self.work),
                  ray_nodes=len(set(self.ray_node.values())), fleet_nodes_served=len(self.ray_node), users=users,
                  cwd=self.cwd or "each task's own folder", origin_wall=origin_wall(self.loop))
        for name in missing:
            self.loop.post(NodeLost(name, f"no live Ray node labelled {LABEL}={name} or its site"))
        self._threads = [threading.Thread(target=self._watch, name="suanli-ray-watch", daemon=True),
                         threading.Thread(target=self._checkpoints, name="suanli-ray-checkpoints", daemon=True)]
        for t in self._threads:
            t.start()

    def post(self, kind: str, **fields: object) -> None:
        self.loop.post(Note(kind, tuple(fields.items())))

    def _labelled_as(self, name: str, labelled: dict[str, str]) -> str | None:
        """The live Ray node that stands for fleet node ``name``: labelled with its
        name, else with its site (not for a node that registered itself)."""
        return labelled.get(name) or (None if name in self.exact else labelled.get(self.site[name]))

    def nodes_added(self, nodes) -> None:
        """Nodes added to the fleet while running: the Ray node labelled with the
        name (or the site) stands for each; one without is lost until one comes."""
        fleet = self.view.world.fleet
        try:
            labelled = self.cluster.labelled()
        except Exception:
            labelled = {}
        with self._lock:
            for n in nodes:
                name = fleet.node_name(n)
                self.site[name] = fleet.site_name_of(n)
                if fleet.groups[int(fleet.node_group[n])].single:
                    self.exact.add(name)  # a node that registered itself is its own Ray node, not its site's
                rid = self._labelled_as(name, labelled)
                if rid is not None and rid not in self.lost:
                    self.ray_node[name] = rid
                    self.missing.discard(name)
                else:
                    self.missing.add(name)
                    self.loop.post(NodeLost(name, f"no live Ray node labelled {LABEL}={name} or its site"))

    def uid(self, ln: Launch) -> int | None:
        """The user the task's tenant runs as (None: the Ray workers')."""
        return self.users.of(ln.tenant) if self.users else None

    def _ship(self, task: str, data: bytes, header: str | None = None) -> None:
        if not data and header is None:
            return
        with self._log_lock:
            out = RotatingLog(self.logs.note(task), self.log_max_bytes, self.isolate)
            try:
                first = out.line(header.encode()) if header is not None else False
                first |= out.write(data)
            finally:
                out.close()
        if first:
            self.post("logRotated", task=task, bytes=out.written, cap_bytes=self.log_max_bytes)

    def forget(self, app: str) -> None:
        """A deleted application's tasks have ended (``release``): their logs go."""
        with self._log_lock:
            self.logs.remove(self.logs.take(app))

    def sweep(self, tasks: Collection[str]) -> None:
        """At start: the logs of tasks not among ``tasks`` go."""
        self.logs.sweep(tasks)

    # ------------------------------------------------------------ the executor interface

    def start(self, run: Run, now: float) -> None:
        run.started_at = now
        gang = regrouped(self.view, run)
        shared = self.gang_refs.get(gang) if gang is not None else None
        if shared is not None:  # each member starts with the gang's state
            for task in run.tasks:
                self.state_refs[task] = shared[0]
            self.post("gangStateShared", gang=gang, run=run.run_id, members=len(run.tasks), bytes=shared[1],
                      through="object store")
        for task in run.tasks:
            self._launch(launch(self.view, run, task, speed_of(self.loop)))

    def restart(self, run: Run, task: str, now: float) -> None:
        h = self.handles.get(task)
        if h is None or h.waiting is not None:
            return  # gone, or started again meanwhile (by a move)
        self._ship(task, b"", f"--- suanli: {task} run {run.run_id} restarted on {h.launch.node} at {_stamp()}\n")
        began = h.actor.start.remote(h.launch.command, h.launch.env, self.cwd, None, h.launch.cpu_milli,
                                     h.launch.mem_mib, self.uid(h.launch))
        with self._lock:
            h.waiting = h.actor.wait.remote(began)
        self._note_start(h, began)

    def stop(self, run: Run, now: float) -> None:
        keep_progress(run, now)
        self._end(run.tasks, save=True)
        gang = regrouped(self.view, run)
        if gang is not None:
            self._gather_state(gang, run)

    def _gather_state(self, gang: str, run: Run) -> None:
        """A regrouped gang stopped: what its members saved, merged in rank
        order (``merge_trees``) into one state its next run's members start
        with, in the object store."""
        with tempfile.TemporaryDirectory(prefix="suanli-gang-") as tmp:
            sources = []
            for i, task in enumerate(run.tasks):
                ref = self.state_refs.get(task)
                if ref is None:
                    continue
                folder = Path(tmp) / str(i)
                unpack(self.ray.get(ref), folder)
                sources.append((folder, None))
            merge_trees(sources, Path(tmp) / "gang")
            data = pack(Path(tmp) / "gang")
        self.gang_refs[gang] = (self.ray.put(data), len(data))
        self.post("gangStateSaved", gang=gang, run=run.run_id, members=len(run.tasks), bytes=len(data),
                  to="object store")

    def move(self, run: Run, task: str, now: float) -> None:
        self._end([task], save=True)
        self._launch(launch(self.view, run, task, speed_of(self.loop)))

    def release(self, run: Run, now: float) -> None:
        self._end(run.tasks, save=False)
        for task in run.tasks:
            self.state_refs.pop(task, None)
        gang = regrouped(self.view, run)
        if gang is not None and self.gang_refs.pop(gang, None) is not None:  # its members it ended without, too
            for task in [task for task in self.state_refs if gang_of(task) == gang]:
                del self.state_refs[task]

    def node_down(self, node: int, now: float) -> None:
        """What runs on the node is gone: its actors are killed (the node may
        still answer, when the scheduler was told so by a scenario); stateful
        tasks keep only their last checkpoint."""
        name = self.view.world.fleet.node_name(node)
        for h in [h for h in self.handles.values() if h.launch.node == name]:
            h.stopping = True
            with self._lock:
                self.handles.pop(h.launch.task, None)
            self._drop(h, kill=True)

    def close(self) -> None:
        self._closed.set()
        try:
            self._end(list(self.handles), save=False)
        finally:
            for t in self._threads:
                t.join(timeout=5)

    # ------------------------------------------------------------ actors

    def _launch(self, ln: Launch) -> None:
        rid = self.ray_node[ln.node]
        pin = self.affinity(node_id=rid, soft=False)
        if ln.stateful:
            actor = self.cluster.actor_class.options(scheduling_strategy=pin).remote(ln.task, ln.run_id)
        else:
            agent = self.agents.get(rid)
            if agent is None:
                agent = self.agents[rid] = self.cluster.agent_class.options(scheduling_strategy=pin).remote()
            actor = Slot(agent, f"{ln.task}#{ln.run_id}", ln.task, ln.run_id)
        state = self.state_refs.get(ln.task) if ln.stateful else None
        ln.env["SUANLI_LOG_MAX_BYTES"] = str(self.log_max_bytes)  # the task's cap, on its node too
        self._ship(ln.task, b"", f"--- suanli: {ln.task} run {ln.run_id} on {ln.node} (Ray node {rid[:12]}) "
                                 f"at {_stamp()}\n")
        began = actor.start.remote(ln.command, ln.env, self.cwd, state, ln.cpu_milli, ln.mem_mib, self.uid(ln))
        h = Handle(ln, actor, rid)
        h.waiting = actor.wait.remote(began)
        with self._lock:
            self.handles[ln.task] = h
        self._note_start(h, began)
        if state is not None:
            self.post("stateRestored", task=ln.task, node=ln.node, through="object store")

    def _note_start(self, h: Handle, began: Any) -> None:
        """Once the process has started, its first checkpoint is due one period later."""
        if not h.launch.checkpoint_every_s:
            return

        def due(fut) -> None:
            if fut.exception() is None:
                h.next_checkpoint = time.monotonic() + h.launch.checkpoint_every_s
        began.future().add_done_callback(due)

    def _end(self, tasks, save: bool) -> None:
        """Stop the tasks' processes together (SIGTERM, then SIGKILL after
        their grace); keep the state of stateful ones in the object store."""
        ending = []
        for task in tasks:
            with self._lock:
                h = self.handles.pop(task, None)
            if h is None:
                continue
            h.stopping = True
            h.lock.acquire()  # a checkpoint under way finishes first
            ending.append((h, h.actor.stop.remote(h.launch.grace_s, save and h.launch.stateful)))
        for h, ref in ending:
            try:
                state, data = self.ray.get(ref, timeout=h.launch.grace_s + 30)
                self._ship(h.launch.task, data)
                if state is not None:
                    self.state_refs[h.launch.task] = self.ray.put(state)
                    self.post("stateSaved", task=h.launch.task, node=h.launch.node, bytes=len(state),
                              to="object store")
            except Exception as exc:  # the node is gone: the last checkpoint is what is left
                log.info("stopping %s: %s", h.launch.task, exc)
            finally:
                h.lock.release()
                self._drop(h)

    def _drop(self, h: Handle, kill: bool = False) -> None:
        """Let go of a task's actor (kill it), or of its slot on its node's agent
        (``kill``: its process is killed first)."""
        if isinstance(h.actor, Slot):
            if kill:
                h.actor.stop.remote(0.0, False)
            h.actor.agent.forget.remote(h.actor.key)
        else:
            self.ray.kill(h.actor)

    # ------------------------------------------------------------ watching

    def _watch(self) -> None:
        """Post the processes that ended, and the fleet nodes whose Ray node died."""
        last_look = 0.0
        while not self._closed.is_set():
            with self._lock:
                waiting = {h.waiting: h for h in self.handles.values() if h.waiting is not None}
            if waiting:
                ready, _ = self.ray.wait(list(waiting), num_returns=len(waiting), timeout=0.1)
            else:
                ready = []
                self._closed.wait(0.1)
            for ref in ready:
                h = waiting[ref]
                with self._lock:
                    if h.waiting is ref:
                        h.waiting = None
                try:
                    code, data = self.ray.get(ref)
                except Exception as exc:  # the actor died: with its node (noticed below), or alone
                    if h.stopping or self._closed.is_set() or h.ray_node not in self._alive():
                        continue
                    self.post("actorFailed", task=h.launch.task, node=h.launch.node,
                              error=str(exc).strip().splitlines()[-1][:300] if str(exc).strip() else type(exc).__name__)
                    code, data = -1, b""
                self._ship(h.launch.task, data)
                if not h.stopping and not self._closed.is_set():
                    self.loop.post(TaskExited(h.launch.run_id, h.launch.task, code))
            if time.monotonic() - last_look > 0.25:
                last_look = time.monotonic()
                self._look_at_nodes()

    def _alive(self) -> set[str]:
        try:
            return self.cluster.alive()
        except Exception:
            return set(self.ray_node.values())

    def _look_at_nodes(self) -> None:
        """Fleet nodes whose Ray node died are lost; fleet nodes without one
        that a live Ray node now stands for (one that joined, or came back
        under a label) are found."""
        try:
            alive, labelled = self.cluster.view()
        except Exception:
            return
        for rid in set(self.ray_node.values()) - alive - self.lost:
            self.lost.add(rid)
            self.agents.pop(rid, None)
            for name, r in self.ray_node.items():
                if r == rid:
                    self.missing.add(name)
                    self.loop.post(NodeLost(name, f"Ray node {rid[:12]} died"))
        if self.register_node is not None:
            self._register_unknown(labelled)
        for name in sorted(self.missing):
            rid = self._labelled_as(name, labelled)
            if rid is not None and rid not in self.lost:
                self.ray_node[name] = rid
                self.missing.discard(name)
                self.loop.post(NodeFound(name, f"Ray node {rid[:12]} labelled {LABEL}="
                                               f"{name if name in labelled else self.site[name]}"))

    def _register_unknown(self, labelled: dict[str, str]) -> None:
        """A live Ray node labelled ``suanli.site=SITE`` and ``suanli.node=NAME``
        (``SITE/NAME`` here) with a site of the fleet and a name
        it does not have (or one that registered so before) is a node that joined:
        registered as an agent's (its CPU, memory and GPUs as Ray counts them;
        found again if it had been lost), and its lease renewed while it lives."""
        fleet = self.view.world.fleet
        now = time.monotonic()
        new = [label for label in labelled if "/" in label and label not in self._registered
               and fleet.site_table.names.get(label.partition("/")[0]) >= 0
               and (label not in self.site or _an_agents(fleet, label))]
        if new:
            resources = self.cluster.resources()
            for label in new:
                spec = ray_node_spec(resources.get(label, {}), fleet.kinds.names)
                try:
                    self.register_node(label, label.partition("/")[0], spec, RAY_NODE_LEASE_S)
                except Exception as exc:  # noqa: BLE001 - a node that cannot be one (a bad name) stays out
                    self.post("rayNodeRefused", label=label, error=str(exc)[:300])
                self._registered[label] = now
        for label, when in list(self._registered.items()):
            if label not in labelled:
                del self._registered[label]  # its lease runs out; a new Ray node under the label registers again
            elif now - when > RAY_NODE_LEASE_S / 3:
                self._registered[label] = now
                try:
                    self.renew_node(label)
                except Exception:  # the store away: next time
                    pass

    def _checkpoints(self) -> None:
        while not self._closed.wait(0.05):
            now = time.monotonic()
            for h in list(self.handles.values()):
                if h.next_checkpoint is None or now < h.next_checkpoint or h.stopping:
                    continue
                h.next_checkpoint = now + h.launch.checkpoint_every_s
                if not h.lock.acquire(blocking=False):
                    continue
                try:
                    began = time.monotonic()
                    state, data = self.ray.get(h.actor.checkpoint.remote(h.launch.grace_s),
                                               timeout=h.launch.grace_s + 30)
                    self._ship(h.launch.task, data)
                    if state is None:
                        self.post("checkpointMissed", task=h.launch.task, node=h.launch.node,
                                  reason=f"no {CHECKPOINT_MARK} within {h.launch.grace_s:g}s")
                        continue
                    self.state_refs[h.launch.task] = self.ray.put(state)
                    self.post("checkpointed", task=h.launch.task, node=h.launch.node, bytes=len(state),
                              took_s=round(time.monotonic() - began, 6), to="object store")
                except Exception as exc:
                    log.info("checkpoint of %s: %s", h.launch.task, exc)
                finally:
                    h.lock.release()


def _stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")
