"""The executor interface and the events executors report.

The simulation (and the live control plane, which is the same code on a wall
clock) tells an executor to ``start``, ``stop`` and ``release`` the tasks of a
run; the executor reports back through events on the loop (``RunFinished``,
``TaskExited``, ``NodeLost``, ``NodeFound``, ``Note``), so the scheduler never knows whether
the work is simulated or real. Real executors post their events from their
own threads (``EventLoop.post``); the scheduler's thread handles them in
order, between instants.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Collection, NamedTuple, Protocol


@dataclass(slots=True)
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
    scaling: Any = None  # the lead component's speed-up model (None: the formula with ``efficiency``)
    placement: tuple[int, ...] | None = None  # members per node, where a model reads it
    fabric: str | None = None  # what its members share between nodes (its coupling)
    paused_s: float = 0.0  # seconds from its start with no progress (a resize's restart)
    checkpointed_at: float | None = None  # a checkpoint taken then (a resize): the progress kept to it
    finish_at: float | None = None  # set by the executor for jobs
    restarts: dict[str, int] | None = None  # task -> times a real executor restarted it in this run
    exited: set[str] | None = None  # job tasks whose process ended well


@dataclass(frozen=True, slots=True)
class RunFinished:
    """Every job task of a run completed."""

    run_id: int


@dataclass(frozen=True, slots=True)
class TaskExited:
    """A task's process ended on its own (not stopped by the executor)."""

    run_id: int
    task: str
    code: int  # exit status; -N: ended by signal N
    reason: str | None = None  # what ended it, where the executor knows more than the status (over its memory)


@dataclass(frozen=True, slots=True)
class Restart:
    """Start a task of a run again in place (a restart policy's backoff is up)."""

    run_id: int
    task: str


@dataclass(frozen=True, slots=True)
class NodeLost:
    """The machine behind a fleet node is gone (or was never there)."""

    node: str
    reason: str


@dataclass(frozen=True, slots=True)
class NodeFound:
    """The machine behind a fleet node is there again (or came late)."""

    node: str
    reason: str


@dataclass(frozen=True, slots=True)
class Note:
    """Something an executor did that the event log should say (a checkpoint taken)."""

    kind: str
    fields: tuple[tuple[str, object], ...]


@dataclass(frozen=True, slots=True)
class Call:
    """Work of an executor's own, done on the scheduler's thread between
    instants (what agents reported, say)."""

    fn: Callable[[], None]


class Attachment(NamedTuple):
    """What an executor is given, and all it may look at: the ledger's
    read-only view (which tasks a run has, their components and tenants),
    the event loop it reports to (``post``, thread-safe), and the world
    (its nodes, its folder)."""

    view: Any  # ledger.LedgerView
    loop: Any  # engine.loop.EventLoop
    world: Any  # model.work.World


class Executor(Protocol):
    """What runs the work. One that keeps nothing of the runs it is given
    between calls (the simulated one) says so with ``holds_runs = False``:
    the ledger may then keep a plain run as columns, and the next call about
    it gets a run made again from them (equal, not the same object)."""

    def start(self, run: Run, now: float) -> None:
        """Start every task of ``run`` where the scheduler placed it."""

    def stop(self, run: Run, now: float) -> None:
        """Stop the run early (it moves or is requeued): keep its progress and state."""

    def move(self, run: Run, task: str, now: float) -> None:
        """One task of a running run was placed elsewhere: stop it where it ran,
        keeping its state, and start it where it is placed now."""

    def release(self, run: Run, now: float) -> None:
        """The run is over (its jobs finished, or it was deleted): end what still runs."""

    def restart(self, run: Run, task: str, now: float) -> None:
        """Start one task of a running run again in place."""

    def node_down(self, node: int, now: float) -> None:
        """A node went down: what runs there is gone, without a last checkpoint."""

    def forget(self, app: str) -> None:
        """The application ``app`` is deleted and its tasks have ended (``release``):
        remove what is kept of them (their logs)."""

    def sweep(self, tasks: Collection[str]) -> None:
        """At a control plane's start: remove what is kept of tasks not among
        ``tasks`` (those of applications deleted while no executor ran)."""

    def close(self) -> None:
        """End everything this executor started."""
