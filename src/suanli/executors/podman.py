"""The podman executor: every placed task is a container on this machine.

It is the local executor (``local.py``) with a container in place of the
process: the same folders, logs, checkpoint protocol, state carried across
moves and tenants kept apart, with these differences:

- **What runs.** The component's image (``run.image``, or the variant of
  ``run.images`` for the arch of the node the task is on) with its command
  (``run.command``; left out: the image's own), started by ``podman run``
  with runc, attached: the container's output is the task's log, its exit
  status the task's. A tiny init (``--init``) is its first process and hands
  signals on, so a program that does not handle ``SIGTERM`` ends on it, as a
  process would.
- **Its slice.** The task's control groups are made as for a process, and
  the container's are made under them (``--cgroup-parent``): cpu, memory and
  pids are held by the task's groups, so a container that goes over its
  memory is killed by the kernel, and the task's end says it was over its
  memory. Where this executor cannot make control groups, podman is given
  the limits itself (``--cpus``, ``--memory``, ``--pids-limit``). Open
  files and processes per user are held by explicit ulimits.
- **What it sees.** Its environment is the component's ``env`` and the
  ``SUANLI_*`` variables only (with what podman sets itself: ``HOSTNAME``,
  ``container``, the image's ``PATH``); its state folder is a volume at
  ``/suanli/state`` (``SUANLI_STATE_DIR``), its own folder one at
  ``/suanli/home`` (``HOME``, its working directory). Nothing of the
  executor's files. Under a control plane it runs as its tenant's uid, with
  no capabilities and no way to gain privileges. It shares the machine's
  network, as a process does.
- **Its end.** A stop is ``SIGTERM`` to the container, then ``SIGKILL``
  after the grace (``podman kill``). Containers are named
  ``suanli-PID-TASK.RUN-N`` and labelled with the executor's pid
  (``suanli.executor``) and work directory (``suanli.work``); those of an
  executor that died are removed when the next one starts.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import threading
from pathlib import Path
from typing import IO, TYPE_CHECKING

from suanli.executors.local import LocalExecutor, Proc
from suanli.executors.probes import command_check
from suanli.executors.tasks import Launch

if TYPE_CHECKING:
    from suanli.executors.base import Attachment
    from suanli.model.work import Probe

STATE_MOUNT, HOME_MOUNT = "/suanli/state", "/suanli/home"
LABEL = "suanli.executor"  # the pid of the executor that started a container
WORK_LABEL = "suanli.work"  # and its work directory
NOFILE = 1024  # open files a task's container may have (podman otherwise asks for more than the hard limit)
PULL = "missing"  # an image not on the machine is pulled (from the registry its reference names)
RUNTIME = ("--runtime", "runc", "--cgroup-manager", "cgroupfs")  # (crun fails on hybrid cgroups)


def podman() -> list[str]:
    """podman's command, with the runtime and cgroup manager every call here uses."""
    return [shutil.which("podman") or "podman", *RUNTIME]


def podman_problem() -> str | None:
    """Why no container can be run here (None: podman and runc are there)."""
    if shutil.which("podman") is None:
        return "podman is not installed (Debian: apt install podman runc)"
    if shutil.which("runc") is None:
        return "runc is not installed (Debian: apt install runc); podman runs containers with it"
    return None


class PodmanExecutor(LocalExecutor):
    name = "podman"

    def __init__(self, given: "Attachment", work_dir: Path, **kw) -> None:
        self._count = 0
        self._names: dict[int, str] = {}  # the pid of a task's podman client -> its container's name
        self._sweep_containers()
        super().__init__(given, work_dir, **kw)

    # ------------------------------------------------------------ containers

    def _podman(self, *args: str, timeout: float) -> subprocess.CompletedProcess:
        """A podman command of the executor's (its output kept); raises ``OSError``, ``TimeoutExpired``."""
        return subprocess.run([*podman(), *args], capture_output=True, text=True, timeout=timeout,
                              env=self._client_env())

    def _client_env(self) -> dict[str, str]:
        """podman's own environment: what it needs to find itself, nothing of the executor's secrets."""
        return {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "XDG_RUNTIME_DIR", "TMPDIR")}

    def _sweep_containers(self) -> None:
        """Remove the containers of executors that are gone (killed before
        they could remove their own)."""
        try:
            out = self._podman("ps", "-a", "--filter", f"label={LABEL}",
                               "--format", f'{{{{.Names}}}} {{{{index .Labels "{LABEL}"}}}}', timeout=60)
            dead = [name for name, pid in (line.split() for line in out.stdout.splitlines() if len(line.split()) == 2)
                    if not pid.isdigit() or not Path(f"/proc/{pid}").exists()]
            if dead:
                self._podman("rm", "-f", "-t", "0", *dead, timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            pass

    def _cwd_said(self) -> str:
        return f"{HOME_MOUNT} in each task's container (its own folder)"

    def _containment(self, processes: str) -> str:
        return "a container per task (podman with runc), its groups under the task's"

    def _refused(self, ln: Launch) -> str | None:
        if not ln.containerized:
            return (f"{ln.task} runs a command, not an image: the podman executor runs containers "
                    "(give its component run.image, or use --executor local)")
        if ln.image is None:
            return f"{ln.task}: its image has no variant for {ln.node}'s arch ({ln.arch})"
        return None

    def _popen(self, ln: Launch, key: str, procs: list[Path], uid: int | None, state: Path, home: Path,
               log: IO[bytes]) -> subprocess.Popen:
        self._count += 1
        name = re.sub(r"[^a-zA-Z0-9_.-]", "_", f"suanli-{os.getpid()}-{key}-{self._count}")
        user = uid if uid is not None else os.geteuid()
        argv = [*podman(), "run", "--rm", "--name", name, "--label", f"{LABEL}={os.getpid()}",
                "--label", f"{WORK_LABEL}={self.work}",
                "--init", "--pull", PULL, "--log-driver", "none", "--network", "host",
                "--user", f"{user}:{user}", "--workdir", HOME_MOUNT,
                "--ulimit", f"nofile={NOFILE}:{NOFILE}", "--ulimit", f"nproc={self.nproc or self.max_pids}:"
                                                                    f"{self.nproc or self.max_pids}",
                "--pids-limit", str(self.max_pids),
                "--volume", f"{state}:{STATE_MOUNT}", "--volume", f"{home}:{HOME_MOUNT}"]
        if ln.cpu_milli:
            argv += ["--cpus", f"{ln.cpu_milli / 1000:g}"]
        for device in ln.devices:  # by CDI name: the runtime adds the device's nodes, mounts and env
            argv += ["--device", device]
        if procs:  # the task's groups hold it (and tell when it went over its memory)
            argv += ["--cgroup-parent", self.confinement.group_path(key)]
            self._delegate(key)
        elif ln.mem_mib:
            argv += ["--memory", f"{ln.mem_mib}m", "--memory-swap", f"{ln.mem_mib}m"]
        if self.isolate:
            argv += ["--cap-drop", "all", "--security-opt", "no-new-privileges"]
        env = dict(ln.env)
        env.update(SUANLI_STATE_DIR=STATE_MOUNT, HOME=HOME_MOUNT, SUANLI_LOG_MAX_BYTES=str(self.pump.max_bytes))
        argv += ["--env-file", str(self._env_file(name, env)), "--", ln.image, *ln.command]
        popen = subprocess.Popen(argv, env=self._client_env(), stdin=subprocess.DEVNULL, stdout=log,
                                 stderr=subprocess.STDOUT, start_new_session=True)
        self._names[popen.pid] = name  # (by the client: a task started again gets another container)
        return popen

    def _env_file(self, name: str, env: dict[str, str]) -> Path:
        """The container's environment, in a file only this executor reads
        (on podman's command line, any user of the machine could read it)."""
        folder = self._dir(self.work / "env", 0o700)
        path = folder / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            for k, v in env.items():
                f.write(f"{k}={v.replace(chr(10), ' ')}\n")
        return path

    def _delegate(self, key: str) -> None:
        """cgroup v2: the task's group hands its controllers down to the
        container's (it holds no process itself)."""
        if self.confinement.kind != "v2":
            return
        group = self.confinement.bases[0] / key
        try:
            wanted = " ".join(f"+{c}" for c in ("cpu", "memory", "pids")
                              if c in (group / "cgroup.controllers").read_text().split())
            (group / "cgroup.subtree_control").write_text(wanted)
        except OSError:
            pass

    def _check(self, p: Proc, probe: "Probe") -> tuple[bool, str]:
        """An exec probe runs in the task's container (as its user, in its folder)."""
        name = self._names.get(p.popen.pid)
        if probe.kind != "exec" or name is None:
            return super()._check(p, probe)
        return command_check([*podman(), "exec", name, *probe.command], probe, env=self._client_env())

    def _podman_kill(self, name: str, sig: int) -> bool:
        try:
            return self._podman("kill", "--signal", str(int(sig)), name, timeout=30).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False

    def _signal(self, p: Proc, sig: int) -> bool:
        """``sig`` to the container's first process (its init hands it on);
        False while the container is not running yet."""
        name = self._names.get(p.popen.pid)
        if name is None or p.ended.is_set():
            return False
        reached = self._podman_kill(name, sig)
        if sig == signal.SIGKILL and not reached:  # not started yet: the client goes, and the container with it
            try:
                os.killpg(p.popen.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        return reached

    def _ended(self, p: Proc) -> None:
        name = self._names.pop(p.popen.pid, None)
        if name is not None:
            (self.work / "env" / name).unlink(missing_ok=True)
        if name is not None and (p.popen.returncode or 0) < 0:
            # a client killed before its container ended leaves it (with --rm, one that ended is gone)
            threading.Thread(target=self._podman, args=("rm", "-f", "-t", "0", name), kwargs={"timeout": 120},
                             name="suanli-podman-rm", daemon=True).start()
