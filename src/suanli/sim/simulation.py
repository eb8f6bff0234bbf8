"""The digital twin: the static scheduler driven over time by an event loop.

``Simulation`` owns the clock, the pending queue and the record of every task.
Each instant's events are applied first (submissions, finished runs, deletes,
nodes and links going down or up); then one scheduling pass places what is
pending, in the business layer's order. Every transition is logged as an
event (``events``) in time order; the same scenario and seed give the same log.
"""

from __future__ import annotations

import gc
import logging
import time
import zlib
from bisect import bisect_left
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from suanli.engine.clock import Clock, VirtualClock
from suanli.engine.loop import EventLoop
from suanli.executors.base import Executor, NodeFound, NodeLost, Note, Restart, Run, RunFinished, TaskExited
from suanli.executors.sim import SimExecutor
from suanli.model.work import MAX_RESTARTS, Application, Component, World
from suanli.scheduling.business_layer import BusinessLayer, Unit, build_units, unit_shape
from suanli.scheduling.global_layer import GlobalLayer
from suanli.scheduling.policies import policy_for
from suanli.scheduling.reasons import Why
from suanli.output import resources_json
from suanli.phrases import why_json
from suanli.scheduling import nearby
from suanli.scheduling.filters import feasible, fits_row
from suanli.scheduling.request import compile_request
from suanli.scheduling.select import allocation, partial_allocation
from suanli.scheduling.state import PlacementState
from suanli.scheduling.table import Allocation
from suanli.spec.build import resources_of
from suanli.spec.schema import NodeDownEvent, NodeUpEvent, ReschedulingPolicy
from suanli.sim.events import EventLog
from suanli.sim.defrag import needs_whole_devices
from suanli.sim.hosts import HostKeeper
from suanli.sim.ledger import FAILED, FINISHED, OMITTED, PENDING, RUNNING, Ledger, LedgerView, TaskRecord
from suanli.sim.metrics import Recorder
from suanli.sim.mobility import mobility_events
from suanli.sim.moves import (HYSTERESIS, Held, Plan, apply_plan, bound_plan, claim_plan, defrag_plan, held_by,
                              preempt_plan, reclaim_plan, return_plans)
from suanli.sim.rescheduler import FAIR_MARGIN, broken_units, running_at, serves_again_s
from suanli.sim import waiting
from suanli.sim.returns import ReturnWatch
from suanli.sim.room import RoomWait
from suanli.sim.waiting import WaitQueue
from suanli.sim.workload import Arrival, draw, generated, openb_arrivals, swf_arrivals

log = logging.getLogger(__name__)



# A run allocates and drops many small objects (events, allocations, records)
# and makes few reference cycles. At the interpreter's default thresholds (a
# collection per 700 new container objects) collecting took 4.5% of a
# 100,000-pod replay's time; at these, 0.3%.
GC_THRESHOLDS = (20_000, 20, 10)
# What a run keeps (the world, and tasks by the million at a city's first
# instant) lives until its end; full collections scanning it again and again
# took about a tenth of a 300,000-car hour. It is set aside from collection
# (``gc.freeze``) when the run starts and after each instant that added this
# many task records; unreachable cycles among it wait for the run's end.
FREEZE_EVERY = 100_000


@contextmanager
def fewer_collections():
    """Collect garbage less often for the duration (never more often than
    before), what exists now set aside from collection until the end."""
    old = gc.get_threshold()
    gc.set_threshold(*(max(a, b) for a, b in zip(old, GC_THRESHOLDS)))
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*old)


class Disrupted:
    """The tasks stopped to move, until they run again, counted per component
    (disruption budgets read the counts at every voluntary move)."""

    __slots__ = ("_key", "counts")

    def __init__(self) -> None:
        self._key: dict[str, tuple[str, str]] = {}
        self.counts: Counter = Counter()  # (app, component) -> tasks of it moving

    def add(self, task: str, comp: Component) -> None:
        if task not in self._key:
            key = self._key[task] = (comp.app, comp.name)
            self.counts[key] += 1

    def discard(self, task: str) -> None:
        key = self._key.pop(task, None)
        if key is not None:
            self.counts[key] -= 1
            if not self.counts[key]:
                del self.counts[key]

    def __contains__(self, task: object) -> bool:
        return task in self._key

    def key(self, task: str) -> tuple[str, str]:
        """The (app, component) a moving task counts against."""
        return self._key[task]

    def __len__(self) -> int:
        return len(self._key)

    def __iter__(self):
        return iter(self._key)


@dataclass(frozen=True, slots=True)
class Submit:
    app: Application
    ended: Mapping[str, str] | None = None  # tasks that ended before (a restarted control plane) -> status


@dataclass(frozen=True, slots=True)
class Restore:
    apps: tuple[tuple[Application, Mapping[str, str]], ...]  # a restarted control plane's, with their ended tasks


@dataclass(frozen=True, slots=True)
class NextArrival:
    index: int  # which generator


@dataclass(frozen=True, slots=True)
class Leave:
    app: str  # a trace's application leaving at its recorded time


@dataclass(frozen=True, slots=True)
class ClaimEnded:
    claim: int


@dataclass(frozen=True, slots=True)
class MoveDone:
    task: str
    move: int  # which move of the simulation (a later stop makes it stale)


@dataclass(frozen=True, slots=True)
class Wake:
    """Nothing but a reason to look again (a hysteresis or an idle time is up)."""


@dataclass(frozen=True, slots=True)
class ScenarioEvent:
    spec: Any  # one of schema's event specs


DEFAULT_RTT_MS, DEFAULT_BANDWIDTH = 2.0, 100.0  # a handover of a device that had no link, unless given


@dataclass(frozen=True, slots=True)
class NextMove:
    index: int  # which mobility stream: its pending event is due


class Simulation:
    def __init__(self, world: World, *, seed: int | None = None, until: float | None = None,
                 clock: Clock | None = None, on_instant: Callable[[float], None] | None = None,
                 policy: str | None = None, events_to: Path | None = None,
                 executor: Callable[["Simulation"], Executor] | None = None) -> None:
        self.world = world
        if world.fleet.network.version:  # an earlier run changed it in place: start from the fleet's links
            world.fleet.network = world.fleet.fresh_network()
        scenario = world.scenario.spec if world.scenario is not None else None
        self.scenario = scenario
        self.seed = world.seed if seed is None else seed
        self.until = until if until is not None else (scenario.until if scenario and scenario.until else None)
        self.state = PlacementState(world)
        self.state.journal = {}  # every host added or removed becomes an event
        self.rng = np.random.default_rng(self.seed)
        self.global_layer = GlobalLayer(self.state, self.rng)
        self.business = BusinessLayer(self.state, self.global_layer, self.rng, policy=policy_for(world, policy))
        self.loop = EventLoop(clock or VirtualClock())
        self.executor: Executor = SimExecutor(self.loop)
        self.events = EventLog(events_to)  # in memory, or streamed to ``events_to``
        self._names: dict[int, tuple[str, str]] = {}  # node -> its name and its site's, for events
        self._stamp: tuple[float | None, float] = (None, 0.0)  # an instant's time and its rounding, for events
        self.ledger = Ledger()  # the records of tasks and units: they change through its transitions only
        self.keep_records = True  # a deleted application's task records are kept for the results (a server keeps none)
        self.view = LedgerView(self.ledger, self.state.placements, world)  # what code outside reads
        self._tasks, self._units = self.ledger.tasks, self.ledger.units  # read here, changed by the ledger
        self.pending = WaitQueue()  # unit ids, in submission order; some parked
        self._room = RoomWait()  # units parked until a row they could go to has room for them
        self._room_near: dict[int, set[int]] = {}  # near site -> units parked so
        self._room_site: dict[int, int] = {}  # unit parked so -> its near site
        self.offline: dict[int, tuple] = {}  # device site -> its links while it is offline
        self.down_links: set[tuple[int, int]] = set()  # site pairs whose links a linkDown took down
        self._mobility: list[Iterator] = []  # mobility streams (handovers, offline spells)
        self._next_mobility: list[tuple | None] = []
        self.recorder = Recorder(self.state, self._near_violations)
        self.near_running: dict[str, Component] = {}  # running tasks away from their near site
        self.returns = ReturnWatch()  # which of them a return plan looks at again
        self._beyond: set[str] = set()  # those of them now beyond their bound (kept as things change)
        self._streams: list[Iterator[Arrival]] = []  # generators and traces, read as they are due
        self._next: list[Arrival | None] = []
        self._levels: Counter = Counter()  # standings of the running units, counted
        self._own: dict[str, Counter] = {}  # per tenant, the priorities of its running units, counted
        self.claims: dict[int, Allocation] = {}  # deviceBusy: capacity taken outside the scheduler
        self.on_instant = on_instant  # called after each instant, e.g. for a progress bar
        self.on_pass: Callable[[float, int], None] | None = None  # told each scheduling pass's seconds and units
        # Units one pass tries at most (None: all that wait). A live control plane bounds it so
        # that an instant stays short: the rest are tried at the next instant, at once.
        self.max_pass: int | None = None
        self._frozen_at = -1  # in ``run``: task records when what it holds was last set aside from collection
        self._reclaimed_at: float | None = None
        self._defragged_at: float | None = None
        self.migrating: dict[str, tuple[int, float]] = {}  # tasks moving, until they serve again -> (move, when)
        self._moves = 0
        self.now = 0.0
        self._wakes: set[float] = set()
        self.dry = False  # a dry run looks: it asks for no instants
        self.policy = scenario.policy.rescheduling if scenario is not None else ReschedulingPolicy()
        self.rescheduling = self.policy if self.policy.enabled else None  # None: no rescheduler
        self.hosts = HostKeeper(self)
        self.disrupted = Disrupted()  # tasks stopped to move, until they run again
        self.lost_nodes: set[str] = set()  # nodes an executor reported gone (cordoned or drained ones too)
        if executor is not None:  # a real one: made last, it may look at all of the above
            self.executor = executor(self)

    # ------------------------------------------------------------ running

    def run(self) -> float:
        with fewer_collections():
            self._frozen_at = len(self._tasks)
            try:
                self.start()
                end = self.loop.run(self._handle, self.until)
                self.recorder.sample(end, keep=True)
            finally:
                self._frozen_at = -1
        return end

    def step(self, until: float) -> None:
        """Handle every instant due by ``until``, without waiting: a live
        control plane's turn, between the commands it takes."""
        self.loop.run_due(self._handle, until)

    def submit(self, app: Application, ended: Mapping[str, str] | None = None) -> None:
        """Submit ``app`` now. Units all of whose tasks are in ``ended`` (task ->
        finished or failed) are recorded so and not run again."""
        self.loop.schedule(self.loop.now(), Submit(app, ended))

    def restore(self, apps: list[tuple[Application, Mapping[str, str]]]) -> None:
        """Submit the applications a restarted control plane had (each with its
        ended tasks, as ``submit``), all in one instant and one scheduling pass;
        their tasks are not logged as submitted a second time."""
        self.loop.schedule(self.loop.now(), Restore(tuple(apps)))

    def apply(self, spec: Any) -> None:
        """A scenario event (one of the schema's event specs) happens now."""
        self.loop.schedule(self.loop.now(), ScenarioEvent(spec))

    def start(self) -> None:
        """Place the VCs' first hosts and queue the world's work (``run`` does this first)."""
        self.global_layer.place_initial()
        self.flush_hosts(0.0)
        entries = {a.app: a for a in self.scenario.arrivals} if self.scenario else {}
        self.apps_of_document: dict[str, list[str]] = {}  # documents with `each`: the applications made
        copies: dict[str, list[Application]] = {}
        for app in self.world.apps:  # an application with no arrival entry arrives at 0
            entry = entries.get(app.document)
            if app.template is not None:
                self.apps_of_document.setdefault(app.template, []).append(app.name)
                if entry is not None and (entry.share, entry.over, entry.stay) != (None, None, None):
                    copies.setdefault(app.template, []).append(app)
                    continue
            self.loop.schedule(entry.at if entry is not None else 0.0, Submit(app))
        for document, apps in copies.items():
            self._sampled_arrivals(entries[document], apps)
        if self.scenario is None:
            return
        horizon = self.until if self.until is not None else float("inf")
        for i, gen in enumerate(self.scenario.generators):
            self._add_stream(generated(gen, i, self.seed, horizon))
        for tr in self.scenario.traces:
            reader = openb_arrivals if tr.format == "openb" else swf_arrivals
            self._add_stream(reader(tr, self.world.base_dir, self.world.fleet))
        for ev in self.scenario.events:
            self.loop.schedule(ev.at, ScenarioEvent(ev))
        for i, mob in enumerate(self.scenario.mobility):
            self._mobility.append(mobility_events(self.world.fleet, mob, i, self.seed, horizon))
            self._next_mobility.append(None)
            self._queue_mobility(len(self._mobility) - 1)

    def _sampled_arrivals(self, entry: Any, apps: list[Application]) -> None:
        """The copies of a per-site application that arrive (``share`` of them,
        drawn), each at a time drawn uniformly over ``over`` from ``at`` (so a
        Poisson stream, given its count) and leaving after its ``stay``."""
        rng = np.random.default_rng([self.seed, zlib.crc32(entry.app.encode())])
        k = len(apps) if entry.share is None else int(round(entry.share * len(apps)))
        chosen = np.sort(rng.choice(len(apps), size=k, replace=False)) if k < len(apps) else np.arange(k)
        at = entry.at + (rng.uniform(0.0, entry.over, k) if entry.over else np.zeros(k))
        stay = [draw(entry.stay, rng) for _ in range(k)] if entry.stay is not None else None
        for j, i in enumerate(chosen.tolist()):
            app = apps[i]
            self.loop.schedule(float(at[j]), Submit(app))
            if stay is not None:
                self.loop.schedule(float(at[j] + stay[j]), Leave(app.name))

    def _queue_mobility(self, index: int) -> None:
        nxt = next(self._mobility[index], None)
        self._next_mobility[index] = nxt
        if nxt is not None:
            self.loop.schedule(nxt[0], NextMove(index))

    def _add_stream(self, stream: Iterator[Arrival]) -> None:
        self._streams.append(stream)
        self._next.append(None)
        self._queue_next(len(self._streams) - 1)

    def _queue_next(self, index: int, now: float | None = None) -> None:
        """Read stream ``index`` on: every arrival due by ``now`` arrives in this
        instant (one scheduling pass for all of them); the next is queued."""
        nxt = next(self._streams[index], None)
        while nxt is not None and now is not None and nxt.at <= now:
            self._arrive(now, nxt)
            nxt = next(self._streams[index], None)
        self._next[index] = nxt
        if nxt is not None:
            self.loop.schedule(nxt.at, NextArrival(index))

    def _arrive(self, t: float, arrival: Arrival) -> None:
        if arrival.app is None:  # a record that cannot become work: counted, as failed
            self.ledger.record_ended(arrival.skipped, arrival.tenant, FAILED, t)
            self.log(t, "submitted", task=arrival.skipped, tenant=arrival.tenant)
            self.log(t, "failed", task=arrival.skipped, reason=arrival.reason)
            return
        self._submit(t, arrival.app)
        if arrival.leave_at is not None:
            self.loop.schedule(arrival.leave_at, Leave(arrival.app.name))

    def _handle(self, t: float, batch: list[Any]) -> None:
        self.now = t
        for ev in batch:
            if isinstance(ev, Submit):
                self._submit(t, ev.app, ev.ended)
            elif isinstance(ev, Restore):
                for app, ended in ev.apps:
                    self._submit(t, app, ended, restored=True)
            elif isinstance(ev, NextArrival):
                self._arrive(t, self._next[ev.index])
                self._queue_next(ev.index, t)
            elif isinstance(ev, Leave):
                self._delete(t, ev.app, "left")
            elif isinstance(ev, RunFinished):
                self._finished(t, ev.run_id)
            elif isinstance(ev, ScenarioEvent):
                self._scenario_event(t, ev.spec)
            elif isinstance(ev, NextMove):
                self._scenario_event(t, self._next_mobility[ev.index][1])
                self._queue_mobility(ev.index)
            elif isinstance(ev, ClaimEnded):
                self._claim_ended(t, ev.claim)
            elif isinstance(ev, MoveDone):
                self._move_done(t, ev)
            elif isinstance(ev, Wake):
                pass  # the instant's pass is the point
            elif isinstance(ev, TaskExited):
                self._exited(t, ev)
            elif isinstance(ev, Restart):
                self._restart(t, ev)
            elif isinstance(ev, NodeLost):
                self._node_lost(t, ev)
            elif isinstance(ev, NodeFound):
                self._node_found(t, ev)
            elif isinstance(ev, Note):
                self.log(t, ev.kind, **dict(ev.fields))
        self.hosts.before(t)
        self._schedule(t)
        if self.rescheduling is not None:
            self._returns(t)
        self.hosts.after(t)
        self.flush_hosts(t)
        self.recorder.sample(t)
        if self._frozen_at >= 0 and len(self._tasks) >= self._frozen_at + FREEZE_EVERY:
            gc.freeze()  # what this instant added lives on (see ``FREEZE_EVERY``)
            self._frozen_at = len(self._tasks)
        if self.on_instant is not None:
            self.on_instant(t)

    # ------------------------------------------------------------ arrivals and ends

    def _submit(self, t: float, app: Application, ended: Mapping[str, str] | None = None,
                restored: bool = False) -> None:
        try:
            units = build_units((app,))
        except Exception as exc:  # noqa: BLE001 - an application the model cannot hold fails alone
            self.log(t, "failed", app=app.name, tenant=app.tenant, reason=cannot_schedule(exc))
            log.warning("application %s of tenant %s: %s", app.name, app.tenant, cannot_schedule(exc))
            return
        ledger = self.ledger
        for unit in units:
            if ended and all(task in ended for task in unit.tasks):
                for task, comp in zip(unit.tasks, unit.components):
                    ledger.record_ended(task, app.tenant, ended[task], t, comp.lifetime == "job")
                continue
            uid = ledger.submit(unit, t)
            if not restored:
                for task in unit.tasks:
                    self.log(t, "submitted", task=task, tenant=app.tenant)
            self.pending.add(uid)

    def _current(self, run_id: int) -> int | None:
        """The unit whose run ``run_id`` is; None when that run has stopped (an
        executor's report about it is stale)."""
        uid = self.ledger.unit_of_run(run_id)
        if uid is None:
            return None
        run = self._units[uid].run
        return uid if run is not None and run.run_id == run_id else None

    def _finished(self, t: float, run_id: int) -> None:
        uid = self._current(run_id)
        if uid is None:
            return  # the run was stopped earlier: a stale finish
        us = self._units[uid]
        jobs = [task for task in us.run.tasks if self._tasks[task].component.lifetime == "job"]
        for task in jobs:
            self._end_task(t, task, FINISHED, "finished")
        if len(jobs) == len(us.run.tasks):
            self._close_run(uid)
        else:
            us.run.remaining_s = us.run.remaining_work_s = None  # the services carry on

    def _end_task(self, t: float, task: str, status: str, kind: str, **extra: Any) -> None:
        rec = self._tasks[task]
        p = self.state.placements.get(task)
        where = {}
        if p is not None:
            self.state.remove_placement(task)
            self.business.release(rec.component, p.host.node)
            where = self.where(p.host.node)
        self.near_running.pop(task, None)
        self.returns.leave(task)
        self._beyond.discard(task)
        self.migrating.pop(task, None)
        self.disrupted.discard(task)
        self.ledger.ended(rec, status, t)
        self.log(t, kind, task=task, **where, **extra)

    def _close_run(self, uid: int, stop_at: float | None = None) -> Run:
        """Take a unit's run off the books. With ``stop_at`` the executor stops it
        early and the progress it kept is what the unit's next run starts from."""
        us = self._units[uid]
        run = us.run
        if stop_at is not None:
            self.executor.stop(run, stop_at)
            us.remaining_s, us.remaining_work_s = run.remaining_s, run.remaining_work_s
        else:
            self.executor.release(run, self.now)
        if self.ledger.close(uid)[1]:
            self._count_running(us.unit, -1)
        return run

    def _count_running(self, unit: Unit, step: int) -> None:
        """Keep the counts of running standings and priorities (``_preempt`` reads their least).
        Work that starts below what is running, or of another tenant, may be
        a victim for units parked for room: they look again."""
        standing, priority, tenant = self.business.standing(unit), unit.priority, unit.tenant
        levels, own = self._levels, self._own.get(tenant)
        if step > 0 and len(self._room):
            if not own or priority < min(own) or not levels or standing < min(levels):
                self._unpark(self._room.items())
        if own is None:
            own = self._own[tenant] = Counter()
        for counts, key in ((levels, standing), (own, priority)):
            n = counts[key] + step
            if n > 0:
                counts[key] = n
            else:
                counts.pop(key, None)
        if not own:
            del self._own[tenant]

    def _stop_unit(self, t: float, uid: int, lost_node: int | None) -> None:
        """Stop a unit's run (a member was lost) and queue it again, whole."""
        if self._units[uid].run is None:
            return
        run = self._close_run(uid, stop_at=t)
        for task in run.tasks:
            p = self.state.placements.get(task)
            kind = "lost" if p is not None and p.host.node == lost_node else "requeued"
            self._end_task(t, task, PENDING, kind)
        self.pending.add(uid)

    # ------------------------------------------------------------ real processes

    def _exited(self, t: float, ev: TaskExited) -> None:
        """A task's process ended by itself. A job that ended well is done (the
        run finishes when all its jobs are); otherwise the component's restart
        policy may start it again in place, after a backoff; else the run ends:
        a service that exited 0 finished, anything else failed."""
        uid = self._current(ev.run_id)
        if uid is None:
            return  # a run stopped meanwhile
        run = self._units[uid].run
        rec = self._tasks[ev.task]
        comp = rec.component
        self.log(t, "exited", task=ev.task, code=ev.code, **self.where(self.state.placements[ev.task].host.node))
        if ev.code == 0 and rec.job:
            run.exited = (run.exited or set()) | {ev.task}
            if all(task in run.exited for task in run.tasks if self._tasks[task].job):
                self._finished(t, ev.run_id)
            return
        policy = comp.run.restart if comp.run is not None else ("always" if not rec.job else "never")
        limit = comp.run.max_restarts if comp.run is not None else MAX_RESTARTS
        done = (run.restarts or {}).get(ev.task, 0)
        if (policy == "always" or (policy == "onFailure" and ev.code != 0)) and done < limit:
            run.restarts = {**(run.restarts or {}), ev.task: done + 1}
            backoff = min(2.0 ** done, 30.0) * self._speed()
            self.log(t, "restarting", task=ev.task, attempt=done + 1, after_s=round(backoff, 3))
            self.loop.schedule(t + backoff, Restart(ev.run_id, ev.task))
            return
        status = FINISHED if ev.code == 0 else FAILED
        why = f"exit status {ev.code}" + (f" after {done} restarts" if done else "")
        for task in self._close_run(uid).tasks:
            if self._tasks[task].status == RUNNING:
                self._end_task(t, task, status if task == ev.task else FAILED, status if task == ev.task else "failed",
                               reason=why if task == ev.task else f"{ev.task} ended: {why}")

    def _speed(self) -> float:
        """Scheduler seconds per real second (a sped-up wall clock)."""
        return getattr(self.loop.clock, "speed", 1.0)

    def _restart(self, t: float, ev: Restart) -> None:
        uid = self._current(ev.run_id)
        if uid is None:
            return
        self.executor.restart(self._units[uid].run, ev.task, t)

    def _node_lost(self, t: float, ev: NodeLost) -> None:
        """The executor says a node's machine is gone: as ``nodeDown``, with its reason."""
        if ev.node in self.lost_nodes:
            return
        self.lost_nodes.add(ev.node)
        self.log(t, "nodeLost", node=ev.node, reason=ev.reason)
        self._scenario_event(t, NodeDownEvent.model_construct(at=t, kind="nodeDown", node=ev.node))

    def _node_found(self, t: float, ev: NodeFound) -> None:
        """A lost node's machine is back: as ``nodeUp``, with its reason."""
        if ev.node not in self.lost_nodes:
            return
        self.lost_nodes.discard(ev.node)
        self.log(t, "nodeFound", node=ev.node, reason=ev.reason)
        self._scenario_event(t, NodeUpEvent.model_construct(at=t, kind="nodeUp", node=ev.node))

    # ------------------------------------------------------------ scenario events

    def _scenario_event(self, t: float, ev: Any) -> None:
        fleet = self.world.fleet
        if ev.kind == "delete":  # every application made from the document
            for name in self.apps_of_document.get(ev.app, (ev.app,)):
                self._delete(t, name, "deleted")
        elif ev.kind in ("nodeDown", "nodeUp", "nodeDrain", "nodeCordon"):
            node = fleet.node_by_name(ev.node)
            self.log(t, ev.kind, node=ev.node)
            tasks = self.state.set_node_enabled(node, ev.kind == "nodeUp")
            if ev.kind == "nodeUp":
                self.hosts.node_back(node)
                self.pending.wake(int(fleet.node_site[node]))
                return
            if ev.kind == "nodeCordon":
                return  # what runs there stays, hosts included
            if ev.kind == "nodeDown":
                self.executor.node_down(node, t)
                for uid in dict.fromkeys(self._tasks[task].unit for task in tasks):
                    self._stop_unit(t, uid, node)
            else:
                self.hosts.draining[node] = None  # its work moves off in waves (hosts.before)
            self.hosts.node_out(node)
        elif ev.kind in ("linkDown", "linkUp"):
            a, b = (fleet.site_index[s] for s in ev.between)
            (fleet.network.link_down if ev.kind == "linkDown" else fleet.network.link_up)(a, b)  # in place
            (self.down_links.add if ev.kind == "linkDown" else self.down_links.discard)((min(a, b), max(a, b)))
            self.log(t, ev.kind, between=list(ev.between))
            self._network_changed(t)
        elif ev.kind == "handover":
            site = fleet.site_index[ev.site]
            # its links now, or those it had when it went offline
            _, rtt, bw = self.offline[site] if site in self.offline else fleet.network.links_of(site)[:3]
            r = ev.rtt_ms if ev.rtt_ms is not None else (float(rtt[0]) if rtt.size else DEFAULT_RTT_MS)
            w = ev.bandwidth if ev.bandwidth is not None else (float(bw[0]) if bw.size else DEFAULT_BANDWIDTH)
            to = [fleet.site_index[x] for x in ev.to]
            if site in self.offline:  # it comes back where it moved to
                self.offline[site] = (np.array(to), np.full(len(to), r), np.full(len(to), w))
            else:
                fleet.network.attach(site, to, [r] * len(to), [w] * len(to))
            self.log(t, "handover", site=ev.site, to=list(ev.to))
            # a device with one link carries no path between other sites: only work there or bound to it
            self._network_changed(t, {site} if rtt.size <= 1 and len(to) <= 1 else None)
        elif ev.kind in ("deviceOffline", "deviceOnline"):
            self._device_presence(t, ev)
        elif ev.kind == "deviceBusy":
            self._device_busy(t, ev)

    def _network_changed(self, t: float, sites: set[int] | None = None) -> None:
        """Paths changed (at ``sites`` only, when given): requests compiled
        against the old ones go, and running work whose bound broke moves, or waits."""
        private = self.world.fleet.site_table.private
        own = sites is not None and private is not None and all(private[s] for s in sites)
        name = self.world.fleet.site_table.names.name
        self.business.forget_requests({name(s) for s in sites} if own else None)
        self.global_layer.forget_requests()
        self.state.forget_network(sites)
        if sites is None:
            self.pending.wake_all()  # paths changed anywhere: what waited on a device may find one
        checked = self._recheck_near(sites)
        if not own:
            self.returns.wake_all()  # a site others may move to: every answer may change
            self._unpark(self._room.items())
        else:  # another device's own site: only the work there or bound to it
            self.returns.wake(checked)
            self._unpark([uid for s in sites for uid in self._room_near.get(s, ())])
        if self.rescheduling is not None:
            for uid, reason in broken_units(self, sites).items():
                apply_plan(self, t, bound_plan(uid, reason))

    def _device_presence(self, t: float, ev: Any) -> None:
        """A device goes offline (its nodes go down, its tasks there are lost
        and wait again by their restart policy, and it is unreachable) or
        comes back (its links and nodes return)."""
        fleet = self.world.fleet
        site = fleet.site_index[ev.site]
        going = ev.kind == "deviceOffline"
        if going == (site in self.offline):
            return  # already so
        nodes = fleet.nodes_of(site).tolist()
        self.log(t, ev.kind, site=ev.site)
        network = fleet.network
        links = network.links_of(site)[:3]
        if going:
            self.offline[site] = links
            _cut_off(network, site, links)
            for node in nodes:
                tasks = self.state.set_node_enabled(node, False)
                self.executor.node_down(node, t)
                for uid in dict.fromkeys(self._tasks[task].unit for task in tasks):
                    self._stop_unit(t, uid, node)
                self.hosts.node_out(node)
        else:
            links = self.offline.pop(site)
            back = network.leaf[site] and len(links[0]) == 1 and int(network.parent[site]) == int(links[0][0]) \
                and network.links_of(site)[1][0] == links[1][0] and network.links_of(site)[2][0] == links[2][0]
            if back:  # the link it had, up again
                network.link_up(site, int(links[0][0]))
            else:  # it moved while away, or had several links
                network.attach(site, *links)
            for node in nodes:
                self.state.set_node_enabled(node, True)
                self.hosts.node_back(node)
            self.pending.wake(site)
        self._network_changed(t, {site} if len(links[0]) <= 1 else None)

    # ------------------------------------------------------------ the fleet changed while running

    def grow_fleet(self, t: float, fleet: Any, paths: bool) -> None:
        """Run on ``fleet`` from now: the fleet this one grew (``Fleet(base=the
        current one)``, its nodes numbered as before), with nodes, sites or
        links added, or facts of sites changed. ``paths``: sites or links
        changed, so the network is made again (links taken down and devices
        offline stay so); otherwise the current network goes on as it is."""
        old = self.world.fleet
        if paths:
            network = fleet.network
            for a, b in self.down_links:
                network.link_down(a, b)
            for site, links in self.offline.items():
                _cut_off(network, site, links)
        else:
            fleet.network = old.network
        self.state.adopt(fleet)
        self.recorder.grow(fleet)
        self.business.grow()
        added = getattr(self.executor, "nodes_added", None)  # a real executor finds what stands for them
        if added is not None and fleet.n_nodes > old.n_nodes:
            added(range(old.n_nodes, fleet.n_nodes))
        self.global_layer.forget_requests()
        if paths:
            self._network_changed(t)
        else:
            self.state.forget_network(None)
        self.pending.wake_all()  # what waited may fit on a new node
        self._unpark(self._room.items())
        self.wake_at(t)

    def set_tenancy(self, t: float, tenants: Mapping[str, Any], vcs: Mapping[str, Any]) -> list[str]:
        """Tenants and virtual clusters as given, from now (a live server's,
        changed through its API). A tenant's weight, quota and allowed sites
        hold for placements from now on: work above a lowered quota keeps
        running, and is reclaimed only as the rescheduling policy reclaims.
        A removed tenant or VC must have no work left (its applications were
        deleted first). A VC's groups take their new bounds: hosts are placed
        up to a fixed count or a minimum, idle ones removed down to it or to
        a maximum; a group removed or given another shape loses its idle
        hosts. Returns what could not be done (hosts that could not be placed)."""
        state, world, out = self.state, self.world, []
        for name in [n for n in world.vcs if n not in vcs]:
            self._drop_vc(t, name)
        for name in [n for n in world.tenants if n not in tenants]:
            del world.tenants[name]
            i = state.tenant_index[name]
            state.quota_table[i] = 0  # a row stays (its number is in use); it takes nothing more
        for tenant in tenants.values():
            if world.tenants.get(tenant.name) != tenant:
                state.set_tenant(tenant)
        for vc in vcs.values():
            old = world.vcs.get(vc.name)
            if old == vc:
                continue
            vcs_state = state.vcs.get(vc.name) or state.add_vc(vc)
            world.vcs[vc.name] = vc
            if vc.default:
                continue
            for h in list(vcs_state.hosts):  # a group gone or reshaped: its hosts are no longer the VC's kind
                if _shape(vc, h.group) is None or _shape(old, h.group) != _shape(vc, h.group):
                    self._remove_idle(t, vcs_state, h)
            for g in vc.host_groups:
                mine = [h for h in vcs_state.hosts if h.group == g.name]
                excess = len(mine) - g.limit  # idle hosts go, the newest first; busy ones stay
                for h in reversed(mine):
                    if excess > 0 and self._remove_idle(t, vcs_state, h):
                        excess -= 1
                short = g.initial - len([h for h in vcs_state.hosts if h.group == g.name])
                if short > 0:
                    self.global_layer.forget_requests()
                    got = self.global_layer.place_hosts(vc, g, short)
                    if not isinstance(got, list):
                        out.append(f"virtual cluster {vc.name}: {short} hosts of group {g.name} could not be placed")
        self.global_layer.forget_requests()
        self.business.forget_requests()
        self.flush_hosts(t)
        self.pending.wake_all()
        self._unpark(self._room.items())
        self.wake_at(t)
        return out

    def _remove_idle(self, t: float, vcs_state: Any, host: Any) -> bool:
        """Remove the host if nothing runs on it; whether it was."""
        if host in vcs_state.hosts and _host_idle(vcs_state, host):
            self.flush_hosts(t)
            self.state.remove_host(vcs_state, host)
            self.flush_hosts(t, reason="its virtual cluster changed")
            return True
        return False

    def _drop_vc(self, t: float, name: str) -> None:
        vcs_state = self.state.vcs.get(name)
        if vcs_state is not None and not vcs_state.default:
            for h in list(vcs_state.hosts):
                self._remove_idle(t, vcs_state, h)
            if not vcs_state.hosts:
                del self.state.vcs[name]
        elif vcs_state is not None:
            del self.state.vcs[name]
        self.world.vcs.pop(name, None)

    def retire_node(self, t: float, node: int, why: str) -> None:
        """A node leaves the fleet for good: its work stops as on a failed node
        (and waits again by its restart policy), its explicit VCs' hosts move,
        and it is never a candidate again."""
        fleet = self.world.fleet
        if fleet.retired[node]:
            return
        name = fleet.node_name(node)
        self.log(t, "nodeRemoved", node=name, reason=why)
        tasks = self.state.set_node_enabled(node, False)
        self.executor.node_down(node, t)
        for uid in dict.fromkeys(self._tasks[task].unit for task in tasks):
            self._stop_unit(t, uid, node)
        self.hosts.node_out(node)
        self.hosts.draining.pop(node, None)
        self.lost_nodes.discard(name)
        self.state.retire_node(node)
        self.recorder.grow(fleet)
        self.wake_at(t)

    def _device_busy(self, t: float, ev: Any) -> None:
        """Local work outside the scheduler claims capacity on a node (the site's
        node with the most room when a site is named). The claim comes first:
        when what is free is short, the work on that node that stands in the
        way moves off, cheapest first (lowest standing and priority, least state, fewest
        tasks), until the claim fits. What cannot be freed (capacity held by
        an explicit VC's host) is reported as ``short``."""
        fleet, nodes = self.world.fleet, self.state.nodes
        req = compile_request(fleet, resources_of(ev.resources))
        if ev.node is not None:
            rows = np.array([fleet.node_by_name(ev.node)])
        else:
            rows = np.flatnonzero(nodes.view("site") == fleet.site_index[ev.site])
        fits = rows[feasible(nodes, req)[rows]]
        row = int(fits[0]) if fits.size else int(rows[np.argmax(nodes.free[0, rows])])
        if not fits.size and (room := claim_plan(self, req, row)) is not None:
            apply_plan(self, t, room)
        full = fits_row(nodes, req, row)
        a = allocation(nodes, req, row) if full else partial_allocation(nodes, req, row)
        nodes.take(a)
        claim = len(self.claims)
        self.claims[claim] = a
        short = {k: int(v) for k, v in zip(fleet.resource_keys, req.vec - a.vec) if v > 0}
        self.log(t, "deviceBusy", **self.where(row), claimed=resources_json(self.state, a.vec),
                  **({"short": short} if short else {}))
        if ev.duration is not None:
            self.loop.schedule(t + ev.duration, ClaimEnded(claim))

    def _claim_ended(self, t: float, claim: int) -> None:
        a = self.claims.pop(claim)
        self.state.nodes.give(a)
        self.log(t, "deviceFree", **self.where(a.row), freed=resources_json(self.state, a.vec))

    def _delete(self, t: float, app: str, why: str) -> None:
        """The application is deleted (or its trace says it left): its running
        tasks stop, finished; those never placed fail."""
        self.log(t, why, app=app)
        for uid in self.ledger.by_app.get(app, ()):
            us = self._units[uid]
            if us.run is not None:
                for task in self._close_run(uid).tasks:
                    self._end_task(t, task, FINISHED, "finished", reason=why)
            if uid in self.pending:
                self.pending.discard(uid)
                self._unpark((uid,))  # no longer watching rows for room
                for task in us.unit.tasks:
                    rec = self._tasks[task]
                    if rec.status != PENDING:
                        continue
                    if rec.first_placed_at is None:
                        self._end_task(t, task, FAILED, "failed", reason=f"{why} before it was placed")
                    else:  # it ran, was stopped and waited to run again: it ends there
                        self._end_task(t, task, FINISHED, "finished", reason=f"{why} while waiting to run again")
        self._forget(app)
        if not self.keep_records:  # a server's: its store keeps the history; what the executor kept goes
            self.executor.forget(app)

    def _forget(self, app: str) -> None:
        """Drop what a deleted application's units held once all of them have ended:
        its records stay, with their times, status and class, but not its work
        (a long trace would otherwise keep every pod it ever replayed)."""
        self.ledger.forget(app, self.pending, self.keep_records)

    # ------------------------------------------------------------ scheduling

    def _schedule(self, t: float) -> None:
        risen: dict = {}
        if len(self._room):
            risen, fresh = self._room.due()
            self._unpark(fresh)
        ready = self._bounded(t, self.pending.ready())
        if not ready and not risen:
            return
        started = time.perf_counter() if self.on_pass is not None else 0.0
        tried, failed, broken = self._pass(ready, risen)  # tried: in queue order
        if self.on_pass is not None and tried:
            self.on_pass(time.perf_counter() - started, len(tried))
        for unit, exc in broken:
            self._refuse(t, unit.app.name, exc)
        if broken:
            failed = [(u, reasons) for u, reasons in failed if u.seq in self.pending]
        still = {u.seq: reasons for u, reasons in failed}
        for uid in tried:
            if uid not in self.pending:
                continue  # refused above
            if uid in still:
                reasons = still[uid]
                if not self.pending.parked(uid):  # (a parked unit reached for room that did not fit stays so)
                    offline = self._offline_near(self._units[uid].unit)
                    if offline is not None:  # nothing but the device's return can change this
                        self.pending.park(uid, offline[0])
                        reasons = Counter({Why("offline", site=self.world.fleet.sites[s].name): 1
                                           for s in dict.fromkeys(offline)})
                    else:
                        self._park_for_room(uid)
                for task in self._units[uid].unit.tasks:
                    self.ledger.waits(self._tasks[task], reasons)
                continue
            self._unpark((uid,), wake=False)
            self.pending.discard(uid)
            self.started(t, uid)
        if risen:
            self._room.settle(risen)
        units = [u for u, _ in failed if not self.pending.parked(u.seq)]
        if units and (self._preempt(t, units) or self._reclaim(t, units) or self._defragment(t, units)):
            self._schedule(t)  # the evicted or moved work may fit elsewhere now

    def _pass(self, ready: list[int], risen: dict) -> tuple[list[int], list, list]:
        """Try the ready units, and the parked ones that rows gained room for,
        as one pass that tried every waiting unit would: (units tried, in
        order; those that failed, with reasons; those whose placement raised).

        With one tenant waiting the pass's order is fixed (standing, then
        priority, then arrival), so the parked units are merged into it
        (``RoomWait.walk``) and the ready ones are placed in runs between
        them. With several, the parked units a risen row could hold are
        made ready and the pass runs as usual."""
        units = [self._units[uid].unit for uid in ready]
        tenants = {u.tenant for u in units} | set(self._room.tenants)
        if risen and len(tenants) > 1:
            self._unpark(self._room.fitting(risen))
            ready = self._bounded(self.now, self.pending.ready())
            units = [self._units[uid].unit for uid in ready]
            risen = {}
        broken: list = []
        if not risen:
            return ready, self.business.run(units, record=False, broken=broken), broken
        keyed = sorted(((self._pass_key(u), u) for u in units), key=lambda ku: ku[0])
        keys, units = [k for k, _ in keyed], [u for _, u in keyed]
        walk = self._room.walk(risen)
        tried, failed, i = [], [], 0
        parked = self.pending.parked

        def run(batch: list) -> None:
            tried.extend(u.seq for u in batch)
            failed.extend(self.business.run(batch, record=False, broken=broken))

        while (key := walk.peek()) is not None:
            j = bisect_left(keys, key, i)
            if j > i:
                run(units[i:j])
                i = j
            uid = walk.next(parked)
            if uid is not None:
                run([self._units[uid].unit])
        if i < len(units):
            run(units[i:])
        return self.pending.in_order(tried), failed, broken

    def _bounded(self, t: float, ready: list[int]) -> list[int]:
        """The first ``max_pass`` of the ready units (in the queue's order); when
        some are left, an instant comes again at once for them."""
        if self.max_pass is None or len(ready) <= self.max_pass:
            return ready
        self.loop.schedule(t, Wake())  # (on a wall clock: the next turn, the commands that came taken first)
        return ready[:self.max_pass]

    def _pass_key(self, unit: Unit) -> tuple:
        """A unit's place in a pass of one tenant's units (``BusinessLayer.run``'s order)."""
        return (-self.business.standing(unit), -unit.priority, unit.seq)

    def _park_for_room(self, uid: int) -> None:
        """Park a unit that did not fit when only room on the rows within its
        bound can change that: one task bound near a site, its neighbourhood
        few rows of a default VC, no quota, anti-affinity or whole devices,
        and nothing running that it could evict or reclaim from (the
        preemption and fair-share passes would find no victim). It waits
        until one of those rows changes, paths near its site change, or such
        work starts (``_count_running``)."""
        unit = self._units[uid].unit
        if not waiting.ENABLED or len(unit.tasks) != 1 or needs_whole_devices(unit):
            return
        comp = unit.components[0]
        tenant = self.world.tenants.get(unit.tenant)
        vcs = self.state.vcs[unit.app.vc]
        if (comp.near is None or comp.near.max_rtt_ms is None or comp.anti_affinity is not None
                or tenant is None or tenant.quota or not vcs.default or not self._outranks_nothing(unit)):
            return
        req = self.business.request(comp, unit.tenant, unit.state_site(0))
        rows = nearby.candidate_rows(vcs.table, req)
        if rows is None:
            return
        rows = rows[nearby.static_ok(vcs.table, req, rows, within=True)]  # the rows that could ever hold it
        self.pending.park(uid, ("room", uid))
        self._room.add(uid, vcs.table, rows, req, self._pass_key(unit), unit.tenant)
        site = self.world.fleet.site_index[comp.near.site]
        self._room_near.setdefault(site, set()).add(uid)
        self._room_site[uid] = site

    def _outranks_nothing(self, unit: Unit) -> bool:
        """Nothing running is of lower standing, or of lower priority in its
        tenant, and no other tenant runs work (``_preempt`` and ``_reclaim``
        would not look for victims for it)."""
        if self.rescheduling is not None and any(t != unit.tenant for t in self._own):
            return False
        if self._levels and self.business.standing(unit) > min(self._levels):
            return False
        own = self._own.get(unit.tenant)
        return not own or unit.priority <= min(own)

    def _unpark(self, uids, wake: bool = True) -> None:
        """Parked units (for room) that may fit now: back to the queue's pass
        (one that left the queue meanwhile, deleted or refused, is only forgotten;
        ``wake=False``: one that was placed)."""
        for uid in list(uids):
            if uid not in self._room:
                continue
            self._room.discard(uid)
            site = self._room_site.pop(uid)
            near = self._room_near.get(site)
            if near is not None:
                near.discard(uid)
                if not near:
                    del self._room_near[site]
            if wake:
                self.pending.wake(("room", uid))

    def _offline_near(self, unit: Unit) -> list[int] | None:
        """The offline devices the unit's members are bound near, when every
        member is bound near one whose nodes are all down: no candidate
        anywhere, no victim to evict, until that device comes back (a unit
        parked under the first of them; the others are checked when it wakes)."""
        if not self.offline or not waiting.ENABLED:
            return None
        fleet, enabled = self.world.fleet, self.state.nodes.enabled
        sites = []
        for comp in unit.components:
            s = fleet.site_index.get(comp.near.site, -1) if comp.near is not None else -1
            if s not in self.offline or enabled[fleet.nodes_of(s)].any():
                return None
            sites.append(s)
        return sites

    def _refuse(self, t: float, app: str, exc: Exception) -> None:
        """An application whose placement raised (a request the scheduler's
        arithmetic cannot hold): its tasks fail with the reason, any of its
        running work stops; every other application goes on."""
        why = cannot_schedule(exc)
        uids = self.ledger.by_app.get(app, ())
        tenant = self._units[uids[0]].unit.tenant if uids else "?"
        log.warning("application %s of tenant %s: %s", app, tenant, why)
        for uid in uids:
            us = self._units[uid]
            if us.run is not None:
                for task in self._close_run(uid).tasks:
                    self._end_task(t, task, FAILED, "failed", reason=why)
            self.pending.discard(uid)
            self._unpark((uid,))
            for task in us.unit.tasks:
                if self._tasks[task].status == PENDING:
                    self._end_task(t, task, FAILED, "failed", reason=why)
        self._forget(app)

    # ------------------------------------------------------------ preemption

    def _preempt(self, t: float, failed: list[Unit]) -> bool:
        """Evict the cheapest preemptible units a waiting unit outranks that
        make it fit, highest standing first: its own tenant's work of lower
        priority, other tenants' work of lower standing (``outranks``). Each
        eviction strictly lowers (standing, priority), so passes end."""
        evicted = False
        standing = self.business.standing
        if not self._levels:
            return False
        lowest = min(self._levels)  # the lowest standing running (a few distinct values)
        own = {tenant: min(p) for tenant, p in self._own.items()}  # per tenant, its lowest priority running
        if lowest is None:
            return False
        hopeless: set[tuple] = set()  # shapes that found no plan: the same shape will not either
        for unit in sorted(failed, key=lambda u: (-standing(u), -u.priority, u.seq)):
            if standing(unit) <= lowest and unit.priority <= own.get(unit.tenant, unit.priority):
                continue  # nothing running that it outranks
            shape = unit_shape(unit)
            if unit.seq not in self.pending or shape in hopeless:
                continue
            plan = preempt_plan(self, unit)
            if plan is None:
                hopeless.add(shape)
                continue
            apply_plan(self, t, plan)
            evicted = True
        return evicted

    def _reclaim(self, t: float, failed: list[Unit]) -> bool:
        """Fair-share reclaim, once per instant: a waiting unit of a tenant below
        its weighted share takes back room from tenants above theirs (their
        cheapest preemptible work of no higher standing), only if that makes
        it fit and leaves them no lower than the claimant."""
        policy = self.rescheduling
        if policy is None or self._reclaimed_at == t:
            return False
        self._reclaimed_at = t
        share = self.state.share_by_tenant()
        top = max(share.values(), default=0.0)
        reclaimed = 0
        hopeless: set[tuple] = set()
        standing = self.business.standing
        for unit in sorted(failed, key=lambda u: (-standing(u), share[u.tenant], -u.priority, u.seq)):
            shape = unit_shape(unit)
            if unit.seq not in self.pending or shape in hopeless or share[unit.tenant] * (1 + FAIR_MARGIN) >= top:
                continue
            plan = reclaim_plan(self, unit)
            if plan is None:
                hopeless.add(shape)
                continue
            apply_plan(self, t, plan)
            reclaimed += 1
        return reclaimed > 0

    def _defragment(self, t: float, failed: list[Unit]) -> bool:
        """Once per instant: for waiting units that need whole devices, move
        fractional tasks together so whole devices come free, when that makes
        the unit fit (see ``defrag``)."""
        if self.rescheduling is None or self._defragged_at == t:
            return False
        self._defragged_at = t
        placed = False
        hopeless: set[tuple] = set()
        standing = self.business.standing
        for unit in sorted(failed, key=lambda u: (-standing(u), -u.priority, u.seq)):
            shape = unit_shape(unit)
            if unit.seq not in self.pending or shape in hopeless or not needs_whole_devices(unit):
                continue
            plan = defrag_plan(self, unit)
            if plan is None:
                hopeless.add(shape)
                continue
            placed |= apply_plan(self, t, plan)
        return placed

    def _returns(self, t: float) -> None:
        """This instant's return moves, those budgets and the migration limit allow."""
        if self.near_running and len(self.migrating) < self.policy.max_concurrent_migrations:
            for plan in return_plans(self, t):
                if self.allowed(plan):
                    apply_plan(self, t, plan)

    def allowed(self, plan: Plan) -> bool:
        """May ``plan`` be made now?"""
        return self._free(plan.held)

    def _free(self, held: Held | None) -> bool:
        """Nothing holds it back. When hysteresis does, there will be an
        instant when it ends, to look again."""
        if held is not None and held.by == HYSTERESIS:
            self.wake_at(held.until)
        return held is None

    def evict(self, t: float, uid: int, cause: str, by: Unit | None = None, **why: Any) -> None:
        """Stop a running unit and queue it again whole. Services move: their
        next start is a migration, and a stateful one may go only where its
        state can follow. Jobs resume from their last checkpoint."""
        run = self._close_run(uid, stop_at=t)
        unit = self._units[uid].unit
        fleet = self.world.fleet
        held = []
        for task in run.tasks:
            rec = self._tasks[task]
            node = self.state.placements[task].host.node
            if rec.component.lifetime == "service":
                self.ledger.stopped_to_move(rec, node, t)
            held.append(int(fleet.node_site[node]) if rec.component.lifetime == "service" and rec.component.stateful else -1)
            extra = {"by": by.tasks[0]} if by is not None else {}
            self._end_task(t, task, PENDING, "preempted", cause=cause, **extra, **why)
            self.disrupted.add(task, rec.component)
        if any(s >= 0 for s in held):
            by_task = dict(zip(run.tasks, held))
            unit.state_sites = tuple(by_task.get(task, -1) for task in unit.tasks)
        self.pending.add(uid)

    def log_move(self, t: float, rec: TaskRecord, to: int, **cause: Any) -> None:
        """A moved service: stopped, its state travels over the path, restored.
        It is placed now and ``started`` when its state has arrived and it has
        restarted (the policy's ``restartTime``); until then it is a migration
        in flight, stateless or not."""
        fleet = self.world.fleet
        state_bytes = rec.component.state_mib * 2**20 if rec.component.stateful else 0
        ready = serves_again_s(self, rec.component, rec.moved_from, to)
        downtime = (t - rec.stopped_at) + ready
        self.log(t, "migrated", task=rec.task, **{"from": fleet.node_name(rec.moved_from)},
                  to=fleet.node_name(to), bytes=int(state_bytes), downtime_s=round(float(downtime), 6), **cause)
        self.ledger.moved(rec, t)
        self._moves += 1
        self.migrating[rec.task] = (self._moves, t + ready)
        self.loop.schedule(t + ready, MoveDone(rec.task, self._moves))

    def _move_done(self, t: float, ev: "MoveDone") -> None:
        if self.migrating.get(ev.task, (None,))[0] != ev.move:
            return  # the task stopped again before its state arrived
        del self.migrating[ev.task]
        self.disrupted.discard(ev.task)
        p = self.state.placements[ev.task]
        self.log(t, "started", task=ev.task, **self.where(p.host.node))

    def started(self, t: float, uid: int) -> None:
        us = self._units[uid]
        us.unit.state_sites = ()
        placed = [task for task in us.unit.tasks if task in self.state.placements]
        left_out = self.business.left_out.pop(uid, None)
        if len(placed) < len(us.unit.tasks):  # an elastic gang placed below its size: why, the binding bound first
            if left_out is None:
                left_out = Counter({Why("elastic", placed=len(placed), members=len(us.unit.tasks)): 1})
            why = why_json(left_out)
            for task in us.unit.tasks[len(placed):]:
                self._end_task(t, task, OMITTED, "omitted", reason="; ".join(w["reason"] for w in why), why=why)
        lead = us.unit.components[0]
        ledger = self.ledger
        tasks = us.unit.tasks if len(placed) == len(us.unit.tasks) else tuple(placed)  # (all: shared)
        run = Run(ledger.next_run_id(), tasks, len(placed), t, us.remaining_work_s, us.remaining_s,
                  lead.efficiency, lead.checkpoint_every_s if lead.stateful else None)
        if ledger.start(uid, run):
            self._count_running(us.unit, +1)
        tab = self._tasks
        ids, moving = tab.ids, tab.moving
        for task in placed:
            i = ids[task]
            p = self.state.placements[task]
            ledger.placed(i, t)
            self.track_near(task, tab.component[i])
            where = self.where(p.host.node)
            self.log(t, "placed", task=task, **where, host=p.host.name, vc=p.vc)
            if moving and i in moving:  # a service that stopped to move: priced from where it left
                self.log_move(t, tab[task], p.host.node)  # started when its state arrives
            else:
                self.disrupted.discard(task)
                self.log(t, "started", task=task, **where)
        self.executor.start(run, t)

    # ------------------------------------------------------------ voluntary moves

    def may_disturb(self, uid: int, moves: int = 0) -> bool:
        """May a voluntary move (return, reclaim, defragmentation, drain) stop
        this running unit now? (``moves.held_by``: within its components'
        disruption budgets, the migration limit and hysteresis.)"""
        return self._free(held_by(self, uid, moves=moves))

    def wake_at(self, when: float) -> None:
        """Make sure there is an instant (and a pass) at ``when`` (not asked
        for by a dry run: ``plan.dry_run``)."""
        if when not in self._wakes and not self.dry:
            self._wakes.add(when)
            self.loop.schedule(when, Wake())

    # ------------------------------------------------------------ helpers

    def track_near(self, task: str, comp: Component | None = None) -> None:
        """Keep ``near_running`` to the running tasks placed away from their
        ``near`` site: only they can move closer, or be beyond their bound.
        (``comp``: the task's component, when the caller has its record.)"""
        if comp is None:
            comp = self._tasks[task].component
        if comp.near is None:
            return
        if self._names_of(self.state.placements[task].host.node)[1] != comp.near.site:  # names are unique
            if task not in self.near_running:
                self.returns.enter(task)
            self.near_running[task] = comp
            self.returns.wake((task,))  # placed anew: its answer may differ
            self._near_status(task)
        else:  # at home: no site index parsed from its name
            self.near_running.pop(task, None)
            self.returns.leave(task)
            self._beyond.discard(task)

    def _near_status(self, task: str) -> None:
        """Whether ``task`` (running away from its near site) is now beyond its bound."""
        comp = self.near_running.get(task)
        if comp is None or comp.near.max_rtt_ms is None:  # at home, or a preference only
            self._beyond.discard(task)
            return
        fleet = self.world.fleet
        node = self.state.placements[task].host.node
        if fleet.network.rtt(fleet.node_site[node], fleet.site_index[comp.near.site]) > comp.near.max_rtt_ms:
            self._beyond.add(task)
        else:
            self._beyond.discard(task)

    def _recheck_near(self, sites: set[int] | None) -> list[str]:
        """Paths changed (at ``sites`` only, when given): the running tasks
        away from their near site whose path may have changed are checked
        again (those bound near one of ``sites`` or placed on one); returns them."""
        if sites is None:
            tasks = list(self.near_running)
        else:
            tasks = [task for uid in running_at(self, sites) for task in self._units[uid].run.tasks]
        tasks = [task for task in tasks if task in self.near_running]
        for task in tasks:
            self._near_status(task)
        return tasks

    def _near_violations(self) -> int:
        """Running tasks now farther from their near site than their bound
        (placement never does this; links going down can): kept as tasks
        start, move and end, and as paths change, not counted at each instant."""
        return len(self._beyond)

    def _names_of(self, node: int) -> tuple[str, str]:
        """The node's name and its site's (kept per node once made)."""
        names = self._names.get(node)
        if names is None:
            fleet = self.world.fleet
            names = self._names[node] = (fleet.node_name(node), fleet.site_name_of(node))
        return names

    def where(self, node: int) -> dict[str, str]:
        names = self._names_of(node)
        return {"node": names[0], "site": names[1]}

    def log(self, t: float, kind: str, **fields: Any) -> None:
        if self.state.journal:
            self.flush_hosts(t)  # host changes come before what they made possible
        at, rounded = self._stamp
        if t is not at:  # round() is slow, and an instant logs many events with the one time object
            self._stamp = t, (rounded := round(t, 6))
        self.events.append({"t": rounded, "kind": kind, **fields})

    def flush_hosts(self, t: float, **why: Any) -> None:
        """Log the hosts added and removed since the last event."""
        changes = self.state.journal
        if not changes:  # most instants change no host
            return
        self.state.journal = {}
        name = self.world.fleet.node_name
        rounded = round(t, 6)
        append = self.events.append
        for (kind, _), h in changes.items():
            append({"t": rounded, "kind": kind, "vc": h.vc, "host": h.name, "node": name(h.node), **why})


def _shape(vc: Any, group: str | None) -> tuple | None:
    """What a VC's host group's hosts are like (bounds apart)."""
    g = next((g for g in vc.host_groups if g.name == group), None) if vc is not None else None
    return None if g is None else (g.resources, g.coupling, g.selector, g.near, g.arch)


def _host_idle(vcs_state: Any, host: Any) -> bool:
    t = vcs_state.table
    r = host.row
    return bool((t.free[:, r] == t.cap[:, r]).all() and (t.dev_free[:, r] == t.dev_cap[:, r]).all())


def _cut_off(network: Any, site: int, links: tuple) -> None:
    """A device's site leaves the network (offline): its one link goes down,
    the core staying as it is; with several, it is detached."""
    if network.leaf[site]:
        network.link_down(site, int(links[0][0]))
    else:
        network.attach(site, [], [], [])


def cannot_schedule(exc: BaseException) -> str:
    """The reason an application fails when handling it raised: the error, shortly."""
    text = str(exc)
    return f"cannot be scheduled: {type(exc).__name__}" + (f": {text[:200]}" if text else "")
