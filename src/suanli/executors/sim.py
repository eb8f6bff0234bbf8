"""The simulated executor: derives run times, and progress kept when a run stops.

A job with ``duration`` runs that long. A job with ``work`` (task-time at
parallelism 1) runs ``work / (p * efficiency ** log2(p))`` for parallelism p:
in series on little hardware, in parallel on much; a component's speed-up
model (``model/speedup.py``) says otherwise where it is given. When a run stops early,
the progress kept is what the last checkpoint saved (stateful jobs with
``checkpointEvery``), else nothing.
"""

from __future__ import annotations

import math

from suanli.engine.loop import EventLoop
from suanli.executors.base import Run, RunFinished
from suanli.model.speedup import advance, time_to_finish


def speed(parallelism: int, efficiency: float) -> float:
    """Task-seconds of work done per second by ``parallelism`` members."""
    p = max(parallelism, 1)
    return p * efficiency ** math.log2(p)


def runtime(run: Run) -> float | None:
    """Seconds until the run's jobs finish; None for services."""
    if run.remaining_s is not None:
        return max(run.remaining_s, 0.0)
    if run.remaining_work_s is not None:  # (after a resize's restart, when it made no progress)
        if run.scaling is not None:
            return run.paused_s + time_to_finish(run.scaling, run.remaining_work_s, run.parallelism, nodes_of(run),
                                                 run.fabric, run.placement)
        return run.paused_s + max(run.remaining_work_s, 0.0) / speed(run.parallelism, run.efficiency)
    return None


def nodes_of(run: Run) -> int:
    return len(run.placement) if run.placement else 1


def work_after(run: Run, seconds: float) -> float:
    """The work a run's jobs have left after ``seconds`` of progress at its allocation."""
    if run.scaling is not None:
        return advance(run.scaling, run.remaining_work_s, seconds, run.parallelism, nodes_of(run), run.fabric,
                       run.placement)
    return max(run.remaining_work_s - seconds * speed(run.parallelism, run.efficiency), 0.0)


class SimExecutor:
    holds_runs = False  # it keeps no run: the ledger may keep a plain one as columns and make it again

    def __init__(self, loop: EventLoop) -> None:
        self.loop = loop

    def start(self, run: Run, now: float) -> None:
        length = runtime(run)
        run.started_at = now
        if length is not None:
            run.finish_at = now + length
            self.loop.schedule(run.finish_at, RunFinished(run.run_id))

    def stop(self, run: Run, now: float) -> None:
        """Keep the progress the last checkpoint saved; the run's finish is taken back."""
        if run.finish_at is not None:
            self.loop.cancel(run.finish_at, RunFinished(run.run_id))
        keep_progress(run, now)

    def move(self, run: Run, task: str, now: float) -> None:
        """The run goes on; the simulation accounts for the state's transfer."""

    def release(self, run: Run, now: float) -> None:
        """Nothing runs outside the simulation."""

    def restart(self, run: Run, task: str, now: float) -> None:
        """Simulated tasks never exit on their own."""

    def node_down(self, node: int, now: float) -> None:
        """Stopping the units is the simulation's part; checkpoints are implied."""

    def forget(self, app: str) -> None:
        """Nothing is kept outside the simulation."""

    def sweep(self, tasks) -> None:
        """Nothing is kept outside the simulation."""

    def close(self) -> None:
        """Nothing to end."""


def keep_progress(run: Run, now: float) -> None:
    """What a run stopped at ``now`` keeps: the work its last checkpoint
    (``checkpointEvery``) saved, else nothing. Real executors keep the same
    account, so the twin's estimates of a moved job stay comparable."""
    elapsed = max(now - run.started_at - run.paused_s, 0.0)  # (a restart's pause does nothing)
    every = run.checkpoint_every_s
    if run.checkpointed_at is not None:  # a checkpoint taken as it stopped (a resize): all of it kept
        saved = max(run.checkpointed_at - run.started_at - run.paused_s, 0.0)
    else:
        saved = math.floor(elapsed / every) * every if every else 0.0
    if run.remaining_s is not None:
        run.remaining_s = max(run.remaining_s - saved, 0.0)
    if run.remaining_work_s is not None:
        run.remaining_work_s = work_after(run, saved)
    run.finish_at = None
