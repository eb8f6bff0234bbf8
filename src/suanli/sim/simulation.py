"""The digital twin: the static scheduler driven over time by an event loop.

A simulation is four parts with narrow interfaces, put together by
``Simulation``:

- the event engine (``Timeline``): the clock and its loop, the arrivals of
  the world's work (applications, generators, traces, mobility), and each
  instant's order: the instant's events are applied first (submissions,
  finished runs, deletes, nodes and links going down or up), then one
  scheduling pass places what is pending, then return moves, then hosts;
- the global layer's state (``global_state.GlobalState``): the fleet, its
  network, its tenancy and hosts;
- one business shard (``shard.Shard``): the tenants' queue, ledger and
  placements;
- the rescheduler (``rescheduling.Rescheduler``): what moves running work.

They write one event log (``logbook.Logbook``) in time order; the same
scenario and seed give the same log. Executors are given what they need
only (``executors.base.Attachment``): the ledger's view, the loop, the world.
"""

from __future__ import annotations

import gc
import logging
import zlib
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from suanli.engine.clock import Clock, VirtualClock
from suanli.engine.loop import EventLoop
from suanli.executors.base import (Attachment, Call, Executor, NodeFound, NodeLost, Note, Restart, RunFinished,
                                   TaskExited)
from suanli.executors.sim import SimExecutor
from suanli.model.work import Application, World
from suanli.scheduling.business_layer import BusinessLayer
from suanli.scheduling.global_layer import GlobalLayer
from suanli.scheduling.policies import policy_for
from suanli.scheduling.state import GrowingCatalogue, PlacementState
from suanli.spec.schema import ReschedulingPolicy
from suanli.sim.events import EventLog
from suanli.sim.ledger import FAILED
from suanli.sim.global_state import GlobalState
from suanli.sim.hosts import HostKeeper
from suanli.sim.logbook import Logbook
from suanli.sim.loop_events import (ClaimEnded, Leave, MoveDone, NextArrival, NextMove, Restore, ScenarioEvent,
                                    Submit, Update, Wake)
from suanli.sim.metrics import Recorder
from suanli.sim.mobility import mobility_events
from suanli.sim.elastic import Resize, Resizer
from suanli.sim.rescheduling import Rescheduler
from suanli.sim.rollout import Rollouts
from suanli.sim.shard import Shard
from suanli.sim.workload import Arrival, draw, generated, openb_arrivals, swf_arrivals


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
log = logging.getLogger(__name__)


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


class Timeline:
    """The event engine: instants in time order, each handled whole (its
    events, then the scheduling pass and what follows it)."""

    def __init__(self, world: World, scenario: Any, seed: int, until: float | None, loop: EventLoop,
                 book: Logbook, shard: Shard, globe: GlobalState, resched: Rescheduler, hosts: HostKeeper,
                 recorder: Recorder, on_instant: Callable[[float], None] | None) -> None:
        self.world, self.scenario, self.seed, self.until, self.loop = world, scenario, seed, until, loop
        self.book, self.shard, self.globe, self.resched, self.hosts, self.recorder = \
            book, shard, globe, resched, hosts, recorder
        self.on_instant = on_instant  # called after each instant, e.g. for a progress bar
        self.each_documents: set[str] = set()  # documents with `each` (their applications found when deleted)
        self._mobility: list[Iterator] = []  # mobility streams (handovers, offline spells)
        self._next_mobility: list[tuple | None] = []
        self._streams: list[Iterator[Arrival]] = []  # generators and traces, read as they are due
        self._next: list[Arrival | None] = []
        self._frozen_at = -1  # in ``run``: task records when what it holds was last set aside from collection
        self._wakes: set[float] = set()
        self.dry = False  # a dry run looks: it asks for no instants
        self.rollouts = Rollouts(shard, book.log, self.wake_at)
        self.now = 0.0
        self._handlers: dict[type, Callable[[float, Any], None]] = self._event_handlers()

    def _event_handlers(self) -> dict[type, Callable[[float, Any], None]]:
        """What each kind of loop event does at its instant (looked up by its
        class: an instant of short work is one event, and a chain of
        ``isinstance`` took longer than some of what the events do)."""
        shard, globe = self.shard, self.globe

        def submit(t, ev):
            shard.submit(t, ev.app, ev.ended)

        def restore(t, ev):
            for app, ended in ev.apps:
                shard.submit(t, app, ended, restored=True)

        def next_arrival(t, ev):
            self._arrive(t, self._next[ev.index])
            self._queue_next(ev.index, t)

        def next_move(t, ev):
            self.scenario_event(t, self._next_mobility[ev.index][1])
            self._queue_mobility(ev.index)

        def note(t, ev):
            fields = dict(ev.fields)
            if ev.kind in ("ready", "notReady") and \
                    not shard.readiness(fields["task"], fields["run"], ev.kind == "ready"):
                return  # of a run that has stopped meanwhile
            self.book.log(t, ev.kind, **fields)

        return {
            Submit: submit,
            Update: lambda t, ev: self.rollouts.update(t, ev.app, ev.revision, ev.max_unavailable, ev.max_surge),
            Restore: restore,
            NextArrival: next_arrival,
            Leave: lambda t, ev: shard.delete(t, ev.app, "left"),
            RunFinished: lambda t, ev: shard.finished(t, ev.run_id),
            ScenarioEvent: lambda t, ev: self.scenario_event(t, ev.spec),
            NextMove: next_move,
            ClaimEnded: lambda t, ev: globe.claim_ended(t, ev.claim),
            MoveDone: lambda t, ev: self.resched.move_done(t, ev),
            Wake: lambda t, ev: None,  # the instant's pass is the point
            Resize: lambda t, ev: shard.resizer.turn(t),
            TaskExited: lambda t, ev: shard.exited(t, ev),
            Restart: lambda t, ev: shard.restart(t, ev),
            NodeLost: lambda t, ev: globe.node_lost(t, ev),
            NodeFound: lambda t, ev: globe.node_found(t, ev),
            Call: lambda t, ev: ev.fn(),
            Note: note,
        }

    def _handler_of(self, kind: type) -> Callable[[float, Any], None]:
        """The handler of an event of a class derived from one above (kept);
        an event of no such class does nothing."""
        handler = next((h for k, h in self._handlers.items() if issubclass(kind, k)), lambda t, ev: None)
        self._handlers[kind] = handler
        return handler

    def run(self) -> float:
        with fewer_collections():
            self._frozen_at = len(self.shard._tasks)
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

    def update(self, app: Application, revision: int, max_unavailable: int | str, max_surge: int | str = 0) -> None:
        """Roll ``revision`` of the running application ``app.name`` out now (``rollout.py``)."""
        self.loop.schedule(self.loop.now(), Update(app, revision, max_unavailable, max_surge))

    def start(self) -> None:
        """Place the VCs' first hosts and queue the world's work (``run`` does this first)."""
        self.globe.global_layer.place_initial()
        self.book.flush_hosts(0.0)
        entries = {a.app: a for a in self.scenario.arrivals} if self.scenario else {}
        self.each_documents = set()
        copies: dict[str, list[Application]] = {}
        for app in self.world.apps:  # an application with no arrival entry arrives at 0
            entry = entries.get(app.document)
            if app.template is not None:
                self.each_documents.add(app.template)  # (not a list of its copies: a car's 8 bytes)
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
            self.shard.ledger.record_ended(arrival.skipped, arrival.tenant, FAILED, t)
            self.book.log(t, "submitted", task=arrival.skipped, tenant=arrival.tenant)
            self.book.log(t, "failed", task=arrival.skipped, reason=arrival.reason)
            return
        self.shard.submit(t, arrival.app)
        if arrival.leave_at is not None and arrival.leave_at <= t:
            self.shard.delete(t, arrival.app.name, "left")  # (a trace's record that ended as it began)
        elif arrival.leave_at is not None:
            self.loop.schedule(arrival.leave_at, Leave(arrival.app.name))

    def _handle(self, t: float, batch: list[Any]) -> None:
        self.now = self.shard.now = t
        handlers = self._handlers
        for ev in batch:
            handler = handlers.get(type(ev))
            if handler is None:
                handler = self._handler_of(type(ev))
            handler(t, ev)
        if self.rollouts.active:
            self.rollouts.step(t)
        self.hosts.before(t)
        self.shard.schedule(t)
        if self.resched.on:
            self.resched.return_moves(t)
        self.hosts.after(t)
        self.book.flush_hosts(t)
        self.recorder.sample(t)
        self.shard._tasks.flush()  # the names of tasks settled this instant are made when read from now on
        if self._frozen_at >= 0 and len(self.shard._tasks) >= self._frozen_at + FREEZE_EVERY:
            gc.freeze()  # what this instant added lives on (see ``FREEZE_EVERY``)
            self._frozen_at = len(self.shard._tasks)
        if self.on_instant is not None:
            self.on_instant(t)

    def wake_at(self, when: float) -> None:
        """Make sure there is an instant (and a pass) at ``when`` (not asked
        for by a dry run: ``plan.dry_run``)."""
        if when not in self._wakes and not self.dry:
            self._wakes.add(when)
            self.loop.schedule(when, Wake())

    def scenario_event(self, t: float, ev: Any) -> None:
        if ev.kind == "delete":  # every application made from the document
            made = (app for app in self.world.apps if app.template == ev.app) if ev.app in self.each_documents \
                else None
            for name in (app.name for app in made) if made is not None else (ev.app,):
                self.shard.delete(t, name, "deleted")
                if self.rollouts.revisions:
                    self.rollouts.forget(name)
        else:
            self.globe.event(t, ev)


def _part(part: str, name: str, settable: bool = False) -> property:
    """An attribute of one of the parts, read (and set) through the root."""
    def get(self):
        return getattr(getattr(self, part), name)

    def put(self, value):
        setattr(getattr(self, part), name, value)

    return property(get, put if settable else None, doc=f"``{part}.{name}``")


class Simulation:
    """A simulation put together: the parts above, made and wired once.

    What code outside reads is here under the names it always had (each is
    one part's: ``pending`` is the shard's, ``hosts`` the global state's);
    the plans of ``moves`` and ``plan`` are given this root, as they look at
    every part at once."""

    def __init__(self, world: World, *, seed: int | None = None, until: float | None = None,
                 clock: Clock | None = None, on_instant: Callable[[float], None] | None = None,
                 policy: str | None = None, events_to: Path | None = None,
                 executor: Callable[[Attachment], Executor] | None = None) -> None:
        self.world = world
        if world.fleet.network.version:  # an earlier run changed it in place: start from the fleet's links
            world.fleet.network = world.fleet.fresh_network()
        scenario = world.scenario.spec if world.scenario is not None else None
        self.scenario = scenario
        self.seed = world.seed if seed is None else seed
        until = until if until is not None else (scenario.until if scenario and scenario.until else None)
        # (ids shared with the shard's ledger; tasks come and go, a car's tasks named when read)
        self.state = PlacementState(world, GrowingCatalogue())
        self.state.journal = {}  # every host added or removed becomes an event
        self.rng = np.random.default_rng(self.seed)
        self.global_layer = GlobalLayer(self.state, self.rng)
        self.business = BusinessLayer(self.state, self.global_layer, self.rng, policy=policy_for(world, policy))
        self.loop = EventLoop(clock or VirtualClock())
        self.events = EventLog(events_to)  # in memory, or streamed to ``events_to``
        self.book = Logbook(world, self.state, self.events)
        self.globe = GlobalState(world, self.state, self.global_layer, self.loop, self.book, self.wake_at)
        self.shard = Shard(world, self.state, self.business, self.loop, self.book, self.globe.offline)
        self.policy = scenario.policy.rescheduling if scenario is not None else ReschedulingPolicy()
        if scenario is not None:
            self.shard.use_backfill(scenario.policy.backfill, scenario.policy.reservations)
        self.resched = Rescheduler(self, self.shard, world, self.state, self.business, self.loop, self.book,
                                   self.policy)
        self.shard.resizer = Resizer(self.shard, self.loop, self.book.log,
                                     scenario.policy.elastic if scenario is not None else None)
        self.recorder = Recorder(self.state, self.shard.near_violations)
        self.hosts = HostKeeper(self)
        self.timeline = Timeline(world, scenario, self.seed, until, self.loop, self.book, self.shard, self.globe,
                                 self.resched, self.hosts, self.recorder, on_instant)
        self.shard.resched = self.globe.resched = self.resched
        self.globe.shard, self.globe.hosts, self.globe.recorder = self.shard, self.hosts, self.recorder
        self.view = self.shard.view  # what code outside reads of the tasks
        self.ledger = self.shard.ledger
        self.executor = SimExecutor(self.loop)
        if executor is not None:  # a real one: made last, given what it may look at
            self.executor = executor(self.attachment)
            if self.shard.resizer.on and not getattr(self.executor, "regroups", False):
                log.warning("policy.elastic %s: the %s executor does not restart a gang at another width; "
                            "gangs keep the width they start at", scenario.policy.elastic.policy, self.executor.name)
                self.shard.resizer.on = False

    @property
    def executor(self) -> Executor:
        return self.shard.executor

    @executor.setter
    def executor(self, value: Executor) -> None:
        self.shard.executor = self.globe.executor = value

    @property
    def attachment(self) -> Attachment:
        """What an executor is given."""
        return Attachment(self.view, self.loop, self.world)

    # the parts' operations, under the names callers use
    def run(self) -> float:
        return self.timeline.run()

    def step(self, until: float) -> None:
        self.timeline.step(until)

    def start(self) -> None:
        self.timeline.start()

    def submit(self, app: Application, ended: Mapping[str, str] | None = None) -> None:
        self.timeline.submit(app, ended)

    def restore(self, apps: list[tuple[Application, Mapping[str, str]]]) -> None:
        self.timeline.restore(apps)

    def apply(self, spec: Any) -> None:
        self.timeline.apply(spec)

    def wake_at(self, when: float) -> None:
        self.timeline.wake_at(when)

    def update(self, app: Application, revision: int, max_unavailable: int | str, max_surge: int | str = 0) -> None:
        self.timeline.update(app, revision, max_unavailable, max_surge)

    @property
    def rollouts(self) -> Rollouts:
        return self.timeline.rollouts

    until = _part("timeline", "until")
    now = _part("timeline", "now")
    dry = _part("timeline", "dry", settable=True)
    on_instant = _part("timeline", "on_instant", settable=True)
    # the shard's
    pending = _part("shard", "pending")
    near_running = _part("shard", "near_running")
    returns = _part("shard", "returns")
    keep_records = _part("shard", "keep_records", settable=True)
    max_pass = _part("shard", "max_pass", settable=True)
    on_pass = _part("shard", "on_pass", settable=True)
    _room = _part("shard", "_room")
    _room_site = _part("shard", "_room_site")
    # the global state's
    offline = _part("globe", "offline")
    down_links = _part("globe", "down_links")
    claims = _part("globe", "claims")
    lost_nodes = _part("globe", "lost_nodes")
    # the rescheduler's
    migrating = _part("resched", "migrating")
    disrupted = _part("resched", "disrupted")

    @property
    def rescheduling(self) -> ReschedulingPolicy | None:
        """The rescheduling policy when it is on (None: no voluntary moves)."""
        return self.policy if self.resched.on else None

    def grow_fleet(self, t: float, fleet: Any, paths: bool) -> None:
        self.globe.grow_fleet(t, fleet, paths)

    def set_tenancy(self, t: float, tenants: Mapping[str, Any], vcs: Mapping[str, Any]) -> list[str]:
        return self.globe.set_tenancy(t, tenants, vcs)

    def retire_node(self, t: float, node: int, why: str) -> None:
        self.globe.retire_node(t, node, why)

    def log(self, t: float, kind: str, **fields: Any) -> None:
        self.book.log(t, kind, **fields)

    def flush_hosts(self, t: float, **why: Any) -> None:
        self.book.flush_hosts(t, **why)

    def where(self, node: int) -> dict[str, str]:
        return self.book.where(node)

    def started(self, t: float, uid: int) -> None:
        self.shard.started(t, uid)

    def track_near(self, task: str, comp: Any = None) -> None:
        self.shard.track_near(task, comp)

    def _near_violations(self) -> int:
        return self.shard.near_violations()

    def allowed(self, plan: Any) -> bool:
        return self.resched.allowed(plan)

    def may_disturb(self, uid: int, moves: int = 0) -> bool:
        return self.resched.may_disturb(uid, moves)

    def evict(self, t: float, uid: int, cause: str, by: Any = None, **why: Any) -> None:
        self.resched.evict(t, uid, cause, by, **why)

    def log_move(self, t: float, rec: Any, to: int, **cause: Any) -> None:
        self.resched.log_move(t, rec, to, **cause)
