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
import stat
import sys
import tarfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator
from urllib.parse import quote

from suanli.executors.base import Run
from suanli.executors.confine import wrap
from suanli.executors.sim import runtime

if TYPE_CHECKING:
    from suanli.engine.loop import EventLoop
    from suanli.sim.ledger import LedgerView

CHECKPOINT_MARK = ".checkpointed"  # a task touches it in its state directory when a checkpoint is written
USERS_FILE = "users.json"  # in the work directory: tenant -> the uid its tasks run as
FIRST_UID = 2_000_000  # tenants' uids count up from here: far above the users a system makes
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
    return Launch(run.run_id, task, rec.tenant, name, site, tuple(command), env, comp.resources.cpu_milli,
                  comp.resources.mem_mib, comp.stateful, every, grace, spec is None)


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


def await_checkpoint(state_dir: Path, ask: Callable[[], None], ended: Callable[[], bool], grace_s: float) -> bool:
    """The protocol's checkpoint: clear the mark, ``ask`` (SIGUSR1), and wait up to
    ``grace_s`` for the task to write the mark; False if it did not, or ``ended``."""
    mark = state_dir / CHECKPOINT_MARK
    try:
        mark.unlink(missing_ok=True)
    except OSError:  # the task made it something else than a file
        return False
    ask()
    deadline = time.monotonic() + grace_s
    while not mark.exists():
        if time.monotonic() > deadline or ended():
            return False
        time.sleep(0.005)
    return True


def guarded(command: tuple[str, ...]) -> tuple[str, ...]:
    """``command``, killed when the thread that started it ends (util-linux's
    ``setpriv --pdeathsig``; as it is where that is missing)."""
    setpriv = shutil.which("setpriv")
    if setpriv:
        return (setpriv, "--pdeathsig", "KILL", "--", *command)
    return command


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


def task_command(command: tuple[str, ...], procs: list[Path], uid: int | None) -> tuple[str, ...]:
    """What to execute for a task: it joins its control groups first (the
    ``cgroup.procs`` files ``procs``), while still root, then becomes ``uid``
    (None: it stays this process's user); killed with the thread that
    started it throughout."""
    command = resolve(command)
    if uid is None:
        return guarded(wrap(command, procs))
    return guarded(wrap(as_user(command, uid), procs)) if procs else as_user(command, uid)


class Users:
    """The uid each tenant's tasks run as: ``FIRST_UID`` upward, in the order
    tenants are first seen, kept in a file (mode 0600) so that a tenant keeps
    its uid, and the files it owns, across restarts. Numbers only: no
    ``/etc/passwd`` entries are needed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        try:
            self.uids: dict[str, int] = json.loads(path.read_text())["tenants"]
        except FileNotFoundError:
            self.uids = {}

    def of(self, tenant: str) -> int:
        with self._lock:
            uid = self.uids.get(tenant)
            if uid is None:
                uid = self.uids[tenant] = max(self.uids.values(), default=FIRST_UID - 1) + 1
                self._save()
            return uid

    def _save(self) -> None:
        tmp = self.path.with_name(self.path.name + ".new")
        tmp.unlink(missing_ok=True)
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            json.dump({"first_uid": FIRST_UID, "tenants": self.uids}, f, indent=1, sort_keys=True)
        tmp.replace(self.path)


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


def open_log(path: Path, private: bool):
    """A task's log, opened to append (created 0600 when ``private``); the
    task's output goes to it through the descriptor, so the task need not
    be able to open it."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600 if private else 0o666)
    if private:
        os.fchmod(fd, 0o600)
    return os.fdopen(fd, "ab")


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
        target = dst / rel
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
