"""What a real executor needs to start one task: its process, where, with what.

Both real executors (``local``, ``ray``) start the same process for a task:
the component's ``run`` command with its ``env``, plus the environment the
executor sets (``SUANLI_*``, see docs/executors.md), and nothing else. A
component without ``run`` is held by a stand-in that only occupies its
slice: a job sleeps for the time the twin expects it to take, a service
sleeps until stopped.

Under a control plane (``isolate_tenants``) a task is kept from what is not
its own: it runs as a user of its tenant's (``Users``), in a folder of its
own, and every folder of the executor's is private (docs/executors.md, "What
a task can see"). The executor itself runs as root and copies the tasks'
state folders; it does so without following a task's links or trusting its
file names (``copy_tree``, ``pack``), so that no task can have it read for
it what it could not read itself.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator
from urllib.parse import quote

from suanli.executors.base import Run
from suanli.executors.confine import wrap
from suanli.executors.sim import runtime

if TYPE_CHECKING:
    from suanli.engine.loop import EventLoop
    from suanli.model.work import Probe
    from suanli.sim.ledger import LedgerView

CHECKPOINT_MARK = ".checkpointed"  # a task touches it in its state directory when a checkpoint is written
USERS_FILE = "users.json"  # in the work directory: tenant -> the uid its tasks run as
FIRST_UID = 2_000_000  # tenants' uids count up from here: far above the users a system makes
MAX_PIDS = 1024  # processes (and threads) one task may have at once, by default
TASK_PATH = ("/usr/local/bin", "/usr/bin", "/bin")
PRIVATE, SHARED = 0o700, 0o711  # a folder of one user's; one that others may cross but not list


@dataclass(frozen=True)
class Launch:
    run_id: int
    task: str
    tenant: str
    node: str  # the fleet node's name
    site: str
    command: tuple[str, ...]
    env: dict[str, str]  # the component's own, then the executor's SUANLI_*
    cpu_milli: int
    mem_mib: int
    stateful: bool
    checkpoint_every_s: float | None  # real seconds between checkpoints the executor asks for
    grace_s: float  # real seconds a task has to save its state and exit when asked to stop
    standin: bool  # no run command: a sleeping stand-in holds the slice
    image: str | None = None  # the container image it runs (its variant for the node's arch); None: a process
    arch: str = ""  # the node's
    containerized: bool = False  # its component runs an image (even where no variant is for this arch)
    readiness: "Probe | None" = None
    liveness: "Probe | None" = None
    devices: tuple[str, ...] = ()  # the CDI names of the devices it holds whose node names them so


def safe(task: str) -> str:
    """A task name as one path component (``app/comp/0`` -> ``app%2Fcomp%2F0``)."""
    return quote(task, safe="")


def launch(view: "LedgerView", run: Run, task: str, speed: float = 1.0) -> Launch:
    """How ``task`` of ``run`` starts where the scheduler placed it (``speed``:
    scheduler seconds per real second)."""
    rec = view.tasks[task]
    comp = rec.component
    node = view.node_of(task)
    fleet = view.world.fleet
    spec = comp.run
    if spec is not None:
        command, env, grace = spec.command, dict(spec.env), spec.stop_grace_s
    else:
        seconds = runtime(run)
        command = ("sleep", "infinity" if seconds is None else f"{max(seconds / speed, 0.0):.3f}")
        env, grace = {}, 10.0
    name = fleet.node_name(node)
    site = fleet.site_of(node).name
    group = fleet.groups[int(fleet.node_group[node])]
    arch = group.arch
    held = view.devices_of(task) if comp.resources.accelerators else []
    cdi = {d.kind: d.cdi for d in group.devices if d.cdi}
    if held:
        env["SUANLI_DEVICES"] = ",".join(f"{kind}:{index}" for kind, _, index in held)
    if comp.gang:
        rank, width = rank_of(run, task)
        env.update(SUANLI_GANG=gang_of(task).split(":", 1)[-1], SUANLI_WORLD_SIZE=str(width),
                   SUANLI_RANK=str(rank))
    env.update({
        "SUANLI_TASK": task.split(":", 1)[-1],  # as its tenant knows it (a control plane prefixes the tenant)
        "SUANLI_TENANT": rec.tenant,
        "SUANLI_NODE": name,
        "SUANLI_SITE": site,
        "SUANLI_RUN": str(run.run_id),
        "SUANLI_CPU_MILLI": str(comp.resources.cpu_milli),
        "SUANLI_MEMORY_MIB": str(comp.resources.mem_mib),
    })
    every = comp.checkpoint_every_s / speed if comp.stateful and comp.checkpoint_every_s else None
    contained = spec is not None and spec.containerized
    return Launch(run.run_id, task, rec.tenant, name, site, tuple(command), env, comp.resources.cpu_milli,
                  comp.resources.mem_mib, comp.stateful, every, grace, spec is None,
                  spec.image_for(arch) if contained else None, arch, contained,
                  spec.readiness if spec is not None else None, spec.liveness if spec is not None else None,
                  tuple(f"{cdi[kind]}={index}" for kind, _, index in held if kind in cdi))


def gang_of(task: str) -> str:
    """The gang (component) a member belongs to: its name without the index."""
    return task.rsplit("/", 1)[0]


_ranks: dict[int, dict[str, tuple[int, int]]] = {}  # the last run asked of: member -> (rank, width)


def rank_of(run: Run, task: str) -> tuple[int, int]:
    """A gang member's rank in ``run`` (its place among the run's members of
    its gang, the first 0) and the gang's width in it."""
    got = _ranks.get(run.run_id)
    if got is None or task not in got:
        _ranks.clear()
        members: dict[str, list[str]] = {}
        for t in run.tasks:
            members.setdefault(gang_of(t), []).append(t)
        got = _ranks[run.run_id] = {t: (i, len(ts)) for ts in members.values() for i, t in enumerate(ts)}
    return got[task]


def regrouped(view: "LedgerView", run: Run) -> str | None:
    """The gang of ``run`` whose members share one state (None: each keeps its
    own): a stateful gang job whose width can change (``minSize`` below its
    most), so that a member may start at another rank or after other members
    did its share. Its state when it stops is what all its members left,
    merged (``merge_trees``), and each member of its next run starts with it."""
    comp = view.tasks[run.tasks[0]].component
    if not comp.gang or not comp.stateful or comp.lifetime != "job":
        return None
    if (comp.min_size or comp.size) >= max(comp.size, comp.max_size or 0):
        return None
    return gang_of(run.tasks[0])


def speed_of(loop: "EventLoop") -> float:
    """Scheduler seconds per real second of the loop's clock."""
    return getattr(loop.clock, "speed", 1.0)


def origin_wall(loop: "EventLoop") -> float:
    """The wall time (seconds since the epoch) of the scheduler's time 0."""
    return round(time.time() - loop.now() / speed_of(loop), 6)


def process_env(env: dict[str, str], state_dir: Path, home: Path, cpu_milli: int) -> dict[str, str]:
    """The whole environment of a task's process, made from nothing: a fixed
    ``PATH`` (this Python's folder first, so ``python3`` in a script is the
    control plane's), ``HOME`` its own folder, ``LANG``, unbuffered Python
    output, threads for its cores; then the task's ``env`` (which wins) and
    its state folder. Nothing of the executor's own environment is passed
    on: a control plane's holds its admin token and its database's address."""
    out = {"PATH": os.pathsep.join(dict.fromkeys((os.path.dirname(sys.executable), *TASK_PATH))),
           "HOME": str(home), "LANG": "C.UTF-8",
           "PYTHONUNBUFFERED": "1"}  # a Python task's log lines arrive as they are printed
    if cpu_milli:
        out["OMP_NUM_THREADS"] = str(max(1, -(-cpu_milli // 1000)))
    out.update(env)
    out["SUANLI_STATE_DIR"] = str(state_dir)
    return out


def await_checkpoint(state_dir: Path, ask: Callable[[], bool], ended: Callable[[], bool], grace_s: float) -> bool:
    """The protocol's checkpoint: clear the mark, ``ask`` (SIGUSR1; asked again
    while it reports that it did not reach the task's command), and wait up to
    ``grace_s`` for the task to write the mark; False if it did not, or ``ended``."""
    mark = state_dir / CHECKPOINT_MARK
    try:
        mark.unlink(missing_ok=True)
    except OSError:  # the task made it something else than a file
        return False
    reached = ask()
    deadline = time.monotonic() + grace_s
    while not mark.exists():
        if time.monotonic() > deadline or ended():
            return False
        if not reached:
            reached = ask()
        time.sleep(0.005)
    return True


def guarded(command: tuple[str, ...]) -> tuple[str, ...]:
    """``command``, killed when the thread that started it ends (util-linux's
    ``setpriv --pdeathsig``; as it is where that is missing)."""
    setpriv = shutil.which("setpriv")
    if setpriv:
        return (setpriv, "--pdeathsig", "KILL", "--", *command)
    return command


# A task's first process in a pid namespace of its own: it runs the task's
# command and ends with it, and the kernel then kills every other process in the
# namespace (a daemon the task left, whatever its session). It has no signal
# handlers, so as the namespace's init it ignores the signals a stop sends (the
# task's processes get them, as before) and ends only with the task or by SIGKILL.
NS_INIT = '"$@"; exit $?'
_NS_VARIANTS = (("--pid",), ("--user", "--map-current-user", "--pid"))  # root; a user without privileges
_ns_probe: dict[str, object] = {}


def pid_namespace() -> tuple[tuple[str, ...] | None, str]:
    """How a task is started in a pid namespace of its own here (util-linux
    ``unshare``'s arguments), or None and why not; tried once per process."""
    if "args" not in _ns_probe:
        _ns_probe["args"], _ns_probe["why"] = None, "no unshare (util-linux) here"
        unshare = shutil.which("unshare")
        for variant in _NS_VARIANTS if unshare else ():
            args = (unshare, *variant, "--fork", "--kill-child")
            try:
                done = subprocess.run([*args, "--", "true"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, timeout=10)
            except (OSError, subprocess.TimeoutExpired) as exc:
                _ns_probe["why"] = f"unshare failed: {exc}"
                continue
            if done.returncode == 0:
                _ns_probe["args"], _ns_probe["why"] = args, ""
                break
            _ns_probe["why"] = (done.stderr.decode(errors="replace").strip().splitlines() or ["unshare failed"])[-1]
    return _ns_probe["args"], _ns_probe["why"]  # type: ignore[return-value]


def in_namespace(command: tuple[str, ...], unshare: tuple[str, ...]) -> tuple[str, ...]:
    """``command`` as the only child of a pid namespace's init (``NS_INIT``)."""
    return (*unshare, "--", shutil.which("sh") or "/bin/sh", "-c", NS_INIT, "suanli-init", *command)


def signal_task(group: int, sig: int, wrapped: bool) -> bool:
    """Send ``sig`` to a task's process group ``group`` (its first process's pid).
    ``wrapped``: that first process is ``unshare`` (``in_namespace``), which
    dies of the signals it does not block (SIGUSR1, the checkpoint's): then
    every other member of the group gets it, and SIGKILL alone goes to all.
    Whether it reached the task's command: unwrapped, always; wrapped, once
    the namespace's init and a process under it got it (just after the start,
    ``unshare`` may not have forked yet, and then nothing gets it)."""
    reached = 0
    try:
        if not wrapped or sig == signal.SIGKILL:
            os.killpg(group, sig)
            return True
        for stat_file in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat_file.read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            pid = int(stat_file.parent.name)
            if int(fields[2]) == group and pid != group:  # (after the name: state, ppid, pgrp)
                try:
                    os.kill(pid, sig)
                    reached += 1
                except ProcessLookupError:
                    pass
    except (ProcessLookupError, PermissionError):
        pass
    return reached >= 2


def ask_task(group: int, sig: int, wrapped: bool, ended: Callable[[], bool], within_s: float) -> bool:
    """``signal_task``, sent again until it reaches the task's command (``ask_until``)."""
    return ask_until(lambda: signal_task(group, sig, wrapped), ended, within_s)


def ask_until(send: Callable[[], bool], ended: Callable[[], bool], within_s: float) -> bool:
    """``send`` a signal again until it says it reached the task's command (a
    stop or a checkpoint asked as the task starts would otherwise be lost, and
    the task killed after its grace with what it had not saved), the task has
    ended, or ``within_s`` has passed; whether it reached the command."""
    deadline = time.monotonic() + within_s
    while not send():
        if ended() or time.monotonic() >= deadline:
            return False
        time.sleep(0.005)
    return True


def pid_budget() -> int:
    """The processes this machine can have: the kernel's ``pid_max``, or less where
    the control group this process runs in has a ``pids.max`` of its own."""
    budget = 1 << 22
    try:
        budget = int(Path("/proc/sys/kernel/pid_max").read_text())
    except (OSError, ValueError):
        pass
    root = Path("/sys/fs/cgroup")
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if "pids" in controllers.split(","):
                mount = root / "pids"  # cgroup v1's pids hierarchy
            elif controllers == "" and (root / "cgroup.controllers").exists():
                mount = root  # cgroup v2
            else:
                continue
            here = mount / path.lstrip("/")
            while here == mount or mount in here.parents:
                limit = here / "pids.max"
                if limit.exists() and (text := limit.read_text().strip()) != "max":
                    budget = min(budget, int(text))
                if here == mount:
                    break
                here = here.parent
    except (OSError, ValueError):
        pass
    return budget


def tenant_nproc() -> int:
    """``RLIMIT_NPROC`` of a tenant's tasks: half the machine's processes, so that
    no tenant's tasks together can leave the others none."""
    return max(64, pid_budget() // 2)


def resolve(command: tuple[str, ...]) -> tuple[str, ...]:
    """``python3``/``python`` as the first word means this interpreter, so a
    task runs with the same Python as the control plane wherever that is installed."""
    if command and re.fullmatch(r"python3?", command[0]):
        return (sys.executable, *command[1:])
    return command


# ------------------------------------------------------------------ users


def user_switch() -> str | None:
    """None if this process can start tasks as other users; else why not."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "not root: every task runs as the executor's user"
    if shutil.which("setpriv") is None:
        return "no setpriv (util-linux) here: every task runs as the executor's user"
    return None


def as_user(command: tuple[str, ...], uid: int) -> tuple[str, ...]:
    """``command`` run as ``uid`` (its group the same number, no other
    groups, no gaining privileges through set-user-ID programs), killed when
    the thread that started it ends. The kernel forgets a parent-death signal
    when the user changes; setpriv sets it after the change."""
    return (shutil.which("setpriv") or "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
            "--no-new-privs", "--pdeathsig", "KILL", "--", *command)


class Orphans:
    """This process as the subreaper of its tasks (where a task gets no pid
    namespace): a process a task left behind (a daemon, a double fork) is
    reparented here instead of to the machine's init, and is killed once it is
    no live run's (``SUANLI_RUN`` in its environment names the run that started it)."""

    PR_SET_CHILD_SUBREAPER = 36

    def __init__(self) -> None:
        self.active = False
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            self.active = libc.prctl(self.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
        except (OSError, AttributeError):
            pass

    @staticmethod
    def children() -> list[int]:
        out: list[int] = []
        for task in Path("/proc/self/task").glob("*"):
            try:
                out += [int(p) for p in (task / "children").read_text().split()]
            except (OSError, ValueError):
                pass
        return out

    def end(self, live: set[int], keep: set[int] = frozenset()) -> int:
        """Kill and reap the children of this process that are no run's of ``live``
        (run ids) and not in ``keep`` (pids); the number ended."""
        if not self.active:
            return 0
        ended = 0
        for pid in self.children():
            if pid in keep:
                continue
            try:
                env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                env = []
            run = next((e[11:] for e in env if e.startswith(b"SUANLI_RUN=")), b"")
            if run.isdigit() and int(run) in live:
                continue
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                ended += 1
            except (ProcessLookupError, ChildProcessError):
                pass
        return ended


def task_command(command: tuple[str, ...], procs: list[Path], uid: int | None,
                 unshare: tuple[str, ...] | None = None, nproc: int | None = None) -> tuple[str, ...]:
    """What to execute for a task: it joins its control groups first (the
    ``cgroup.procs`` files ``procs``), while still root; then, given ``unshare``
    (``pid_namespace``), starts a pid namespace whose init runs the rest and
    whose every process ends with it; then takes ``nproc`` as its
    ``RLIMIT_NPROC`` and becomes ``uid`` (None: it stays this process's user).
    Killed with the thread that started it throughout."""
    command = resolve(command)
    if uid is not None:
        command = as_user(command, uid)
        if nproc is not None and (prlimit := shutil.which("prlimit")):
            command = (prlimit, f"--nproc={nproc}:{nproc}", "--", *command)
    if unshare is not None:
        command = in_namespace(command, unshare)
    if uid is not None and not procs and unshare is None:
        return command  # setpriv set the parent-death signal after the change of user
    return guarded(wrap(command, procs))


REGISTRY = Path("/var/lib/suanli/uids.json")  # the uids this machine's executors gave out, and to whom


class UidConflict(ValueError):
    """A uid of this work directory's tenants is another executor's on this machine."""


class Users:
    """The uid each tenant's tasks run as: ``FIRST_UID`` upward, kept in a file
    of the work directory (mode 0600) so that a tenant keeps its uid, and the
    files it owns, across restarts. Numbers only: no ``/etc/passwd`` entries
    are needed.

    Every uid is also registered machine-wide (``REGISTRY``, or
    ``SUANLI_UID_REGISTRY``; root's, 0600, written under a lock), with the
    work directory and tenant it is for: two servers on one machine never give
    two tenants the same uid, and one whose work directory holds a uid that
    the registry gives another is refused at start (``UidConflict``). A uid is
    given again only once the work directory it was for is gone."""

    def __init__(self, path: Path, registry: Path | None = None) -> None:
        self.path = path
        self.owner = str(path.parent.resolve())
        self.registry = Path(registry or os.environ.get("SUANLI_UID_REGISTRY") or REGISTRY)
        self._lock = threading.Lock()
        try:
            self.uids: dict[str, int] = json.loads(path.read_text())["tenants"]
        except FileNotFoundError:
            self.uids = {}
        with self._registered() as reg:
            for tenant, uid in self.uids.items():
                other = reg.get(str(uid))
                if other is not None and (other["work"], other["tenant"]) != (self.owner, tenant):
                    raise UidConflict(f"uid {uid} of tenant {tenant!r} in {path} is tenant {other['tenant']!r}'s of "
                                      f"the executor working in {other['work']}: their tasks would share a user; "
                                      "give one of them a new work directory")
                reg[str(uid)] = {"work": self.owner, "tenant": tenant}

    def of(self, tenant: str) -> int:
        with self._lock:
            uid = self.uids.get(tenant)
            if uid is None:
                with self._registered() as reg:
                    taken = {int(u) for u in reg} | set(self.uids.values())
                    uid = next(u for u in range(FIRST_UID, FIRST_UID + len(taken) + 1) if u not in taken)
                    reg[str(uid)] = {"work": self.owner, "tenant": tenant}
                self.uids[tenant] = uid
                self._save()
            return uid

    @contextmanager
    def _registered(self) -> Iterator[dict[str, dict[str, str]]]:
        """The machine's registry, locked, read, and written back as the block left it
        (entries of work directories that are gone dropped)."""
        import fcntl

        self.registry.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(str(self.registry) + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                reg = json.loads(self.registry.read_text())["uids"]
            except (FileNotFoundError, ValueError, KeyError):
                reg = {}
            reg = {u: e for u, e in reg.items() if os.path.isdir(e.get("work", ""))}
            before = json.dumps(reg, sort_keys=True)
            yield reg
            if json.dumps(reg, sort_keys=True) != before or not self.registry.exists():
                _write_private(self.registry, {"first_uid": FIRST_UID, "uids": reg})
        finally:
            os.close(fd)

    def _save(self) -> None:
        _write_private(self.path, {"first_uid": FIRST_UID, "tenants": self.uids})


def _write_private(path: Path, data: dict) -> None:
    """``data`` as JSON in ``path`` (0600), replaced whole."""
    tmp = path.with_name(path.name + f".{os.getpid()}.new")
    tmp.unlink(missing_ok=True)
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    tmp.replace(path)


def unreachable(folder: Path) -> str | None:
    """Why other users cannot reach ``folder`` (a folder above it they may not
    cross); None when they can."""
    for above in reversed(Path(folder).resolve().parents):
        mode = above.stat().st_mode
        if not mode & stat.S_IXOTH:
            return f"{above} may not be crossed by other users (mode {stat.S_IMODE(mode):04o})"
    return None


def make_dir(path: Path, mode: int | None = None, uid: int | None = None) -> Path:
    """``path`` made if missing (its parents too), then given ``mode`` and
    owner ``uid`` (its group the same number) when these are given."""
    path.mkdir(parents=True, exist_ok=True)
    if mode is not None:
        os.chmod(path, mode)
    if uid is not None:
        os.chown(path, uid, uid)
    return path


# ------------------------------------------------------------------ state folders


def _tree(src: Path, owner: int | None, skip: tuple[str, ...] = ()) -> Iterator[tuple[str, os.stat_result, object]]:
    """Each folder, regular file and symbolic link under ``src``, parents first:
    (path relative to ``src``, its status, None for a folder / the link's
    target / a descriptor open on the file). Links are not followed and files
    are opened relative to their folder's descriptor, so a task that changes
    its tree meanwhile cannot make this read anything outside it. With
    ``owner``, only what that user owns (a hard link to someone else's file
    is left out); ``skip``: names left out at the top."""
    for top, dirs, files, dfd in os.fwalk(src, follow_symlinks=False):
        rel = os.path.relpath(top, src)
        keep = []
        for name in sorted(dirs + files):
            path = name if rel == "." else os.path.join(rel, name)
            try:
                st = os.lstat(name, dir_fd=dfd)
            except OSError:
                continue
            if (rel == "." and name in skip) or (owner is not None and st.st_uid != owner):
                continue
            if stat.S_ISDIR(st.st_mode):
                keep.append(name)
                yield path, st, None
            elif stat.S_ISLNK(st.st_mode):
                yield path, st, os.readlink(name, dir_fd=dfd)
            elif stat.S_ISREG(st.st_mode):
                yield from _open_file(name, dfd, path, owner)
        dirs[:] = [d for d in dirs if d in keep]


def _open_file(name: str, dfd: int, path: str, owner: int | None) -> Iterator[tuple[str, os.stat_result, int]]:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    except OSError:
        return
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and (owner is None or st.st_uid == owner):
            yield path, st, fd
    finally:
        os.close(fd)


def copy_tree(src: Path, dst: Path, owner: int | None = None, skip: tuple[str, ...] = ()) -> None:
    """Copy the folder ``src`` to ``dst`` (new, made 0700): folders, files
    (their permission bits and times) and links as links (see ``_tree``)."""
    os.mkdir(dst, PRIVATE)
    for rel, st, what in _tree(src, owner, skip):
        _put(dst / rel, st, what)


def merge_trees(sources: list[tuple[Path, int | None]], dst: Path) -> None:
    """The folders ``sources`` (each with the user whose files alone are
    read, as ``copy_tree``), merged into ``dst`` (new): a path that several
    hold is taken from the first that holds it, and nothing under a path the
    first made a file or a link. A gang's members in rank order: rank 0's
    word is the gang's."""
    os.mkdir(dst, PRIVATE)
    for src, owner in sources:
        if not src.is_dir():
            continue
        for rel, st, what in _tree(src, owner, (CHECKPOINT_MARK,)):
            target = dst / rel
            parent = dst / os.path.dirname(rel)
            if os.path.lexists(target) or parent.is_symlink() or not parent.is_dir():
                continue  # the first holder's; or a folder of its where the first put a file
            _put(target, st, what)


def _put(target: Path, st: os.stat_result, what: object) -> None:
    """One entry of ``_tree``'s at ``target`` (new): a folder (None), a link
    (its target), or a copy of a file (a descriptor), with its permission
    bits (and a file's times)."""
    if what is None:
        os.mkdir(target, PRIVATE)
        os.chmod(target, stat.S_IMODE(st.st_mode) & 0o777)
    elif isinstance(what, str):
        os.symlink(what, target)
    else:
        with os.fdopen(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as out, \
                os.fdopen(os.dup(what), "rb") as f:
            shutil.copyfileobj(f, out, 1 << 20)
        os.chmod(target, stat.S_IMODE(st.st_mode) & 0o777)
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))


def give(folder: Path, uid: int) -> None:
    """``folder`` and everything in it to ``uid`` (links themselves, not what
    they point to). Its contents first: run on a copy no task can enter yet
    (``folder`` 0700, root's), nothing can be swapped under it meanwhile."""
    for _, dirs, files, dfd in os.fwalk(folder, follow_symlinks=False):
        for name in dirs + files:
            os.chown(name, uid, uid, dir_fd=dfd, follow_symlinks=False)
    os.chown(folder, uid, uid)


def pack(folder: Path, owner: int | None = None) -> bytes:
    """The folder as a gzipped tar (without the checkpoint mark), read as ``copy_tree`` reads."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for rel, st, what in _tree(folder, owner, (CHECKPOINT_MARK,)):
            info = tarfile.TarInfo(rel)
            info.mode, info.mtime = stat.S_IMODE(st.st_mode) & 0o777, int(st.st_mtime)
            if what is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif isinstance(what, str):
                info.type, info.linkname = tarfile.SYMTYPE, what
                tar.addfile(info)
            else:
                info.size = st.st_size
                with os.fdopen(os.dup(what), "rb") as f:
                    tar.addfile(info, f)
    return buf.getvalue()


def unpack(data: bytes, folder: Path) -> None:
    """What ``pack`` made, into ``folder`` (nothing outside it; owned by this process's user)."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        members = tar.getmembers()
        for m in members:
            m.uid = m.gid = os.getuid() if hasattr(os, "getuid") else 0
            m.uname = m.gname = ""
        tar.extractall(folder, members=members, filter="tar")


def folder_size(path: Path) -> int:
    """The bytes of the regular files under ``path`` (links not followed)."""
    total = 0
    for top, _, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(top, name))
            except OSError:
                continue
            total += st.st_size if stat.S_ISREG(st.st_mode) else 0
    return total
