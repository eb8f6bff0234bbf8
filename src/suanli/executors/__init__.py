"""Executors: who runs the tasks the scheduler places.

``sim`` (the digital twin's), ``local`` (processes on this machine),
``podman`` (containers on this machine), ``ray`` (actors on a Ray
cluster) and ``agents`` (processes or containers on the nodes that agents
register, ``agents.py``) share one interface (``base.Executor``).
``make`` returns what ``Simulation(executor=...)`` takes.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from suanli.spec.problems import Problem, SpecError

if TYPE_CHECKING:
    from suanli.executors.base import Executor
    from suanli.executors.base import Attachment


class ExecutorName(str, Enum):
    sim = "sim"
    local = "local"
    podman = "podman"
    ray = "ray"
    agents = "agents"


def make(name: ExecutorName, *, work_dir: Path | None, ray_address: str | None = None,
         cwd: Path | None = None, confine: bool = True, isolate_tenants: bool = False,
         max_pids: int | None = None, log_max_bytes: int | None = None, db: str | None = None
         ) -> Callable[["Attachment"], "Executor"] | None:
    """The executor factory for ``name`` (None: the simulated one). Raises
    ``SpecError`` naming the option at fault.

    ``isolate_tenants``: the tasks are a control plane's, of tenants who must
    not see each other's work nor the control plane's: each task runs in its
    own folder, as its tenant's user where the executor runs as root, and the
    work directory's folders are private (docs/executors.md). Without it (one
    user, ``suanli run``), commands run in ``cwd`` (default: the scenario's
    folder) as the executor's user. ``max_pids``: processes one task may have
    at once (local executor; default ``tasks.MAX_PIDS``). ``log_max_bytes``:
    a task's log rotates past it (default ``logs.DEFAULT_MAX_LOG``). ``db``:
    the control plane's store, through which the agents executor tells the
    agents what to run (``agents.py``)."""
    if name is ExecutorName.sim:
        return None
    if work_dir is None:
        raise SpecError([Problem("--work-dir", f"the {name.value} executor keeps logs and state there; give a folder")])
    try:
        Path(work_dir).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError([Problem("--work-dir", f"cannot make {work_dir}: {exc.strerror or exc}")]) from None
    from suanli.executors.logs import DEFAULT_MAX_LOG

    cap = log_max_bytes or DEFAULT_MAX_LOG
    if name is ExecutorName.agents:
        if db is None:
            raise SpecError([Problem("--executor", "the agents executor runs under a control plane (suanli serve)")])
        from suanli.executors.agents import AgentsExecutor
        from suanli.server.store import Store

        return lambda given: AgentsExecutor(given, work_dir, Store(db, upgrade=False))
    if name in (ExecutorName.local, ExecutorName.podman):
        from suanli.executors.local import LocalExecutor
        from suanli.executors.tasks import MAX_PIDS

        kind = LocalExecutor
        if name is ExecutorName.podman:
            from suanli.executors.podman import PodmanExecutor, podman_problem

            if (why := podman_problem()) is not None:
                raise SpecError([Problem("--executor", f"podman runs containers here, and {why}")])
            kind = PodmanExecutor
        if isolate_tenants:
            _reachable_by_tenants(Path(work_dir))
            _own_users(Path(work_dir))
        pids = max_pids or MAX_PIDS
        return lambda given: kind(given, work_dir, cwd=cwd, confine=confine, isolate_tenants=isolate_tenants,
                                  max_pids=pids, log_max_bytes=cap)
    from suanli.executors.ray import connect

    if isolate_tenants:
        _own_users(Path(work_dir))
    cluster = connect(ray_address)  # raises SpecError when Ray or the cluster is missing
    return lambda given: cluster.executor(given, work_dir, cwd=cwd, isolate_tenants=isolate_tenants, log_max_bytes=cap)


def _reachable_by_tenants(work_dir: Path) -> None:
    """Tasks that run as their tenants' users must reach their folders in the
    work directory: every folder above it must let other users cross it."""
    from suanli.executors.tasks import unreachable, user_switch

    if user_switch() is not None:
        return  # every task runs as the executor's user
    why = unreachable(work_dir)
    if why is not None:
        raise SpecError([Problem("--work-dir", f"tasks run as their tenants' users and cannot reach {work_dir}: "
                                 f"{why}; choose a work directory every user may reach (such as /srv/suanli) "
                                 "or let them cross that folder (chmod o+x)")])


def _own_users(work_dir: Path) -> None:
    """The tenants' uids of the work directory are its own on this machine (no
    other executor's tenants have them), registered if new."""
    from suanli.executors.tasks import USERS_FILE, UidConflict, Users, user_switch

    if user_switch() is not None:
        return  # every task runs as the executor's user
    try:
        Users(Path(work_dir) / USERS_FILE)
    except UidConflict as exc:
        raise SpecError([Problem("--work-dir", str(exc))]) from None
    except OSError as exc:
        raise SpecError([Problem("--work-dir", f"cannot register its tenants' uids: {exc.strerror or exc}")]) from None
