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
    if run.remaining_work_s is not None:
        if run.paused_s:
            return run.paused_s + (runtime(_unpaused(run)) or 0.0)
        if run.scaling is not None:
            return time_to_finish(run.scaling, run.remaining_work_s, run.parallelism, nodes_of(run), run.fabric,
                                  run.placement)
        return max(run.remaining_work_s, 0.0) / speed(run.parallelism, run.efficiency)
    return None


def _unpaused(run: Run) -> Run:
    from dataclasses import replace

    return replace(run, paused_s=0.0)


def nodes_of(run: Run) -> int:
    return len(run.placement) if run.placement else 1


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
        """Keep the progress the last checkpoint saved (the finish event is then stale)."""
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
        if run.scaling is not None:
            run.remaining_work_s = advance(run.scaling, run.remaining_work_s, saved, run.parallelism, nodes_of(run),
                                           run.fabric, run.placement)
        else:
            done = saved * speed(run.parallelism, run.efficiency)
            run.remaining_work_s = max(run.remaining_work_s - done, 0.0)
    run.finish_at = None
