"""The task ledger: every task's record and every unit's state, and the one
place where they change.

A task is submitted (pending), placed and started (running), stopped
(pending again: preempted, requeued, lost) and ends (finished or failed;
or omitted: a member an elastic gang runs without, which never runs). A
unit (a gang, an affinity group, or one task) gets a run when it starts and
loses it when it stops. The indexes that the scheduler reads change with
these transitions and nowhere else, so they stay together:

- runs by id;
- running units in the order they started;
- units by application;
- units that ran bound near a site or to its data;
- tasks counted by status.

Code outside the simulation (executors, metrics, the rescheduler, the plan,
the controller, results) reads the ledger through ``LedgerView``. That view
has no transitions, and its mappings are read-only.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Container, Iterable, Iterator, Mapping

from suanli.executors.base import Run
from suanli.model.work import Component, World
from suanli.scheduling.business_layer import Unit
from suanli.scheduling.state import Placement

PENDING, RUNNING, FINISHED, FAILED, OMITTED = "pending", "running", "finished", "failed", "omitted"
STATUSES = (FINISHED, RUNNING, PENDING, FAILED, OMITTED)  # the order counts are shown in
_CLASSES = {(short, large): ("short" if short else "resident") + ("/large" if large else "/small")
            for short in (False, True) for large in (False, True)}  # one string each, not one per unit
NO_REASONS: Counter = Counter()  # shared by every record with none; records get a new Counter, never change it


@dataclass(slots=True)
class TaskRecord:
    task: str
    tenant: str
    component: Component | None  # None: a trace record that never became work
    unit: int  # -1 with no component
    status: str = PENDING
    submitted_at: float = 0.0
    first_placed_at: float | None = None
    ended_at: float | None = None
    moved_from: int | None = None  # the node a preempted service left; its next start is a move
    stopped_at: float | None = None
    last_move_at: float | None = None
    klass: str = ""  # the unit's workload class ("" for a record that never became work)
    job: bool = False  # a job (it finishes) rather than a service
    reasons: Counter = field(default_factory=lambda: NO_REASONS)


@dataclass(slots=True)
class UnitState:
    unit: Unit
    klass: str  # short/small, short/large, resident/small, resident/large
    remaining_work_s: float | None
    remaining_s: float | None
    run: Run | None = None


def unit_class(unit: Unit) -> str:
    """A unit's workload class: short when all its components are jobs, large when it has several tasks."""
    comps = unit.components
    jobs = sum(1 for c in comps if c.lifetime == "job")
    return _CLASSES[bool(jobs and jobs == len(comps)), len(unit.tasks) > 1]


class Ledger:
    """The records and their transitions (see the module's text)."""

    __slots__ = ("tasks", "units", "runs", "running", "running_seq", "by_app", "bound_to", "counts",
                 "_unit_ids", "_run_ids")

    def __init__(self) -> None:
        self.tasks: dict[str, TaskRecord] = {}
        self.units: dict[int, UnitState] = {}
        self.runs: dict[int, int] = {}  # run id -> unit id
        self.running: dict[int, None] = {}  # unit ids with a run, in start order
        self.running_seq: dict[int, int] = {}  # unit -> when it entered ``running`` (its order there)
        self.by_app: dict[str, list[int]] = {}  # application -> its units, in submission order
        self.bound_to: dict[str, set[int]] = {}  # site name -> units that ran bound near it or to its data
        self.counts: Counter = Counter()  # status -> tasks
        self._unit_ids = 0
        self._run_ids = 0

    # ------------------------------------------------------------ submit

    def _put(self, rec: TaskRecord) -> None:
        old = self.tasks.get(rec.task)
        if old is not None:  # a recreated application's task: its record is replaced
            self.counts[old.status] -= 1
        self.tasks[rec.task] = rec
        self.counts[rec.status] += 1

    def record_ended(self, task: str, tenant: str, status: str, t: float, job: bool = False) -> None:
        """A task that ended before it became work here: one a restored control
        plane had seen end, or a trace record that cannot become work."""
        self._put(TaskRecord(task, tenant, None, -1, status, t, ended_at=t, job=job))

    def submit(self, unit: Unit, t: float) -> int:
        """A unit and its tasks, pending; returns the unit's id (also its ``seq``)."""
        uid = unit.seq = self._unit_ids
        self._unit_ids += 1
        comps = unit.components
        klass = unit_class(unit)
        lead = next((c for c in comps if c.lifetime == "job"), None)
        self.units[uid] = UnitState(unit, klass, lead.work_s if lead else None, lead.duration_s if lead else None)
        self.by_app.setdefault(unit.app.name, []).append(uid)
        tenant = unit.tenant
        for task, comp in zip(unit.tasks, comps):
            self._put(TaskRecord(task, tenant, comp, uid, submitted_at=t, klass=klass, job=comp.lifetime == "job"))
        return uid

    # ------------------------------------------------------------ runs

    def next_run_id(self) -> int:
        self._run_ids += 1
        return self._run_ids

    def start(self, uid: int, run: Run) -> bool:
        """The unit runs ``run``; True when it was not running before (its standing is counted then)."""
        us = self.units[uid]
        us.run = run
        self.runs[run.run_id] = uid
        new = uid not in self.running
        if new:
            self.running_seq[uid] = run.run_id  # the running dict's order, for lookups that skip the scan
            for comp in us.unit.distinct_components():
                for name in (comp.near.site if comp.near is not None else None, comp.data_source, comp.data_sink):
                    if name is not None:
                        self.bound_to.setdefault(name, set()).add(uid)
        self.running[uid] = None
        return new

    def close(self, uid: int) -> tuple[Run, bool]:
        """The unit's run is off the books: (that run, whether the unit was running)."""
        us = self.units[uid]
        run = us.run
        self.runs.pop(run.run_id, None)
        was = self.running.pop(uid, 0) is None
        us.run = None
        return run, was

    # ------------------------------------------------------------ tasks

    def placed(self, rec: TaskRecord, t: float) -> None:
        """A task of a starting run is running."""
        self.counts[rec.status] -= 1
        self.counts[RUNNING] += 1
        rec.status = RUNNING
        if rec.first_placed_at is None:
            rec.first_placed_at = t
        rec.reasons = NO_REASONS

    def ended(self, rec: TaskRecord, status: str, t: float) -> None:
        """A task stopped (``status`` pending: to run again) or ended."""
        self.counts[rec.status] -= 1
        self.counts[status] += 1
        rec.status, rec.ended_at = status, t

    @staticmethod
    def waits(rec: TaskRecord, reasons: Counter) -> None:
        """A pending task's reasons for waiting, from its last try."""
        rec.reasons = reasons

    @staticmethod
    def stopped_to_move(rec: TaskRecord, node: int, t: float) -> None:
        """A service left ``node`` at ``t``: its next start is a move, priced from there."""
        rec.moved_from, rec.stopped_at = node, t

    @staticmethod
    def moved(rec: TaskRecord, t: float) -> None:
        rec.moved_from = rec.stopped_at = None
        rec.last_move_at = t

    # ------------------------------------------------------------ deletes

    def forget(self, app: str, waiting: Container[int], records: bool = True) -> None:
        """Drop what a deleted application's units hold once all of them have
        ended (none has a run, none is in ``waiting``): its records stay, with
        their times, status and class (``records`` false: they go too), but
        not its work."""
        uids = self.by_app.get(app, ())
        if any(self.units[uid].run is not None or uid in waiting for uid in uids):
            return
        for uid in self.by_app.pop(app, ()):
            for task in self.units.pop(uid).unit.tasks:
                if records:
                    self.tasks[task].component = None
                elif task in self.tasks:
                    self.counts[self.tasks.pop(task).status] -= 1


class LedgerView:
    """The ledger, read only, with where each running task is placed: what
    code outside the simulation may look at."""

    __slots__ = ("tasks", "units", "world", "_ledger", "_placements")

    def __init__(self, ledger: Ledger, placements: Mapping[str, Placement], world: World) -> None:
        self.tasks: Mapping[str, TaskRecord] = MappingProxyType(ledger.tasks)
        self.units: Mapping[int, UnitState] = MappingProxyType(ledger.units)
        self.world = world
        self._ledger = ledger
        self._placements = placements

    def node_of(self, task: str) -> int:
        """The node a placed task is on."""
        return self._placements[task].host.node

    def running(self) -> Iterator[int]:
        """The running units, in the order they started."""
        return iter(self._ledger.running)

    def in_start_order(self, uids: Iterable[int]) -> list[int]:
        """Those of ``uids`` that are running, in the order they started."""
        running, seq = self._ledger.running, self._ledger.running_seq
        return sorted((u for u in uids if u in running), key=seq.__getitem__)

    def bound_near(self, site: str) -> frozenset[int] | set[int]:
        """Units that ran bound near ``site`` or to its data (running or not)."""
        return self._ledger.bound_to.get(site, frozenset())

    def counts(self) -> dict[str, int]:
        """Tasks by status, every status named (kept by the transitions, not counted)."""
        c = self._ledger.counts
        return {s: c.get(s, 0) for s in STATUSES}

    def pending(self) -> Iterator[TaskRecord]:
        """The pending tasks' records, in submission order (a scan: for outputs)."""
        return (r for r in self._ledger.tasks.values() if r.status == PENDING)

    def __len__(self) -> int:
        return len(self._ledger.tasks)
