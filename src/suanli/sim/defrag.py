"""Defragmentation of shared devices.

A task that needs whole devices can wait while a node has enough free share
of that kind, scattered as slivers over partly used devices. Then moving a
few fractional tasks (to other devices of the same node first, or to other
nodes) frees whole devices for it.

For a waiting single-task unit with one whole-device need, the candidate
rows are found with one vectorized pass (rows with enough usable devices
and free cpu and memory, when the free share of the whole table adds up to
the count). For the most promising rows (fewest partly
used devices to empty, then most free share), the devices to empty are those
with the most free share; each fractional task on them is moved, largest
first, to the best-fitting other device on the row, else to the best other
row. The plan is tried on the table and kept only if the waiting unit then
really fits; the cheapest plan (fewest moves, then least state) is made.
Moves are voluntary: only preemptible single-task units, within disruption
budgets and the migration limit.
"""

from __future__ import annotations

import numpy as np

from suanli.scheduling.business_layer import TaskExtras, Unit
from suanli.scheduling.filters import feasible, static_mask, usable_slots
from suanli.scheduling.preempt import fits_now
from suanli.scheduling.select import allocation, pick
from suanli.scheduling.statement import Statement
from suanli.scheduling.table import Allocation

MAX_ROWS = 8  # candidate rows tried per waiting unit


def needs_whole_devices(unit: Unit) -> bool:
    return any(a.milli >= 1000 for c in unit.components for a in c.resources.accelerators)


def plan_defrag(sim, unit: Unit) -> list[tuple[str, Allocation]] | None:
    """The moves that would let ``unit`` fit, or None."""
    if len(unit.tasks) != 1:
        return None
    vcs = sim.state.vcs[unit.app.vc]
    table = vcs.table
    req = sim.business.unit_requests(unit)[0]
    whole = [(need, ok) for need, ok in zip(req.accels, usable_slots(table, req)) if need.whole]
    if len(whole) != 1 or len(req.accels) != 1:
        return None
    need, ok = whole[0]
    dev_free, free = table.view("dev_free"), table.view("free")
    full = ok & (table.view("dev_cap") == 1000)
    share = np.where(full, dev_free, 0)
    whole_free = (full & (dev_free == 1000)).sum(axis=0)
    if share.sum() < need.count * 1000:
        return None  # not enough free share anywhere: moving cannot help
    cand = (static_mask(table, req) & table.view("enabled") & (full.sum(axis=0) >= need.count)
            & (whole_free < need.count) & (free[0] >= req.vec[0]) & (free[1] >= req.vec[1]))
    rows = np.flatnonzero(cand)
    if not rows.size:
        return None
    top = -np.sort(-np.where(full[:, rows], dev_free[:, rows], -1), axis=0)[: need.count]
    to_empty = (top < 1000).sum(axis=0)
    order = np.lexsort((-share[:, rows].sum(axis=0), to_empty))
    best = None
    for row in rows[order[:MAX_ROWS]]:
        plan = _plan_row(sim, unit, vcs, int(row), full[:, row], need.count)
        if plan is not None and (best is None or _cost(sim, plan) < _cost(sim, best)):
            best = plan
    return best


def _cost(sim, plan) -> tuple:
    tasks = sim.view.tasks
    return (len(plan), sum(tasks[t].component.state_mib for t, _ in plan if tasks[t].component.stateful))


def _plan_row(sim, unit: Unit, vcs, row: int, usable: np.ndarray, count: int):
    state, table = sim.state, vcs.table
    slots = np.flatnonzero(usable)
    targets = set(int(s) for s in slots[np.argsort(-table.dev_free[slots, row], kind="stable")][:count])
    node = int(table.node[row])
    occupants = []
    for task in sorted(state.tasks_on(node)):
        p = state.placements[task]
        if p.vc == vcs.name and p.alloc.row == row and targets & set(p.alloc.slots):
            occupants.append(task)
    local = table.dev_free[:, row].astype(np.int64)
    for s in targets:
        local[s] = -1  # kept empty
    plan: list[tuple[str, Allocation]] = []
    with Statement() as probe:  # the moves made tentatively, to see the unit fit; all undone
        for task in sorted(occupants, key=lambda t: -sum(state.placements[t].alloc.milli)):
            rec = sim.view.tasks[task]
            a = state.placements[task].alloc
            us = sim.view.units[rec.unit]
            if (len(us.unit.tasks) != 1 or not rec.component.preemptible or us.run is None
                    or len(a.slots) != 1 or a.milli[0] >= 1000 or not sim.may_disturb(rec.unit, len(plan))):
                return None
            treq = sim.business.request(rec.component, rec.tenant)
            milli = a.milli[0]
            ok = usable_slots(table, treq)[0][:, row] if treq.accels else np.zeros(len(local), bool)
            fit = np.flatnonzero(ok & (local >= milli))
            if fit.size:  # another device of the same row: the tightest that fits
                s = int(fit[np.argmin(local[fit])])
                new = Allocation(row, a.vec, (s,), (milli,))
                local[s] -= milli
            else:  # another row
                new = _elsewhere(sim, vcs, rec, treq, a)
                if new is None:
                    return None
            probe.give(table, (a,))
            probe.take(table, (new,))
            plan.append((task, new))
        return plan if fits_now(sim.business, unit) else None


def _elsewhere(sim, vcs, rec, treq, a: Allocation) -> Allocation | None:
    state, table = sim.state, vcs.table
    with Statement() as probe:
        if vcs.default:  # it already counts against its tenant's quota: do not count it twice
            state.charge(rec.tenant, -a.vec, probe)
        mask = feasible(table, treq, TaskExtras(sim.business, vcs).checks(treq, table))
    mask[a.row] = False
    row = pick(table, treq, mask, state.fleet.network, sim.rng)
    return allocation(table, treq, row) if row >= 0 else None
