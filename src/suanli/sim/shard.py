"""One business shard: its tenants' queue, ledger and placements.

A ``Shard`` owns what the business layer decides with: the ledger of task
records and units (``ledger``, read through ``view``), the queue of units
waiting (``pending``) and those parked until a row has room for them, the
counts of what runs by standing and priority, and the running tasks away
from their ``near`` site. Its operations are the business layer's: a
submission, a scheduling pass, a run started, finished, exited, stopped, an
application deleted or refused. What it asks of others goes through narrow
references: the global layer's ``offline`` devices, the rescheduler (when a
pass leaves units waiting, and to price a move), the executor, the event
loop (restarts, another pass at once) and the ``Logbook``.

Today one process runs one shard over every tenant; the split is what a
sharded run divides (docs/scale.md).
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_left
from collections import Counter
from typing import Any, Callable, Mapping

import numpy as np

from suanli.engine.loop import EventLoop
from suanli.executors.base import Executor, Restart, Run, TaskExited
from suanli.executors.sim import speed
from suanli.model.speedup import members_per_node, time_to_finish
from suanli.model.work import MAX_RESTARTS, Application, Component, World
from suanli.phrases import why_json
from suanli.scheduling import nearby
from suanli.scheduling.backfill import Backfill
from suanli.scheduling.business_layer import BusinessLayer, Unit, build_units, unit_shape
from suanli.scheduling.domains import couplings_domain
from suanli.scheduling.filters import static_mask
from suanli.scheduling.reasons import Domain, Reasons, Why, bound
from suanli.scheduling.state import PlacementState
from suanli.sim import waiting
from suanli.sim.defrag import needs_whole_devices
from suanli.sim.ledger import FAILED, FINISHED, OMITTED, PENDING, RUNNING, WITHDRAWN, Ledger, LedgerView
from suanli.sim.logbook import Logbook
from suanli.sim.loop_events import Wake
from suanli.sim.rescheduler import running_at
from suanli.sim.returns import ReturnWatch
from suanli.sim.room import RoomWait
from suanli.sim.waiting import WaitQueue

log = logging.getLogger(__name__)

# passes one instant may make, beyond one per unit, while each evicts or moves work; past it
# what still waits tries again at the next instant (a warning says so)
ROUNDS = 64
FLEET_GROWS = "fleet grows"  # the key inadmissible units are parked under (every parked unit wakes when it grows)
_LIVE_GROUPS: dict[int, tuple[int, int, np.ndarray]] = {}  # id(fleet) -> (nodes, retired, groups with a node in service)


def beyond_every_node(fleet, req, retired: int) -> Why | None:
    """Why ``req`` can never be placed on this fleet, when it asks more of
    one resource on one node than any node has (the ``retired`` nodes, a
    count the caller keeps, left out): cpu, memory, or whole devices of a
    kind and its allowed models (a share: one such device). None when no
    single resource is beyond every node. O(node groups), not O(nodes);
    kept with the request for the fleet and its count of retired nodes (a
    device's task asked at each arrival while the edge near it is full)."""
    key = (id(fleet), fleet.n_nodes, retired)
    got = req.cache.get("beyond every node")
    if got is not None and got[0] == key:
        return got[1]
    why = _beyond_every_node(fleet, req, retired)
    req.cache["beyond every node"] = (key, why)
    return why


def _beyond_every_node(fleet, req, retired: int) -> Why | None:
    groups = _live_groups(fleet, retired)
    cap = fleet.group_capacity[groups]
    for col, name in ((0, "cpu"), (1, "memory")):
        most = int(cap[:, col].max(initial=0))
        if int(req.vec[col]) > most:
            return Why("inadmissible", None, name, requested=int(req.vec[col]), most=most)
    for need in req.accels:
        if need.kind < 0:  # a kind the fleet has none of
            have = 0
        else:
            usable = fleet.group_dev_kind[groups] == need.kind
            if need.models is not None:
                usable &= np.isin(fleet.group_dev_model[groups], need.models)
            have = int(usable.sum(axis=1).max(initial=0)) if need.whole else int(bool(usable.any()))
        if need.milli > 1000 * have:
            return Why("inadmissible", None, need.kind_name, requested=int(need.milli), most=1000 * have)
    return None


def _live_groups(fleet, retired: int) -> np.ndarray:
    """The node groups with a node in service (not retired), cached per fleet
    and count of retired nodes (read over the nodes only when that changes)."""
    got = _LIVE_GROUPS.get(id(fleet))
    if got is None or got[0] != fleet.n_nodes or got[1] != retired:
        groups = np.unique(fleet.node_group[~fleet.retired]) if retired else np.arange(len(fleet.groups))
        if len(_LIVE_GROUPS) > 8:
            _LIVE_GROUPS.clear()
        got = _LIVE_GROUPS[id(fleet)] = (fleet.n_nodes, retired, groups)
    return got[2]


class Shard:
    def __init__(self, world: World, state: PlacementState, business: BusinessLayer, loop: EventLoop,
                 book: Logbook, offline: dict) -> None:
        self.world, self.state, self.business, self.loop = world, state, business, loop
        self.log, self.where, self.names_of = book.log, book.where, book.names_of
        self.offline = offline  # the global layer's: device site -> its links while offline (read only)
        # the records of tasks and units: they change through its transitions only
        self.ledger = Ledger(state.task_ids, world.fleet.site_index)
        self.view = LedgerView(self.ledger, state.placements, world)  # what code outside reads
        self._tasks, self._units = self.ledger.tasks, self.ledger.units  # read here, changed by the ledger
        self.keep_records = True  # a deleted application's task records are kept for the results (a server keeps none)
        self.pending = WaitQueue()  # unit ids, in submission order; some parked
        self._room = RoomWait()  # units parked until a row they could go to has room for them
        self._domain_bounds: dict[tuple, Why | None] = {}  # (a gang's shape, fleet) -> why it never fits
        self._ahead: dict[int, np.ndarray] = {}  # a pass's placed units not started yet, per cohort member
        self._room_near: dict[int, set[int]] = {}  # near site -> units parked so
        self._room_site: dict[int, int] = {}  # unit parked so -> its near site
        self.near_running: dict[str, Component] = {}  # running tasks away from their near site
        self.ready: set[str] = set()  # running tasks whose readiness probe passes (real executors)
        self.returns = ReturnWatch()  # which of them a return plan looks at again
        self._beyond: set[str] = set()  # those of them now beyond their bound (kept as things change)
        self._levels: Counter = Counter()  # standings of the running units, counted
        self._own: dict[str, Counter] = {}  # per tenant, the priorities of its running units, counted
        self.on_pass: Callable[[float, int], None] | None = None  # told each scheduling pass's seconds and units
        # Units one pass tries at most (None: all that wait). A live control plane bounds it so
        # that an instant stays short: the rest are tried at the next instant, at once.
        self.max_pass: int | None = None
        self.now = 0.0  # the instant being handled (set by the event engine)
        self.executor: Executor | None = None  # set with the simulation's
        self.resched: Any = None  # the rescheduler (set once it is made)
        self.resizer: Any = None  # resizes elastic gangs (``elastic.py``), where policy.elastic asks
        self.pause: dict[int, float] = {}  # unit -> seconds its next run makes no progress (a resize's restart)

    def submit(self, t: float, app: Application, ended: Mapping[str, str] | None = None,
               restored: bool = False) -> None:
        """``app`` arrives: its units wait. Units all of whose tasks are in
        ``ended`` are recorded so and not run again; ``restored``: a
        restarted control plane's, its tasks not logged as submitted again."""
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
            uid = ledger.submit(unit, t, compact=True)
            if not restored:
                for task in unit.tasks:
                    self.log(t, "submitted", task=task, tenant=app.tenant)
            self.pending.add(uid)
            if self.resizer is not None:
                self.resizer.submitted(t, uid, unit)

    def current(self, run_id: int) -> int | None:
        """The unit whose run ``run_id`` is; None when that run has stopped (an
        executor's report about it is stale)."""
        uid = self.ledger.unit_of_run(run_id)
        if uid is None:
            return None
        return uid if self._units.run_id[uid] == run_id else None

    def replace_unit(self, t: float, uid: int, unit: Unit, revision: int) -> int:
        """A unit made again as ``unit`` (the same tasks, of its application's
        ``revision``): stopped if it runs (its state kept, as for a move), it
        waits in its new form; the new unit's id."""
        if self._units[uid].run is not None:
            for task in self.close_run(uid, stop_at=t).tasks:
                self.end_task(t, task, PENDING, "updating", revision=revision)
        self._unqueue(uid)
        new = self.ledger.replace(uid, unit, t)
        self.pending.add(new)
        return new

    def add_unit(self, t: float, unit: Unit) -> int:
        """A unit of an application that grew (more replicas): it waits."""
        uid = self.ledger.submit(unit, t)
        for task in unit.tasks:
            self.log(t, "submitted", task=task, tenant=unit.tenant)
        self.pending.add(uid)
        return uid

    def withdraw_unit(self, t: float, uid: int, why: str) -> None:
        """A unit of an application that shrank (fewer replicas): it stops and its tasks end."""
        self._end_unit(t, uid, why)
        if not self.keep_records:
            self.ledger.withdraw(uid)

    def _unqueue(self, uid: int) -> bool:
        """A unit no longer waits (nor watches rows for room); whether it waited."""
        if uid not in self.pending:
            return False
        self.pending.discard(uid)
        self.unpark((uid,))
        return True

    def _end_unit(self, t: float, uid: int, why: str) -> None:
        """A unit's running tasks stop, finished; its waiting ones end: withdrawn
        if never placed, finished if they ran and waited to run again."""
        us = self._units[uid]
        if us.run is not None:
            for task in self.close_run(uid).tasks:
                self.end_task(t, task, FINISHED, "finished", reason=why)
        if self._unqueue(uid):
            for task in us.unit.tasks:
                rec = self._tasks[task]
                if rec.status != PENDING:
                    continue
                if rec.first_placed_at is None:
                    self.end_task(t, task, WITHDRAWN, "withdrawn", reason=f"{why} before it was placed")
                else:  # it ran, was stopped and waited to run again: it ends there
                    self.end_task(t, task, FINISHED, "finished", reason=f"{why} while waiting to run again")

    def probed(self, task: str) -> bool:
        """Whether ``task``'s readiness comes from a probe: its component has a
        readiness probe and its executor runs probes (else it is ready once it runs)."""
        rec = self._tasks.get(task)
        run = rec.component.run if rec is not None and rec.component is not None else None
        return run is not None and run.readiness is not None and getattr(self.executor, "runs_probes", False)

    def readiness(self, task: str, run_id: int, ready: bool) -> bool:
        """A running task's readiness probe passed (``ready``) or failed;
        False when the report is stale (of a run that has stopped)."""
        if self.current(run_id) is None or task not in self.state.placements:
            return False
        (self.ready.add if ready else self.ready.discard)(task)
        return True

    def finished(self, t: float, run_id: int) -> None:
        uid = self.current(run_id)
        if uid is None:
            return  # the run was stopped earlier: a stale finish
        us = self._units[uid]
        tasks = us.run.tasks
        jobs = [(task, rec) for task in tasks if (rec := self._tasks[task]).component.lifetime == "job"]
        for task, rec in jobs:
            self.end_task(t, task, FINISHED, "finished", rec=rec)
        unit = us.unit
        if unit.components[0].parts and len(tasks) < len(unit.tasks):  # the parts run in series
            ran = set(tasks)
            for task in unit.tasks:
                if task not in ran:
                    self.end_task(t, task, FINISHED, "finished", reason="run in series by its other parts")
        if len(jobs) == len(tasks):
            self.close_run(uid, unit=unit)
            if self.resizer is not None and self.resizer.units:
                self.resizer.ended(uid)
        else:
            us.run.remaining_s = us.run.remaining_work_s = None  # the services carry on

    def end_task(self, t: float, task: str, status: str, kind: str, rec: Any = None, **extra: Any) -> None:
        """A task ends (or stops, to run again: ``status`` pending), logged as
        ``kind`` with ``extra``; ``rec``: its record, when the caller has it."""
        if rec is None:
            rec = self._tasks[task]
        p = self.state.remove_placement(task) if task in self.state.placements else None
        where = {}
        if p is not None:
            self.business.release(rec.component, p.host.node)
            where = self.where(p.host.node)
        self.near_running.pop(task, None)
        if self.ready:
            self.ready.discard(task)
        self.returns.leave(task)
        self._beyond.discard(task)
        self.resched.migrating.pop(task, None)
        self.resched.disrupted.discard(task)
        self.ledger.ended(rec, status, t)
        self.log(t, kind, task=task, **where, **extra)

    def close_run(self, uid: int, stop_at: float | None = None, unit: Unit | None = None) -> Run:
        """Take a unit's run off the books. With ``stop_at`` the executor stops it
        early and the progress it kept is what the unit's next run starts from.
        ``unit``: the unit, when the caller has made it."""
        us = self._units[uid]
        run = us.run
        if stop_at is not None:
            self.executor.stop(run, stop_at)
            us.remaining_s, us.remaining_work_s = run.remaining_s, run.remaining_work_s
        else:
            self.executor.release(run, self.now)
        self.ledger.close(uid, run)
        self.count_running(us.unit if unit is None else unit, -1)
        return run

    def count_running(self, unit: Unit, step: int) -> None:
        """Keep the counts of running standings and priorities (``_preempt`` reads their least).
        Work that starts below what is running, or of another tenant, may be
        a victim for units parked for room: they look again."""
        standing, priority, tenant = self.business.standing(unit), unit.priority, unit.tenant
        levels, own = self._levels, self._own.get(tenant)
        if step > 0 and len(self._room):
            if not own or priority < min(own) or not levels or standing < min(levels):
                self.unpark(self._room.items())
        if own is None:
            own = self._own[tenant] = Counter()
        n = levels[standing] + step
        if n > 0:
            levels[standing] = n
        else:
            levels.pop(standing, None)
        n = own[priority] + step
        if n > 0:
            own[priority] = n
        else:
            own.pop(priority, None)
            if not own:
                del self._own[tenant]

    def checkpoint(self, t: float, uid: int) -> Run:
        """A checkpoint of a running unit at ``t``, before a resize stops it: its
        run keeps all its progress to ``t`` (its finish goes with the stop, as
        any stopped run's does: ``SimExecutor.stop``)."""
        run = self._units[uid].run
        run.checkpointed_at = t
        return run

    def shrink(self, t: float, uid: int, drop, pause: float) -> None:
        """A running gang goes on without the members ``drop`` (a resize in
        place): its run stops at a checkpoint, the dropped members' room is
        given back, and a new run of the others starts where they are, making
        no progress for ``pause``."""
        run = self.checkpoint(t, uid)
        self.close_run(uid, stop_at=t)
        for task in drop:
            self.end_task(t, task, PENDING, "resizing")
        self.pause[uid] = pause
        self.business.widths[uid] = len(run.tasks) - len(drop)
        self.started(t, uid)

    def stop_unit(self, t: float, uid: int, lost_node: int | None, kind: str | None = None) -> None:
        """Stop a unit's run (a member was lost, or it is resized: ``kind``) and queue it again, whole."""
        if self._units[uid].run is None:
            return
        run = self.close_run(uid, stop_at=t)
        for task in run.tasks:
            p = self.state.placements.get(task)
            said = kind or ("lost" if p is not None and p.host.node == lost_node else "requeued")
            self.end_task(t, task, PENDING, said)
        self.pending.add(uid)

    def exited(self, t: float, ev: TaskExited) -> None:
        """A task's process ended by itself. A job that ended well is done (the
        run finishes when all its jobs are); otherwise the component's restart
        policy may start it again in place, after a backoff; else the run ends:
        a service that exited 0 finished, anything else failed."""
        uid = self.current(ev.run_id)
        if uid is None:
            return  # a run stopped meanwhile
        run = self._units[uid].run
        rec = self._tasks[ev.task]
        comp = rec.component
        said = {"reason": ev.reason} if ev.reason else {}
        self.log(t, "exited", task=ev.task, code=ev.code, **said,
                 **self.where(self.state.placements[ev.task].host.node))
        if ev.task in self.ready:  # its process is gone: it serves no more, even if it starts again in place
            self.ready.discard(ev.task)
            self.log(t, "notReady", task=ev.task, run=ev.run_id, reason="its process ended")
        if ev.code == 0 and rec.job:
            run.exited = (run.exited or set()) | {ev.task}
            if all(task in run.exited for task in run.tasks if self._tasks[task].job):
                self.finished(t, ev.run_id)
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
        why = (f"{ev.reason}: " if ev.reason else "") + f"exit status {ev.code}" + \
            (f" after {done} restarts" if done else "")
        for task in self.close_run(uid).tasks:
            if self._tasks[task].status == RUNNING:
                self.end_task(t, task, status if task == ev.task else FAILED, status if task == ev.task else "failed",
                               reason=why if task == ev.task else f"{ev.task} ended: {why}")

    def _speed(self) -> float:
        """Scheduler seconds per real second (a sped-up wall clock)."""
        return getattr(self.loop.clock, "speed", 1.0)

    def restart(self, t: float, ev: Restart) -> None:
        uid = self.current(ev.run_id)
        if uid is None:
            return
        self.executor.restart(self._units[uid].run, ev.task, t)

    def delete(self, t: float, app: str, why: str) -> None:
        """The application is deleted (or its trace says it left): its running
        tasks stop, finished; those never placed fail."""
        self.log(t, why, app=app)
        for uid in self.ledger.by_app.get(app, ()):
            self._end_unit(t, uid, why)
        self._forget(app)
        if not self.keep_records:  # a server's: its store keeps the history; what the executor kept goes
            self.executor.forget(app)

    def _forget(self, app: str) -> None:
        """Drop what a deleted application's units held once all of them have ended:
        its records stay, with their times, status and class, but not its work
        (a long trace would otherwise keep every pod it ever replayed)."""
        self.ledger.forget(app, self.pending, self.keep_records)

    def schedule(self, t: float) -> None:
        """The instant's pass; then, while evictions or moves made room, the pass
        again (a loop, not a call in a call: a long chain of evictions within an
        instant once ran past Python's recursion limit; ``ROUNDS`` bounds it)."""
        rounds = 0
        while self._round(t):
            rounds += 1
            if rounds > ROUNDS + len(self._units):
                log.warning("t=%s: %d passes in one instant, each evicting or moving work; the rest waits "
                            "for the next instant", t, rounds)
                return

    def _round(self, t: float) -> bool:
        """One pass; True when it evicted or moved work (the evicted or moved work
        may fit elsewhere now: another pass)."""
        risen: dict = {}
        if len(self._room):
            risen, fresh = self._room.due()
            self.unpark(fresh)
        ready = self._bounded(t, self.pending.ready())
        if not ready and not risen:
            return False
        started = time.perf_counter() if self.on_pass is not None else 0.0
        if self.business.backfill is not None:
            self.business.backfill.begin(t)
        tried, failed, broken = self._pass(ready, risen)  # tried: in queue order
        if self.on_pass is not None and tried:
            self.on_pass(time.perf_counter() - started, len(tried))
        for unit, exc in broken:
            self.refuse(t, unit.app.name, exc)
        if broken:
            failed = [(u, reasons) for u, reasons in failed if u.seq in self.pending]
        still = {u.seq: reasons for u, reasons in failed}
        if self.state.cohorts:  # placed in this pass, started below one by one (``_borrowed``)
            self._ahead = self._cohort_use(uid for uid in tried if uid in self.pending and uid not in still)
        for uid in tried:
            if uid not in self.pending:
                continue  # refused above
            if uid in still:
                reasons = still[uid]
                if not self.pending.parked(uid):  # (a parked unit reached for room that did not fit stays so)
                    beyond = self._beyond_every_node(self._units[uid].unit)
                    offline = self._offline_near(self._units[uid].unit) if beyond is None else None
                    if beyond is not None:  # inadmissible: nothing but a larger node can change this
                        if waiting.ENABLED:
                            self.pending.park(uid, FLEET_GROWS)
                        reasons = beyond
                    elif offline is not None:  # nothing but the device's return can change this
                        self.pending.park(uid, offline[0])
                        reasons = Counter({Why("offline", site=self.world.fleet.sites[s].name): 1
                                           for s in dict.fromkeys(offline)})
                    else:
                        self._park_for_room(uid)
                self.ledger.unit_waits(self._units[uid].unit.tasks, reasons)
                continue
            self.unpark((uid,), wake=False)
            self.pending.discard(uid)
            self.started(t, uid, fresh=True)
        self._ahead = {}
        if risen:
            self._room.settle(risen)
        units = [u for u, _ in failed if not self.pending.parked(u.seq)]
        return bool(units) and bool(self.resched.reclaim_lent(t, units) or self.resched.preempt(t, units)
                                    or self.resched.reclaim(t, units) or self.resched.defragment(t, units))

    def _pass(self, ready: list[int], risen: dict) -> tuple[list[int], list, list]:
        """Try the ready units, and the parked ones that rows gained room for,
        as one pass that tried every waiting unit would: (units tried, in
        order; those that failed, with reasons; those whose placement raised).

        With one tenant waiting the pass's order is fixed (standing, then
        priority, then arrival), so the parked units are merged into it
        (``RoomWait.walk``) and the ready ones are placed in runs between
        them. With several, the parked units a risen row could hold are
        made ready and the pass runs as usual."""
        table = self.ledger.units
        if risen:
            units = [table.unit_of(uid) for uid in ready]
            if len({u.tenant for u in units} | set(self._room.tenants)) > 1:
                self.unpark(self._room.fitting(risen))
                ready = self._bounded(self.now, self.pending.ready())
                risen = {}
        broken: list = []
        if not risen:  # (units kept as columns are made as the pass comes to them)
            return ready, self.business.run_ids(ready, table.key_of, table.unit_of, record=False, broken=broken), broken
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
        if not waiting.ENABLED or len(unit.tasks) != 1 or needs_whole_devices(unit) or self.business.backfill:
            return  # (with backfill, a reservation's start may let it through: it is tried at every pass)
        comp = unit.components[0]
        tenant = self.world.tenants.get(unit.tenant)
        vcs = self.state.vcs[unit.app.vc]
        if (comp.near is None or comp.near.max_rtt_ms is None or comp.anti_affinity is not None
                or tenant is None or tenant.quota or not vcs.default or not self._outranks_nothing(unit)):
            return
        req = self.business.request(comp, unit.tenant, unit.state_site(0))
        ever = nearby.ever_rows(vcs.table, req)  # the rows that could ever hold it, and their sites
        if ever is None:
            return
        self.pending.park(uid, ("room", uid))
        self._room.add(uid, vcs.table, *ever, req, self._pass_key(unit), unit.tenant)
        site = self.world.fleet.site_index[comp.near.site]
        self._room_near.setdefault(site, set()).add(uid)
        self._room_site[uid] = site

    def _outranks_nothing(self, unit: Unit) -> bool:
        """Nothing running is of lower standing, or of lower priority in its
        tenant, and no other tenant runs work (``_preempt`` and ``_reclaim``
        would not look for victims for it)."""
        if self.resched.on and any(t != unit.tenant for t in self._own):
            return False
        if self._levels and self.business.standing(unit) > min(self._levels):
            return False
        own = self._own.get(unit.tenant)
        return not own or unit.priority <= min(own)

    def unpark(self, uids, wake: bool = True) -> None:
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

    def _beyond_every_node(self, unit: Unit) -> Reasons | None:
        """Reasons, the bound binding, when a member asks more of one resource
        on one node than any node of the fleet has (cpu, memory, or devices of
        a kind and models): the unit is inadmissible, and only the fleet's
        growth can change that (``grow_fleet`` wakes every parked unit). None
        otherwise: it may still wait for room."""
        fleet = self.world.fleet
        for comp in unit.distinct_components():
            why = beyond_every_node(fleet, self.business.request(comp, unit.tenant), self.state.nodes.n_retired)
            if why is not None:
                return bound(why)
        if unit.couplings and len(unit.tasks) > 1:
            why = self._beyond_every_domain(unit)
            if why is not None:
                return bound(why)
        return None

    def _beyond_every_domain(self, unit: Unit) -> Why | None:
        """Why a gang can never be placed: fewer of its members than it needs
        (its size, or an elastic gang's least) fit in the largest domain of
        its coupling, even with the domain empty (members per node: what the
        node holds of each resource over what a member asks, on the nodes a
        member could use at all; retired nodes left out). Kept per shape
        until the fleet changes."""
        table, fleet = self.state.nodes, self.world.fleet
        key = (unit_shape(unit), unit.couplings, fleet.n_nodes, table.n_retired, id(fleet.network))
        if key in self._domain_bounds:
            return self._domain_bounds[key]
        domain, levels = couplings_domain(table, fleet.network, unit.couplings)
        per_row = np.full(table.n, np.iinfo(np.int64).max // 4, np.int64)
        for comp in unit.distinct_components():
            req = self.business.request(comp, unit.tenant)
            cols = np.flatnonzero(req.vec > 0)
            fit = (table.view("cap")[cols] // req.vec[cols, None]).min(axis=0) if cols.size else per_row
            per_row = np.minimum(per_row, np.where(static_mask(table, req), fit, 0))
        live = (domain >= 0) & ~fleet.retired[table.view("node")]
        held = np.bincount(domain[live], weights=np.minimum(per_row[live], len(unit.tasks))) if live.any() else []
        most = int(max(held, default=0))
        need = unit.min_members or len(unit.tasks)
        why = None if most >= need else \
            Why("inadmissible", "domain", domain=Domain(levels), fits=most, members=need)
        if len(self._domain_bounds) > 256:
            self._domain_bounds.clear()
        self._domain_bounds[key] = why
        return why

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

    def refuse(self, t: float, app: str, exc: Exception) -> None:
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
                for task in self.close_run(uid).tasks:
                    self.end_task(t, task, FAILED, "failed", reason=why)
            self.pending.discard(uid)
            self.unpark((uid,))
            for task in us.unit.tasks:
                if self._tasks[task].status == PENDING:
                    self.end_task(t, task, FAILED, "failed", reason=why)
        self._forget(app)

    def started(self, t: float, uid: int, fresh: bool = False) -> None:
        """A unit's placed tasks start as one run. ``fresh``: placed by this
        instant's pass, so within their bounds (no path to look up)."""
        us = self._units[uid]
        unit = us.unit  # (the object itself, or made again when kept as columns)
        unit.state_sites = ()
        placed = [task for task in unit.tasks if task in self.state.placements]
        left_out = self.business.left_out.pop(uid, None)
        if len(placed) < len(unit.tasks):  # an elastic gang placed below its size: why, the binding bound first
            if left_out is None:
                left_out = Counter({Why("elastic", "parts" if unit.components[0].parts else None, placed=len(placed),
                                        members=len(unit.tasks)): 1})
            why = why_json(left_out)
            on = set(placed)  # (a gang shrunk in place keeps the members it chose, not a prefix)
            for task in (task for task in unit.tasks if task not in on):
                self.end_task(t, task, OMITTED, "omitted", reason="; ".join(w["reason"] for w in why), why=why)
        lead = unit.components[0]
        ledger = self.ledger
        tasks = unit.tasks if len(placed) == len(unit.tasks) else tuple(placed)  # (all: shared)
        run = Run(ledger.next_run_id(), tasks, len(placed), t, us.remaining_work_s, us.remaining_s,
                  lead.efficiency, lead.checkpoint_every_s if lead.stateful else None)
        if self.pause:
            run.paused_s = self.pause.pop(uid, 0.0)  # a resized gang's restart
        if lead.scaling is not None:  # a model that reads how the members spread
            run.scaling, run.fabric = lead.scaling, lead.coupling
            run.placement = members_per_node(self.state.placements[task].host.node for task in placed)
        if ledger.start(uid, run, compact=not getattr(self.executor, "holds_runs", True), unit=unit):
            self.count_running(unit, +1)
        tab = self._tasks
        ids, moving = tab.ids, tab.moving
        comps = unit.components
        comp_of = dict(zip(unit.tasks, comps)) if len(comps) > 1 else None  # (the records': the same objects)
        borrowed = self._borrowed(uid) if self.state.cohorts else {}
        host_of = self.state.placements.host_of
        for task in placed:
            i = ids[task]
            vc, host = host_of(task)
            ledger.placed(i, t)
            self.track_near(task, comps[0] if comp_of is None else comp_of[task], host.node, fresh)
            where = self.where(host.node)
            self.log(t, "placed", task=task, **where, host=host.name, vc=vc, **borrowed)
            if moving and i in moving:  # a service that stopped to move: priced from where it left
                self.resched.log_move(t, tab[task], host.node)  # started when its state arrives
            else:
                self.resched.disrupted.discard(task)
                self.log(t, "started", task=task, **where)
        self.executor.start(run, t)

    # ------------------------------------------------------------ backfill

    def use_backfill(self, mode: str, depth: int) -> None:
        """Passes with reservations (``backfill.py``), or first fit (``off``)."""
        self.business.backfill = None if mode == "off" else \
            Backfill(mode, depth, self._expected_ends, self._expected_run)

    @staticmethod
    def _time_limit(unit: Unit) -> float | None:
        """A unit's time limit: its components' longest, when each states one."""
        limits = [c.time_limit_s for c in unit.distinct_components()]
        return None if None in limits else max(limits)

    def _expected_ends(self) -> list[tuple[float, list]]:
        """The running units' expected ends (their time limit, else when the
        executor expects them to finish; services never end) and what they
        hold on the node table."""
        state, out = self.state, []
        for uid in self.view.running():
            us = self._units[uid]
            run = us.run
            limit = self._time_limit(us.unit)
            end = run.started_at + limit if limit is not None else run.finish_at
            if end is None:
                continue
            allocs = [p.alloc for task in run.tasks if state.vcs[(p := state.placements[task]).vc].default]
            if allocs:
                out.append((max(end, self.now), allocs))
        return out

    def _expected_run(self, unit: Unit) -> float:
        """A waiting unit's expected run: its time limit, else what is left of
        its duration or work at its size (inf: a service, or unknown)."""
        limit = self._time_limit(unit)
        if limit is not None:
            return limit
        us = self._units[unit.seq]
        if us.remaining_s is not None:
            return us.remaining_s
        if us.remaining_work_s is not None:
            lead = unit.components[0]
            if lead.scaling is not None:
                return time_to_finish(lead.scaling, us.remaining_work_s, len(unit.tasks))
            return us.remaining_work_s / speed(len(unit.tasks), lead.efficiency)
        return float("inf")

    def _cohort_use(self, uids) -> dict[int, np.ndarray]:
        """What placed units of cohort members hold against their tenants'
        quotas (default VCs' tasks), summed per tenant row."""
        state = self.state
        out: dict[int, np.ndarray] = {}
        for uid in uids:
            unit = self._units[uid].unit
            i = state.tenant_index[unit.tenant]
            if state.cohorts.of[i] < 0:
                continue
            for task in unit.tasks:
                p = state.placements.get(task)
                if p is not None and state.vcs[p.vc].default:
                    out[i] = out[i] + p.alloc.vec if i in out else p.alloc.vec.astype(np.int64)
        return out

    def _borrowed(self, uid: int) -> dict[str, Any]:
        """What the placed events of a unit starting now say when, started in
        this order, it takes its tenant above its quota: it runs on quota
        borrowed in its cohort, from whom (those lending most first). The
        units of the same pass not started yet are not counted
        (``_ahead``)."""
        state = self.state
        unit = self._units[uid].unit
        i = state.tenant_index[unit.tenant]
        if state.cohorts.of[i] < 0:
            return {}
        ahead = self._ahead.get(i)
        if ahead is not None:
            ahead -= self._cohort_use((uid,)).get(i, 0)
        after = state.used[i] - (ahead if ahead is not None else 0)
        if not (after > state.cohorts.nominal[i]).any():
            return {}
        names = [state.tenant_names[r] for r in state.cohorts.lenders(state.used, i)]
        if not names:
            return {}
        return {"borrowed_from": names, "reason": "running on quota borrowed from tenant " + ", ".join(names)}

    def track_near(self, task: str, comp: Component | None = None, node: int = -1, fresh: bool = False) -> None:
        """Keep ``near_running`` to the running tasks placed away from their
        ``near`` site: only they can move closer, or be beyond their bound.
        (``comp``: the task's component, when the caller has its record;
        ``node``: where it is placed, when the caller has read that;
        ``fresh``: placed by this instant's pass, which places within bounds
        only, so not beyond its bound.)"""
        if comp is None:
            comp = self._tasks[task].component
        if comp.near is None:
            return
        if node < 0:
            node = self.state.placements[task].host.node
        if self.names_of(node)[1] != comp.near.site:  # names are unique
            if task not in self.near_running:
                self.returns.enter(task)
            self.near_running[task] = comp
            self.returns.wake((task,))  # placed anew: its answer may differ
            if fresh:
                self._beyond.discard(task)
            else:
                self._near_status(task, node)
        else:  # at home: no site index parsed from its name
            self.near_running.pop(task, None)
            self.returns.leave(task)
            self._beyond.discard(task)

    def _near_status(self, task: str, node: int = -1) -> None:
        """Whether ``task`` (running away from its near site; placed on
        ``node``, when the caller has read it) is now beyond its bound."""
        comp = self.near_running.get(task)
        if comp is None or comp.near.max_rtt_ms is None:  # at home, or a preference only
            self._beyond.discard(task)
            return
        fleet = self.world.fleet
        if node < 0:
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

    def near_violations(self) -> int:
        """Running tasks now farther from their near site than their bound
        (placement never does this; links going down can): kept as tasks
        start, move and end, and as paths change, not counted at each instant."""
        return len(self._beyond)

    # ------------------------------------------------------------ what the global layer tells it

    def stop_tasks(self, t: float, tasks, node: int) -> None:
        """``node`` went down (or left): the units of its ``tasks`` stop and wait again, whole."""
        for uid in dict.fromkeys(self._tasks[task].unit for task in tasks):
            self.stop_unit(t, uid, node)

    def paths_changed(self, sites: set[int] | None, own: bool, reach: set[int] | None = None) -> None:
        """Paths changed (at ``sites`` only, when given; ``own``: they are
        private devices' own sites; ``reach``: the sites whose work could go
        to one of them, before or after): requests compiled against the old
        ones go, what waited on a device may find one, and the running tasks
        away from their near site are checked again."""
        name = self.world.fleet.site_table.names.name
        near = sites if own else (sites | reach) if sites is not None and reach is not None else None
        self.business.forget_requests({name(s) for s in near} if near is not None else None)
        if sites is None:
            self.pending.wake_all()  # paths changed anywhere: what waited on a device may find one
        checked = self._recheck_near(sites)
        if near is None:
            self.returns.wake_all()  # a site others may move to: every answer may change
            self.unpark(self._room.items())
            return
        if not own:  # work bound near the sites around it that could run there may move there now, or no longer
            for s in reach:
                for uid in self.view.bound_near(name(s)):
                    run = self._units[uid].run
                    if run is not None:
                        checked += [task for task in run.tasks
                                    if task in self.near_running and self._could_run_at(task, sites)]
        self.returns.wake(checked)
        self.unpark([uid for s in near for uid in self._room_near.get(s, ())])

    def _could_run_at(self, task: str, sites: set[int]) -> bool:
        """Could running ``task`` be placed on a node of ``sites`` (its VC's
        rows there, by what they are and where, its near bound aside)? A site
        that relays nothing changes no path but its own: a task that could
        never run there gives the same answer as before it moved."""
        p = self.state.placements.get(task)
        if p is None:
            return True
        table = self.state.vcs[p.vc].table
        order, start = nearby.site_rows(table)
        rows = [order[start[s]:start[s + 1]] for s in sites if s + 1 < start.size]
        rows = np.concatenate(rows) if rows else order[:0]
        if rows.size == 0:
            return False
        rec = self._tasks[task]
        req = self.business.request(rec.component, rec.tenant)
        return bool(nearby.static_ok(table, req, np.sort(rows), within=True).any())

    def wake_all(self) -> None:
        """Room may have appeared anywhere (nodes, hosts, tenancy changed): every waiting unit looks again."""
        self.pending.wake_all()
        self.unpark(self._room.items())


def cannot_schedule(exc: BaseException) -> str:
    """The reason an application fails when handling it raised: the error, shortly."""
    text = str(exc)
    return f"cannot be scheduled: {type(exc).__name__}" + (f": {text[:200]}" if text else "")
