"""Executors: who runs the tasks the scheduler places.

``sim`` (the digital twin's), ``local`` (processes on this machine) and
``ray`` (actors on a Ray cluster) share one interface (``base.Executor``).
``make`` returns what ``Simulation(executor=...)`` takes.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from suanli.spec.problems import Problem, SpecError

if TYPE_CHECKING:
    from suanli.executors.base import Executor
    from suanli.sim.simulation import Simulation


class ExecutorName(str, Enum):
    sim = "sim"
    local = "local"
    ray = "ray"


def make(name: ExecutorName, *, work_dir: Path | None, ray_address: str | None = None,
         cwd: Path | None = None, confine: bool = True,
         isolate_tenants: bool = False) -> Callable[["Simulation"], "Executor"] | None:
    """The executor factory for ``name`` (None: the simulated one). Raises
    ``SpecError`` naming the option at fault.

    ``isolate_tenants``: the tasks are a control plane's, of tenants who must
    not see each other's work nor the control plane's: each task runs in its
    own folder, as its tenant's user where the executor runs as root, and the
    work directory's folders are private (docs/executors.md). Without it (one
    user, ``suanli run``), commands run in ``cwd`` (default: the scenario's
    folder) as the executor's user."""
    if name is ExecutorName.sim:
        return None
    if work_dir is None:
        raise SpecError([Problem("--work-dir", f"the {name.value} executor keeps logs and state there; give a folder")])
    try:
        Path(work_dir).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError([Problem("--work-dir", f"cannot make {work_dir}: {exc.strerror or exc}")]) from None
    if name is ExecutorName.local:
        from suanli.executors.local import LocalExecutor

        if isolate_tenants:
            _reachable_by_tenants(Path(work_dir))
        return lambda sim: LocalExecutor(sim, work_dir, cwd=cwd, confine=confine, isolate_tenants=isolate_tenants)
    from suanli.executors.ray import connect

    cluster = connect(ray_address)  # raises SpecError when Ray or the cluster is missing
    return lambda sim: cluster.executor(sim, work_dir, cwd=cwd, isolate_tenants=isolate_tenants)


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
