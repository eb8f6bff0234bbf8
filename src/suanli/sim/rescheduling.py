"""The rescheduler as one object: what moves running work, and its books.

``Rescheduler`` makes the voluntary and forced moves of a simulation, by the
plans of ``moves`` (preemption, fair-share reclaim, defragmentation, return
moves, moves off a node a device claims, moves back within a bound a link
failure broke), and keeps what they need between instants: the migrations in
flight, the tasks stopped to move (counted per component for disruption
budgets), the instants reclaim and defragmentation last ran. It stops and
requeues work through the shard (``close_run``, ``end_task``, ``pending``).

The plans read the whole simulation (tables, ledger, queue): they are given
``sim``, the composition root, and change nothing; this object applies them.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from suanli.engine.loop import EventLoop
from suanli.model.work import Component, World
from suanli.scheduling.business_layer import BusinessLayer, Unit, unit_shape
from suanli.scheduling.request import Request
from suanli.scheduling.state import PlacementState
from suanli.spec.schema import ReschedulingPolicy
from suanli.sim.defrag import needs_whole_devices
from suanli.sim.ledger import PENDING, TaskRecord
from suanli.sim.logbook import Logbook
from suanli.sim.loop_events import MoveDone
from suanli.sim.moves import (HYSTERESIS, Held, Plan, apply_plan, bound_plan, claim_plan, defrag_plan, held_by,
                              lent_plan, preempt_plan, reclaim_plan, return_plans)
from suanli.sim.rescheduler import FAIR_MARGIN, broken_units, serves_again_s


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


class Rescheduler:
    def __init__(self, sim: Any, shard: Any, world: World, state: PlacementState, business: BusinessLayer,
                 loop: EventLoop, book: Logbook, policy: ReschedulingPolicy) -> None:
        self.sim, self.shard, self.world, self.state, self.business, self.loop = sim, shard, world, state, business, loop
        self.log, self.where = book.log, book.where
        self.ledger = shard.ledger
        self._tasks, self._units = shard._tasks, shard._units
        self.policy = policy
        self.on = policy.enabled  # off: no voluntary moves (preemption by standing still happens)
        self.migrating: dict[str, tuple[int, float]] = {}  # tasks moving, until they serve again -> (move, when)
        self.disrupted = Disrupted()  # tasks stopped to move, until they run again
        self._moves = 0
        self._reclaimed_at: float | None = None
        self._defragged_at: float | None = None

    def preempt(self, t: float, failed: list[Unit]) -> bool:
        """Evict the cheapest preemptible units a waiting unit outranks that
        make it fit, highest standing first: its own tenant's work of lower
        priority, other tenants' work of lower standing (``outranks``). Each
        eviction strictly lowers (standing, priority), so passes end."""
        standing = self.business.standing
        if not self.shard._levels:
            return False
        lowest = min(self.shard._levels)  # the lowest standing running (a few distinct values)
        own = {tenant: min(p) for tenant, p in self.shard._own.items()}  # per tenant, its lowest priority running
        if lowest is None:
            return False
        units = [u for u in sorted(failed, key=lambda u: (-standing(u), -u.priority, u.seq))
                 if standing(u) > lowest or u.priority > own.get(u.tenant, u.priority)]  # (others outrank nothing running)
        return self._made(t, units, preempt_plan, unit_shape) > 0

    def _made(self, t: float, units: list[Unit], plan_of, shape_of) -> int:
        """Plan and make, unit by unit in order, what ``plan_of`` plans for
        the ones still waiting; a shape (``shape_of``) that found no plan is
        not planned again (the same shape would not find one either).
        Returns the plans made."""
        made = 0
        hopeless: set[tuple] = set()
        for unit in units:
            shape = shape_of(unit)
            if unit.seq not in self.shard.pending or shape in hopeless:
                continue
            plan = plan_of(self.sim, unit)
            if plan is None:
                hopeless.add(shape)
                continue
            apply_plan(self.sim, t, plan)
            made += 1
        return made

    def reclaim_lent(self, t: float, failed: list[Unit]) -> bool:
        """Cohort reclaim: a waiting unit that asks within its tenant's own
        quota, while other members of its cohort run on quota they borrowed,
        evicts the cheapest set of that borrowed work that makes it fit (as
        its tenant's ``reclaimWithinCohort`` allows). Each eviction lowers
        what the cohort borrows, so passes end."""
        cohorts = self.state.cohorts
        if not cohorts or not cohorts.borrowed(self.state.used).any():
            return False
        standing = self.business.standing
        units = sorted(failed, key=lambda u: (-standing(u), -u.priority, u.seq))
        return self._made(t, units, lent_plan, lambda u: (u.tenant, unit_shape(u))) > 0

    def reclaim(self, t: float, failed: list[Unit]) -> bool:
        """Fair-share reclaim, once per instant: a waiting unit of a tenant below
        its weighted share takes back room from tenants above theirs (their
        cheapest preemptible work of no higher standing), only if that makes
        it fit and leaves them no lower than the claimant."""
        if not self.on or self._reclaimed_at == t:
            return False
        self._reclaimed_at = t
        share = self.state.share_by_tenant()
        top = max(share.values(), default=0.0)
        reclaimed = 0
        hopeless: set[tuple] = set()
        standing = self.business.standing
        for unit in sorted(failed, key=lambda u: (-standing(u), share[u.tenant], -u.priority, u.seq)):
            shape = unit_shape(unit)
            if unit.seq not in self.shard.pending or shape in hopeless or share[unit.tenant] * (1 + FAIR_MARGIN) >= top:
                continue
            plan = reclaim_plan(self.sim, unit)
            if plan is None:
                hopeless.add(shape)
                continue
            apply_plan(self.sim, t, plan)
            reclaimed += 1
        return reclaimed > 0

    def defragment(self, t: float, failed: list[Unit]) -> bool:
        """Once per instant: for waiting units that need whole devices, move
        fractional tasks together so whole devices come free, when that makes
        the unit fit (see ``defrag``)."""
        if not self.on or self._defragged_at == t:
            return False
        self._defragged_at = t
        placed = False
        hopeless: set[tuple] = set()
        standing = self.business.standing
        for unit in sorted(failed, key=lambda u: (-standing(u), -u.priority, u.seq)):
            shape = unit_shape(unit)
            if unit.seq not in self.shard.pending or shape in hopeless or not needs_whole_devices(unit):
                continue
            plan = defrag_plan(self.sim, unit)
            if plan is None:
                hopeless.add(shape)
                continue
            placed |= apply_plan(self.sim, t, plan)
        return placed

    def return_moves(self, t: float) -> None:
        """This instant's return moves, those budgets and the migration limit allow."""
        if self.shard.near_running and len(self.migrating) < self.policy.max_concurrent_migrations:
            for plan in return_plans(self.sim, t):
                if self.allowed(plan):
                    apply_plan(self.sim, t, plan)

    def allowed(self, plan: Plan) -> bool:
        """May ``plan`` be made now?"""
        return self._free(plan.held)

    def _free(self, held: Held | None) -> bool:
        """Nothing holds it back. When hysteresis does, there will be an
        instant when it ends, to look again."""
        if held is not None and held.by == HYSTERESIS:
            self.sim.wake_at(held.until)
        return held is None

    def evict(self, t: float, uid: int, cause: str, by: Unit | None = None, **why: Any) -> None:
        """Stop a running unit and queue it again whole. Services move: their
        next start is a migration, and a stateful one may go only where its
        state can follow. Jobs resume from their last checkpoint."""
        run = self.shard.close_run(uid, stop_at=t)
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
            self.shard.end_task(t, task, PENDING, "preempted", cause=cause, **extra, **why)
            self.disrupted.add(task, rec.component)
        if any(s >= 0 for s in held):
            by_task = dict(zip(run.tasks, held))
            unit.state_sites = tuple(by_task.get(task, -1) for task in unit.tasks)
        self.shard.pending.add(uid)

    def log_move(self, t: float, rec: TaskRecord, to: int, **cause: Any) -> None:
        """A moved service: stopped, its state travels over the path, restored.
        It is placed now and ``started`` when its state has arrived and it has
        restarted (the policy's ``restartTime``); until then it is a migration
        in flight, stateless or not."""
        fleet = self.world.fleet
        state_bytes = rec.component.state_mib * 2**20 if rec.component.stateful else 0
        ready = serves_again_s(self.sim, rec.component, rec.moved_from, to)
        downtime = (t - rec.stopped_at) + ready
        self.log(t, "migrated", task=rec.task, **{"from": fleet.node_name(rec.moved_from)},
                  to=fleet.node_name(to), bytes=int(state_bytes), downtime_s=round(float(downtime), 6), **cause)
        self.ledger.moved(rec, t)
        self._moves += 1
        self.migrating[rec.task] = (self._moves, t + ready)
        self.loop.schedule(t + ready, MoveDone(rec.task, self._moves))

    def move_done(self, t: float, ev: "MoveDone") -> None:
        if self.migrating.get(ev.task, (None,))[0] != ev.move:
            return  # the task stopped again before its state arrived
        del self.migrating[ev.task]
        self.disrupted.discard(ev.task)
        p = self.state.placements[ev.task]
        self.log(t, "started", task=ev.task, **self.where(p.host.node))

    def may_disturb(self, uid: int, moves: int = 0) -> bool:
        """May a voluntary move (return, reclaim, defragmentation, drain) stop
        this running unit now? (``moves.held_by``: within its components'
        disruption budgets, the migration limit and hysteresis.)"""
        return self._free(held_by(self.sim, uid, moves=moves))


    def claim_room(self, t: float, req: Request, row: int) -> None:
        """Local work claims ``req`` on node ``row`` and what is free there is
        short: the work in the way moves off, cheapest first, when it can."""
        room = claim_plan(self.sim, req, row)
        if room is not None:
            apply_plan(self.sim, t, room)

    def bounds_broken(self, t: float, sites: set[int] | None) -> None:
        """Paths changed (at ``sites`` only, when given): running units whose
        bound broke move back within it, or wait."""
        if self.on:
            for uid, reason in broken_units(self.sim, sites).items():
                apply_plan(self.sim, t, bound_plan(uid, reason))
