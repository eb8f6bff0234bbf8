"""The rescheduler: return moves, and the victims preemption may choose from.

Return moves: running services brought closer to their
``near`` site when room appears there (infotainment coming back to the car),
and services whose bound a link failure broke moved back within it.

A move is planned only when its gain beats its cost: the gain is the rise in
the weighted near score, the cost the downtime of moving the service's state
over the path (one point per second), plus a margin; a task moved less than
``hysteresis`` ago stays, and at most ``maxConcurrentMigrations`` moves are
made per instant. Only single-task units move here; gangs and affinity groups
move whole with preemption.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from suanli.scheduling import nearby, scores
from suanli.scheduling.business_layer import TaskExtras, Unit
from suanli.scheduling.filters import feasible, static_checks, static_fits, static_mask
from suanli.scheduling.preempt import Victim
from suanli.scheduling.reasons import Why
from suanli.scheduling.select import pick

FAIR_MARGIN = 0.05  # a tenant gives back only while 5% above the claimant's weighted share
GAIN_MARGIN = 20.0  # points a move must clear beyond its cost, against flapping


@dataclass(frozen=True, slots=True)
class Move:
    task: str
    to_row: int
    gain: float
    held_until: float | None = None  # a dry run's move that hysteresis holds back until then


def transfer_s(fleet, from_node: int, to_node: int, state_bytes: int) -> float:
    """Seconds to move ``state_bytes`` between two nodes' sites: size over the
    path's bottleneck bandwidth, plus its rtt (nothing to move: no cost; no
    path: inf), as ``scores.transfer_s`` counts it for a placement."""
    if not state_bytes or from_node == to_node:
        return 0.0  # nothing to move, or it stays where it is
    a, b = fleet.node_site[from_node], fleet.node_site[to_node]
    return float(scores.transfer_s(fleet.network, int(b), np.array([a]), state_bytes)[0])


def serves_again_s(sim, comp, from_node: int, to_node: int) -> float:
    """Seconds from a service's placement elsewhere until it serves again: its
    state (if stateful) over the path, then its restart (``restartTime``)."""
    state_bytes = comp.state_mib * 2**20 if comp.stateful else 0
    return transfer_s(sim.world.fleet, from_node, to_node, state_bytes) + sim.policy.restart_time


class DryRoom:
    """What the return moves a dry run lists would take, per table and row: a
    dry run makes none of them, so the next task's look is kept off the rows
    they would fill (a live instant makes each move before the next look)."""

    def __init__(self) -> None:
        self._taken: dict[int, dict[int, np.ndarray]] = {}  # id(table) -> row -> vector
        self._arrays: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # id(table) -> (rows, vectors [R, k])

    def take(self, table, row: int, vec: np.ndarray) -> None:
        rows = self._taken.setdefault(id(table), {})
        rows[row] = rows[row] + vec if row in rows else vec.astype(np.int64)
        self._arrays.pop(id(table), None)

    def blocked(self, table, req) -> np.ndarray | None:
        """The rows where ``req`` no longer fits once what the listed moves
        take there is taken (by the resource vector); None when they take
        nothing on this table."""
        rows = self._taken.get(id(table))
        if not rows:
            return None
        got = self._arrays.get(id(table))
        if got is None:
            got = self._arrays[id(table)] = (np.fromiter(rows, np.int64, len(rows)),
                                             np.stack(list(rows.values()), axis=1))
        at, taken = got
        return at[~(table.free[:, at] - taken >= req.vec[:, None]).all(axis=0)]


def plan_returns(sim, t: float, hysteresis_s: float, limit: int | None, dry: DryRoom | None = None) -> Iterator[Move]:
    """Moves closer to their near site for the running tasks away from it that
    the watch says may have a new answer (``returns.ReturnWatch``), in the
    order they went away; at most ``limit``. Each move is given before the
    next task is looked at: the caller makes it (or not) first, so that the
    moves of one instant each see the room the others took. ``dry``: a dry
    run's look, which sets nothing aside, asks for no wake-up, includes the
    moves hysteresis holds back (with ``held_until``), and keeps off the rows
    what the moves it lists would take (``DryRoom``)."""
    fleet, state = sim.world.fleet, sim.state
    network = fleet.network
    watch = sim.returns
    moves = 0
    rest = watch.rest if dry is None else (lambda *a, **k: None)
    for task in (watch.due(t) if dry is None else list(sim.near_running)):
        if limit is not None and moves >= limit:
            break
        comp = sim.near_running[task]
        rec = sim.view.tasks[task]
        if comp.lifetime != "service" or len(sim.view.units[rec.unit].unit.tasks) > 1:
            rest(task)  # it never moves here (until it moves otherwise)
            continue
        held_until = None
        if rec.last_move_at is not None and t - rec.last_move_at < hysteresis_s:
            if dry is None:
                sim.wake_at(rec.last_move_at + hysteresis_s)  # it may return then
                rest(task, until=rec.last_move_at + hysteresis_s)
                continue
            held_until = rec.last_move_at + hysteresis_s
        p = state.placements[task]
        vcs = state.vcs[p.vc]
        table = vcs.table
        near = fleet.site_index[comp.near.site]
        req = sim.business.request(comp, rec.tenant)
        rows = nearby.candidate_rows(table, req) if req.near is not None else None
        watched = None
        blocked = dry.blocked(table, req) if dry is not None else None
        if rows is not None:  # the rows within its bound, with their rtts: no column over every site
            draws = nearby.DRAWS[0]
            row, here, there, watched = _closer_nearby(sim, table, vcs, req, rows, p.alloc.row, near, blocked)
            if nearby.DRAWS[0] != draws or comp.anti_affinity is not None or sim.world.tenants[rec.tenant].quota:
                watched = None  # its answer hangs on more than the rows it could go to
        else:
            to_near = network.rtt_to(near)
            here = to_near[table.site[p.alloc.row]]
            row, there = -1, here
            if here > fleet.site_table.intra_rtt_ms[near]:
                mask = feasible(table, req, TaskExtras(sim.business, vcs).checks(req, table))
                mask &= to_near[table.view("site")] < here
                if blocked is not None:
                    mask[blocked] = False
                if mask.any():
                    row = pick(table, req, mask, fleet.network, sim.rng)
                    there = to_near[table.site[row]]
        if row >= 0:
            before, after = scores.WEIGHTS["near"] * scores.near_of(np.array([here, there]),
                                                                    comp.near.max_rtt_ms is not None)
            downtime = serves_again_s(sim, comp, p.host.node, int(table.node[row]))
            if after - before > downtime + GAIN_MARGIN:
                moves += 1
                yield Move(task, row, float(after - before), held_until)
                continue
        if watched is not None:  # already on its site, nowhere closer, or not worth it: until they change
            rest(task, table, watched)


def _closer_nearby(sim, table, vcs, req, rows: np.ndarray, at: int, near: int,
                   blocked: np.ndarray | None = None) -> tuple[int, float, float, np.ndarray]:
    """``plan_returns``' choice over the rows within the request's bound:
    (the row ``select.pick`` would choose among those that fit and are closer
    to the near site than ``at`` is, or -1; the rtt of ``at``; of that row;
    the closer rows, whose changes could change the answer).
    ``nearby.pick`` is that choice: one row needs no scores and no draw, ties
    are drawn in row order."""
    fleet = sim.world.fleet
    rtt = nearby.row_rtt(req)
    k = np.searchsorted(rows, at)
    here = float(rtt[k]) if k < rows.size and rows[k] == at else \
        float(fleet.network.rtt(int(table.site[at]), near))  # beyond its bound now
    if here <= fleet.site_table.intra_rtt_ms[near]:
        return -1, here, here, rows[:0]  # already on its site
    masks = [m for _, m in TaskExtras(sim.business, vcs).checks(req, table)]
    closer = rows[rtt < here]
    inside = closer if blocked is None else closer[~np.isin(closer, blocked)]  # (a dry run's rows others fill)
    row = nearby.pick(table, req, rows, fleet.network, sim.rng, masks, inside=inside)
    return (row, here, float(rtt[np.searchsorted(rows, row)]), closer) if row >= 0 else (-1, here, here, closer)


def relocate(sim, t: float, task: str, a, cause: str, reason: str) -> None:
    """Move a running task to allocation ``a`` on its VC's table (another row,
    or other devices of the same row): its run goes on, it is placed again
    there and its state travels (``migrated``; started when it arrives)."""
    rec = sim.view.tasks[task]
    old = sim.state.placements[task]
    vcs = sim.state.vcs[old.vc]
    sim.state.remove_placement(task)
    sim.business.release(rec.component, old.host.node)
    vcs.table.take(a)
    sim.state.add_placement(task, rec.tenant, vcs, a)
    p = sim.state.placements[task]
    sim.business.acquire(rec.component, p.host.node)
    sim.track_near(task)
    sim.ledger.stopped_to_move(rec, old.host.node, t)
    sim.disrupted.add(task, rec.component)
    sim.log(t, "placed", task=task, **sim.where(p.host.node), host=p.host.name, vc=p.vc, reason=reason)
    sim.log_move(t, rec, p.host.node, cause=cause)
    sim.executor.move(sim.view.units[rec.unit].run, task, t)


def outranks(sim, unit: Unit, other: Unit) -> bool:
    """May ``unit`` evict ``other`` for priority? Within one tenant by their
    priorities; across tenants by their standings (each priority up to its
    tenant's ceiling), so a tenant's own priorities never reach past another
    tenant's work unless the admin granted a ceiling above it."""
    if other.tenant == unit.tenant:
        return other.priority < unit.priority
    return sim.business.standing(other) < sim.business.standing(unit)


def victims(sim, unit: Unit, fair: bool = False) -> list[Victim]:
    """Running units ``unit`` outranks, all preemptible, on the same table,
    holding something on a row the unit could use at all, none of its
    cohort's other members: what a member takes from another is decided by
    the cohort's reclaim alone (``lent_victims``, within the owner's
    ``reclaimWithinCohort``), so a member's work within its own quota is
    never evicted for another member's priority (which its owner would
    reclaim in turn), and an owner that reclaims ``never`` or
    ``lowerPriority`` does not evict more by priority. ``fair``: instead,
    units of no higher standing from other tenants above the unit's tenant's
    weighted share (fair-share reclaim). A unit that would run on quota its
    tenant borrows evicts no other tenant's work by priority: what it
    borrows its lender may reclaim, and the work it evicted may reclaim
    in turn (two cohorts whose quotas the fleet cannot hold at once would
    evict each other's work in a ring, an instant without end)."""
    share = sim.state.share_by_tenant() if fair else {}
    cohorts, index = sim.state.cohorts, sim.state.tenant_index
    cohort = int(cohorts.of[index[unit.tenant]])  # its cohort's own rules reclaim from its members (``lent_victims``)
    borrows = not fair and cohort >= 0 and _borrows(sim, unit, _need(sim, unit))
    table = sim.state.vcs[unit.app.vc].table
    standing = sim.business.standing
    mine = standing(unit)
    reqs = [sim.business.request(comp, unit.tenant) for comp in unit.distinct_components()]
    near = [nearby.candidate_rows(table, r) for r in reqs] if table is sim.state.nodes else [None]
    if all(rows is not None for rows in near):  # bound near a few sites: the units on their rows only
        rows = np.unique(np.concatenate([rows[nearby.static_ok(table, r, rows, within=True)]
                                         for r, rows in zip(reqs, near)]))
        useful = np.zeros(table.n, bool)
        useful[rows] = True
        on = {sim.view.tasks[task].unit for row in rows.tolist() for task in sim.state.tasks_on(row)}
        candidates = sim.view.in_start_order(on)
    else:
        useful = np.zeros(table.n, bool)
        for r in reqs:
            useful |= static_mask(table, r)
        candidates = sim.view.running()
    out = []
    for uid in candidates:
        us = sim.view.units[uid]
        them = us.unit  # (made again when kept as columns: read once)
        if not all(c.preemptible for c in them.components):
            continue
        other = them.tenant
        if fair:
            if other == unit.tenant or standing(them) > mine or \
                    share[other] <= share[unit.tenant] * (1 + FAIR_MARGIN):
                continue
            if not sim.may_disturb(uid):
                continue  # reclaim is voluntary: within budgets, the migration limit and hysteresis
        elif not outranks(sim, unit, them):
            continue
        if other != unit.tenant and (borrows or cohort >= 0 and cohorts.of[index[other]] == cohort):
            continue
        held = []
        for task in us.run.tasks:
            p = sim.state.placements[task]
            if sim.state.vcs[p.vc].table is not table:
                break
            held.append((sim.view.tasks[task].component, p.alloc))
        else:
            if held and any(useful[a.row] for _, a in held):
                state = sum(c.state_mib for c in them.distinct_components() if c.stateful)
                rank = -share[other] if fair else 0.0  # the tenant furthest above gives first
                theirs = standing(them)
                level = (theirs, them.priority if other == unit.tenant else theirs)
                waits = not all(room_elsewhere(table, sim.business.request(c, other), a.row) for c, a in held)
                out.append(Victim(uid, other, them.priority, state, held, rank, level, waits))
    return out


def _need(sim, unit: Unit) -> np.ndarray:
    """What ``unit`` holds once placed, per resource."""
    return sum(sim.business.request(c, unit.tenant).vec for c in unit.components)


def _borrows(sim, unit: Unit, need: np.ndarray) -> bool:
    """Whether ``unit``, placed now (holding ``need``), would take its tenant
    above its own (nominal) quota on some resource: it would run on what its
    cohort lends."""
    i = sim.state.tenant_index[unit.tenant]
    return bool((sim.state.used[i] + need > sim.state.cohorts.nominal[i]).any())


def lent_victims(sim, unit: Unit) -> list[Victim]:
    """Work running on quota its tenant borrowed from ``unit``'s cohort, that
    ``unit``'s tenant may evict to get its own quota back: the preemptible
    running units of the cohort's other members above their quota on a
    resource ``unit`` asks for (of lower standing only, when its tenant
    reclaims ``lowerPriority``), on the unit's table, the borrower furthest
    above its weighted share cheapest. None when its tenant is in no cohort,
    does not reclaim, or asks beyond its own quota (that would be borrowing,
    not getting back). Fair-share reclaim leaves a cohort's members to this."""
    state = sim.state
    me = sim.world.tenants[unit.tenant]
    i = state.tenant_index[unit.tenant]
    cohorts = state.cohorts
    if cohorts.of[i] < 0 or me.reclaim == "never":
        return []
    need = _need(sim, unit)
    if _borrows(sim, unit, need):
        return []
    borrowed = cohorts.borrowed(state.used)
    rows = cohorts.members[int(cohorts.of[i])]
    over = {state.tenant_names[r] for r in rows.tolist() if r != i and (borrowed[r] * (need > 0)).any()}
    if not over:
        return []
    table = state.vcs[unit.app.vc].table
    standing = sim.business.standing
    mine = standing(unit)
    share = state.share_by_tenant()
    out = []
    for uid in sim.view.running():
        us = sim.view.units[uid]
        them = us.unit
        if them.tenant not in over or not all(c.preemptible for c in them.components):
            continue
        if me.reclaim == "lowerPriority" and standing(them) >= mine:
            continue
        held = []
        for task in us.run.tasks:
            p = state.placements[task]
            if state.vcs[p.vc].table is not table:
                break
            held.append((sim.view.tasks[task].component, p.alloc))
        else:
            if held:
                state_mib = sum(c.state_mib for c in them.distinct_components() if c.stateful)
                rank = -share[them.tenant]  # the borrower furthest above its weighted share gives first
                waits = not all(room_elsewhere(table, sim.business.request(c, them.tenant), a.row) for c, a in held)
                out.append(Victim(uid, them.tenant, them.priority, state_mib, held, rank, (0, 0), waits))
    return out


def room_elsewhere(table, req, row: int) -> bool:
    """Is there room for ``req`` now on a row of ``table`` other than ``row``
    (where it runs, which its eviction is to free)? Over the rows within its
    near bound when they are few."""
    rows = nearby.candidate_rows(table, req) if req.near is not None else None
    if rows is not None:
        return bool((nearby.fits_now(table, req, rows, within=True) & (rows != row)).any())
    mask = feasible(table, req)
    mask[row] = False
    return bool(mask.any())


def reclaim_keeps_order(sim, unit: Unit, plan: list[Victim]) -> bool:
    """After evicting ``plan`` and placing ``unit``, is every victim's tenant
    still at or above the claimant's weighted share? (Shares move toward the
    weights, never past them.)"""
    state = sim.state
    used = {t: state.tenant_used[t].copy() for t in {unit.tenant, *(v.tenant for v in plan)}}  # only these are read
    for v in plan:
        for _, a in v.held:
            used[v.tenant] = used[v.tenant] - a.vec
    need = sum(sim.business.request(c, unit.tenant).vec for c in unit.components)
    used[unit.tenant] = used[unit.tenant] + need
    total = np.maximum(state.total, 1)

    def share(t: str) -> float:
        return float((used[t] / total).max(initial=0.0)) / sim.world.tenants[t].weight

    return all(share(v.tenant) >= share(unit.tenant) for v in plan)


def broken_units(sim, changed: set[int] | None = None) -> dict[int, Why]:
    """Running units the network no longer supports, with why: a member beyond
    its ``near`` bound or cut off from its data, or an affinity group whose
    ``reachable`` scope a partition split. (Called when links change;
    ``changed``: only the paths of these sites did, as when a device moves, so
    only units placed there or bound to them are checked again.)"""
    state, business = sim.state, sim.business
    fleet = sim.world.fleet
    component = fleet.network.component
    out: dict[int, Why] = {}
    for uid in running_at(sim, changed) if changed is not None else sim.view.running():
        us = sim.view.units[uid]
        sites = []
        for task in us.run.tasks:
            rec, p = sim.view.tasks[task], state.placements[task]
            table = state.vcs[p.vc].table
            row = p.alloc.row
            sites.append(int(table.site[row]))
            comp = rec.component
            if comp.near is None and comp.data_source is None and comp.data_sink is None:
                continue
            req = business.request(comp, rec.tenant)
            if not static_fits(table, req, row):
                out[uid] = next(reason for reason, mask in static_checks(table, req) if not mask[row])
                break
        else:
            if us.unit.affinity_scope == "reachable" and len(set(component[sites].tolist())) > 1:
                out[uid] = Why("reach", "split")
    return out


def running_at(sim, sites: set[int]) -> list[int]:
    """The running units placed on ``sites`` or bound (near, data) to one, in
    the order they started: from the node and bound indexes, not a scan."""
    fleet, state = sim.world.fleet, sim.state
    found: set[int] = set()
    for s in sites:
        found.update(sim.view.bound_near(fleet.site_table.names.name(s)))
        for node in fleet.nodes_of(s).tolist():
            found.update(sim.view.tasks[task].unit for task in state.tasks_on(node))
    return sim.view.in_start_order(found)
