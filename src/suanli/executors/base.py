"""The executor interface and the events executors report.

The simulation (and later the live control plane) tells an executor to
``start``, ``stop``, ``checkpoint`` and ``restore`` the tasks of a run; the
executor reports back through events on the loop (``RunFinished``), so the
scheduler never knows whether the work is simulated or real.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass
class Run:
    """One placement of a unit's tasks, from start until they stop."""

    run_id: int
    tasks: tuple[str, ...]
    parallelism: int  # members running together (a gang's size as placed)
    started_at: float
    remaining_work_s: float | None  # jobs: task-time still to do at parallelism 1
    remaining_s: float | None  # jobs with a fixed duration: seconds still to run
    efficiency: float = 1.0
    checkpoint_every_s: float | None = None
    finish_at: float | None = None  # set by the executor for jobs
    tokens: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RunFinished:
    """Every job task of a run completed."""

    run_id: int


class Executor(Protocol):
    def start(self, run: Run, now: float) -> None: ...

    def stop(self, run: Run, now: float) -> None: ...

    def checkpoint(self, run: Run, now: float) -> None: ...

    def restore(self, run: Run, now: float) -> None: ...
