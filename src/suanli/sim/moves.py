"""Every rescheduling mechanism in one shape: plans of moves, applied in one place.

A mechanism looks at what is waiting or what was triggered and plans, without
changing anything, the moves it would make, as ``Plan``s:

| mechanism | triggered by | moves |
|---|---|---|
| ``return`` | a running service away from its ``near`` site, room closer | the service, relocated |
| ``preempt`` | a waiting unit that outranks running work | the cheapest set it outranks, evicted |
| ``reclaim`` | a waiting unit of a tenant below its weighted share | work of tenants above theirs, evicted |
| ``lent`` | a waiting unit within its tenant's quota, which its cohort lent out | work on borrowed quota, evicted |
| ``defragment`` | a waiting whole-device unit, free share scattered | fractional tasks, relocated |
| ``drain`` | a node being drained | each unit on it, evicted (services migrate) |
| ``claim`` | local work claiming a node's capacity (``deviceBusy``) | the cheapest set that makes it fit, evicted |
| ``bound`` | a link change that broke a unit's near or data bound | the unit, evicted |

``apply_plan`` makes a plan: evictions (a unit stops and waits again whole; its
services migrate when placed), relocations (a running task placed elsewhere,
its run goes on), then the waiting unit it made room for. Each plan has a
cost (``cost``: tasks disturbed, state to move, the downtime a relocation
costs, the highest priority evicted) and, where the mechanism weighs one, a
gain. Voluntary plans (returns, reclaim, defragmentation, drains) may be
held back: by a task's ``hysteresis``, its component's disruption budget or
the migration limit (``held``, with the time it may go when that is known).
``suanli plan`` lists every mechanism's plans in this shape, held ones
included (``plan.dry_run``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterator

from suanli.phrases import text
from suanli.scheduling.business_layer import Unit
from suanli.scheduling.filters import fits_row
from suanli.scheduling.preempt import Victim, plan_preemption
from suanli.scheduling.reasons import Why
from suanli.scheduling.statement import Statement
from suanli.scheduling.table import Allocation
from suanli.sim.defrag import plan_defrag
from suanli.scheduling.select import allocation
from suanli.sim.rescheduler import (DryRoom, lent_victims, plan_returns, reclaim_keeps_order, relocate, serves_again_s,
                                   victims)

HYSTERESIS, BUDGET, MIGRATIONS = "hysteresis", "disruption budget", "migration limit"


@dataclass(frozen=True, slots=True)
class Held:
    """Why a voluntary plan may not be made now, and when it may (``until``:
    None when that hangs on a move in flight whose end is not known yet,
    such as an evicted replica not placed again)."""

    by: str  # HYSTERESIS, BUDGET or MIGRATIONS
    until: float | None = None
    after: tuple[str, ...] = ()  # the moving tasks it waits for

    def json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"by": self.by, "until_s": None if self.until is None else round(self.until, 6)}
        if self.after:
            out["after"] = list(self.after)
        return out


@dataclass(slots=True)
class Plan:
    mechanism: str  # return, preempt, reclaim, defragment, drain, claim, bound
    cause: str  # the cause its preempted and migrated events carry
    evict: tuple[int, ...] = ()  # units stopped and queued again whole
    relocate: tuple[tuple[str, Allocation], ...] = ()  # running tasks placed elsewhere, their runs go on
    unit: Unit | None = None  # the waiting unit it makes room for, placed right after
    reason: str | None = None  # what its events say
    gain: float | None = None  # in points of the placement scores, where the mechanism weighs one
    held: Held | None = None
    shrink: tuple[tuple[int, tuple[str, ...]], ...] = ()  # running elastic gangs that go on without these members


# ------------------------------------------------------------ held back

def held_by(sim, uid: int, planned: Counter | None = None, moves: int = 0) -> Held | None:
    """May a voluntary move stop running unit ``uid`` now? None if so, else
    what holds it back: a task moved less than ``hysteresis`` ago; its
    components' disruption budget (a gang: another member moving); or the
    migration limit (``moves`` planned now, plus those in flight).
    ``planned``: a dry run's moves planned but not made yet, per (app,
    component) (made moves are in ``sim.disrupted``); only a dry run is told
    when a move held by the budget or the limit may go, which takes a look
    over the moves under way."""
    policy = sim.policy
    unit = sim.view.units[uid].unit
    services = sum(1 for c in unit.components if c.lifetime == "service")  # jobs requeue, not migrate
    ahead = sum(planned.values()) if planned else 0
    if len(sim.migrating) + moves + ahead + services > policy.max_concurrent_migrations:
        if planned is None:
            return Held(MIGRATIONS)
        ends = [when for _, when in sim.migrating.values()]
        return Held(MIGRATIONS, min(ends) if ends and not ahead else None)
    tasks = sim.view.tasks
    for task in unit.tasks:
        last = tasks[task].last_move_at
        if last is not None and sim.now - last < policy.hysteresis:
            return Held(HYSTERESIS, last + policy.hysteresis)
    if not sim.disrupted and not planned:
        return None
    moving = sim.disrupted.counts
    members = Counter((c.app, c.name) for c in unit.components)
    for comp in unit.distinct_components():
        key = (comp.app, comp.name)
        limit = 0 if comp.gang else policy.budget(comp.size)
        ahead = planned[key] if planned else 0
        if moving[key] + ahead + (0 if comp.gang else members[key]) > limit:
            return Held(BUDGET) if planned is None else _budget_held(sim, key, bool(ahead))
    return None


def _budget_held(sim, key: tuple[str, str], planned: bool) -> Held:
    """Held by a component's budget: until the first of its moving tasks serves
    again (known once all of them are placed and their moves in flight)."""
    moving = [task for task in sim.disrupted if sim.disrupted.key(task) == key]
    ends = [sim.migrating[task][1] for task in moving if task in sim.migrating]
    known = len(ends) == len(moving) and not planned
    return Held(BUDGET, min(ends) if known and ends else None, tuple(sorted(moving)))


# ------------------------------------------------------------ the mechanisms

def preempt_plan(sim, unit: Unit) -> Plan | None:
    """Evict the cheapest running work ``unit`` outranks that makes it fit;
    an elastic gang it outranks is shrunk (members above its least) before
    any gang is stopped whole."""
    found = victims(sim, unit)
    shrunk = _shrink_plan(sim, unit, found)
    if shrunk is not None:
        return shrunk
    plan = plan_preemption(sim.business, unit, found)
    return Plan("preempt", "priority", tuple(v.key for v in plan), unit=unit) if plan else None


def _shrink_plan(sim, unit: Unit, found: list) -> Plan | None:
    """A plan that shrinks elastic gangs (each member above a gang's least a
    victim of its own, cheaper than any whole unit of its level) and evicts
    what else it must; None when no shrink is in the cheapest set."""
    resizer = sim.shard.resizer
    if resizer is None or not resizer.units:
        return None
    members, whole, of = [], [], {}
    for v in found:
        drop = resizer.shrinkable(v.key)
        if not drop:
            whole.append(v)
            continue
        held = dict((task, pair) for task, pair in zip(sim.view.units[v.key].run.tasks, v.held))
        for task in drop:
            key = -1 - len(of)  # (a member's key: negative, apart from units' ids)
            of[key] = (v.key, task)
            members.append(Victim(key, v.tenant, v.priority, 0, [held[task]], -float("inf"), v.level, False))
    if not members:
        return None
    plan = plan_preemption(sim.business, unit, members + whole)
    if not plan or not any(v.key < 0 for v in plan):
        return None
    shrink: dict[int, list[str]] = {}
    for v in plan:
        if v.key < 0:
            uid, task = of[v.key]
            shrink.setdefault(uid, []).append(task)
    return Plan("preempt", "priority", tuple(v.key for v in plan if v.key >= 0), unit=unit,
                shrink=tuple((uid, tuple(tasks)) for uid, tasks in shrink.items()))


def reclaim_plan(sim, unit: Unit) -> Plan | None:
    """Fair share: evict work of tenants above their weighted share (within
    budgets) that makes ``unit`` fit and leaves them no lower than its tenant."""
    plan = plan_preemption(sim.business, unit, victims(sim, unit, fair=True))
    if not plan or not reclaim_keeps_order(sim, unit, plan):
        return None
    return Plan("reclaim", "fair share", tuple(v.key for v in plan), unit=unit)


def lent_plan(sim, unit: Unit) -> Plan | None:
    """Cohort reclaim: ``unit``'s tenant gets back the quota its cohort lent,
    by evicting the cheapest set of work running on borrowed quota that
    makes the unit fit (``rescheduler.lent_victims``)."""
    plan = plan_preemption(sim.business, unit, lent_victims(sim, unit))
    if not plan:
        return None
    return Plan("lent", "cohort reclaim", tuple(v.key for v in plan), unit=unit,
                reason=f"reclaimed by its owner {unit.tenant}")


def defrag_plan(sim, unit: Unit) -> Plan | None:
    """Gather fractional tasks so ``unit`` finds the whole devices it needs."""
    moves = plan_defrag(sim, unit)
    if not moves:
        return None
    return Plan("defragment", "defragment", relocate=tuple(moves), unit=unit,
                reason=f"frees whole devices for {unit.tasks[0]}")


def return_plans(sim, t: float, dry: bool = False) -> Iterator[Plan]:
    """Return moves: services closer to their near site where the gain beats
    the cost (``rescheduler.plan_returns``), each checked against budgets and
    the migration limit as it comes (a made move counts for the next)."""
    policy = sim.policy
    room = policy.max_concurrent_migrations - len(sim.migrating)
    planned: Counter = Counter()
    taken = DryRoom() if dry else None
    for move in plan_returns(sim, t, policy.hysteresis, room if not dry else None, dry=taken):
        rec = sim.view.tasks[move.task]
        p = sim.state.placements[move.task]
        table = sim.state.vcs[p.vc].table
        a = allocation(table, sim.business.request(rec.component, rec.tenant), move.to_row)
        held = Held(HYSTERESIS, move.held_until) if move.held_until is not None else \
            held_by(sim, rec.unit, planned if dry else None)
        yield Plan("return", "return", relocate=((move.task, a),), reason="closer to its near site",
                   gain=move.gain, held=held)  # (a live caller makes it before the next is planned)
        if taken is not None and held is None:
            planned[(rec.component.app, rec.component.name)] += 1
            taken.take(table, a.row, a.vec)


def drain_plans(sim, dry: bool = False) -> Iterator[Plan]:
    """Each running unit on a draining node, in order, evicted within budgets."""
    planned: Counter = Counter()
    fleet = sim.world.fleet
    for node in list(sim.hosts.draining):
        tasks = sorted(sim.state.tasks_on(node))
        for uid in dict.fromkeys(sim.view.tasks[task].unit for task in tasks):
            if sim.view.units[uid].run is None:
                continue
            held = held_by(sim, uid, planned if dry else None)
            yield Plan("drain", "drain", (uid,), reason=f"node {fleet.node_name(node)} drained", held=held)
            if dry and held is None:
                planned.update((c.app, c.name) for c in sim.view.units[uid].unit.components)


def claim_plan(sim, req, row: int) -> Plan | None:
    """Room for a claim of ``req`` on node ``row`` (default VCs' running units
    there hold node capacity directly): the cheapest set, only as many as
    the claim needs, and only if together they make it fit. The set is
    minimal: a unit the claim fits without stays (evicted, it would come
    back to the node it left). None when no set makes it fit."""
    nodes, state = sim.state.nodes, sim.state
    units = {}
    for task in state.tasks_on(row):
        p = state.placements[task]
        uid = sim.view.tasks[task].unit
        if state.vcs[p.vc].default and sim.view.units[uid].run is not None:
            units[uid] = sim.view.units[uid].unit
    standing = sim.business.standing  # the claim is no tenant's: tenants count by standing
    cost = {uid: (standing(u), u.priority, sum(c.state_mib for c in u.distinct_components() if c.stateful),
                  len(u.tasks), uid)
            for uid, u in units.items()}
    held = {uid: [state.placements[task].alloc for task in sim.view.units[uid].run.tasks
                  if state.placements[task].host.node == row] for uid in units}
    with Statement() as probe:  # as if they had left: all undone before the real evictions
        probe.give(nodes, [a for uid in units for a in held[uid]])
        if not fits_row(nodes, req, row):
            return None
    chosen = []
    with Statement() as probe:
        for uid in sorted(units, key=cost.get):  # cheapest first, until it fits
            chosen.append(uid)
            probe.give(nodes, held[uid])
            if fits_row(nodes, req, row):
                break
        for uid in sorted(chosen[:-1], key=cost.get, reverse=True):  # then keep what it fits without, dearest first
            with Statement(probe) as back:
                back.take(nodes, held[uid])
                if fits_row(nodes, req, row):
                    back.commit()
                    chosen.remove(uid)  # evicted, it would only come back to this node
    if not chosen:
        return None
    return Plan("claim", "capacity claimed", tuple(chosen), reason=f"deviceBusy on {sim.world.fleet.node_name(row)}")


def bound_plan(uid: int, reason: Why) -> Plan:
    """A unit the network no longer supports (``rescheduler.broken_units``:
    the check its row now fails, in the plan's and its events' words)."""
    return Plan("bound", "bound broken", (uid,), reason=text(reason))


# ------------------------------------------------------------ applying, costing, showing

def apply_plan(sim, t: float, plan: Plan) -> bool:
    """Make ``plan``: its evictions, its relocations, then the unit it made
    room for. True if that unit was placed."""
    why = {"reason": plan.reason} if plan.reason is not None else {}
    for uid, drop in plan.shrink:
        sim.shard.resizer.shrink(t, uid, drop, f"{plan.cause}: room for {plan.unit.tasks[0]}" if plan.unit else
                                 plan.cause)
    for uid in plan.evict:
        sim.evict(t, uid, plan.cause, by=plan.unit, **why)
    for task, a in plan.relocate:
        relocate(sim, t, task, a, plan.cause, plan.reason or plan.cause)
    unit = plan.unit
    if unit is not None and sim.business.place(unit, record=False) is None:
        sim.pending.discard(unit.seq)
        sim.started(t, unit.seq)
        return True
    return False


def cost(sim, plan: Plan) -> dict[str, Any]:
    """What a plan disturbs: units and tasks, state to move, the downtime of
    its relocations (state over the path plus the restart) and of its evicted
    services (at least their restart: where they go is decided when they are
    placed again), the highest priority it evicts."""
    view, state = sim.view, sim.state
    evicted = [view.units[uid] for uid in plan.evict]
    tasks = [task for us in evicted for task in us.run.tasks] + [task for task, _ in plan.relocate] + \
        [task for _, drop in plan.shrink for task in drop]
    comps = [view.tasks[task].component for task in tasks]
    state_bytes = sum(c.state_mib * 2**20 for c in comps if c.stateful and c.lifetime == "service")
    downtime = sum(serves_again_s(sim, view.tasks[task].component, state.placements[task].host.node,
                                  _to_node(state, task, a)) for task, a in plan.relocate)
    services = sum(1 for us in evicted for task in us.run.tasks if view.tasks[task].component.lifetime == "service")
    downtime += services * sim.policy.restart_time  # at least: an evicted service restarts wherever it goes
    out: dict[str, Any] = {"units": len(evicted) + len({view.tasks[task].unit for task, _ in plan.relocate}),
                           "tasks": len(tasks), "state_bytes": int(state_bytes)}
    if plan.relocate or services:
        out["downtime_s"] = round(downtime, 6)
    if evicted:
        out["max_priority"] = max(us.unit.priority for us in evicted)
    return out


def _to_node(state, task: str, a: Allocation) -> int:
    """The node a relocation of ``task`` to ``a`` (a row of its VC's table) goes to."""
    return int(state.vcs[state.placements[task].vc].table.node[a.row])


def plan_json(sim, plan: Plan) -> dict[str, Any]:
    """One plan as ``suanli plan`` shows it (docs/simulation.md, the dry run)."""
    view, fleet, state = sim.view, sim.world.fleet, sim.state
    out: dict[str, Any] = {"kind": plan.mechanism}
    if plan.unit is not None:
        out["for"] = list(plan.unit.tasks)
        out["priority"] = plan.unit.priority
    if plan.evict:
        out["evict"] = [task for uid in plan.evict for task in view.units[uid].run.tasks]
    if plan.shrink:
        out["shrink"] = [{"gang": view.units[uid].unit.tasks[0], "without": list(drop)} for uid, drop in plan.shrink]
    if plan.relocate:
        out["move"] = []
        for task, a in plan.relocate:
            out["move"].append({"task": task, "from": fleet.node_name(state.placements[task].host.node),
                                "to": fleet.node_name(_to_node(state, task, a)),
                                **({"devices": list(a.slots)} if a.slots else {})})
    if plan.reason is not None:
        out["reason"] = plan.reason
    out["cost"] = cost(sim, plan)
    if plan.gain is not None:
        out["gain"] = round(plan.gain, 3)
    out["held"] = plan.held.json() if plan.held is not None else None
    return out
