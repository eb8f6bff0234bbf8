"""What a real executor needs to start one task: its process, where, with what.

Both real executors (``local``, ``ray``) start the same process for a task:
the component's ``run`` command with its ``env``, plus the environment the
executor sets (``SUANLI_*``, see docs/executors.md). A component without
``run`` is held by a stand-in that only occupies its slice: a job sleeps for
the time the twin expects it to take, a service sleeps until stopped.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable
from urllib.parse import quote

from suanli.executors.base import Run
from suanli.executors.sim import runtime

if TYPE_CHECKING:
    from suanli.sim.simulation import Simulation

CHECKPOINT_MARK = ".checkpointed"  # a task touches it in its state directory when a checkpoint is written


@dataclass(frozen=True)
class Launch:
    run_id: int
    task: str
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


def launch(sim: "Simulation", run: Run, task: str) -> Launch:
    """How ``task`` of ``run`` starts where the scheduler placed it."""
    rec = sim.tasks[task]
    comp = rec.component
    node = sim.state.placements[task].host.node
    fleet = sim.world.fleet
    speed = getattr(sim.loop.clock, "speed", 1.0)
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
    return Launch(run.run_id, task, name, site, tuple(command), env, comp.resources.cpu_milli, comp.resources.mem_mib,
                  comp.stateful, every, grace, spec is None)


def origin_wall(sim: "Simulation") -> float:
    """The wall time (seconds since the epoch) of the scheduler's time 0."""
    return round(time.time() - sim.loop.now() / getattr(sim.loop.clock, "speed", 1.0), 6)


def process_env(env: dict[str, str], state_dir: Path, cpu_milli: int) -> dict[str, str]:
    """The environment a task's process gets: this one's, then the task's (which
    wins), its state folder, and threads for its cores (unless it set them)."""
    out = dict(os.environ)
    out.update(env)
    out["SUANLI_STATE_DIR"] = str(state_dir)
    out.setdefault("PYTHONUNBUFFERED", "1")  # a Python task's log lines arrive as they are printed
    if cpu_milli:
        out.setdefault("OMP_NUM_THREADS", str(max(1, -(-cpu_milli // 1000))))
    return out


def await_checkpoint(state_dir: Path, ask: Callable[[], None], ended: Callable[[], bool], grace_s: float) -> bool:
    """The protocol's checkpoint: clear the mark, ``ask`` (SIGUSR1), and wait up to
    ``grace_s`` for the task to write the mark; False if it did not, or ``ended``."""
    mark = state_dir / CHECKPOINT_MARK
    mark.unlink(missing_ok=True)
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
