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
         cwd: Path | None = None, confine: bool = True) -> Callable[["Simulation"], "Executor"] | None:
    """The executor factory for ``name`` (None: the simulated one). Raises
    ``SpecError`` naming the option at fault."""
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

        return lambda sim: LocalExecutor(sim, work_dir, cwd=cwd, confine=confine)
    from suanli.executors.ray import connect

    cluster = connect(ray_address)  # raises SpecError when Ray or the cluster is missing
    return lambda sim: cluster.executor(sim, work_dir, cwd=cwd)
