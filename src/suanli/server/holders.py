"""Who holds what a server needs: its port, its store, its lease.

Read from ``/proc`` (Linux): the listening sockets of ``/proc/net/tcp`` and
``tcp6`` (with the uid that made each), the files and sockets each process
has open, its user, parent, control groups and environment. Used twice:

- ``suanli serve`` looks before it serves. A port or a store held by a
  process that a task left behind (a process of a tenant's user, in a task's
  control group, or with a task's environment) is refused, with the process
  named, so that a task can never stand in for the server and take the
  tokens its clients send; an earlier server's controller that outlived its
  server is ended, and said so.
- The client looks before it sends a token over plain http to a loopback
  address: the process listening there must run as the client's own user or
  as root (or as ``SUANLI_SERVER_UID``), never as a tenant's.

Where ``/proc`` is not there (not Linux), nothing is found and nothing is refused.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from suanli.executors.tasks import FIRST_UID

PROC = Path("/proc")
LISTEN = "0A"  # a socket's state in /proc/net/tcp: listening


@dataclass(frozen=True)
class Listener:
    address: str
    port: int
    uid: int
    inode: int


def listeners(port: int) -> list[Listener]:
    """The sockets listening on ``port`` (TCP, IPv4 and IPv6), on any address."""
    out = []
    for table, v6 in (("tcp", False), ("tcp6", True)):
        try:
            lines = (PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) < 10 or f[3] != LISTEN:
                continue
            host, _, hexport = f[1].partition(":")
            if int(hexport, 16) != port:
                continue
            out.append(Listener(_address(host, v6), port, int(f[7]), int(f[9])))
    return out


def _address(hexhost: str, v6: bool) -> str:
    raw = bytes.fromhex(hexhost)
    if not v6:
        return str(ipaddress.IPv4Address(raw[::-1]))
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))  # four host-order 32-bit words
    addr = ipaddress.IPv6Address(words)
    return str(addr.ipv4_mapped or addr)


def serves(listener: Listener, host: str) -> bool:
    """Whether a connection to ``host`` (an address or name) reaches ``listener``."""
    if listener.address in ("0.0.0.0", "::"):
        return True
    try:
        wanted = ipaddress.ip_address("127.0.0.1" if host == "localhost" else host)
    except ValueError:
        return True  # a name: whichever it resolves to
    return ipaddress.ip_address(listener.address) == wanted


def holders(inodes: set[int] = frozenset(), paths: set[str] = frozenset()) -> dict[int, set[str]]:
    """Processes with one of the sockets ``inodes`` or the files ``paths`` open:
    pid -> what of them it holds (only the processes this one may look at)."""
    wanted = {f"socket:[{i}]": f"socket {i}" for i in inodes}
    wanted.update({os.path.realpath(p): p for p in paths})
    out: dict[int, set[str]] = {}
    if not wanted:  # (a new store's files: no walk of every process's descriptors)
        return out
    for fd_dir in PROC.glob("[0-9]*/fd"):
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd_dir / fd)
            except OSError:
                continue
            if target in wanted:
                out.setdefault(int(fd_dir.parent.name), set()).add(wanted[target])
    return out


@dataclass(frozen=True)
class Process:
    pid: int
    ppid: int
    uid: int
    name: str  # /proc/PID/comm
    command: str
    cgroups: tuple[str, ...]
    task: str | None  # SUANLI_TASK of its environment (readable: root's, or one's own user's)

    @property
    def leftover(self) -> str | None:
        """Why this looks like a process a task started (None: it does not)."""
        if self.task is not None:
            return f"it has the environment of task {self.task}"
        group = next((g for g in self.cgroups if "/suanli." in g), None)
        if group is not None:
            return f"it is in a task's control group ({group})"
        if self.uid >= FIRST_UID:
            return f"it runs as uid {self.uid}, a tenant's"
        return None

    @property
    def orphaned_controller(self) -> bool:
        """A controller's process (a server's child) whose server is gone: its parent
        is no longer a ``serve`` (the machine's init, or a subreaper, took it)."""
        from suanli.server.remote import PROCESS_NAME

        if self.name != PROCESS_NAME:
            return False
        try:
            parent = (PROC / str(self.ppid) / "cmdline").read_bytes().split(b"\0")
        except OSError:
            return True
        return self.ppid <= 1 or b"serve" not in parent

    def __str__(self) -> str:
        return f"process {self.pid} (uid {self.uid}: {self.command[:120]})"


def process(pid: int) -> Process | None:
    base = PROC / str(pid)
    try:
        status = (base / "status").read_text()
        command = (base / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    try:
        cgroups = tuple(line.split(":", 2)[2] for line in (base / "cgroup").read_text().splitlines())
    except OSError:
        cgroups = ()
    task = None
    try:
        for entry in (base / "environ").read_bytes().split(b"\0"):
            if entry.startswith(b"SUANLI_TASK="):
                task = entry[12:].decode(errors="replace")
    except OSError:
        pass
    name = fields.get("Name", "?").strip()
    return Process(pid, int(fields.get("PPid", "0").strip() or 0), int(fields.get("Uid", "0").split()[0]), name,
                   command or f"[{name}]", cgroups, task)


def end(pid: int, wait_s: float = 5.0) -> bool:
    """SIGKILL ``pid`` and wait for it to be gone; whether it is."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if not (PROC / str(pid)).exists() or _zombie(pid):
            return True
        time.sleep(0.02)
    return False


def _zombie(pid: int) -> bool:
    try:
        return " Z " in (PROC / str(pid) / "stat").read_text().split(")", 1)[1][:4]
    except OSError:
        return True


# ------------------------------------------------------------------ before serving


def port_problem(host: str, port: int) -> str | None:
    """Why ``suanli serve`` cannot take ``host:port``: held by a task's leftover
    (named), or by anything else; None when it is free."""
    held = [ln for ln in listeners(port) if serves(ln, host) or host in ("0.0.0.0", "::", "")]
    if not held:
        return None
    found = holders({ln.inode for ln in held})
    procs = [p for pid in sorted(found) if (p := process(pid)) is not None]
    for p in procs:
        why = p.leftover
        if why is not None:
            return (f"port {port} is held by {p}, which a task left behind ({why}): a task may not stand in for "
                    f"the server; end it (kill -9 {p.pid}) and start again")
    if procs:
        return f"port {port} is in use by {procs[0]}"
    uid = held[0].uid
    why = ", a tenant's: a task's leftover" if uid >= FIRST_UID else ""
    return f"port {port} is in use by a process of uid {uid}{why}"


def store_problems(database: str | None) -> tuple[list[str], list[Process]]:
    """What holds a SQLite database's files: (problems: a task's leftover holding
    them, refused; earlier controllers that outlived their server, to end)."""
    if database is None:
        return [], []
    files = {database + suffix for suffix in ("", "-wal", "-shm", "-writer.lock")}
    found = holders(paths={f for f in files if os.path.exists(f)})
    problems, orphans = [], []
    for pid in sorted(found):
        p = process(pid)
        if p is None or pid == os.getpid():
            continue
        if p.leftover is not None:
            problems.append(f"the store {database} is held open by {p}, which a task left behind ({p.leftover}); "
                            f"end it (kill -9 {p.pid}) and start again")
        elif p.orphaned_controller:
            orphans.append(p)
    return problems, orphans


def lease_orphan(pid: int | None, host: str | None) -> Process | None:
    """The lease holder's process when it is an orphaned controller on this machine."""
    import socket

    if pid is None or host != socket.gethostname() or pid == os.getpid():
        return None
    p = process(pid)
    return p if p is not None and p.orphaned_controller else None


# ------------------------------------------------------------------ before sending a token


LOOPBACK_NAMES = ("localhost",)


def loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def listener_problem(host: str, port: int) -> str | None:
    """Why a client should not send a token to ``host:port`` over plain http on this
    machine: the process listening there is not of the client's user, nor root
    (nor ``SUANLI_SERVER_UID``). None when it is, or when nothing listens (the
    connection fails by itself)."""
    allowed = {0, os.getuid()}
    if os.environ.get("SUANLI_SERVER_UID", "").isdigit():
        allowed.add(int(os.environ["SUANLI_SERVER_UID"]))
    held = [ln for ln in listeners(port) if serves(ln, host)]
    strangers = [ln for ln in held if ln.uid not in allowed]
    if not strangers:
        return None
    uid = strangers[0].uid
    whose = "a tenant's user (a task of the server)" if uid >= FIRST_UID else "another user"
    return (f"the process listening on {host}:{port} runs as uid {uid}, {whose}, not as you or root: the token is "
            f"not sent (a server of another user: set SUANLI_SERVER_UID={uid}; or use https)")
